"""The MetricAccess admission webhook at its seam: reviews in, reviews out, RBAC a mock transport.

What is refused at creation is what could expose another tenant's figures
(docs/multi-tenant-metrics.md, "Admission"): a selector naming a namespace other than the source
(422, the spec is wrong), a ``source`` other than the object's own namespace unless the requester
may read metrics there, a remote-write target Service in another namespace unless the requester
may ``get services`` there (403, the requester is not allowed). The requester is the review's
``userInfo``; the permission is decided by the API server in a SubjectAccessReview for that user,
with its groups, uid and extra, never by the webhook's own guess. The SubjectAccessReviews are
answered from a table of ``(user, verb, group, resource, namespace)``, as RoleBindings would.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from gpustack_core import contract
from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig
from gpustack_worker.metricaccess_admission import MetricAccessWebhook

VALIDATE = contract.METRIC_ACCESS_VALIDATE_PATH
ALICE = "alice"
"""A member of team-a who may also read team-b's metrics and Services in monitoring."""
MALLORY = "mallory"
"""A member of team-a and nothing more."""
RULES = {
    (ALICE, "get", "metrics.k8s.io", "pods", "team-b"),
    (ALICE, "get", "", "services", "monitoring"),
}


@dataclass
class FakeApi:
    """SubjectAccessReviews answered from :data:`RULES`; optionally down."""

    down: bool = False
    reviews: list[dict[str, Any]] = field(default_factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            return httpx.Response(500, json={"kind": "Status", "message": "etcd is down"})
        body = json.loads(request.content)
        assert request.url.path == "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        spec = body["spec"]
        self.reviews.append(spec)
        a = spec.get("resourceAttributes", {})
        key = (spec["user"], a.get("verb"), a.get("group", ""), a.get("resource"),
               a.get("namespace"))  # fmt: skip
        return httpx.Response(201, json={**body, "status": {"allowed": key in RULES}})


def metricaccess(
    *,
    source: str | None = None,
    metrics: list[str] | None = None,
    target_namespace: str | None = None,
    namespace: str | None = "team-a",
) -> dict[str, Any]:
    prometheus: dict[str, Any] = {"serviceName": "prometheus-operated", "servicePort": 9090}
    if target_namespace is not None:
        prometheus["namespace"] = target_namespace
    spec: dict[str, Any] = {
        "metrics": metrics or ["gpustack_instance_memory_used_mib"],
        "remoteWrite": {"enabled": True, "interval": "30s",
                        "target": {"type": "prometheus", "prometheus": prometheus}},
    }  # fmt: skip
    if source is not None:
        spec["source"] = source
    meta: dict[str, Any] = {"name": "gpu-team-metrics"}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": "observability.gpustack.ai/v1", "kind": "MetricAccess",
            "metadata": meta, "spec": spec}  # fmt: skip


def review(
    obj: dict[str, Any],
    *,
    user: str = MALLORY,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    user_info: dict[str, Any] | None = None,
) -> bytes:
    request: dict[str, Any] = {
        "uid": "u-1",
        "kind": {"group": "observability.gpustack.ai", "version": "v1", "kind": "MetricAccess"},
        "operation": operation,
        "namespace": "team-a",
        "name": "gpu-team-metrics",
        "object": obj,
    }
    if user_info is None:
        user_info = {"username": user, "uid": f"uid-{user}", "groups": ["system:authenticated"],
                     "extra": {"scopes": ["a", "b"]}}  # fmt: skip
    if user_info:
        request["userInfo"] = user_info
    if old is not None:
        request["oldObject"] = old
    envelope = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(envelope).encode()


async def judge(body: bytes, api: FakeApi | None = None) -> tuple[int, dict[str, Any], FakeApi]:
    api = api or FakeApi()
    config = KubeConfig("https://api.invalid", None, None, None, False, "default")
    async with KubeClient(config, transport=httpx.MockTransport(api.handle)) as client:
        status, answer = await MetricAccessWebhook.of(client).handle(VALIDATE, body)
    return status, (json.loads(answer)["response"] if status == 200 else {}), api


async def test_a_tenant_declaring_its_own_namespace_is_allowed_without_any_review() -> None:
    status, response, api = await judge(review(metricaccess()))
    assert status == 200
    assert response == {"uid": "u-1", "allowed": True}
    assert api.reviews == []  # nothing to authorize: source and target are its own


@pytest.mark.parametrize(
    "selector",
    [
        '{__name__="gpustack_instance_memory_used_mib", namespace="team-b"}',
        '{__name__=~"gpustack_.*", namespace=~"team-.*"}',
        '{__name__="gpustack_instance_memory_used_mib", namespace!="team-a"}',
    ],
)
async def test_a_selector_naming_another_namespace_is_invalid(selector: str) -> None:
    status, response, api = await judge(review(metricaccess(metrics=[selector]), user=ALICE))
    assert status == 200
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    assert response["status"]["reason"] == "Invalid"
    message = response["status"]["message"]
    assert "\n" not in message
    assert "spec.metrics[0]" in message
    assert "team-a" in message
    assert api.reviews == []  # a wrong spec is refused before anyone is asked anything


