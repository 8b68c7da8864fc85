"""Delegated authentication: front-proxy headers, client certificates, bearer tokens."""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker import authn
from gpustack_worker.authn import (
    AuthenticationSettings,
    Authenticator,
    ConfigurationError,
    RequestHeaderSettings,
    Unauthenticated,
    UserInfo,
    settings_from_configmap,
    with_overrides,
)

NOW = datetime.datetime.now(datetime.UTC)

FRONT_PROXY_CA = trustme.CA(organization_name="front-proxy-ca")
CLIENT_CA = trustme.CA(organization_name="kubernetes")
STRANGER_CA = trustme.CA(organization_name="stranger")


def der_chain(leaf: trustme.LeafCert) -> list[bytes]:
    """The chain as the TLS layer hands it over: DER, leaf first, intermediates after."""
    return [
        x509.load_pem_x509_certificate(pem.bytes()).public_bytes(serialization.Encoding.DER)
        for pem in leaf.cert_chain_pems
    ]


def kubeadm_cert(
    ca: trustme.CA,
    common_name: str,
    *,
    organizations: Sequence[str] = (),
    usages: Sequence[x509.ObjectIdentifier] = (ExtendedKeyUsageOID.CLIENT_AUTH,),
) -> bytes:
    """A client certificate as kubeadm issues them: no SAN, EKU clientAuth only."""
    issuer = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    signer = serialization.load_pem_private_key(ca.private_key_pem.bytes(), password=None)
    assert isinstance(signer, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(issuer.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - datetime.timedelta(hours=1))
        .not_valid_after(NOW + datetime.timedelta(days=365))
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()),
            critical=False,
        )
    )
    cert = builder.sign(signer, hashes.SHA256())
    assert not any(isinstance(e.value, x509.SubjectAlternativeName) for e in cert.extensions)
    return cert.public_bytes(serialization.Encoding.DER)


def front_proxy_settings(**changes: object) -> AuthenticationSettings:
    requestheader = RequestHeaderSettings(
        client_ca=FRONT_PROXY_CA.cert_pem.bytes(),
        allowed_names=("front-proxy-client",),
        uid_headers=("X-Remote-Uid",),
    )
    fields = {**requestheader.__dict__, **changes}
    return AuthenticationSettings(
        requestheader=RequestHeaderSettings(**fields),
        client_ca=CLIENT_CA.cert_pem.bytes(),
    )


PROXY_CERT = [kubeadm_cert(FRONT_PROXY_CA, "front-proxy-client")]
IDENTITY = [
    ("X-Remote-User", "alice"),
    ("x-remote-group", "system:authenticated"),
    ("X-Remote-Group", "team-a"),
    ("X-Remote-Uid", "u-123"),
    ("X-Remote-Extra-Scopes", "view"),
    ("X-Remote-Extra-Scopes", "edit"),
    ("X-Remote-Extra-Example.com%2Fteam", "ml"),
]


# --- front proxy ---------------------------------------------------------------------------


async def test_front_proxy_vouches_for_user_groups_uid_and_extra() -> None:
    user = await Authenticator(front_proxy_settings()).authenticate(PROXY_CERT, IDENTITY)
    assert user == UserInfo(
        name="alice",
        uid="u-123",
        groups=("system:authenticated", "team-a"),
        extra={"scopes": ("view", "edit"), "example.com/team": ("ml",)},
    )


async def test_a_trustme_front_proxy_certificate_with_a_san_works_too() -> None:
    leaf = FRONT_PROXY_CA.issue_cert("front-proxy.invalid", common_name="front-proxy-client")
    user = await Authenticator(front_proxy_settings()).authenticate(
        der_chain(leaf), [("X-Remote-User", "bob")]
    )
    assert user == UserInfo(name="bob")


