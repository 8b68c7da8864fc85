"""The Instance webhook at its seam: reviews in, reviews out, the cluster a mock transport.

The rules themselves are tested in ``tests/unit/core/test_instance_rules.py``; here, what the
webhook adds: it decodes strictly, looks facts up only when a rule needs them, refuses (503)
rather than admits what it could not verify, ratchets an UPDATE over a stored mistake, and
answers any body — however malformed — with a review or a one-line 400, never an exception.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_core import contract
from gpustack_core.settings import Settings
from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig
from gpustack_worker.admission import DevicesCache
from gpustack_worker.instance_admission import InstanceWebhook, patch_of

VALIDATE = contract.INSTANCE_VALIDATE_PATH
MUTATE = contract.INSTANCE_MUTATE_PATH


class Cluster:
    """Nodes by name, one InstanceType, one node's Devices; counts what was read."""

    def __init__(self, *, nodes_fail: bool = False) -> None:
        self.nodes_fail = nodes_fail
        self.reads: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.reads.append(path)
        if path.startswith("/api/v1/nodes/"):
            if self.nodes_fail:
                return httpx.Response(500, json={"kind": "Status", "message": "etcd is down"})
            if path.endswith("/gpu-1"):
                return httpx.Response(200, json={"metadata": {"name": "gpu-1"}})
            return httpx.Response(404, json={"kind": "Status", "code": 404, "reason": "NotFound"})
        if path.endswith("/instancetypes/l4"):
            return httpx.Response(200, json={
                "metadata": {"name": "l4"},
                "spec": {"acceleratable": True, "manufacturer": "nvidia",
                         "unitResources": {"cpu": "4", "ram": "16Gi"}},
            })  # fmt: skip
        if path.endswith("/devices"):
            cards = [{"id": f"GPU-{i}", "index": i} for i in range(2)]
            group = {"id": "l4", "manufacturer": "nvidia", "accelerators": cards}
            item = {"metadata": {"name": "gpu-1"}, "spec": {"groups": [group]}}
            return httpx.Response(200, json={"items": [item]})
        return httpx.Response(404, json={"kind": "Status", "code": 404, "reason": "NotFound"})


@asynccontextmanager
async def webhook(
    cluster: Cluster, settings: Settings | None = None
) -> AsyncIterator[InstanceWebhook]:
    config = KubeConfig("https://api.invalid", None, None, None, False, "default")
    async with KubeClient(config, transport=httpx.MockTransport(cluster)) as client:
        yield InstanceWebhook(client, DevicesCache(client), lambda: settings or Settings())


def review(
    spec: dict[str, Any],
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    name: str = "ws",
) -> bytes:
    def instance(body: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "Instance",
                "metadata": {"name": name, "namespace": "team-a"},
                "spec": {"image": "ubuntu:24.04", **body}}  # fmt: skip

    request: dict[str, Any] = {
        "uid": "u-1",
        "kind": {"group": "worker.gpustack.ai", "version": "v1alpha1", "kind": "Instance"},
        "operation": operation,
        "namespace": "team-a",
        "name": name,
        "object": instance(spec),
    }
    if old is not None:
        request["oldObject"] = instance(old)
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


def response(body: bytes) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(body)["response"]
    return found


async def test_a_good_instance_is_allowed_reading_only_what_its_rules_need() -> None:
    cluster = Cluster()
    async with webhook(cluster) as hook:
        status, body = await hook.handle(VALIDATE, review({"resources": {"cpu": "1"}}))
    assert status == 200
    assert response(body) == {"uid": "u-1", "allowed": True}
    assert cluster.reads == []  # no pin, no card: nothing to look up


async def test_a_denial_carries_its_code_and_one_cause_per_field() -> None:
    async with webhook(Cluster()) as hook:
        status, body = await hook.handle(VALIDATE, review({"nodeName": "gone", "ports": [
            {"port": 22}, {"port": 22}]}))  # fmt: skip
    assert status == 200
    answer = response(body)
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 422
    assert answer["status"]["reason"] == "Invalid"
    assert answer["status"]["message"] == (
        '[spec.ports[1]: Duplicate value: "22/TCP", spec.nodeName: Not found: "gone": '
        "no Node of that name exists]"
    )
    assert answer["status"]["details"]["causes"] == [
        {"reason": "FieldValueDuplicate", "message": 'Duplicate value: "22/TCP"',
         "field": "spec.ports[1]"},
        {"reason": "FieldValueNotFound",
         "message": 'Not found: "gone": no Node of that name exists', "field": "spec.nodeName"},
    ]  # fmt: skip


