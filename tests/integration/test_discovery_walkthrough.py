"""Discovery published to the cluster: the walkthrough's node labels, Devices and ledger.

The stand-in serves a scenario; a real Device Manager per scenario Device Manager (in process,
over the replayed recording) and the worker's NodeFeature task publish through the API; the
stand-in's NFD turns their NodeFeatures into Node labels. Expected values are the
walkthrough's (``shared/spec/instancetype-walkthrough.md``, "1. Initial state"), letter for
letter, or recomputed here from the Pods' annotations as raw JSON.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from gpustack_devicemanager.daemon import Running, ServeOptions, serve
from gpustack_kube.client import KubeClient
from gpustack_kube.config import load_config
from gpustack_simulator.cluster.server import RunningCluster
from gpustack_simulator.procfs import write_procfs
from gpustack_simulator.recording import load_recording
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.testing import cluster_standin
from gpustack_worker.nodefeatures import publish, run_node_features
from patience import HANG

KUBECTL = shutil.which("kubectl")
WHOLE = 1_600_000
ANNOTATION = "device.gpustack.ai/accelerator.allocated"

WALKTHROUGH_NODE_A10G = {
    "gpustack.ai/managed": "true",
    "general.feature.gpustack.ai/amd": "true",
    "general.feature.gpustack.ai/amd-epyc-7r32": "true",
    "general.feature.gpustack.ai/amd-epyc-7r32.count": "4",
    "acceleratable.feature.gpustack.ai/nvidia": "true",
    "acceleratable.feature.gpustack.ai/nvidia-a10g": "true",
    "acceleratable.feature.gpustack.ai/nvidia-a10g.count": "1",
    "acceleratable.feature.gpustack.ai/nvidia-a10g.memory": "24Gi",
    "acceleratable.feature.gpustack.ai/nvidia-a10g.cores": "10240",
    "acceleratable.feature.gpustack.ai/nvidia-a10g.family": "Ampere",
    "acceleratable.feature.gpustack.ai/nvidia-a10g.product": "NVIDIA-A10G",
    "acceleratable.feature.gpustack.ai/nvidia-a10g.comcap": "8.6",
    "acceleratable.feature.gpustack.ai/nvidia.driver-version": "580.159.03",
    "acceleratable.feature.gpustack.ai/nvidia.runtime-version": "13.0",
    # The walkthrough lists it among the NodeFeature keys, not in the Node excerpt.
    "feature.gpustack.ai/acceleratable": "true",
}
A10G_UUID = "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575"
PREFIXES = ("gpustack.ai/", "general.feature.gpustack.ai/", "acceleratable.", "feature.gpustack")


def ours(labels: dict[str, str]) -> dict[str, str]:
    """The labels the operator publishes (NFD's own and Kubernetes' left out)."""
    return {k: v for k, v in labels.items() if k.startswith(PREFIXES)}


@dataclass
class Managers:
    cluster: RunningCluster
    running: dict[tuple[str, str], Running]

    def stop(self, node: str, manufacturer: str) -> None:
        """Stop one Device Manager as SIGTERM does (its objects stay, as on a cluster)."""
        self.running[(node, manufacturer)].shutdown.set()

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        return self.cluster.state.store.get(kind, namespace, name)


async def _eventually(check: Callable[[], bool], what: str, timeout: float = HANG) -> None:
    with trio.move_on_after(timeout):
        while not check():
            await trio.sleep(0.1)
        return
    pytest.fail(f"timed out waiting for {what}")


@asynccontextmanager
async def open_managers(scenario: str, tmp_path: Path, *, worker: bool) -> AsyncIterator[Managers]:
    """The stand-in, every Device Manager of ``scenario`` in process, and the worker's task."""
    async with cluster_standin(scenario, tmp_path / "cluster") as cluster:
        worker_kube = load_config(cluster.kubeconfig, context="worker")
        assert worker_kube is not None
        client = KubeClient(worker_kube)
        try:
            async with trio.open_nursery() as nursery:
                expanded = cluster.state.expanded
                running: dict[tuple[str, str], Running] = {}
                for dm in expanded.device_managers:
                    proc_root = tmp_path / f"proc-{dm.node}-{dm.manufacturer}"
                    write_procfs(proc_root, dict(expanded.procs(dm.node)))
                    options = ServeOptions(
                        manufacturer=dm.manufacturer,
                        node_name=dm.node,
                        monitor_period=0.5,
                        secure_port=0,
                        bind_address="127.0.0.1",
                        proc_root=proc_root,
                    )
                    kube = load_config(cluster.kubeconfig, context="device-manager")
                    backend = replay_backend(load_recording(dm.recording))
                    running[(dm.node, dm.manufacturer)] = await nursery.start(
                        partial(serve, options, backend, kube=kube)
                    )
                features = trio.CancelScope()

                async def node_features() -> None:
                    with features:
                        await run_node_features(client, "gpustack-system", period=1.0)

                if worker:
                    nursery.start_soon(node_features)
                try:
                    yield Managers(cluster, running)
                finally:
                    for state in running.values():
                        state.shutdown.set()  # each serve() returns after closing its client
                    features.cancel()
        finally:
            await client.aclose()