async def test_the_first_non_empty_username_header_wins() -> None:
    settings = front_proxy_settings(username_headers=("X-Remote-User", "X-Other-User"))
    user = await Authenticator(settings).authenticate(
        PROXY_CERT, [("X-Remote-User", ""), ("X-Other-User", "carol"), ("X-Other-User", "eve")]
    )
    assert user.name == "carol"


async def test_a_cn_outside_the_allowed_names_is_refused() -> None:
    chain = [kubeadm_cert(FRONT_PROXY_CA, "someone-else")]
    with pytest.raises(Unauthenticated) as caught:
        await Authenticator(front_proxy_settings()).authenticate(chain, IDENTITY)
    assert str(caught.value) == (
        'client certificate CN "someone-else" is not in the allowed names ["front-proxy-client"]'
    )


async def test_empty_allowed_names_accept_any_cn() -> None:
    chain = [kubeadm_cert(FRONT_PROXY_CA, "someone-else")]
    user = await Authenticator(front_proxy_settings(allowed_names=())).authenticate(chain, IDENTITY)
    assert user.name == "alice"


async def test_front_proxy_certificate_without_a_username_header_is_refused() -> None:
    with pytest.raises(Unauthenticated, match="front-proxy certificate but no X-Remote-User"):
        await Authenticator(front_proxy_settings()).authenticate(
            PROXY_CERT, [("X-Remote-Group", "system:masters")]
        )


async def test_a_chain_from_an_unknown_ca_is_refused_and_its_headers_ignored() -> None:
    chain = [kubeadm_cert(STRANGER_CA, "front-proxy-client")]
    with pytest.raises(Unauthenticated) as caught:
        await Authenticator(front_proxy_settings()).authenticate(chain, IDENTITY)
    assert str(caught.value) == "x509: certificate signed by unknown authority"


async def test_identity_headers_without_a_certificate_are_never_believed() -> None:
    with pytest.raises(Unauthenticated) as caught:
        await Authenticator(front_proxy_settings()).authenticate([], IDENTITY)
    assert str(caught.value).startswith("no client certificate and no bearer token")
    assert "X-Remote-User is believed only from a verified front-proxy" in str(caught.value)


async def test_nothing_presented_says_so() -> None:
    with pytest.raises(Unauthenticated) as caught:
        await Authenticator(front_proxy_settings()).authenticate([], [])
    assert str(caught.value) == "no client certificate and no bearer token"


async def test_an_expired_front_proxy_certificate_is_refused() -> None:
    leaf = FRONT_PROXY_CA.issue_cert(
        "front-proxy.invalid",
        common_name="front-proxy-client",
        not_before=NOW - datetime.timedelta(days=2),
        not_after=NOW - datetime.timedelta(days=1),
    )
    with pytest.raises(Unauthenticated) as caught:
        await Authenticator(front_proxy_settings()).authenticate(der_chain(leaf), IDENTITY)
    # The front-proxy CA's verdict, not the client CA's "unknown authority".
    assert str(caught.value).startswith("x509: certificate has expired or is not yet valid: ")
    assert "expired at" in str(caught.value)


async def test_a_not_yet_valid_certificate_is_refused() -> None:
    leaf = FRONT_PROXY_CA.issue_cert(
        "front-proxy.invalid",
        common_name="front-proxy-client",
        not_before=NOW + datetime.timedelta(days=1),
        not_after=NOW + datetime.timedelta(days=2),
    )
    with pytest.raises(Unauthenticated, match="is not valid before"):
        await Authenticator(front_proxy_settings()).authenticate(der_chain(leaf), IDENTITY)


async def test_a_leaf_whose_usage_excludes_client_auth_is_refused() -> None:
    chain = [
        kubeadm_cert(
            FRONT_PROXY_CA, "front-proxy-client", usages=(ExtendedKeyUsageOID.SERVER_AUTH,)
        )
    ]
    with pytest.raises(Unauthenticated, match="incompatible key usage"):
        await Authenticator(front_proxy_settings()).authenticate(chain, IDENTITY)


