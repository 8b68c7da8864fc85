"""Delegated authentication, as every Kubernetes aggregated API server does it.

The API server's aggregator proxies each request to us over TLS with its *front-proxy* client
certificate and names the real user in ``X-Remote-*`` headers; clients may also reach us
directly with a certificate from the cluster's client CA or a bearer token. Which CAs and
headers to trust is published in ``kube-system/extension-apiserver-authentication``.

The TLS layer below proves key possession but verifies no chain, so everything here starts
from raw DER. Identity headers are believed only once a presented chain verifies against the
request-header CA and names an allowed CN: anyone can send an ``X-Remote-User`` header.

The order and the fall-through follow kube-apiserver's union authenticator: a certificate the
front-proxy path turns down may still be an ordinary client certificate, and a bearer token is
tried when no certificate authenticated. Verification follows Go's ``crypto/x509``, which the
rest of the cluster uses: any certificate in a CA bundle is a trust anchor, validity is checked
at the current time, and an extended key usage anywhere in the chain must allow client auth.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from OpenSSL import crypto

from gpustack_kube import reviews

UserInfo = reviews.UserInfo
"""Who made a request (:class:`gpustack_kube.reviews.UserInfo`, shared with the Device Manager's
guard); named here, where the worker's code has always read it."""

CONFIGMAP_NAMESPACE = "kube-system"
CONFIGMAP_NAME = "extension-apiserver-authentication"

REQUESTHEADER_CLIENT_CA = "requestheader-client-ca-file"
REQUESTHEADER_ALLOWED_NAMES = "requestheader-allowed-names"
REQUESTHEADER_USERNAME_HEADERS = "requestheader-username-headers"
REQUESTHEADER_GROUP_HEADERS = "requestheader-group-headers"
REQUESTHEADER_EXTRA_PREFIXES = "requestheader-extra-headers-prefix"
REQUESTHEADER_UID_HEADERS = "requestheader-uid-headers"
CLIENT_CA = "client-ca-file"

UNKNOWN_AUTHORITY = "x509: certificate signed by unknown authority"

# OpenSSL's verify codes that mean "no path to a trust anchor": Go says unknown authority.
_UNANCHORED = frozenset(
    {
        2,  # X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT
        18,  # X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT
        19,  # X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN
        20,  # X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY
        21,  # X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE
    }
)
_NOT_YET_VALID = 9  # X509_V_ERR_CERT_NOT_YET_VALID
_EXPIRED = 10  # X509_V_ERR_CERT_HAS_EXPIRED


class ConfigurationError(Exception):
    """The ConfigMap or a flag holds something unusable; the message names which and why."""


class Unauthenticated(Exception):  # noqa: N818 — it is the HTTP status it becomes
    """No credential authenticated the request: 401, saying why."""


@dataclass(frozen=True)
class RequestHeaderSettings:
    """Whom to believe about identity headers, and which headers carry it."""

    client_ca: bytes
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)
    uid_headers: tuple[str, ...] = ()


@dataclass(frozen=True)
class AuthenticationSettings:
    """Everything authentication needs; ``None`` turns that path off."""

    requestheader: RequestHeaderSettings | None
    client_ca: bytes | None


TokenReviewer = Callable[[str], Awaitable[UserInfo | None]]
"""Answers who a bearer token belongs to, ``None`` for an invalid token (a TokenReview)."""


# --- settings -----------------------------------------------------------------------------