async def test_a_malformed_spec_is_invalid_in_one_line() -> None:
    obj = metricaccess(metrics=['rate({__name__="x"}[5m])'])
    status, response, _ = await judge(review(obj))
    assert (status, response["status"]["code"]) == (200, 422)
    assert "spec.metrics[0]" in response["status"]["message"]
    assert "\n" not in response["status"]["message"]


async def test_another_source_needs_the_requesters_metrics_read_there() -> None:
    obj = metricaccess(source="team-b", metrics=["gpustack_instance_memory_used_mib"])
    status, response, api = await judge(review(obj, user=MALLORY))
    assert status == 200
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["reason"] == "Forbidden"
    message = response["status"]["message"]
    assert "spec.source" in message
    assert "mallory" in message
    assert "team-b" in message
    assert "\n" not in message
    # The review is for the requester exactly as the API server named it, and asks what the
    # gateway asks of a tenant reading team-b: get pods.metrics.k8s.io there.
    assert api.reviews == [
        {
            "user": MALLORY,
            "uid": "uid-mallory",
            "groups": ["system:authenticated"],
            "extra": {"scopes": ["a", "b"]},
            "resourceAttributes": {
                "verb": "get", "group": "metrics.k8s.io", "resource": "pods",
                "namespace": "team-b",
            },
        }
    ]  # fmt: skip


async def test_another_source_is_allowed_to_a_requester_who_may_read_it() -> None:
    obj = metricaccess(source="team-b", metrics=['{__name__="x", namespace="team-b"}'])
    status, response, _ = await judge(review(obj, user=ALICE))
    assert (status, response["allowed"]) == (200, True)


async def test_a_target_in_another_namespace_needs_get_services_there() -> None:
    obj = metricaccess(target_namespace="monitoring")
    _, response, api = await judge(review(obj, user=MALLORY))
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert "spec.remoteWrite.target.prometheus.namespace" in response["status"]["message"]
    attrs = api.reviews[-1]["resourceAttributes"]
    assert attrs == {"verb": "get", "resource": "services", "namespace": "monitoring",
                     "name": "prometheus-operated"}  # fmt: skip
    _status, response, _ = await judge(review(obj, user=ALICE))
    assert response["allowed"] is True


async def test_both_refusals_are_named_together() -> None:
    obj = metricaccess(source="team-b", target_namespace="team-c")
    _, response, api = await judge(review(obj, user=MALLORY))
    message = response["status"]["message"]
    assert response["status"]["code"] == 403
    assert "spec.source" in message
    assert "spec.remoteWrite.target.prometheus.namespace" in message
    assert len(api.reviews) == 2
    assert [c["field"] for c in response["status"]["details"]["causes"]] == [
        "spec.source",
        "spec.remoteWrite.target.prometheus.namespace",
    ]


async def test_a_review_without_a_requester_cannot_reach_another_namespace() -> None:
    obj = metricaccess(source="team-b")
    _, response, api = await judge(review(obj, user_info={}))
    assert response["status"]["code"] == 403
    assert api.reviews == []  # nobody to ask about


async def test_the_api_server_down_refuses_503_not_admits() -> None:
    obj = metricaccess(source="team-b")
    status, response, _ = await judge(review(obj, user=ALICE), FakeApi(down=True))
    assert status == 200
    assert response["allowed"] is False
    assert response["status"]["code"] == 503
    assert "\n" not in response["status"]["message"]


async def test_an_update_changing_the_source_is_judged_again() -> None:
    old = metricaccess()
    new = metricaccess(source="team-b")
    _, response, _ = await judge(review(new, operation="UPDATE", old=old, user=MALLORY))
    assert response["status"]["code"] == 403


async def test_a_metadata_only_update_of_a_stored_spec_is_not_reauthorized() -> None:
    # An administrator's cross-namespace MetricAccess: a label added later by a team member who
    # could not have created it is not a new claim on team-b's metrics.
    old = metricaccess(source="team-b")
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"owner": "team-a"}
    _, response, api = await judge(review(new, operation="UPDATE", old=old, user=MALLORY))
    assert response["allowed"] is True
    assert api.reviews == []


async def test_the_object_namespace_comes_from_the_review_when_metadata_omits_it() -> None:
    # kubectl create -n team-a sends an object without metadata.namespace; the source defaults
    # to the namespace the object is created in, which is the review's.
    obj = metricaccess(namespace=None)
    _, response, api = await judge(review(obj))
    assert response["allowed"] is True
    assert api.reviews == []


async def test_other_kinds_and_deletes_pass_and_garbage_is_a_400() -> None:
    body = json.loads(review(metricaccess(source="team-b")))
    body["request"]["operation"] = "DELETE"
    status, response, api = await judge(json.dumps(body).encode())
    assert (status, response["allowed"], api.reviews) == (200, True, [])
    body["request"]["operation"] = "CREATE"
    body["request"]["kind"] = {"group": "", "version": "v1", "kind": "Pod"}
    status, response, _ = await judge(json.dumps(body).encode())
    assert (status, response["allowed"]) == (200, True)
    status, _, _ = await judge(b"{not json")
    assert status == 400
    body["request"]["kind"] = {"group": "observability.gpustack.ai", "version": "v1",
                               "kind": "MetricAccess"}  # fmt: skip
    body["request"]["userInfo"] = {"username": 7}
    status, _, _ = await judge(json.dumps(body).encode())
    assert status == 400
