"""The publisher's pure parts: detection → labels, and merging into shared objects.

Expected figures are read off the committed recordings by hand (bytes ÷ 2**20, CUDA's
version encoding) or are the walkthrough's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from gpustack_core import contract
from gpustack_core.devices import AcceleratorSpec, GroupSpec
from gpustack_core.features import Card, acceleratable_labels, groups_from_cards
from gpustack_core.ledger import build_ledger
from gpustack_devicemanager.podview import node_pod
from gpustack_devicemanager.publish import (
    Publisher,
    cards_of,
    detected_groups,
    devices_labels,
    merged_groups,
    merged_labels,
    nodefeature_body,
    pod_allocations,
    run_publisher,
)
from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig
from gpustack_simulator.recording import load_recording
from gpustack_simulator.replay.backends import replay_backend
from patience import HANG

RECORDINGS = Path(__file__).resolve().parents[3] / "recordings"
KEY = "acceleratable.feature.gpustack.ai/nvidia-a10g"


def _pod(name: str, annotation: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {contract.ALLOCATION_ANNOTATION: annotation},
        },
        "spec": {"nodeName": "n", "containers": [{"name": "main"}]},
        "status": {"phase": "Running"},
    }


def test_the_ledger_is_handed_the_pod_views_grants_not_text() -> None:
    """One read per Pod (the view's); the ledger charges its grants and names the unreadable."""
    half = 800_000  # half a card of 1,600,000 units, granted Sliced (mode 3)
    granted = json.dumps({"main": {"devices": {"groups": [{"id": "g", "manufacturer": "nvidia",
        "accelerators": [{"id": "GPU-0", "mode": 3, "allocated": half}]}]},
        "deviceIDs": ["g:GPU-0:0"]}})  # fmt: skip
    views = [node_pod(_pod("good", granted)), node_pod(_pod("bad", "{oops"))]
    allocations = pod_allocations(views)
    assert [(a.name, a.grants, a.unreadable is None) for a in allocations] == [
        ("good", views[0].grants, True),
        ("bad", (), False),
    ]
    assert views[0].grants[0].accelerator.allocated == half
    group = GroupSpec(
        id="g",
        manufacturer="nvidia",
        memory=1,
        accelerators=(AcceleratorSpec(id="GPU-0", index=0),),
    )
    ledger = build_ledger([group], allocations)
    [card] = ledger.groups[0].accelerators
    assert (card.mode, card.allocated, card.remaining) == (3, half, 1_600_000 - half)
    [reason] = ledger.skipped
    assert reason.startswith(f"pod team/bad: annotation {contract.ALLOCATION_ANNOTATION}: ")
    assert reason.endswith("; it holds nothing in the ledger")


def labels_of(recording: str) -> dict[str, str]:
    backend = replay_backend(load_recording(RECORDINGS / recording))
    try:
        return acceleratable_labels(detected_groups(backend.detect()).groups)
    finally:
        backend.close()


def test_the_committed_a10g_recording_states_no_compute_capability() -> None:
    labels = labels_of("nvidia/a10g.yaml")
    # 24146608128 B = 23028 MiB = 22.49 GiB → 22Gi; 9216 cores; CUDA 11070 → 11.7.
    assert labels[KEY + ".memory"] == "22Gi"
    assert labels[KEY + ".cores"] == "9216"
    assert labels["acceleratable.feature.gpustack.ai/nvidia.driver-version"] == "515.105.01"
    assert labels["acceleratable.feature.gpustack.ai/nvidia.runtime-version"] == "11.7"
    # The recording answers FUNCTION_NOT_FOUND for the compute capability: no label, no family.
    assert KEY + ".comcap" not in labels
    assert KEY + ".family" not in labels


def test_the_walkthrough_recording_gives_the_walkthrough_labels() -> None:
    labels = labels_of("nvidia/a10g-walkthrough.yaml")
    assert labels[KEY + ".comcap"] == "8.6"
    assert labels[KEY + ".family"] == "Ampere"
    assert labels[KEY + ".memory"] == "24Gi"
    assert labels[KEY + ".cores"] == "10240"


def test_mig_partitions_reach_the_spec() -> None:
    backend = replay_backend(load_recording(RECORDINGS / "nvidia/h100-mig.yaml"))
    try:
        cards = cards_of(backend.detect())
    finally:
        backend.close()
    (group,) = groups_from_cards("nvidia", cards).groups
    physical = group.accelerators[0].status.physical_sliced
    assert physical is not None
    # The recording: a 3g.40gb in slot 0 and 1g.10gb in slots 1 and 2.
    assert physical.count == 3
    assert {(p.name, p.count) for p in physical.profiles} == {("3g.40gb", 1), ("1g.10gb", 2)}


def test_merged_groups_replace_only_this_manufacturers() -> None:
    amd = {"id": "mi300x", "manufacturer": "amd", "accelerators": [{"id": "a"}]}
    old_nvidia = {"id": "a10g", "manufacturer": "nvidia", "accelerators": []}
    new_nvidia = {"id": "tesla-t4", "manufacturer": "nvidia", "accelerators": [{"id": "t"}]}
    assert merged_groups([old_nvidia, amd], "nvidia", [new_nvidia]) == [amd, new_nvidia]
    assert merged_groups([amd], "nvidia", []) == [amd]


def test_merged_labels_keep_another_managers_keys() -> None:
    amd = {
        "feature.gpustack.ai/acceleratable": "true",
        "acceleratable.feature.gpustack.ai/amd": "true",
        "acceleratable.feature.gpustack.ai/amd-mi300x.count": "8",
    }
    stale = {"acceleratable.feature.gpustack.ai/nvidia-a10g.count": "1"}
    mine = {"acceleratable.feature.gpustack.ai/nvidia": "true"}
    merged = merged_labels({**amd, **stale}, "nvidia", mine)
    assert merged == {**amd, **mine}
    # The last manufacturer leaving takes the umbrella label with it.
    assert merged_labels(mine, "nvidia", {}) == {}


def node(labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "n", "uid": "u", "labels": labels, "annotations": annotations}}