def settings_from_configmap(obj: Mapping[str, Any]) -> AuthenticationSettings:
    """Read the ``extension-apiserver-authentication`` ConfigMap object.

    Keys that are absent (or empty) take the aggregated-server defaults; a request-header
    section exists only when its CA does, since without one no header can be believed.
    """
    data = obj.get("data")
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigurationError(f"data: expected an object, got {type(data).__name__}")

    def text(key: str) -> str | None:
        value = data.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise ConfigurationError(f"{key}: expected a string, got {type(value).__name__}")
        return value if value.strip() else None

    client_ca = _ca_bundle(CLIENT_CA, text(CLIENT_CA))
    requestheader_ca = _ca_bundle(REQUESTHEADER_CLIENT_CA, text(REQUESTHEADER_CLIENT_CA))
    defaults = RequestHeaderSettings(client_ca=b"")
    allowed = _strings(REQUESTHEADER_ALLOWED_NAMES, text(REQUESTHEADER_ALLOWED_NAMES))
    usernames = _headers(REQUESTHEADER_USERNAME_HEADERS, text(REQUESTHEADER_USERNAME_HEADERS))
    groups = _headers(REQUESTHEADER_GROUP_HEADERS, text(REQUESTHEADER_GROUP_HEADERS))
    prefixes = _headers(REQUESTHEADER_EXTRA_PREFIXES, text(REQUESTHEADER_EXTRA_PREFIXES))
    uids = _headers(REQUESTHEADER_UID_HEADERS, text(REQUESTHEADER_UID_HEADERS))
    requestheader = None
    if requestheader_ca is not None:
        requestheader = RequestHeaderSettings(
            client_ca=requestheader_ca,
            allowed_names=defaults.allowed_names if allowed is None else allowed,
            username_headers=defaults.username_headers if usernames is None else usernames,
            group_headers=defaults.group_headers if groups is None else groups,
            extra_prefixes=defaults.extra_prefixes if prefixes is None else prefixes,
            uid_headers=defaults.uid_headers if uids is None else uids,
        )
        _check_usernames(REQUESTHEADER_USERNAME_HEADERS, requestheader.username_headers)
    return AuthenticationSettings(requestheader=requestheader, client_ca=client_ca)


def with_overrides(
    base: AuthenticationSettings,
    *,
    requestheader_client_ca: bytes | None = None,
    allowed_names: Sequence[str] | None = None,
    username_headers: Sequence[str] | None = None,
    group_headers: Sequence[str] | None = None,
    extra_prefixes: Sequence[str] | None = None,
    uid_headers: Sequence[str] | None = None,
    client_ca: bytes | None = None,
) -> AuthenticationSettings:
    """Command-line flags win over the ConfigMap, field by field (``None``: flag not given).

    Header flags without any request-header CA (neither flag nor ConfigMap) change nothing:
    there is no certificate to believe them from.
    """
    if requestheader_client_ca is not None:
        _require_certificates(f"--{REQUESTHEADER_CLIENT_CA}", requestheader_client_ca)
    if client_ca is not None:
        _require_certificates(f"--{CLIENT_CA}", client_ca)
    requestheader = base.requestheader
    if requestheader is None and requestheader_client_ca is not None:
        requestheader = RequestHeaderSettings(client_ca=requestheader_client_ca)
    if requestheader is not None:
        allowed = _flag_strings(f"--{REQUESTHEADER_ALLOWED_NAMES}", allowed_names)
        usernames = _flag_headers(f"--{REQUESTHEADER_USERNAME_HEADERS}", username_headers)
        groups = _flag_headers(f"--{REQUESTHEADER_GROUP_HEADERS}", group_headers)
        prefixes = _flag_headers(f"--{REQUESTHEADER_EXTRA_PREFIXES}", extra_prefixes)
        uids = _flag_headers(f"--{REQUESTHEADER_UID_HEADERS}", uid_headers)
        requestheader = RequestHeaderSettings(
            client_ca=requestheader.client_ca
            if requestheader_client_ca is None
            else requestheader_client_ca,
            allowed_names=requestheader.allowed_names if allowed is None else allowed,
            username_headers=requestheader.username_headers if usernames is None else usernames,
            group_headers=requestheader.group_headers if groups is None else groups,
            extra_prefixes=requestheader.extra_prefixes if prefixes is None else prefixes,
            uid_headers=requestheader.uid_headers if uids is None else uids,
        )
        _check_usernames(f"--{REQUESTHEADER_USERNAME_HEADERS}", requestheader.username_headers)
    return AuthenticationSettings(
        requestheader=requestheader,
        client_ca=base.client_ca if client_ca is None else client_ca,
    )


def _ca_bundle(key: str, value: str | None) -> bytes | None:
    if value is None:
        return None
    try:
        pem = value.encode()
    except UnicodeEncodeError as exc:
        raise ConfigurationError(f"{key}: not encodable as PEM text: {exc}") from exc
    _require_certificates(key, pem)
    return pem


def _require_certificates(key: str, pem: bytes) -> list[x509.Certificate]:
    """The bundle's certificates; a bundle without one would silently trust nobody."""
    try:
        certificates = x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise ConfigurationError(f"{key}: holds no usable PEM certificate: {exc}") from exc
    if not certificates:
        raise ConfigurationError(f"{key}: holds no PEM certificate")
    return certificates


