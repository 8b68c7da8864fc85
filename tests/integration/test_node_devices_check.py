"""The ``gpustack-node-devices`` check and the fit labels against the cluster stand-in.

The stand-in serves the walkthrough's four nodes and Kueue's CRDs as storage-only copies
(``standin_kueue_crds``: nothing admits here). The test plays Kueue's part by hand — it writes the
Workload with its quota reserved and the check's entry ``Pending``, as Kueue's Pod integration and
scheduler would — and the ``Devices`` ledgers as the Device Manager would; the controller runs
with the worker's own RBAC (the ``worker`` context). Expected figures are counted by the test:
a card is 1,600,000 units, 10 % of it 160,000, a 20 % slice 320,000.

The issue's case: node-t4-b's four T4s each hold a 90 % slice (640,000 units free on the node,
twice the slice), a 20 % slice on a queue whose flavor is node-t4-b is answered ``Retry`` naming
the card; once a card is released it is answered ``Ready`` on that card. The real proof, with
real Kueue evicting and requeueing, is ``tests/e2e/local/test_real_control_plane.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import standin_kueue_crds
import trio

from gpustack_kube.client import KubeClient
from gpustack_kube.config import load_config
from gpustack_kube.paths import (
    ADMISSION_CHECKS,
    DEVICES,
    EVENTS,
    NODES,
    RESOURCE_FLAVORS,
    WORKLOADS,
)
from gpustack_simulator.testing import cluster_standin
from gpustack_worker.admissioncheck.controller import CheckOptions, NodeDevicesCheck
from gpustack_worker.admissioncheck.fitlabels import run_fit_labels
from kubewait import eventually, until_object
from patience import until

WALKTHROUGH = Path(__file__).resolve().parents[2] / "recordings" / "scenarios" / "walkthrough.yaml"
WHOLE = 1_600_000
PERCENT = WHOLE // 100
CHECK = "gpustack-node-devices"
NOW = "2026-12-03T17:00:00Z"
SLICED_KEY = "sliced-max-free-units.fit.gpustack.ai/nvidia-tesla-t4"
SHARED_KEY = "shared-free-cards.fit.gpustack.ai/nvidia-tesla-t4"
T = TypeVar("T")


def t4_devices(node: str, cards: int) -> dict[str, Any]:
    sliceable = {"logicalSliced": {"count": 128}}
    accelerators = [{"id": f"GPU-{node}-{i}", "index": i, "status": sliceable}
                    for i in range(cards)]  # fmt: skip
    return {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "Devices",
            "metadata": {"name": node},
            "spec": {"groups": [{"id": "tesla-t4", "manufacturer": "nvidia", "memory": 15360,
                                 "accelerators": accelerators}]}}  # fmt: skip


def ledger(node: str, remaining: list[int]) -> dict[str, Any]:
    rows = [{"id": f"GPU-{node}-{i}", "index": i, "mode": 0 if left == WHOLE else 3,
             "allocated": WHOLE - left, "remaining": left}
            for i, left in enumerate(remaining)]  # fmt: skip
    return {"groups": [{"id": "tesla-t4", "manufacturer": "nvidia", "accelerators": rows}]}


def workload(
    name: str, flavor: str, conditions: list[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Workload as Kueue's Pod integration writes one for a 20 % slice, and its status."""
    limits = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "20",
              "nvidia.com/gpu.sliced.units": "320000",
              "nvidia.com/gpu.sliced.cores-percentage": "100"}  # fmt: skip
    body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1, "template": {
                "spec": {"containers": [{"name": "main", "image": "busybox",
                                         "resources": {"limits": limits}}]}}}]}}  # fmt: skip
    status = {
        "conditions": [{"type": c, "status": "True", "reason": c, "message": "",
                        "lastTransitionTime": NOW} for c in conditions],
        "admission": {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "main", "count": 1, "flavors": {"nvidia.com/gpu.sliced": flavor}}]},
        "admissionChecks": [{"name": CHECK, "state": "Pending", "message": "",
                             "lastTransitionTime": NOW}],
    }  # fmt: skip
    return body, status


@asynccontextmanager
async def running(tmp_path: Path) -> AsyncIterator[tuple[KubeClient, NodeDevicesCheck]]:
    """The stand-in with Kueue's copies, two T4 nodes' Devices, and the check running."""
    async with cluster_standin(WALKTHROUGH, tmp_path) as cluster:
        admin_config = load_config(cluster.kubeconfig, context="admin")
        worker_config = load_config(cluster.kubeconfig, context="worker")
        assert admin_config is not None
        assert worker_config is not None
        async with (
            KubeClient(admin_config) as admin,
            KubeClient(worker_config) as worker,
            trio.open_nursery() as nursery,
        ):
            await standin_kueue_crds.install(admin)
            for node, cards in (("node-t4-b", 4), ("node-t4-a", 1)):
                await admin.create(DEVICES.path(), t4_devices(node, cards))
            await set_ledger(admin, "node-t4-b", [10 * PERCENT] * 4)
            await set_ledger(admin, "node-t4-a", [WHOLE])
            for flavor, node in (("fl-t4-b", "node-t4-b"), ("fl-t4-a", "node-t4-a")):
                await admin.create(RESOURCE_FLAVORS.path(), {
                    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                    "metadata": {"name": flavor},
                    "spec": {"nodeLabels": {"kubernetes.io/hostname": node}}})  # fmt: skip
            check = NodeDevicesCheck(worker, CheckOptions(identity="test-worker"))
            nursery.start_soon(check.run)
            nursery.start_soon(run_fit_labels, worker)
            try:
                yield admin, check
            finally:
                await check.drain(timeout=2.0)
                nursery.cancel_scope.cancel()