def test_devices_labels_copy_the_nodes_pool_keys() -> None:
    (group,) = groups_from_cards(
        "nvidia", [Card("g", 0, "NVIDIA A10G", 24576, 10240, "d", "r")]
    ).groups
    the_node = node(
        {
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "gpustack.ai/managed": "true",
            "general.feature.gpustack.ai/amd": "true",
            "general.feature.gpustack.ai/amd-epyc-7r32": "true",
            "general.feature.gpustack.ai/amd-epyc-7r32.count": "4",
            "feature.node.kubernetes.io/cpu-model.vendor_id": "AMD",
        },
        {"feature.gpustack.ai/cpu-name": "AMD EPYC 7R32"},
    )
    stale = {"general.feature.gpustack.ai/old-cpu": "true", "team": "kept"}
    assert devices_labels(stale, "nvidia", [group], the_node) == {
        "team": "kept",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "gpustack.ai/managed": "true",
        "general.feature.gpustack.ai/amd-epyc-7r32": "true",
        KEY: "true",
    }
    # A node taken out of management: managed goes from the Devices labels too.
    unmanaged = node({"kubernetes.io/os": "linux"}, {})
    assert "gpustack.ai/managed" not in devices_labels(
        {"gpustack.ai/managed": "true"}, "nvidia", [group], unmanaged
    )


def test_nodefeature_body_is_what_nfd_master_needs() -> None:
    made = nodefeature_body("node-a10g", "gpustack-system", {"a": "b"}, {"kind": "Node"})
    assert made["apiVersion"] == "nfd.k8s-sigs.io/v1alpha1"
    assert made["metadata"]["name"] == "node-a10g-gpustack-device-manager"
    assert made["metadata"]["labels"] == {"nfd.node.kubernetes.io/node-name": "node-a10g"}
    assert made["spec"] == {"labels": {"a": "b"}}


# -- each publication stands alone ---------------------------------------------------------------


def not_found(message: str) -> dict[str, Any]:
    return {"kind": "Status", "code": 404, "reason": "NotFound", "message": message}