def _strings(key: str, value: str | None) -> tuple[str, ...] | None:
    """A JSON array of strings, as the API server writes every list into the ConfigMap."""
    if value is None:
        return None
    try:
        decoded = json.loads(value)
    except (ValueError, RecursionError) as exc:
        raise ConfigurationError(f"{key}: not a JSON array of strings: {exc}") from exc
    if decoded is None:
        return None
    if not isinstance(decoded, list):
        raise ConfigurationError(
            f"{key}: expected a JSON array of strings, got {type(decoded).__name__}"
        )
    for index, item in enumerate(decoded):
        if not isinstance(item, str):
            raise ConfigurationError(f"{key}: item {index} is {type(item).__name__}, not a string")
    return tuple(decoded)


def _headers(key: str, value: str | None) -> tuple[str, ...] | None:
    names = _strings(key, value)
    return None if names is None else _header_names(key, names)


def _header_names(key: str, names: Sequence[str]) -> tuple[str, ...]:
    """Header names, trimmed; an empty one is refused (as a prefix it would match everything)."""
    trimmed = tuple(name.strip() for name in names)
    for index, name in enumerate(trimmed):
        if not name:
            raise ConfigurationError(f"{key}: item {index} is an empty header name")
    return trimmed


def _flag_strings(flag: str, values: Sequence[str] | None) -> tuple[str, ...] | None:
    if values is None:
        return None
    if isinstance(values, str):  # a str is a Sequence[str]: catch the one-name slip
        raise ConfigurationError(f"{flag}: expected a list of names, got the string {values!r}")
    return tuple(values)


def _flag_headers(flag: str, values: Sequence[str] | None) -> tuple[str, ...] | None:
    names = _flag_strings(flag, values)
    return None if names is None else _header_names(flag, names)


def _check_usernames(key: str, headers: tuple[str, ...]) -> None:
    if not headers:
        raise ConfigurationError(
            f"{key}: empty, so no front-proxied request could ever name its user"
        )


# --- authentication -----------------------------------------------------------------------


class _Rejected(Exception):  # noqa: N818 — internal; becomes Unauthenticated
    """One path turned the credential down; ``anchored``: the chain did reach this path's CA."""

    def __init__(self, message: str, *, anchored: bool) -> None:
        super().__init__(message)
        self.anchored = anchored


class _Verifier:
    """One CA bundle, parsed once, verifying presented chains the way Go's x509 does."""

    CACHE_LIMIT = 1024
    """Distinct verified chains remembered; the aggregator presents one, a few clients more."""

    def __init__(self, key: str, pem: bytes) -> None:
        self._verified: dict[tuple[bytes, ...], datetime] = {}
        """Presented chain (DER, leaf first) → when its earliest certificate expires. A
        verifier lives as long as its CA bundle (a changed bundle builds a new one), so a
        remembered verdict is always one this bundle gave."""
        self._store = crypto.X509Store()
        # dict.fromkeys: bundles merged from several API servers repeat their CAs.
        for certificate in dict.fromkeys(_require_certificates(key, pem)):
            self._store.add_cert(crypto.X509.from_cryptography(certificate))
        # Go trusts every certificate in its root pool, intermediates included.
        self._store.set_flags(crypto.X509StoreFlags.PARTIAL_CHAIN)

    def verify(
        self,
        leaf: x509.Certificate,
        intermediates: Sequence[x509.Certificate],
        presented: tuple[bytes, ...],
    ) -> None:
        """Verify the chain, or find it verified before and not expired since.

        The aggregator presents the same front-proxy chain on every request; verifying it
        each time was a noticeable share of a request's CPU. A success is remembered by the
        exact DER bytes of every certificate presented (``presented``, leaf first), until the
        earliest ``notAfter`` of the verified chain; a failure is never remembered.
        """
        now = datetime.now(UTC)
        until = self._verified.get(presented)
        if until is not None and now < until:
            return
        chain = self._verify(leaf, intermediates)
        if len(self._verified) >= self.CACHE_LIMIT:
            self._verified.clear()
        self._verified[presented] = min(c.not_valid_after_utc for c in chain)

    def _verify(
        self, leaf: x509.Certificate, intermediates: Sequence[x509.Certificate]
    ) -> list[x509.Certificate]:
        context = crypto.X509StoreContext(
            self._store,
            crypto.X509.from_cryptography(leaf),
            [crypto.X509.from_cryptography(c) for c in intermediates],
        )
        try:
            chain = [c.to_cryptography() for c in context.get_verified_chain()]
        except crypto.X509StoreContextError as exc:
            raise _rejection(exc) from exc
        for certificate in chain:
            _check_client_usage(certificate)
        return chain