async def test_a_gate_alone_is_403_and_its_setting_opens_it() -> None:
    async with webhook(Cluster()) as hook:
        _, closed = await hook.handle(VALIDATE, review({"privileged": True}))
    assert response(closed)["status"]["code"] == 403
    async with webhook(Cluster(), Settings(instance_privileged_allowed=True)) as hook:
        _, opened = await hook.handle(VALIDATE, review({"privileged": True}))
    assert response(opened)["allowed"] is True


async def test_a_node_that_cannot_be_looked_up_refuses_rather_than_admits() -> None:
    async with webhook(Cluster(nodes_fail=True)) as hook:
        _, body = await hook.handle(VALIDATE, review({"nodeName": "gpu-1"}))
    answer = response(body)
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 503
    assert "could not look Node gpu-1 up" in answer["status"]["message"]


async def test_the_largest_node_of_the_types_manufacturer_bounds_the_cards() -> None:
    async with webhook(Cluster()) as hook:
        _, fits = await hook.handle(VALIDATE, review({"type": "l4", "resources": {
            "accelerator": 2}}))  # fmt: skip
        _, too_many = await hook.handle(VALIDATE, review({"type": "l4", "resources": {
            "accelerator": 3}}))  # fmt: skip
    assert response(fits)["allowed"] is True
    assert response(too_many)["status"]["message"] == (
        "spec.resources.accelerator: Invalid value: 3: no node can hold it: the largest, gpu-1, "
        "has 2 nvidia accelerators"
    )


async def test_an_update_ratchets_over_what_was_stored_wrong_and_keeps_its_cards() -> None:
    """A duplicate port stored before the rule existed does not block stopping it; an
    unchanged card count is not measured again (no Devices read)."""
    stored = {"ports": [{"port": 22}, {"port": 22}], "type": "l4",
              "resources": {"accelerator": 7}}  # fmt: skip
    cluster = Cluster()
    async with webhook(cluster) as hook:
        _, body = await hook.handle(
            VALIDATE, review({**stored, "stop": True}, operation="UPDATE", old=stored)
        )
        _, added = await hook.handle(VALIDATE, review(
            {**stored, "stop": True, "env": [{"name": "A"}, {"name": "A"}]},
            operation="UPDATE", old={**stored, "stop": True}))  # fmt: skip
    assert response(body)["allowed"] is True
    assert cluster.reads == []
    assert 'spec.env[1].name: Duplicate value: "A"' in response(added)["status"]["message"]


async def test_the_preset_fills_only_what_is_absent_at_creation() -> None:
    async with webhook(Cluster()) as hook:
        _, created = await hook.handle(MUTATE, review({"type": "l4", "resources": {
            "accelerator": 2, "cpu": "1"}}))  # fmt: skip
        _, updated = await hook.handle(MUTATE, review(
            {"type": "l4", "resources": {"accelerator": 2}}, operation="UPDATE",
            old={"type": "l4"}))  # fmt: skip
    assert patch_of(created) == [{"op": "add", "path": "/spec/resources/ram", "value": "32Gi"}]
    assert patch_of(updated) == []


async def test_other_kinds_and_deletes_pass_untouched() -> None:
    body = json.loads(review({"privileged": True}))
    body["request"]["kind"]["kind"] = "InstanceType"
    async with webhook(Cluster()) as hook:
        _, other = await hook.handle(VALIDATE, json.dumps(body).encode())
        body["request"]["kind"]["kind"] = "Instance"
        body["request"]["operation"] = "DELETE"
        _, delete = await hook.handle(VALIDATE, json.dumps(body).encode())
    assert response(other)["allowed"] is True
    assert response(delete)["allowed"] is True


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=12,
)
SPEC_FIELDS = st.sampled_from([
    "image", "ports", "env", "resources", "volume", "volumeMount", "additionalVolumes",
    "sshPublicKey", "nodeName", "privileged", "stop", "type", "imagePullSecret",
])  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    spec=st.dictionaries(SPEC_FIELDS, JSON, max_size=6),
    old=st.none() | st.dictionaries(SPEC_FIELDS, JSON, max_size=4),
    raw=st.binary(max_size=64),
)
async def test_any_body_is_a_review_or_a_400_never_an_exception(
    spec: dict[str, Any], old: dict[str, Any] | None, raw: bytes
) -> None:
    async with webhook(Cluster()) as hook:
        for path in (VALIDATE, MUTATE):
            operation = "CREATE" if old is None else "UPDATE"
            status, body = await hook.handle(path, review(spec, operation=operation, old=old))
            assert status == 200
            answer = response(body)
            assert answer["uid"] == "u-1"
            if not answer["allowed"]:
                assert 400 <= answer["status"]["code"] < 600
                assert "\n" not in answer["status"]["message"]
            if "patch" in answer:
                json.loads(base64.b64decode(answer["patch"]))
            status, body = await hook.handle(path, raw)
            assert status in (200, 400)