class NoNfdApi:
    """An API server without Node Feature Discovery: ``nfd.k8s-sigs.io`` is not served.

    The 404 is kube-apiserver's own for a group it does not serve (a text body, not a Status),
    which is what the real server answered the first time the Device Manager ran against it.
    """

    def __init__(self) -> None:
        self.devices: dict[str, Any] | None = None
        self.requests: list[tuple[str, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.requests.append((request.method, path))
        if path.startswith("/apis/nfd.k8s-sigs.io/"):
            return httpx.Response(404, text="404 page not found\n")
        if path == "/api/v1/nodes/gpu-node-1":
            return httpx.Response(200, json={"kind": "Node", "metadata": {
                "name": "gpu-node-1", "uid": "node-uid", "labels": {}}})  # fmt: skip
        devices = "/apis/worker.gpustack.ai/v1alpha1/devices"
        if path == f"{devices}/gpu-node-1" and request.method == "GET":
            if self.devices is None:
                return httpx.Response(404, json=not_found("not found"))
            return httpx.Response(200, json=self.devices)
        if path == devices and request.method == "POST":
            self.devices = json.loads(request.content)
            return httpx.Response(201, json=self.devices)
        return httpx.Response(404, json=not_found(f"unexpected {request.method} {path}"))


async def test_devices_are_published_when_the_nodefeature_api_is_not_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Without NFD, the Devices (what node capacity and the Pod webhook read) still appear.

    Before: the NodeFeature write and the Devices writes shared one try-block, so the 404 of
    the NFD group ended every round before the Devices were written — zero writes, forever.
    """
    backend = replay_backend(load_recording(RECORDINGS / "nvidia/h100-mixed.yaml"))
    try:
        grouped = detected_groups(backend.detect())
    finally:
        backend.close()
    api = NoNfdApi()
    config = KubeConfig("https://api.invalid", None, None, None, False, "default")
    async with KubeClient(config, transport=httpx.MockTransport(api)) as client:
        publisher = Publisher(client, "gpu-node-1", "nvidia", "gpustack-system", grouped.groups)
        with trio.fail_after(HANG):
            async with trio.open_nursery() as nursery:
                await nursery.start(
                    lambda task_status: run_publisher(
                        publisher,
                        list,
                        trio.sleep_forever,
                        period=3600,
                        task_status=task_status,
                    )
                )
                nursery.cancel_scope.cancel()
    assert api.devices is not None, api.requests
    assert [g["id"] for g in api.devices["spec"]["groups"]] == [g.id for g in grouped.groups]
    assert publisher.nodefeature_error is not None
    assert "404" in publisher.nodefeature_error
    warnings = [r for r in caplog.records if "NodeFeature failed" in r.getMessage()]
    assert len(warnings) == 1


class ForgetfulNoNfdApi(NoNfdApi):
    """:class:`NoNfdApi` whose NodeFeature answer is chosen, and whose Devices object is
    deleted at the start of every round (the Node read), so every round must write it again.
    """

    def __init__(self, nfd: httpx.Response) -> None:
        super().__init__()
        self.nfd = nfd
        self.devices_writes = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.startswith("/apis/nfd.k8s-sigs.io/"):
            self.requests.append((request.method, path))
            return self.nfd
        if path == "/api/v1/nodes/gpu-node-1":
            self.devices = None  # deleted meanwhile: this round must create it again
        if path.endswith("/devices/gpu-node-1/status") and request.method == "PUT":
            self.requests.append((request.method, path))
            self.devices = json.loads(request.content)
            return httpx.Response(200, json=self.devices)
        answered = super().__call__(request)
        if request.method == "POST" and answered.status_code == 201:
            self.devices_writes += 1
        return answered


FORBIDDEN = httpx.Response(403, json={
    "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
    "message": 'nodefeatures.nfd.k8s-sigs.io is forbidden: User "system:serviceaccount:ops:dm" '
    'cannot get resource "nodefeatures" in API group "nfd.k8s-sigs.io" in the namespace "ops"',
})  # fmt: skip


@pytest.mark.parametrize(
    "nfd",
    [httpx.Response(404, text="404 page not found\n"), FORBIDDEN],
    ids=["crd-not-served", "refused"],
)
async def test_eight_rounds_without_the_nodefeature_write_eight_devices(
    nfd: httpx.Response, caplog: pytest.LogCaptureFixture, autojump_clock: trio.abc.Clock
) -> None:
    """The issue's reproduction (#31, item 3): 8 rounds against an API whose NodeFeature write
    fails — the CRD not served, or RBAC refusing it — write the Devices every round, and the
    NodeFeature's failure is said once, not once a round.
    """
    backend = replay_backend(load_recording(RECORDINGS / "nvidia/h100-mixed.yaml"))
    try:
        grouped = detected_groups(backend.detect())
    finally:
        backend.close()
    api = ForgetfulNoNfdApi(nfd)
    config = KubeConfig("https://api.invalid", None, None, None, False, "default")
    async with KubeClient(config, transport=httpx.MockTransport(api)) as client:
        publisher = Publisher(client, "gpu-node-1", "nvidia", "ops", grouped.groups)
        with trio.move_on_after(7.5):  # rounds at t = 0, 1, …, 7: eight of them
            await run_publisher(publisher, list, trio.sleep_forever, period=1.0)
    nodefeature_reads = [r for r in api.requests if r == ("GET", NF_PATH)]
    assert len(nodefeature_reads) == 8, api.requests  # the NodeFeature was tried every round
    assert api.devices_writes == 8
    warnings = [r for r in caplog.records if "NodeFeature failed" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    failed_rounds = [r for r in caplog.records if "devices failed" in r.getMessage()]
    assert failed_rounds == []


NF_PATH = (
    "/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/ops/nodefeatures/gpu-node-1-gpustack-device-manager"
)