async def kubectl(cluster: RunningCluster, *args: str) -> str:
    assert KUBECTL is not None
    done = await trio.run_process(
        [KUBECTL, "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def node_labels(managers: Managers, name: str) -> dict[str, str]:
    node = managers.get("Node", name)
    assert node is not None
    return dict(node["metadata"].get("labels") or {})


async def test_walkthrough_node_labels_devices_and_ledger(tmp_path: Path) -> None:
    async with open_managers("walkthrough", tmp_path, worker=True) as managers:
        await _eventually(
            lambda: ours(node_labels(managers, "node-a10g")) == WALKTHROUGH_NODE_A10G,
            "node-a10g to carry the walkthrough's labels",
        )
        devices = managers.get("Devices", "node-a10g")
        await _eventually(
            lambda: bool((managers.get("Devices", "node-a10g") or {}).get("status")),
            "the A10G ledger",
        )
        devices = managers.get("Devices", "node-a10g")
        assert devices is not None
        # The walkthrough's Devices excerpt: the ledger, letter for letter.
        assert devices["status"] == {
            "groups": [
                {
                    "id": "a10g",
                    "manufacturer": "nvidia",
                    "accelerators": [{"id": A10G_UUID, "index": 0, "mode": 0, "remaining": WHOLE}],
                }
            ]
        }
        # The walkthrough's Devices labels, letter for letter (the worker's keys arrive on the
        # Node first, then the Device Manager's next period copies them).
        walkthrough_labels = {
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "gpustack.ai/managed": "true",
            "general.feature.gpustack.ai/amd-epyc-7r32": "true",
            "acceleratable.feature.gpustack.ai/nvidia-a10g": "true",
        }
        await _eventually(
            lambda: (
                (managers.get("Devices", "node-a10g") or {}).get("metadata", {}).get("labels")
                == walkthrough_labels
            ),
            "the walkthrough's Devices labels",
        )
        devices = managers.get("Devices", "node-a10g")
        assert devices is not None
        assert devices["metadata"]["ownerReferences"][0]["kind"] == "Node"
        (group,) = devices["spec"]["groups"]
        assert {k: group[k] for k in ("id", "manufacturer", "name", "memory", "cores")} == {
            "id": "a10g",
            "manufacturer": "nvidia",
            "name": "NVIDIA A10G",
            "memory": 24576,
            "cores": 10240,
        }
        assert (group["driverVersion"], group["runtimeVersion"]) == ("580.159.03", "13.0")
        assert (group["computeCapability"], group["family"]) == ("8.6", "Ampere")
        (card,) = group["accelerators"]
        assert card["id"] == A10G_UUID
        assert card["status"]["logicalSliced"] == {"count": 128}

        # node-cpu: the worker's keys, no accelerator's.
        cpu = ours(node_labels(managers, "node-cpu"))
        assert cpu == {
            "gpustack.ai/managed": "true",
            "general.feature.gpustack.ai/amd": "true",
            "general.feature.gpustack.ai/amd-epyc-7r13": "true",
            "general.feature.gpustack.ai/amd-epyc-7r13.count": "16",
        }
        t4b = ours(node_labels(managers, "node-t4-b"))
        assert t4b["acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count"] == "4"
        assert t4b["acceleratable.feature.gpustack.ai/nvidia-tesla-t4.product"] == "Tesla-T4"
        assert t4b["acceleratable.feature.gpustack.ai/nvidia-tesla-t4.memory"] == "16Gi"
        assert t4b["general.feature.gpustack.ai/intel-xeon-platinum-8259cl.count"] == "48"

        names = {d["metadata"]["name"] for d in managers.cluster.state.store.list("Devices")}
        assert names == {"node-a10g", "node-t4-a", "node-t4-b"}

        if KUBECTL is not None:
            listed = await kubectl(managers.cluster, "get", "devices", "-o", "name")
            assert sorted(listed.split()) == [
                "devices.worker.gpustack.ai/node-a10g",
                "devices.worker.gpustack.ai/node-t4-a",
                "devices.worker.gpustack.ai/node-t4-b",
            ]
            shown = await kubectl(managers.cluster, "get", "node", "node-a10g", "--show-labels")
            for key, value in WALKTHROUGH_NODE_A10G.items():
                assert f"{key}={value}" in shown


async def test_no_write_when_nothing_changed(tmp_path: Path) -> None:
    async with open_managers("walkthrough", tmp_path, worker=False) as managers:
        await _eventually(
            lambda: bool((managers.get("Devices", "node-t4-a") or {}).get("status")),
            "node-t4-a's ledger",
        )
        feature = managers.get(
            "NodeFeature", "node-t4-a-gpustack-device-manager", "gpustack-system"
        )
        devices = managers.get("Devices", "node-t4-a")
        assert feature is not None
        assert devices is not None
        await trio.sleep(2.0)  # four publishing periods
        again = managers.get("NodeFeature", "node-t4-a-gpustack-device-manager", "gpustack-system")
        assert again is not None
        assert again["metadata"]["resourceVersion"] == feature["metadata"]["resourceVersion"]
        now = managers.get("Devices", "node-t4-a")
        assert now is not None
        assert now["metadata"]["resourceVersion"] == devices["metadata"]["resourceVersion"]


def _well_formed(containers: object) -> bool:
    """The annotation's shape, checked by hand: container → {devices: {groups: [...]}}."""
    if not isinstance(containers, dict):
        return False
    for container in containers.values():
        devices = container.get("devices") if isinstance(container, dict) else None
        if not isinstance(devices, dict) or not isinstance(devices.get("groups", []), list):
            return False
    return True


def expected_ledger(pods: list[dict[str, Any]], cards: list[str]) -> dict[str, tuple[int, int]]:
    """card → (allocated, remaining), summed from the annotations' raw JSON."""
    allocated = dict.fromkeys(cards, 0)
    for pod in pods:
        text = (pod["metadata"].get("annotations") or {}).get(ANNOTATION)
        if text is None:
            continue
        try:
            containers = json.loads(text)
        except json.JSONDecodeError:
            continue
        if not _well_formed(containers):
            continue
        terminal = (pod.get("status") or {}).get("phase") in {"Succeeded", "Failed"}
        for container in containers.values():
            for group in container["devices"].get("groups", []):
                for card in group.get("accelerators", []):
                    if card["mode"] == 5 or card["id"] not in allocated:
                        continue
                    if terminal and card["mode"] != 4:
                        continue
                    total = allocated[card["id"]] + card.get("allocated", 0)
                    allocated[card["id"]] = min(total, WHOLE)
    return {card: (units, WHOLE - units) for card, units in allocated.items()}


def ledger_rows(devices: dict[str, Any], manufacturer: str) -> dict[str, tuple[int, int]]:
    (group,) = [g for g in devices["status"]["groups"] if g["manufacturer"] == manufacturer]
    return {a["id"]: (a.get("allocated", 0), a["remaining"]) for a in group["accelerators"]}


async def test_an_unparseable_annotation_skips_that_pod_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gpustack.devicemanager.publish")
    async with open_managers("nvidia-mixed", tmp_path, worker=False) as managers:
        state = managers.cluster.state
        node = "gpu-node-1"
        await _eventually(
            lambda: bool((managers.get("Devices", node) or {}).get("status")), "the ledger"
        )
        devices = managers.get("Devices", node)
        assert devices is not None
        cards = [a["id"] for g in devices["spec"]["groups"] for a in g["accelerators"]]
        pods = [p for p in state.store.list("Pod") if p["spec"].get("nodeName") == node]
        assert ledger_rows(devices, "nvidia") == expected_ledger(pods, cards)
        victim = next(p for p in pods if ANNOTATION in (p["metadata"].get("annotations") or {}))
        meta = victim["metadata"]

        def corrupt(pod: dict[str, Any]) -> None:
            pod["metadata"]["annotations"][ANNOTATION] = '{"main": {"devices": 7}}'

        state.update_pod(meta["namespace"], meta["name"], corrupt)
        pods = [p for p in state.store.list("Pod") if p["spec"].get("nodeName") == node]
        want = expected_ledger(pods, cards)
        await _eventually(
            lambda: ledger_rows(managers.get("Devices", node) or {}, "nvidia") == want,
            "the ledger without the corrupted Pod",
        )
        reasons = [r.getMessage() for r in caplog.records if "ledger:" in r.getMessage()]
        assert any(f"pod {meta['namespace']}/{meta['name']}" in m for m in reasons), reasons


async def test_two_managers_on_one_node_each_own_their_group(tmp_path: Path) -> None:
    async with open_managers("nvidia-amd", tmp_path, worker=False) as managers:
        node = "gpu-hybrid-1"

        def manufacturers(part: str) -> list[str]:
            found = managers.get("Devices", node) or {}
            return sorted(g["manufacturer"] for g in (found.get(part) or {}).get("groups", []))

        await _eventually(lambda: manufacturers("spec") == ["amd", "nvidia"], "both spec groups")
        await _eventually(lambda: manufacturers("status") == ["amd", "nvidia"], "both ledgers")
        before = managers.get("Devices", node)
        assert before is not None
        nvidia_spec = [g for g in before["spec"]["groups"] if g["manufacturer"] == "nvidia"]
        nvidia_status = [g for g in before["status"]["groups"] if g["manufacturer"] == "nvidia"]
        labels = managers.get("Node", node)
        assert labels is not None

        managers.stop(node, "nvidia")
        # The AMD manager keeps writing (someone empties its group: it writes it back) and
        # never touches NVIDIA's group.
        store = managers.cluster.state.store
        current = store.get("Devices", "", node)
        assert current is not None
        edited = dict(current)
        edited["spec"] = {
            "groups": [g for g in current["spec"]["groups"] if g["manufacturer"] != "amd"]
        }
        store.put("Devices", edited)
        await _eventually(lambda: manufacturers("spec") == ["amd", "nvidia"], "AMD's group back")
        after = managers.get("Devices", node)
        assert after is not None
        assert [g for g in after["spec"]["groups"] if g["manufacturer"] == "nvidia"] == nvidia_spec
        assert [
            g for g in after["status"]["groups"] if g["manufacturer"] == "nvidia"
        ] == nvidia_status
        node_labels_now = ours(node_labels(managers, node))
        assert node_labels_now["acceleratable.feature.gpustack.ai/nvidia"] == "true"
        assert node_labels_now["acceleratable.feature.gpustack.ai/amd"] == "true"


async def test_a_managed_flip_stays_and_manual_management_onboards_nobody(tmp_path: Path) -> None:
    """§2 of the InstanceType walkthrough: ``gpustack.ai/managed`` is the administrator's.

    The worker's task onboards a node it writes first (``"true"``), never undoes a flip to
    ``"false"``, puts ``"true"`` back where the label was removed, and with
    ``node-management-manual`` writes no ``managed`` label on a NodeFeature it creates.
    """
    async with cluster_standin("walkthrough", tmp_path / "cluster") as cluster:
        config = load_config(cluster.kubeconfig, context="worker")
        as_admin = load_config(cluster.kubeconfig, context="admin")
        assert config is not None
        assert as_admin is not None
        store = cluster.state.store
        path = "/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/gpustack-system/nodefeatures"

        def managed(node: str) -> str | None:
            found = store.get("NodeFeature", "gpustack-system", f"{node}-gpustack-worker")
            assert found is not None
            labels: dict[str, str] = found["spec"]["labels"]
            return labels.get("gpustack.ai/managed")

        async with KubeClient(config) as client, KubeClient(as_admin) as admin:
            a10g = store.get("Node", "", "node-a10g")
            cpu = store.get("Node", "", "node-cpu")
            assert a10g is not None
            assert cpu is not None
            await publish(client, a10g, "gpustack-system")
            assert managed("node-a10g") == "true"
            flip = {"spec": {"labels": {"gpustack.ai/managed": "false"}}}
            await admin.patch(f"{path}/node-a10g-gpustack-worker", flip)
            assert not await publish(client, a10g, "gpustack-system")
            assert managed("node-a10g") == "false"
            # The CPU keys are still the worker's: a hand edit of one is put back, the flip kept.
            edit = {"spec": {"labels": {"general.feature.gpustack.ai/amd-epyc-7r32.count": "9"}}}
            await admin.patch(f"{path}/node-a10g-gpustack-worker", edit)
            assert await publish(client, a10g, "gpustack-system")
            feature = store.get("NodeFeature", "gpustack-system", "node-a10g-gpustack-worker")
            assert feature is not None
            assert (
                feature["spec"]["labels"]["general.feature.gpustack.ai/amd-epyc-7r32.count"] == "4"
            )
            assert managed("node-a10g") == "false"
            # Removed: onboarded again.
            remove = {"spec": {"labels": {"gpustack.ai/managed": None}}}
            await admin.patch(f"{path}/node-a10g-gpustack-worker", remove)
            assert await publish(client, a10g, "gpustack-system")
            assert managed("node-a10g") == "true"
            # Manual management: a new NodeFeature without the label, until an admin sets it.
            await publish(client, cpu, "gpustack-system", manual=True)
            assert managed("node-cpu") is None
            await admin.patch(f"{path}/node-cpu-gpustack-worker",
                               {"spec": {"labels": {"gpustack.ai/managed": "true"}}})  # fmt: skip
            assert not await publish(client, cpu, "gpustack-system", manual=True)
            assert managed("node-cpu") == "true"
