"""A kube-rbac-proxy in front of an ASGI app: Kubernetes identity, SubjectAccessReview, fail closed.

What an exporter serves (every tenant's GPU figures) must go only to callers the cluster's RBAC
allows. kube-rbac-proxy is how Kubernetes components do that (kube-state-metrics, the
Prometheus operator's own exporters); this is the same decision, made in-process:

* **Who.** A client certificate, when the listener verified one against the cluster's client CA
  (the TLS layer put it in the ASGI ``tls`` extension; the CN is the user, each O a group, as
  kube-apiserver reads it), else the ``Authorization: Bearer`` token, sent to the API server in a
  ``TokenReview``. Nothing else in the request says who the caller is: no ``X-Remote-User``, no
  ``Impersonate-*``, no address. None, or an invalid one: **401**.
* **May they.** A ``SubjectAccessReview`` for the request, with kube-rbac-proxy's defaults: the
  non-resource URL (the request's path) with the verb its HTTP method maps to (``GET`` → ``get``),
  or, when configured, fixed resource attributes (``namespace/services/proxy``, as
  ``--resource-attributes`` does) with that verb. Not allowed: **403**.
* **Cannot tell.** The API server unreachable, slow or answering nonsense: **503**, never the
  app, never 500. A failed review is never cached; the next request asks again.

Answers are one line of text. Verdicts (a token's user, a user's decision) are cached for a
configurable time, in bounded maps, on an injected clock — a Prometheus scraping every 15 s
costs the API server two reviews per cache period, not per scrape. Tokens are cached under their
SHA-256, so the guard's memory holds no usable credential.

Why not kube-rbac-proxy itself: its Go module is not served by the module proxy this project
builds from, and a sidecar would add a second TLS hop and a second certificate per node for a
decision that is a dozen lines over our own API client. The semantics follow its documentation
(``--allow-paths``/``--ignore-paths`` become :attr:`AccessSettings.paths`, ``--resource-
attributes`` :attr:`AccessSettings.resource`, ``--auth-token-audiences`` is not offered).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar, cast
from urllib.parse import parse_qsl

import trio
from cryptography import x509
from cryptography.x509.oid import NameOID

from gpustack_core.names import dns1123_label_problem
from gpustack_kube.client import KubeError
from gpustack_kube.reviews import (
    SUBJECT_ACCESS_REVIEW_PATH,
    TOKEN_REVIEW_PATH,
    Attributes,
    AuthorizationError,
    Decision,
    TokenReviewError,
    UserInfo,
    decision_from_review,
    subject_access_review,
    token_review,
    user_from_token_review,
)

log = logging.getLogger("gpustack.serving.access")

Post = Callable[[str, Mapping[str, Any]], Awaitable[dict[str, Any]]]
"""``KubeClient.post``: POST a JSON object, return the decoded answer, raise ``KubeError``."""
Clock = Callable[[], float]
"""Seconds on a monotonic clock (``trio.current_time`` in a daemon, a fake in tests)."""

DEFAULT_TTL: Final = 10.0
"""Seconds a verdict stands: a revoked binding or token stops working within this."""
DEFAULT_MAX_ENTRIES: Final = 4096
REVIEW_TIMEOUT: Final = 5.0
"""Seconds one review may take; past it the request is answered 503, not held."""

VERBS: Final = {
    "GET": "get",
    "HEAD": "get",
    "OPTIONS": "get",
    "POST": "create",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}
"""kube-rbac-proxy's (and the API server's) HTTP method → RBAC verb."""

TLS_EXTENSION: Final = "tls"
"""The ASGI TLS extension; ``client_cert_chain`` holds the chain the listener verified."""


class ReviewUnavailable(Exception):  # noqa: N818 — it is the 503 it becomes
    """A review could not be made or its answer read: the caller is neither in nor out."""


@dataclass(frozen=True)
class AccessSettings:
    """What the guard protects and how it asks.

    ``paths``: the exact request paths that need a caller the API server allows; every other
    path passes untouched (probes, loopback-only debug routes). ``resource``: when set, every
    guarded request is reviewed as these resource attributes (its verb from the method) instead
    of as its non-resource URL. ``client_certificates``: believe the ASGI ``tls`` extension's
    chain — only when the listener itself verified it against the cluster's client CA.
    ``namespace_parameter``: with ``resource``, the review's namespace is the value of this query
    parameter (kube-rbac-proxy's ``rewrites.byQueryParameter``, OpenShift's tenancy port): exactly
    one, a DNS-1123 label, else 400 — a tenant names the namespace it reads and is authorized
    for that one.
    """

    paths: frozenset[str]
    resource: Attributes | None = None
    namespace_parameter: str = ""
    client_certificates: bool = False
    allowed_ttl: float = DEFAULT_TTL
    denied_ttl: float = DEFAULT_TTL
    token_ttl: float = DEFAULT_TTL
    max_entries: int = DEFAULT_MAX_ENTRIES
    timeout: float = REVIEW_TIMEOUT

    def __post_init__(self) -> None:
        for path in self.paths:
            if not path.startswith("/"):
                raise ValueError(f"guarded path {path!r} does not start with /")
        if min(self.allowed_ttl, self.denied_ttl, self.token_ttl) < 0:
            raise ValueError("a cache time cannot be negative")
        if self.max_entries < 1:
            raise ValueError("the caches need room for at least one entry")
        if self.resource is not None and self.resource.path:
            raise ValueError("resource attributes name a resource, not a path")
        if self.namespace_parameter and self.resource is None:
            raise ValueError("a namespace from the query needs resource attributes to put it in")

    def attributes(self, method: str, path: str) -> Attributes | None:
        """What to review for ``method path``; ``None`` for a method RBAC has no verb for."""
        verb = VERBS.get(method.upper())
        if verb is None:
            return None
        if self.resource is None:
            return Attributes.non_resource(path, verb)
        return dataclasses.replace(self.resource, verb=verb)


K = TypeVar("K")
V = TypeVar("V")


class ExpiringCache(Generic[K, V]):
    """At most ``size`` entries, each until its own expiry on ``clock``; oldest evicted first."""

    def __init__(self, size: int, clock: Clock) -> None:
        self._size = size
        self._clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> tuple[V] | None:
        """``(value,)`` while it stands (a one-tuple: the value itself may be ``None``)."""
        found = self._entries.get(key)
        if found is None:
            return None
        if self._clock() >= found[0]:
            del self._entries[key]
            return None
        return (found[1],)

    def put(self, key: K, value: V, ttl: float) -> None:
        """Remember ``value`` for ``ttl`` seconds (not at all for 0)."""
        if ttl <= 0:
            return
        self._entries.pop(key, None)
        self._entries[key] = (self._clock() + ttl, value)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


@dataclass
class AccessStatistics:
    """Reviews that reached the API server and answers the caches spared; for tests, /debug."""

    token_reviews: int = 0
    access_reviews: int = 0
    cache_hits: int = 0
    refused: dict[int, int] = field(default_factory=dict)


class AccessReviewer:
    """TokenReviews and SubjectAccessReviews through ``post``, verdicts cached on ``clock``."""

    def __init__(self, post: Post, settings: AccessSettings, clock: Clock) -> None:
        self._post = post
        self.settings = settings
        self._users: ExpiringCache[bytes, UserInfo | None] = ExpiringCache(
            settings.max_entries, clock
        )
        self._decisions: ExpiringCache[tuple[UserInfo, Attributes], Decision] = ExpiringCache(
            settings.max_entries, clock
        )
        self.statistics = AccessStatistics()

    async def user(self, token: str) -> UserInfo | None:
        """Who ``token`` belongs to, ``None`` if nobody; ``ReviewUnavailable`` if unknown."""
        key = hashlib.sha256(token.encode()).digest()
        cached = self._users.get(key)
        if cached is not None:
            self.statistics.cache_hits += 1
            return cached[0]
        self.statistics.token_reviews += 1
        answer = await self._ask(TOKEN_REVIEW_PATH, token_review(token), "TokenReview")
        try:
            user = user_from_token_review(answer)
        except TokenReviewError as exc:
            raise ReviewUnavailable(str(exc)) from exc
        self._users.put(key, user, self.settings.token_ttl)
        return user

    async def decide(self, user: UserInfo, attributes: Attributes) -> Decision:
        """May ``user`` do ``attributes``; ``ReviewUnavailable`` if the review failed."""
        key = (user, attributes)
        cached = self._decisions.get(key)
        if cached is not None:
            self.statistics.cache_hits += 1
            return cached[0]
        self.statistics.access_reviews += 1
        body = subject_access_review(user, attributes)
        answer = await self._ask(SUBJECT_ACCESS_REVIEW_PATH, body, "SubjectAccessReview")
        try:
            decision = decision_from_review(answer)
        except AuthorizationError as exc:
            raise ReviewUnavailable(str(exc)) from exc
        ttl = self.settings.allowed_ttl if decision.allowed else self.settings.denied_ttl
        self._decisions.put(key, decision, ttl)
        return decision

    async def _ask(self, path: str, body: Mapping[str, Any], what: str) -> dict[str, Any]:
        try:
            with trio.fail_after(self.settings.timeout):
                return await self._post(path, body)
        except KubeError as exc:
            raise ReviewUnavailable(f"{what} failed: {exc}") from exc
        except trio.TooSlowError as exc:
            raise ReviewUnavailable(
                f"{what} failed: no answer within {self.settings.timeout:g} s"
            ) from exc
        except Exception as exc:  # whatever it was, the caller is neither in nor out: 503
            raise ReviewUnavailable(f"{what} failed: {type(exc).__name__}: {exc}") from exc


@dataclass(frozen=True)
class Refusal:
    """Why a request does not reach the app: its status and one line for the caller."""

    status: int
    line: str


PHRASES: Final = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    503: "Service Unavailable",
}


def query_namespace(scope: Mapping[str, Any], parameter: str) -> str | Refusal:
    """The one namespace the query string names in ``parameter``, or a 400 saying why not.

    Validated before it is authorized: what is reviewed must be exactly what is then read, and
    a second value is refused rather than one of them chosen (prom-label-proxy, behind, would
    take their union).
    """
    try:
        query = bytes(scope.get("query_string", b"")).decode()
        pairs = parse_qsl(query, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        return Refusal(400, "the query string is not UTF-8")
    values = [v for k, v in pairs if k == parameter]
    if len(values) != 1:
        return Refusal(400, f"exactly one {parameter!r} query parameter is required")
    if why := dns1123_label_problem(values[0]):
        return Refusal(400, f"{parameter} {values[0][:64]!r}: {why}")
    return values[0]


def bearer_token(scope: Mapping[str, Any]) -> str | Refusal | None:
    """The request's bearer token, a 401 for a malformed or repeated header, ``None`` if none.

    Parsed as kube-apiserver does (``Bearer`` case-insensitive, one space, a non-empty token);
    a second ``Authorization`` header is refused rather than one of them chosen.
    """
    values = [
        bytes(v) for k, v in scope.get("headers") or () if bytes(k).lower() == b"authorization"
    ]
    if not values:
        return None
    if len(values) > 1:
        return Refusal(401, "more than one Authorization header")
    try:
        text = values[0].decode("ascii").strip()
    except UnicodeDecodeError:
        return Refusal(401, "the Authorization header is not ASCII")
    scheme, _, token = text.partition(" ")
    if scheme.lower() != "bearer" or not token.strip() or " " in token.strip():
        return Refusal(401, "the Authorization header is not 'Bearer <token>'")
    return token.strip()


def certificate_user(scope: Mapping[str, Any]) -> UserInfo | None:
    """The user a *verified* client certificate names: CN the user, each O a group.

    Call only where the listener verified the chain against the cluster's client CA (the
    handshake fails otherwise); the chain comes from the connection, not from the request.
    """
    extensions = scope.get("extensions") or {}
    chain = (extensions.get(TLS_EXTENSION) or {}).get("client_cert_chain") or []
    if not chain:
        return None
    leaf = chain[0]
    try:
        certificate = (
            x509.load_pem_x509_certificate(leaf.encode())
            if isinstance(leaf, str)
            else x509.load_der_x509_certificate(bytes(leaf))
        )
    except ValueError:
        return None
    names = [a.value for a in certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    orgs = certificate.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    if not names or not isinstance(names[-1], str) or not names[-1]:
        return None
    return UserInfo(name=names[-1], groups=tuple(str(o.value) for o in orgs))


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def forbidden_line(user: UserInfo, attributes: Attributes) -> str:
    """kube-rbac-proxy's words: which user may not do what."""
    if attributes.path:
        what = f"path {_quoted(attributes.path)}"
    else:
        a = attributes
        what = f"resource {_quoted(a.resource + ('/' + a.subresource if a.subresource else ''))}"
        if a.namespace:
            what += f" in namespace {_quoted(a.namespace)}"
    return f"User {_quoted(user.name)} cannot {attributes.verb} {what}"