async def test_intermediates_come_from_the_presented_chain() -> None:
    intermediate = FRONT_PROXY_CA.create_child_ca()
    leaf = intermediate.issue_cert("front-proxy.invalid", common_name="front-proxy-client")
    authenticator = Authenticator(front_proxy_settings())
    chain = der_chain(leaf)
    assert len(chain) == 2
    assert (await authenticator.authenticate(chain, IDENTITY)).name == "alice"
    with pytest.raises(Unauthenticated, match="unknown authority"):
        await authenticator.authenticate(chain[:1], IDENTITY)


async def test_any_certificate_in_the_bundle_is_a_trust_anchor_as_in_go() -> None:
    intermediate = FRONT_PROXY_CA.create_child_ca()
    leaf = intermediate.issue_cert("front-proxy.invalid", common_name="front-proxy-client")
    settings = front_proxy_settings(client_ca=intermediate.cert_pem.bytes())
    user = await Authenticator(settings).authenticate(der_chain(leaf)[:1], IDENTITY)
    assert user.name == "alice"


async def test_a_malformed_certificate_is_refused() -> None:
    with pytest.raises(Unauthenticated, match="malformed client certificate"):
        await Authenticator(front_proxy_settings()).authenticate([b"\x30\x03junk"], IDENTITY)


# --- client certificates ------------------------------------------------------------------


async def test_a_client_ca_certificate_names_the_user_and_ignores_identity_headers() -> None:
    chain = [kubeadm_cert(CLIENT_CA, "dave", organizations=("system:masters", "team-b"))]
    user = await Authenticator(front_proxy_settings()).authenticate(chain, IDENTITY)
    assert user == UserInfo(name="dave", groups=("system:masters", "team-b"))


async def test_a_trustme_client_certificate_names_the_user() -> None:
    leaf = CLIENT_CA.issue_cert("dave.invalid", common_name="dave", organization_name="devs")
    user = await Authenticator(front_proxy_settings()).authenticate(der_chain(leaf), [])
    assert user == UserInfo(name="dave", groups=("devs",))


async def test_a_front_proxy_refusal_falls_through_to_the_client_ca_like_kube() -> None:
    # One CA for both roles: a user certificate is not the front proxy, yet still a user.
    settings = AuthenticationSettings(
        requestheader=RequestHeaderSettings(
            client_ca=CLIENT_CA.cert_pem.bytes(), allowed_names=("front-proxy-client",)
        ),
        client_ca=CLIENT_CA.cert_pem.bytes(),
    )
    chain = [kubeadm_cert(CLIENT_CA, "dave")]
    assert (await Authenticator(settings).authenticate(chain, IDENTITY)) == UserInfo(name="dave")


async def test_a_certificate_without_any_configured_ca_is_refused() -> None:
    settings = AuthenticationSettings(requestheader=None, client_ca=None)
    with pytest.raises(Unauthenticated, match="no client CA is configured"):
        await Authenticator(settings).authenticate(PROXY_CERT, IDENTITY)


async def test_front_proxy_certificates_are_not_client_certificates() -> None:
    settings = AuthenticationSettings(requestheader=None, client_ca=CLIENT_CA.cert_pem.bytes())
    with pytest.raises(Unauthenticated, match="unknown authority"):
        await Authenticator(settings).authenticate(PROXY_CERT, IDENTITY)


# --- bearer tokens -------------------------------------------------------------------------


