"""The InstanceType webhook at its seam: reviews in, reviews out, the cluster a mock transport.

The rules are tested in ``tests/unit/core/test_instancetype_rules.py``; here, what the webhook
adds: it reads the Nodes and the Devices only to default a creation, refuses (503) rather than
admit a type it could not enrich, passes warnings on, carries an update's unset fields, and
answers any body with a review or a one-line 400. The cluster is the walkthrough's four nodes
(their labels from ``test_pools``) and the A10G's ``Devices``.
"""

from __future__ import annotations

import base64
import copy
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_core import contract
from gpustack_core.decoding import convert
from gpustack_core.instancetype import InstanceTypeSpec
from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig
from gpustack_worker.admission import DevicesCache
from gpustack_worker.instance_admission import patch_of
from gpustack_worker.instancetype_admission import InstanceTypeWebhook
from walkthrough_expected import A10G_TYPE, CUSTOM_ENTRANCE, CUSTOM_TYPE

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from test_pools import NODES

VALIDATE = contract.INSTANCE_TYPE_VALIDATE_PATH
MUTATE = contract.INSTANCE_TYPE_MUTATE_PATH
CUSTOM_SPEC = CUSTOM_TYPE["spec"]
A10G_DEVICES = {
    "metadata": {"name": "node-a10g"},
    "spec": {"groups": [{
        "id": "a10g", "manufacturer": "nvidia", "memory": 23028,
        "accelerators": [{"id": "GPU-e0587d2e", "index": 0,
                          "status": {"logicalSliced": {"count": 128,
                                                       "coresPercentageOvercommit": True}}}],
    }]},
}  # fmt: skip


class Cluster:
    """The walkthrough's Nodes and the A10G's Devices; counts what was read."""

    def __init__(self, *, nodes_fail: bool = False, devices_fail: bool = False) -> None:
        self.nodes_fail = nodes_fail
        self.devices_fail = devices_fail
        self.reads: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.reads.append(path)
        if path == "/api/v1/nodes":
            if self.nodes_fail:
                return httpx.Response(500, json={"kind": "Status", "message": "etcd is down"})
            items = [{"metadata": {"name": n, "labels": labels}} for n, labels in NODES.items()]
            return httpx.Response(200, json={"items": items})
        if path.endswith("/devices"):
            if self.devices_fail:
                return httpx.Response(500, json={"kind": "Status", "message": "etcd is down"})
            return httpx.Response(200, json={"items": [A10G_DEVICES]})
        return httpx.Response(404, json={"kind": "Status", "code": 404, "reason": "NotFound"})


@asynccontextmanager
async def webhook(cluster: Cluster) -> AsyncIterator[InstanceTypeWebhook]:
    config = KubeConfig("https://api.invalid", None, None, None, False, "default")
    async with KubeClient(config, transport=httpx.MockTransport(cluster)) as client:
        yield InstanceTypeWebhook(client, DevicesCache(client))