async def check(
    reviewer: AccessReviewer, scope: Mapping[str, Any]
) -> tuple[UserInfo, Attributes] | Refusal:
    """Who is asking and whether they may: the caller and what was allowed, or the refusal."""
    settings = reviewer.settings
    method = str(scope.get("method", "GET"))
    attributes = settings.attributes(method, str(scope.get("path", "")))
    if attributes is None:
        return Refusal(403, f"method {method} maps to no RBAC verb")
    if settings.namespace_parameter:
        namespace = query_namespace(scope, settings.namespace_parameter)
        if isinstance(namespace, Refusal):
            return namespace
        attributes = dataclasses.replace(attributes, namespace=namespace)
    user = certificate_user(scope) if settings.client_certificates else None
    if user is None:
        token = bearer_token(scope)
        if token is None:
            return Refusal(401, "no bearer token and no verified client certificate")
        if isinstance(token, Refusal):
            return token
        try:
            user = await reviewer.user(token)
        except ReviewUnavailable as exc:
            log.warning("cannot authenticate a request for %s: %s", attributes.path, exc)
            return Refusal(503, "cannot reach the API server to review the token")
        if user is None:
            return Refusal(401, "the bearer token is not valid")
    try:
        decision = await reviewer.decide(user, attributes)
    except ReviewUnavailable as exc:
        log.warning("cannot authorize %s: %s", user.name, exc)
        return Refusal(503, "cannot reach the API server to authorize the request")
    if not decision.allowed:
        return Refusal(403, forbidden_line(user, attributes))
    return user, attributes