def _rejection(exc: crypto.X509StoreContextError) -> _Rejected:
    """OpenSSL's verdict in Go's words, which is what cluster operators search for."""
    code = exc.errors[0] if exc.errors else -1
    if code in _UNANCHORED:
        return _Rejected(UNKNOWN_AUTHORITY, anchored=False)
    failing = exc.certificate.to_cryptography()
    subject = failing.subject.rfc4514_string() or "(empty subject)"
    if code == _EXPIRED:
        return _Rejected(
            "x509: certificate has expired or is not yet valid: "
            f"{subject} expired at {failing.not_valid_after_utc.isoformat()}",
            anchored=True,
        )
    if code == _NOT_YET_VALID:
        return _Rejected(
            "x509: certificate has expired or is not yet valid: "
            f"{subject} is not valid before {failing.not_valid_before_utc.isoformat()}",
            anchored=True,
        )
    return _Rejected(f"x509: {exc} ({subject})", anchored=True)


def _check_client_usage(certificate: x509.Certificate) -> None:
    """Go's rule: a certificate that restricts its usage must allow client authentication."""
    try:
        usage = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return
    except ValueError as exc:
        raise _Rejected(f"x509: malformed extended key usage: {exc}", anchored=True) from exc
    allowed = {ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE}
    if allowed.isdisjoint(usage):
        subject = certificate.subject.rfc4514_string() or "(empty subject)"
        raise _Rejected(
            f"x509: certificate specifies an incompatible key usage ({subject} does not allow "
            "client authentication)",
            anchored=True,
        )


def _attribute(name: x509.Name, oid: x509.ObjectIdentifier) -> list[str]:
    return [a.value for a in name.get_attributes_for_oid(oid) if isinstance(a.value, str)]


def _common_name(certificate: x509.Certificate) -> str:
    """The CN; with several, the last, as Go's ``pkix.Name`` keeps it."""
    names = _attribute(certificate.subject, NameOID.COMMON_NAME)
    return names[-1] if names else ""


@dataclass
class _Presented:
    """One presented chain, parsed: its DER (the cache key), leaf, intermediates and CN."""

    der: tuple[bytes, ...]
    leaf: x509.Certificate
    intermediates: tuple[x509.Certificate, ...]
    _common_name: str | None = None

    @property
    def common_name(self) -> str:
        """The leaf's CN (``_common_name``), read once per chain."""
        if self._common_name is None:
            self._common_name = _common_name(self.leaf)
        return self._common_name


class _Headers:
    """Request headers by lower-cased name, repeated values in arrival order."""

    def __init__(self, headers: Sequence[tuple[str, str]]) -> None:
        self.values: dict[str, list[str]] = {}
        for name, value in headers:
            self.values.setdefault(name.lower(), []).append(value)

    def first(self, names: Sequence[str]) -> str:
        """The first non-empty value among the headers, in the order the settings list them."""
        for name in names:
            for value in self.values.get(name.lower(), ())[:1]:
                if value:
                    return value
        return ""

    def all(self, names: Sequence[str]) -> tuple[str, ...]:
        return tuple(v for n in names for v in self.values.get(n.lower(), ()) if v)