def instancetype(spec: dict[str, Any], name: str = "a10g-12c128g") -> dict[str, Any]:
    return {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "InstanceType",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def review(
    spec: dict[str, Any],
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    name: str = "a10g-12c128g",
) -> bytes:
    request: dict[str, Any] = {
        "uid": "u-1",
        "kind": {"group": "worker.gpustack.ai", "version": "v1alpha1", "kind": "InstanceType"},
        "operation": operation,
        "name": name,
        "object": instancetype(spec, name),
    }
    if old is not None:
        request["oldObject"] = instancetype(old, name)
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


def response(body: bytes) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(body)["response"]
    return found


def applied(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 ``add`` on object members (written from the RFC, not from the webhook)."""
    out = copy.deepcopy(obj)
    for op in patch:
        assert op["op"] == "add"
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]
        ]
        at = out
        for part in parents:
            at = at.setdefault(part, {})
        at[last] = op["value"]
    return out


async def test_the_section_4_type_is_defaulted_from_the_a10g_flavor() -> None:
    """The walkthrough's §4: descriptors as §1's derived A10G type has them, the admin's unit
    kept; labels as §1's type carries them but for its own name's entrance (the reference's)."""
    cluster = Cluster()
    async with webhook(cluster) as hook:
        status, body = await hook.handle(MUTATE, review(CUSTOM_SPEC))
    assert status == 200
    answer = response(body)
    assert answer["allowed"] is True
    assert "warnings" not in answer
    made = applied(instancetype(CUSTOM_SPEC), patch_of(body))
    derived = A10G_TYPE
    assert made["spec"] == {
        **derived["spec"],
        "feature": {"logicalSliced": derived["spec"]["feature"]["logicalSliced"],
                    "physicalSliced": {}},  # maxSize 0 is the default: omitted
        "unitResources": CUSTOM_SPEC["unitResources"],
    }  # fmt: skip
    labels = dict(derived["metadata"]["labels"])
    del labels["schedule.gpustack.ai/derived-from-node"]
    labels["schedule.gpustack.ai/queue-entrance"] = CUSTOM_ENTRANCE
    assert made["metadata"]["labels"] == labels
    assert sorted(set(cluster.reads)) == [
        "/api/v1/nodes",
        "/apis/worker.gpustack.ai/v1alpha1/devices",
    ]
    async with webhook(Cluster()) as hook:  # the defaulted object passes validation
        _, checked = await hook.handle(VALIDATE, review(made["spec"]))
    assert response(checked) == {"uid": "u-1", "allowed": True}


async def test_a_creation_it_cannot_enrich_is_refused_not_admitted_bare() -> None:
    for cluster, said in (
        (Cluster(nodes_fail=True), "could not list the Nodes"),
        (Cluster(devices_fail=True), "the InstanceType's feature cannot be defaulted"),
    ):
        async with webhook(cluster) as hook:
            _, body = await hook.handle(MUTATE, review(CUSTOM_SPEC))
        answer = response(body)
        assert answer["allowed"] is False
        assert answer["status"]["code"] == 503
        assert said in answer["status"]["message"]


async def test_a_pool_no_node_offers_is_admitted_with_a_warning() -> None:
    spec = {**CUSTOM_SPEC, "acceleratorGroup": "nvidia-h200"}
    async with webhook(Cluster()) as hook:
        _, body = await hook.handle(MUTATE, review(spec))
    answer = response(body)
    assert answer["allowed"] is True
    assert answer["warnings"] == [
        "no managed node offers nvidia-h200 on linux/amd64 now: the type's descriptors are "
        "left as written and its pool is empty until one does"
    ]
    assert {op["path"] for op in patch_of(body)} == {
        "/spec/generalGroup",
        "/metadata/labels",
    }


async def test_an_update_is_not_defaulted_again_but_keeps_what_it_leaves_out() -> None:
    """Re-applying the §4 manifest with a displayName: nothing read, the defaulted fields
    carried, then validation passes; a re-size is refused field by field (403)."""
    stored = A10G_TYPE["spec"] | {"unitResources": CUSTOM_SPEC["unitResources"]}
    named = {**CUSTOM_SPEC, "displayName": "A10G, big unit"}
    cluster = Cluster()
    async with webhook(cluster) as hook:
        _, mutated = await hook.handle(MUTATE, review(named, operation="UPDATE", old=stored))
        made = applied(instancetype(named), patch_of(mutated))
        _, kept = await hook.handle(VALIDATE, review(made["spec"], operation="UPDATE", old=stored))
        resized = {**stored, "unitResources": {"cpu": "16", "ram": "128Gi"}, "family": "Hopper"}
        _, refused = await hook.handle(VALIDATE, review(resized, operation="UPDATE", old=stored))
    assert cluster.reads == []
    expected = {**stored, "displayName": "A10G, big unit"}
    assert convert(made["spec"], InstanceTypeSpec, what="made") == convert(
        expected, InstanceTypeSpec, what="expected"
    )
    assert response(kept)["allowed"] is True
    status = response(refused)["status"]
    detail = (
        "field is immutable after creation (only displayName and inactive may change): to "
        "re-size or re-point a pool, delete the InstanceType and create it again"
    )
    assert (status["code"], status["reason"]) == (403, "Forbidden")
    assert status["message"] == (
        f"[spec.family: Forbidden: {detail}, spec.unitResources: Forbidden: {detail}]"
    )
    assert [c["field"] for c in status["details"]["causes"]] == [
        "spec.family",
        "spec.unitResources",
    ]


async def test_inactive_and_display_name_change_freely() -> None:
    stored = A10G_TYPE["spec"]
    async with webhook(Cluster()) as hook:
        changed = {**stored, "inactive": True, "displayName": "off"}
        _, body = await hook.handle(VALIDATE, review(changed, operation="UPDATE", old=stored))
    assert response(body)["allowed"] is True


async def test_a_wrong_spec_is_422_and_left_undefaulted() -> None:
    spec = {**CUSTOM_SPEC, "acceleratorGroup": "", "unitResources": {"cpu": "0"}}
    cluster = Cluster()
    async with webhook(cluster) as hook:
        _, mutated = await hook.handle(MUTATE, review(spec))
        _, body = await hook.handle(VALIDATE, review(spec))
    assert response(mutated) == {"uid": "u-1", "allowed": True}
    assert cluster.reads == []
    status = response(body)["status"]
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert [c["field"] for c in status["details"]["causes"]] == [
        "spec.acceleratorGroup",
        "spec.unitResources.cpu",
    ]


async def test_a_spec_that_does_not_decode_is_named() -> None:
    async with webhook(Cluster()) as hook:
        _, body = await hook.handle(VALIDATE, review({"acceleratable": "yes"}))
    status = response(body)["status"]
    assert status["code"] == 422
    assert "acceleratable" in status["message"]


SPEC_FIELDS = st.sampled_from(
    ["acceleratable", "acceleratorGroup", "generalGroup", "os", "arch", "unitResources",
     "memory", "feature", "displayName", "inactive"]
)  # fmt: skip
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["", "x", "nvidia-a10g"]),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner,
                                                                  max_size=2),
    max_leaves=6,
)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    spec=st.dictionaries(SPEC_FIELDS, JSON, max_size=5),
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