class Reviewer:
    """A TokenReview stand-in that knows one token."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, token: str) -> UserInfo | None:
        self.asked.append(token)
        return UserInfo(name="system:serviceaccount:ns:sa") if token == "good" else None


async def test_a_bearer_token_is_reviewed() -> None:
    reviewer = Reviewer()
    authenticator = Authenticator(front_proxy_settings(), reviewer)
    user = await authenticator.authenticate([], [("authorization", "Bearer good")])
    assert user.name == "system:serviceaccount:ns:sa"
    with pytest.raises(Unauthenticated) as caught:
        await authenticator.authenticate([], [("Authorization", "bearer bad")])
    assert str(caught.value) == "invalid bearer token"
    assert reviewer.asked == ["good", "bad"]


async def test_a_certificate_that_fails_still_lets_the_token_speak() -> None:
    reviewer = Reviewer()
    chain = [kubeadm_cert(STRANGER_CA, "x")]
    authenticator = Authenticator(front_proxy_settings(), reviewer)
    user = await authenticator.authenticate(chain, [("Authorization", "Bearer good")])
    assert user.name == "system:serviceaccount:ns:sa"
    with pytest.raises(Unauthenticated) as caught:
        await authenticator.authenticate(chain, [("Authorization", "Bearer bad")])
    assert str(caught.value) == (
        "x509: certificate signed by unknown authority; invalid bearer token"
    )


async def test_a_verified_certificate_spares_the_token_review() -> None:
    reviewer = Reviewer()
    authenticator = Authenticator(front_proxy_settings(), reviewer)
    user = await authenticator.authenticate(PROXY_CERT, [*IDENTITY, ("Authorization", "Bearer x")])
    assert user.name == "alice"
    assert reviewer.asked == []


@pytest.mark.parametrize("header", ["Basic Zm9vOmJhcg==", "Bearer", "Bearer ", "Token good"])
async def test_not_a_bearer_token(header: str) -> None:
    reviewer = Reviewer()
    with pytest.raises(Unauthenticated, match="no client certificate and no bearer token"):
        await Authenticator(front_proxy_settings(), reviewer).authenticate(
            [], [("Authorization", header)]
        )
    assert reviewer.asked == []


async def test_a_bearer_token_without_a_reviewer_is_refused() -> None:
    with pytest.raises(Unauthenticated, match="token review is not configured"):
        await Authenticator(front_proxy_settings()).authenticate(
            [], [("Authorization", "Bearer good")]
        )


# --- the ConfigMap -------------------------------------------------------------------------


def configmap(**data: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system"},
        "data": {k.replace("_", "-"): v for k, v in data.items()},
    }


KUBEADM = configmap(
    client_ca_file=CLIENT_CA.cert_pem.bytes().decode(),
    requestheader_client_ca_file=FRONT_PROXY_CA.cert_pem.bytes().decode(),
    requestheader_allowed_names='["front-proxy-client"]',
    requestheader_username_headers='["X-Remote-User"]',
    requestheader_group_headers='["X-Remote-Group"]',
    requestheader_extra_headers_prefix='["X-Remote-Extra-"]',
)


def test_a_kubeadm_configmap() -> None:
    settings = settings_from_configmap(KUBEADM)
    assert settings == AuthenticationSettings(
        requestheader=RequestHeaderSettings(
            client_ca=FRONT_PROXY_CA.cert_pem.bytes(),
            allowed_names=("front-proxy-client",),
            username_headers=("X-Remote-User",),
            group_headers=("X-Remote-Group",),
            extra_prefixes=("X-Remote-Extra-",),
            uid_headers=(),
        ),
        client_ca=CLIENT_CA.cert_pem.bytes(),
    )


async def test_settings_from_the_configmap_authenticate() -> None:
    data = {**KUBEADM["data"], "requestheader-uid-headers": '["X-Remote-Uid"]'}  # type: ignore[dict-item]
    authenticator = Authenticator(settings_from_configmap({"data": data}))
    assert (await authenticator.authenticate(PROXY_CERT, IDENTITY)).uid == "u-123"


def test_absent_header_keys_take_the_aggregated_server_defaults() -> None:
    settings = settings_from_configmap(
        configmap(requestheader_client_ca_file=FRONT_PROXY_CA.cert_pem.bytes().decode())
    )
    assert settings.requestheader == RequestHeaderSettings(
        client_ca=FRONT_PROXY_CA.cert_pem.bytes()
    )
    assert settings.client_ca is None


def test_without_a_requestheader_ca_there_is_no_front_proxy() -> None:
    settings = settings_from_configmap(
        configmap(
            client_ca_file=CLIENT_CA.cert_pem.bytes().decode(),
            requestheader_allowed_names='["front-proxy-client"]',
        )
    )
    assert settings == AuthenticationSettings(
        requestheader=None, client_ca=CLIENT_CA.cert_pem.bytes()
    )
    assert settings_from_configmap({"kind": "ConfigMap"}) == AuthenticationSettings(None, None)


def test_a_merged_bundle_with_repeated_cas_is_fine() -> None:
    pem = FRONT_PROXY_CA.cert_pem.bytes() * 2 + STRANGER_CA.cert_pem.bytes()
    settings = settings_from_configmap(configmap(requestheader_client_ca_file=pem.decode()))
    Authenticator(settings)  # the store takes each CA once


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("requestheader-allowed-names", "front-proxy-client", "not a JSON array of strings"),
        ("requestheader-allowed-names", '{"a": 1}', "expected a JSON array of strings, got dict"),
        ("requestheader-group-headers", '["X-Remote-Group", 7]', "item 1 is int, not a string"),
        ("requestheader-extra-headers-prefix", '[""]', "item 0 is an empty header name"),
        ("requestheader-username-headers", "[]", "empty, so no front-proxied request"),
        ("requestheader-uid-headers", "[[", "not a JSON array of strings"),
        ("requestheader-client-ca-file", "not a certificate", "holds no usable PEM certificate"),
        (
            "client-ca-file",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
            "holds no usable PEM certificate",
        ),
    ],
)
def test_malformed_values_name_their_key(key: str, value: str, problem: str) -> None:
    data = {**KUBEADM["data"], key: value}  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError) as caught:
        settings_from_configmap({"data": data})
    assert str(caught.value).startswith(f"{key}: ")
    assert problem in str(caught.value)


def test_non_string_values_and_data_name_the_problem() -> None:
    with pytest.raises(ConfigurationError, match=r"^client-ca-file: expected a string, got int"):
        settings_from_configmap({"data": {"client-ca-file": 3}})
    with pytest.raises(ConfigurationError, match=r"^data: expected an object, got list"):
        settings_from_configmap({"data": []})


CONFIG_KEYS = [
    "requestheader-client-ca-file",
    "requestheader-allowed-names",
    "requestheader-username-headers",
    "requestheader-group-headers",
    "requestheader-extra-headers-prefix",
    "requestheader-uid-headers",
    "client-ca-file",
]
VALUES = st.one_of(
    st.text(),
    st.sampled_from([FRONT_PROXY_CA.cert_pem.bytes().decode(), "null", "[]", '[""]', "[[[]]]"]),
    st.lists(st.one_of(st.text(), st.integers(), st.none())).map(json.dumps),
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(CONFIG_KEYS), VALUES))
def test_any_string_values_give_settings_or_a_configuration_error(data: dict[str, str]) -> None:
    named = None
    try:
        settings = settings_from_configmap({"data": data})
    except ConfigurationError as exc:
        named = str(exc).split(":")[0]
    else:
        Authenticator(settings)  # whatever was accepted can be used
    assert named is None or named in CONFIG_KEYS


# --- flags over the ConfigMap --------------------------------------------------------------


def test_flags_override_field_by_field() -> None:
    base = settings_from_configmap(KUBEADM)
    settings = with_overrides(
        base, allowed_names=["aggregator"], group_headers=["X-Groups"], extra_prefixes=[]
    )
    assert settings.requestheader == RequestHeaderSettings(
        client_ca=FRONT_PROXY_CA.cert_pem.bytes(),
        allowed_names=("aggregator",),
        username_headers=("X-Remote-User",),
        group_headers=("X-Groups",),
        extra_prefixes=(),
    )
    assert settings.client_ca == base.client_ca
    assert with_overrides(base) == base


def test_flag_cas_replace_or_create_the_configmap_ones() -> None:
    stranger = STRANGER_CA.cert_pem.bytes()
    settings = with_overrides(
        AuthenticationSettings(None, None),
        requestheader_client_ca=stranger,
        username_headers=["X-User"],
        client_ca=stranger,
    )
    assert settings == AuthenticationSettings(
        requestheader=RequestHeaderSettings(client_ca=stranger, username_headers=("X-User",)),
        client_ca=stranger,
    )
    replaced = with_overrides(settings_from_configmap(KUBEADM), requestheader_client_ca=stranger)
    assert replaced.requestheader is not None
    assert replaced.requestheader.client_ca == stranger
    assert replaced.requestheader.allowed_names == ("front-proxy-client",)


def test_header_flags_without_any_requestheader_ca_change_nothing() -> None:
    settings = with_overrides(AuthenticationSettings(None, None), allowed_names=["x"])
    assert settings.requestheader is None


def test_bad_flags_name_the_flag() -> None:
    base = settings_from_configmap(KUBEADM)
    with pytest.raises(ConfigurationError, match=r"^--client-ca-file: holds no usable PEM"):
        with_overrides(base, client_ca=b"nope")
    with pytest.raises(ConfigurationError, match=r"^--requestheader-client-ca-file: "):
        with_overrides(base, requestheader_client_ca=b"")
    with pytest.raises(ConfigurationError, match=r"^--requestheader-username-headers: empty"):
        with_overrides(base, username_headers=[])
    with pytest.raises(ConfigurationError, match=r"^--requestheader-allowed-names: expected a"):
        with_overrides(base, allowed_names="front-proxy-client")


# --- UserInfo ------------------------------------------------------------------------------


def test_user_info_is_frozen_and_hashable_with_extra() -> None:
    extra = {"scopes": ("view",)}
    user = UserInfo(name="a", groups=("g",), extra=extra)
    extra["scopes"] = ("edit",)
    assert user.extra == {"scopes": ("view",)}
    same = UserInfo(name="a", groups=("g",), extra={"scopes": ("view",)})
    assert hash(user) == hash(same)
    assert user == same
    assert {user: 1}[same] == 1
    with pytest.raises(TypeError):
        user.extra["scopes"] = ()  # type: ignore[index]


# --- the verified-chain memory -----------------------------------------------------------------


async def test_a_verified_chain_is_remembered_until_it_expires(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    real = authn._Verifier._verify

    def counting(self: object, leaf: object, intermediates: object) -> object:
        calls.append(1)
        return real(self, leaf, intermediates)  # type: ignore[arg-type]

    monkeypatch.setattr(authn._Verifier, "_verify", counting)
    authenticator = Authenticator(front_proxy_settings())
    for _ in range(50):
        user = await authenticator.authenticate(PROXY_CERT, IDENTITY)
        assert user.name == "alice"
    assert len(calls) == 1  # one OpenSSL verification for fifty requests
    # the verdict lasts only until the chain's earliest notAfter: past it, verify again
    verifier = authenticator._front_proxy
    assert verifier is not None
    [(fingerprint, until)] = verifier._verified.items()
    assert until == x509.load_der_x509_certificate(PROXY_CERT[0]).not_valid_after_utc
    verifier._verified[fingerprint] = NOW - datetime.timedelta(seconds=1)
    await authenticator.authenticate(PROXY_CERT, IDENTITY)
    assert len(calls) == 2


async def test_a_refused_chain_is_never_remembered() -> None:
    stranger = [kubeadm_cert(STRANGER_CA, "front-proxy-client")]
    authenticator = Authenticator(front_proxy_settings())
    for _ in range(2):
        with pytest.raises(Unauthenticated):
            await authenticator.authenticate(stranger, IDENTITY)
    assert authenticator._front_proxy is not None
    assert authenticator._front_proxy._verified == {}
