"""The metrics gateway behind the identity guard: a tenant reads only a namespace RBAC lets it.

The guard's API traffic goes through the real :class:`KubeClient` over an ``httpx.MockTransport``
standing in for kube-apiserver: two tokens, and SubjectAccessReviews answered from a table of
``(user, verb, group, resource, namespace)`` as RoleBindings would. The upstream (prom-label-
proxy's place) is a MockTransport recording what reached it. Expected statuses are
kube-rbac-proxy's: 401 no identity, 403 not allowed, 400 a request that names no single valid
namespace — and in every refusal nothing reaches the upstream.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest

from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig
from gpustack_serving.access import AccessReviewer, AccessSettings
from gpustack_worker.metricsgateway import MetricsGateway, access_settings, guarded

ALICE = "system:serviceaccount:team-a:grafana"
TOKENS = {"alice": ALICE}
RULES = {(ALICE, "get", "metrics.k8s.io", "pods", "team-a")}


@dataclass
class FakeApi:
    reviews: list[dict[str, Any]] = field(default_factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if request.url.path.endswith("/tokenreviews"):
            user = TOKENS.get(body["spec"]["token"])
            status: dict[str, Any] = {"authenticated": user is not None}
            if user:
                status["user"] = {"username": user, "groups": ["system:serviceaccounts"]}
            return httpx.Response(201, json={**body, "status": status})
        self.reviews.append(body["spec"])
        a = body["spec"].get("resourceAttributes", {})
        key = (body["spec"]["user"], a.get("verb"), a.get("group"), a.get("resource"),
               a.get("namespace"))  # fmt: skip
        return httpx.Response(201, json={**body, "status": {"allowed": key in RULES}})


@dataclass
class Upstream:
    seen: list[httpx.Request] = field(default_factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        return httpx.Response(200, json={"status": "success", "data": []})


async def _call(
    path: str, query: str, token: str | None = "alice", **headers: str,
) -> tuple[httpx.Response, FakeApi, Upstream]:  # fmt: skip
    api, upstream = FakeApi(), Upstream()
    kube = KubeClient(
        KubeConfig("https://api.invalid", None, None, None, False, "default"),
        transport=httpx.MockTransport(api.handle),
    )
    reviewer = AccessReviewer(kube.post, access_settings(), lambda: 0.0)
    async with httpx.AsyncClient(transport=httpx.MockTransport(upstream.handle)) as http:
        app = MetricsGateway("http://plp", guarded(reviewer), http)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://gw") as client:
            return await client.get(f"{path}?{query}", headers=headers), api, upstream


async def test_the_tenant_reads_its_namespace_and_only_that_reaches_upstream() -> None:
    answer, api, upstream = await _call("/api/v1/query", "query=up&namespace=team-a")
    assert answer.status_code == 200
    assert api.reviews[-1]["resourceAttributes"] == {
        "verb": "get",
        "group": "metrics.k8s.io",
        "resource": "pods",
        "namespace": "team-a",
    }
    (sent,) = upstream.seen
    assert parse_qsl(sent.url.query.decode()) == [("query", "up"), ("namespace", "team-a")]
    assert "authorization" not in sent.headers  # the caller's credential stays here


async def test_another_namespace_is_403_and_nothing_is_forwarded() -> None:
    answer, _, upstream = await _call("/api/v1/series", "match[]=up&namespace=team-b")
    assert answer.status_code == 403
    assert answer.text == (f'User "{ALICE}" cannot get resource "pods" in namespace "team-b"\n')
    assert upstream.seen == []


@pytest.mark.parametrize(
    ("query", "token", "status", "words"),
    [
        ("query=up&namespace=team-a", None, 401, "no bearer token"),
        ("query=up&namespace=team-a", "mallory", 401, "not valid"),
        ("query=up&namespace=team-a&namespace=team-b", "alice", 400, "exactly one"),
        ("query=up", "alice", 400, "exactly one"),
        ("query=up&namespace=team-a%2F..", "alice", 400, "RFC 1123"),
    ],
)
async def test_refusals(query: str, token: str | None, status: int, words: str) -> None:
    answer, api, upstream = await _call("/api/v1/query", query, token)
    assert answer.status_code == status, answer.text
    assert words in answer.text
    assert upstream.seen == []
    if status == 400:
        assert api.reviews == []  # validated before anything is authorized


async def test_an_identity_header_is_not_believed() -> None:
    headers = {"X-Remote-User": ALICE, "Impersonate-User": ALICE}
    answer, _, upstream = await _call("/api/v1/query", "query=up&namespace=team-a", None, **headers)
    assert answer.status_code == 401
    assert upstream.seen == []


async def test_label_values_paths_are_guarded_too() -> None:
    answer, api, _ = await _call("/api/v1/label/instance/values", "namespace=team-b")
    assert answer.status_code == 403
    assert api.reviews[-1]["resourceAttributes"]["namespace"] == "team-b"


def test_a_gateway_reviewer_must_take_the_namespace_from_the_query() -> None:
    plain = AccessSettings(paths=frozenset({"/api/v1/query"}))
    with pytest.raises(ValueError, match="namespace from its parameter"):
        guarded(AccessReviewer(lambda *_: None, plain, lambda: 0.0))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs resource attributes"):
        AccessSettings(paths=frozenset(), namespace_parameter="namespace")