Send = Callable[[dict[str, Any]], Awaitable[None]]
ScopeT = TypeVar("ScopeT", bound=Mapping[str, Any])
ReceiveT = TypeVar("ReceiveT")
SendT = TypeVar("SendT")


class AccessGuard(Generic[ScopeT, ReceiveT, SendT]):
    """ASGI middleware: a guarded path reaches the app only for a caller RBAC allows.

    Generic in the app's own scope/receive/send types, as :class:`gpustack_kube.guard.
    RequestGuard` is, so wrapping keeps the framework's signature.
    """

    def __init__(
        self,
        app: Callable[[ScopeT, ReceiveT, SendT], Awaitable[None]],
        reviewer: AccessReviewer,
    ) -> None:
        self.app = app
        self.reviewer = reviewer

    async def __call__(self, scope: ScopeT, receive: ReceiveT, send: SendT) -> None:
        """Pass the request on, or answer 401/403/503 with one line of text."""
        if scope.get("type") == "http" and scope.get("path") in self.reviewer.settings.paths:
            verdict = await check(self.reviewer, scope)
            if isinstance(verdict, Refusal):
                counts = self.reviewer.statistics.refused
                counts[verdict.status] = counts.get(verdict.status, 0) + 1
                await _refuse(cast(Send, send), verdict)
                return
        await self.app(scope, receive, send)


async def _refuse(send: Send, refusal: Refusal) -> None:
    body = f"{refusal.status} {PHRASES[refusal.status]}: {refusal.line}\n".encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
    ]
    if refusal.status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="kubernetes"'))
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


__all__ = [
    "AccessGuard",
    "AccessReviewer",
    "AccessSettings",
    "AccessStatistics",
    "ExpiringCache",
    "Refusal",
    "ReviewUnavailable",
    "bearer_token",
    "certificate_user",
    "check",
    "forbidden_line",
    "query_namespace",
]