async def set_ledger(admin: KubeClient, node: str, remaining: list[int]) -> None:
    current = await admin.get(DEVICES.path(name=node))
    await admin.update(DEVICES.path(name=node, subresource="status"),
                       {**current, "status": ledger(node, remaining)})  # fmt: skip


async def put_workload(admin: KubeClient, name: str, flavor: str, conditions: list[str]) -> None:
    body, status = workload(name, flavor, conditions)
    made = await admin.create(WORKLOADS.path("team-a"), body)
    await admin.update(WORKLOADS.path("team-a", name, "status"), {**made, "status": status})


def check_entry(workload: dict[str, Any], state: str) -> dict[str, Any] | None:
    """The check's entry on ``workload`` if it says ``state``."""
    for e in (workload.get("status") or {}).get("admissionChecks") or ():
        if e["name"] == CHECK and e["state"] == state:
            return dict(e)
    return None


async def entry(admin: KubeClient, name: str, state: str) -> dict[str, Any]:
    """The check's entry on Workload ``name`` once it says ``state``, woken by a watch."""
    path = WORKLOADS.path("team-a", name)
    return await until_object(admin, path, lambda w: check_entry(w, state), f"{name} {state}")


async def test_the_check_answers_retry_on_a_fragmented_node_and_ready_once_a_card_is_freed(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as (admin, check):
        # The worker wrote its AdmissionCheck and says it is Active.
        def active(found: dict[str, Any]) -> dict[str, Any] | None:
            conditions = (found.get("status") or {}).get("conditions") or ()
            return found if any(c["type"] == "Active" and c["status"] == "True"
                                for c in conditions) else None  # fmt: skip

        path = ADMISSION_CHECKS.path(name=CHECK)
        made = await until_object(admin, path, active, "the AdmissionCheck, Active")
        assert made["spec"] == {"controllerName": "gpustack.ai/node-devices"}

        # An evicted Workload is left alone; the fragmented node's slice is answered Retry.
        await put_workload(admin, "evicted", "fl-t4-a", ["QuotaReserved", "Evicted"])
        await put_workload(admin, "slice", "fl-t4-b", ["QuotaReserved"])
        retry = await entry(admin, "slice", "Retry")
        assert "no node has one card that can hold it" in retry["message"]
        assert "node-t4-b: card GPU-node-t4-b-" in retry["message"]
        assert f"has {10 * PERCENT} units left; the slice asks {20 * PERCENT}" in retry["message"]
        assert retry["requeueAfterSeconds"] == 5
        assert retry["lastTransitionTime"] != NOW

        async def told() -> list[dict[str, Any]] | None:
            events = (await admin.get(EVENTS.path("team-a")))["items"]
            found = [e for e in events if e["involvedObject"].get("name") == "slice"
                     and e["reason"] == "NodeDevicesRetry"]  # fmt: skip
            return found or None

        [event] = await eventually(told, "the Retry reason as an Event")
        assert event["type"] == "Warning"
        assert event["message"] == retry["message"]
        assert event["involvedObject"]["kind"] == "Workload"

        # The fit labels say what one card can give: 10 % on node-t4-b, a whole card on t4-a.
        async def labels(node: str, value: str) -> dict[str, str]:
            def fit(found: dict[str, Any]) -> dict[str, str] | None:
                got: dict[str, str] = found["metadata"].get("labels") or {}
                return got if got.get(SLICED_KEY) == value else None

            return await until_object(admin, NODES.path(name=node), fit, f"{node}'s {value}")

        t4b = await labels("node-t4-b", str(10 * PERCENT))
        assert t4b[SHARED_KEY] == "0"  # every card held Sliced: no share anywhere
        t4a = await labels("node-t4-a", str(WHOLE))
        assert t4a[SHARED_KEY] == "1"

        # A card released: Kueue requeues and reserves again (the test resets the entry, as
        # Kueue does on eviction), and the check answers Ready on that card.
        await set_ledger(admin, "node-t4-b", [10 * PERCENT] * 3 + [WHOLE])
        current = await admin.get(WORKLOADS.path("team-a", "slice"))
        current["status"]["admissionChecks"] = [{
            "name": CHECK, "state": "Pending", "retryCount": 1, "lastTransitionTime": NOW,
            "message": "Reset to Pending after eviction. Previously: Retry"}]  # fmt: skip
        await admin.update(WORKLOADS.path("team-a", "slice", "status"), current)
        ready = await entry(admin, "slice", "Ready")
        assert ready["message"] == "PodSet main fits on node-t4-b (GPU-node-t4-b-3)"
        assert "requeueAfterSeconds" not in ready
        await labels("node-t4-b", str(WHOLE))  # after the release

        # The evicted Workload was never answered.
        evicted = await admin.get(WORKLOADS.path("team-a", "evicted"))
        assert check_entry(evicted, "Pending") is not None
        assert all(key != "team-a/evicted" for key, _, _ in check.answers)


async def test_without_kueues_api_the_check_waits_and_says_so(tmp_path: Path, caplog: Any) -> None:
    async with cluster_standin(WALKTHROUGH, tmp_path) as cluster:
        config = load_config(cluster.kubeconfig, context="worker")
        assert config is not None
        async with KubeClient(config) as worker:
            check = NodeDevicesCheck(worker)
            said = "Kueue's API (kueue.x-k8s.io/v1beta2) is not served"
            async with trio.open_nursery() as nursery:
                nursery.start_soon(check.run)
                # Until it has looked and said so: a fixed second could pass before the first
                # look on a loaded machine.
                await until(lambda: said in caplog.text, "the check saying Kueue is absent")
                nursery.cancel_scope.cancel()
    assert not check.kueue_served.is_set()
