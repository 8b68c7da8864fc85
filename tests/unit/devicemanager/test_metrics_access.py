"""The Device Manager's ``/metrics`` behind the access guard (issue #31 item 7, issue #34 step 1).

The guard's API traffic goes through the real :class:`KubeClient` over an ``httpx.MockTransport``
standing in for kube-apiserver: it knows two tokens and answers SubjectAccessReviews from one
rule (the reader may ``get`` the non-resource URL ``/metrics``), as a ClusterRole with
``nonResourceURLs: ["/metrics"]`` bound to the reader's account would. The expected statuses are
kube-rbac-proxy's: 401 without a valid identity, 403 for one RBAC does not allow, 503 when the
API server cannot say — never the metrics, never a 500.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gpustack_devicemanager.daemon import ServeOptions, _reviewer
from gpustack_devicemanager.exposition import ExpositionHolder
from gpustack_devicemanager.health import Liveness
from gpustack_devicemanager.holder import SnapshotHolder
from gpustack_devicemanager.server import build_app
from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig, KubeConfigError
from gpustack_kube.reviews import Attributes
from gpustack_serving.access import AccessReviewer, AccessSettings, ExpiringCache, Refusal, check

READER = "system:serviceaccount:monitoring:prometheus"
TENANT = "system:serviceaccount:team-a:default"
TOKENS = {"reader-token": READER, "tenant-token": TENANT}


@dataclass
class FakeApiServer:
    """TokenReview by table, SubjectAccessReview by one RBAC rule; counts what it was asked."""

    down: bool = False
    malformed: bool = False
    allowed: set[tuple[str, str, str]] = field(
        default_factory=lambda: {(READER, "/metrics", "get")}
    )
    token_reviews: int = 0
    access_reviews: int = 0
    seen: list[dict[str, Any]] = field(default_factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused")
        body = json.loads(request.content)
        self.seen.append(body)
        if request.url.path == "/apis/authentication.k8s.io/v1/tokenreviews":
            self.token_reviews += 1
            user = TOKENS.get(body["spec"]["token"])
            status: dict[str, Any] = {"authenticated": user is not None}
            if user is not None:
                status["user"] = {"username": user, "groups": ["system:serviceaccounts"]}
            return httpx.Response(201, json={**body, "status": status})
        if request.url.path == "/apis/authorization.k8s.io/v1/subjectaccessreviews":
            self.access_reviews += 1
            if self.malformed:
                return httpx.Response(201, json={**body, "status": {"allowed": "yes"}})
            spec = body["spec"]
            attrs = spec.get("nonResourceAttributes", {})
            allowed = (spec["user"], attrs.get("path"), attrs.get("verb")) in self.allowed
            return httpx.Response(201, json={**body, "status": {"allowed": allowed}})
        return httpx.Response(404, json={"kind": "Status", "code": 404})


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _kube(api: FakeApiServer) -> KubeClient:
    config = KubeConfig("https://api.invalid", None, None, None, False, "default")
    return KubeClient(config, transport=httpx.MockTransport(api.handle))


def _app(reviewer: AccessReviewer | None) -> Any:
    holder = SnapshotHolder(15)
    return build_app(
        holder, Liveness(15.0, 0.0), lambda: 0.0, dict, ExpositionHolder(), access=reviewer
    )


async def _get(
    app: Any, path: str = "/metrics", token: str | None = None, **headers: str
) -> httpx.Response:
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://dm") as client:
        return await client.get(path, headers=headers)


def _guarded(api: FakeApiServer, clock: FakeClock | None = None, ttl: float = 10.0) -> Any:
    settings = AccessSettings(
        paths=frozenset({"/metrics"}), allowed_ttl=ttl, denied_ttl=ttl, token_ttl=ttl
    )
    reviewer = AccessReviewer(_kube(api).post, settings, clock or FakeClock())
    return _app(reviewer), reviewer


async def test_without_the_guard_metrics_are_open_to_anyone() -> None:
    """Today's behaviour, kept when the guard is off: the reason the guard exists."""
    assert (await _get(_app(None))).status_code == 200