class Authenticator:
    """Front-proxy headers, then client certificates, then bearer tokens."""

    def __init__(
        self, settings: AuthenticationSettings, token_reviewer: TokenReviewer | None = None
    ) -> None:
        self.settings = settings
        self._review = token_reviewer
        requestheader = settings.requestheader
        self._front_proxy = (
            None
            if requestheader is None
            else _Verifier(REQUESTHEADER_CLIENT_CA, requestheader.client_ca)
        )
        self._clients = (
            None if settings.client_ca is None else _Verifier(CLIENT_CA, settings.client_ca)
        )
        self._parsed: dict[tuple[bytes, ...], _Presented] = {}
        """Presented chain (DER bytes) → its parsed certificates; a connection presents one
        chain for all its requests, so each request re-parsed the same bytes. Parsing
        decides nothing: every request still has the chain verified (or its verdict looked
        up by these same bytes) and its headers read."""

    async def authenticate(
        self, chain: Sequence[bytes], headers: Sequence[tuple[str, str]]
    ) -> UserInfo:
        """Who sent the request; ``Unauthenticated`` says why nobody.

        ``chain`` is the DER chain from the TLS handshake, leaf first, unverified. Errors the
        token reviewer raises pass through: a review that could not be made is not a verdict.
        """
        fields = _Headers(headers)
        reasons: list[str] = []
        if chain:
            try:
                return self._certificate(chain, fields)
            except _Rejected as exc:
                reasons.append(str(exc))
        token = _bearer_token(fields)
        if token is not None:
            if self._review is None:
                reasons.append("a bearer token was given but token review is not configured")
            else:
                user = await self._review(token)
                if user is not None:
                    return user
                reasons.append("invalid bearer token")
        elif not chain:
            missing = "no client certificate and no bearer token"
            requestheader = self.settings.requestheader
            usernames = (
                requestheader.username_headers if requestheader is not None else ("X-Remote-User",)
            )
            if fields.first(usernames):
                missing += (
                    f" ({usernames[0]} is believed only from a verified front-proxy "
                    "client certificate)"
                )
            reasons.append(missing)
        raise Unauthenticated("; ".join(reasons))

    def _presented(self, der_chain: Sequence[bytes]) -> _Presented:
        key = tuple(der_chain)
        presented = self._parsed.get(key)
        if presented is not None:
            return presented
        try:
            certificates = [x509.load_der_x509_certificate(der) for der in key]
        except ValueError as exc:
            raise _Rejected(f"x509: malformed client certificate: {exc}", anchored=False) from exc
        presented = _Presented(key, certificates[0], tuple(certificates[1:]))
        if len(self._parsed) >= _Verifier.CACHE_LIMIT:
            self._parsed.clear()
        self._parsed[key] = presented
        return presented

    def _certificate(self, der_chain: Sequence[bytes], fields: _Headers) -> UserInfo:
        presented = self._presented(der_chain)
        leaf, intermediates = presented.leaf, presented.intermediates
        failures: list[_Rejected] = []
        if self._front_proxy is not None and self.settings.requestheader is not None:
            try:
                self._front_proxy.verify(leaf, intermediates, presented.der)
                return _from_headers(self.settings.requestheader, presented, fields)
            except _Rejected as exc:
                failures.append(exc)
        if self._clients is not None:
            try:
                self._clients.verify(leaf, intermediates, presented.der)
                return _from_certificate(leaf)
            except _Rejected as exc:
                failures.append(exc)
        if not failures:
            raise _Rejected(
                "a client certificate was presented but no client CA is configured",
                anchored=False,
            )
        # Say why the CA that did issue the chain turned it down; "unknown authority" from
        # the other bundle would only mislead.
        anchored = [str(f) for f in failures if f.anchored] or [str(f) for f in failures]
        raise _Rejected("; ".join(dict.fromkeys(anchored)), anchored=False)


def _from_headers(
    settings: RequestHeaderSettings, presented: _Presented, fields: _Headers
) -> UserInfo:
    """The user the front proxy vouches for, once its certificate has verified."""
    cn = presented.common_name
    if settings.allowed_names and cn not in settings.allowed_names:
        raise _Rejected(
            f"client certificate CN {json.dumps(cn)} is not in the allowed names "
            f"{json.dumps(list(settings.allowed_names))}",
            anchored=True,
        )
    name = fields.first(settings.username_headers)
    if not name:
        raise _Rejected(
            f"front-proxy certificate but no {' or '.join(settings.username_headers)} header",
            anchored=True,
        )
    extra: dict[str, list[str]] = {}
    for prefix in settings.extra_prefixes:
        lowered = prefix.lower()
        for header, values in fields.values.items():
            if header.startswith(lowered) and len(header) > len(lowered):
                extra.setdefault(unquote(header[len(lowered) :]), []).extend(values)
    return UserInfo(
        name=name,
        uid=fields.first(settings.uid_headers),
        groups=fields.all(settings.group_headers),
        extra={k: tuple(v) for k, v in extra.items()},
    )


def _from_certificate(leaf: x509.Certificate) -> UserInfo:
    """Kubernetes' client-certificate identity: the CN is the user, each O a group."""
    cn = _common_name(leaf)
    if not cn:
        raise _Rejected("client certificate has no common name (CN) to name a user", anchored=True)
    return UserInfo(name=cn, groups=tuple(_attribute(leaf.subject, NameOID.ORGANIZATION_NAME)))


def _bearer_token(fields: _Headers) -> str | None:
    """``Authorization: Bearer <token>``, parsed as kube-apiserver parses it."""
    values = fields.values.get("authorization")
    if not values:
        return None
    parts = values[0].strip().split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]