async def test_an_allowed_reader_scrapes() -> None:
    api = FakeApiServer()
    app, _ = _guarded(api)
    answer = await _get(app, token="reader-token")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    review = api.seen[-1]
    assert review["kind"] == "SubjectAccessReview"
    assert review["spec"]["user"] == READER
    assert review["spec"]["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}


async def test_a_user_rbac_does_not_allow_is_403() -> None:
    api = FakeApiServer()
    app, _ = _guarded(api)
    answer = await _get(app, token="tenant-token")
    assert answer.status_code == 403
    assert answer.text == f'403 Forbidden: User "{TENANT}" cannot get path "/metrics"\n'


async def test_no_token_is_401_and_asks_nobody() -> None:
    api = FakeApiServer()
    app, _ = _guarded(api)
    answer = await _get(app)
    assert answer.status_code == 401
    assert answer.text.count("\n") == 1
    assert answer.text.startswith("401 Unauthorized: ")
    assert api.token_reviews == api.access_reviews == 0


async def test_an_invalid_token_is_401() -> None:
    api = FakeApiServer()
    app, _ = _guarded(api)
    answer = await _get(app, token="stolen")
    assert answer.status_code == 401
    assert answer.text == "401 Unauthorized: the bearer token is not valid\n"
    assert api.access_reviews == 0


@pytest.mark.parametrize(
    "header",
    ["Basic cmVhZGVyOnB3", "Bearer", "Bearer a b", "reader-token"],
)
async def test_a_malformed_authorization_header_is_401(header: str) -> None:
    api = FakeApiServer()
    app, _ = _guarded(api)
    answer = await _get(app, Authorization=header)
    assert answer.status_code == 401
    assert api.token_reviews == 0


async def test_identity_headers_are_not_believed() -> None:
    """Only the verified token says who the caller is: X-Remote-User and Impersonate are noise."""
    api = FakeApiServer()
    app, _ = _guarded(api)
    claims = {"X-Remote-User": READER, "Impersonate-User": READER, "X-Forwarded-For": "127.0.0.1"}
    assert (await _get(app, **claims)).status_code == 401
    answer = await _get(app, token="tenant-token", **claims)
    assert answer.status_code == 403
    assert api.seen[-1]["spec"]["user"] == TENANT


async def test_an_unreachable_api_server_is_503_not_open_not_500() -> None:
    api = FakeApiServer(down=True)
    app, _ = _guarded(api)
    answer = await _get(app, token="reader-token")
    assert answer.status_code == 503
    assert answer.text.startswith("503 Service Unavailable: ")
    assert answer.text.count("\n") == 1


async def test_a_malformed_review_is_503_and_not_cached() -> None:
    api = FakeApiServer(malformed=True)
    app, _ = _guarded(api)
    assert (await _get(app, token="reader-token")).status_code == 503
    api.malformed = False
    assert (await _get(app, token="reader-token")).status_code == 200
    assert api.access_reviews == 2


async def test_a_failed_review_is_never_cached() -> None:
    api = FakeApiServer(down=True)
    app, _ = _guarded(api)
    assert (await _get(app, token="reader-token")).status_code == 503
    api.down = False
    assert (await _get(app, token="reader-token")).status_code == 200


async def test_verdicts_are_cached_until_their_ttl_on_the_injected_clock() -> None:
    api = FakeApiServer()
    clock = FakeClock()
    app, reviewer = _guarded(api, clock, ttl=10.0)
    for _ in range(3):
        assert (await _get(app, token="reader-token")).status_code == 200
    assert (api.token_reviews, api.access_reviews) == (1, 1)
    assert reviewer.statistics.cache_hits == 4
    # The binding is removed: within the TTL the cached decision stands, past it the new one.
    api.allowed.clear()
    clock.now += 9.9
    assert (await _get(app, token="reader-token")).status_code == 200
    clock.now += 0.2
    assert (await _get(app, token="reader-token")).status_code == 403
    assert (api.token_reviews, api.access_reviews) == (2, 2)


async def test_other_paths_are_not_guarded() -> None:
    api = FakeApiServer()
    app, _ = _guarded(api)
    assert (await _get(app, "/readyz")).status_code == 200
    assert api.token_reviews == 0


async def test_a_guard_without_an_api_server_refuses_to_start() -> None:
    options = ServeOptions("nvidia", "node-a", access=AccessSettings(frozenset({"/metrics"})))
    with pytest.raises(KubeConfigError, match="needs a Kubernetes configuration"):
        _reviewer(options, None)


def test_resource_attributes_take_the_methods_verb() -> None:
    """kube-rbac-proxy's --resource-attributes: one fixed resource, the verb from the method."""
    resource = Attributes("get", resource="services", subresource="proxy", namespace="ns")
    settings = AccessSettings(frozenset({"/api/v1/query"}), resource=resource)
    assert settings.attributes("POST", "/api/v1/query") == Attributes(
        "create", resource="services", subresource="proxy", namespace="ns"
    )
    assert settings.attributes("GET", "/x") == resource
    assert AccessSettings(frozenset({"/m"})).attributes("HEAD", "/m") == Attributes(
        "get", path="/m"
    )
    assert settings.attributes("TRACE", "/x") is None


def test_the_cache_is_bounded_and_evicts_the_oldest() -> None:
    clock = FakeClock()
    cache: ExpiringCache[int, str] = ExpiringCache(2, clock)
    for key in range(3):
        cache.put(key, str(key), 5.0)
    assert len(cache) == 2
    assert cache.get(0) is None
    assert cache.get(2) == ("2",)
    clock.now += 5.0
    assert cache.get(2) is None


async def test_concurrent_scrapes_all_get_an_answer() -> None:
    api = FakeApiServer()
    app, _ = _guarded(api)
    statuses: list[int] = []

    async def one(token: str) -> None:
        statuses.append((await _get(app, token=token)).status_code)

    async with trio.open_nursery() as nursery:
        for i in range(10):
            nursery.start_soon(one, "reader-token" if i % 2 else "tenant-token")
    assert sorted(statuses) == [200] * 5 + [403] * 5


def _client_certificate(cn: str, org: str) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
            x509.NameAttribute(NameOID.COMMON_NAME, cn),
        ]
    )
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.DER)


@pytest.mark.parametrize("believed", [True, False])
async def test_a_listener_verified_certificate_names_the_user_only_when_configured(
    believed: bool,
) -> None:
    """CN the user, O a group, as kube-apiserver reads a client certificate — believed only
    where the listener verified it against the client CA (``client_certificates``)."""
    api = FakeApiServer()
    api.allowed.add(("prometheus", "/metrics", "get"))
    settings = AccessSettings(frozenset({"/metrics"}), client_certificates=believed)
    reviewer = AccessReviewer(_kube(api).post, settings, FakeClock())
    der = _client_certificate("prometheus", "monitoring")
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/metrics",
        "headers": [],
        "extensions": {"tls": {"client_cert_chain": [der]}},
    }
    verdict = await check(reviewer, scope)
    if believed:
        assert not isinstance(verdict, Refusal)
        assert verdict[0].name == "prometheus"
        assert verdict[0].groups == ("monitoring",)
        assert api.token_reviews == 0
        assert api.seen[-1]["spec"]["groups"] == ["monitoring"]
    else:
        assert isinstance(verdict, Refusal)
        assert verdict.status == 401
