"""The InstanceType controllers on the walkthrough's four nodes, against the cluster stand-in.

The stand-in serves ``recordings/scenarios/walkthrough.yaml``; the scenario's Device Managers run
in process over their recordings and publish their NodeFeatures and Devices, the worker's
NodeFeature task publishes its own, and the stand-in's NFD turns both into the Nodes' labels —
the path a cluster takes. The controller then runs with the worker's own RBAC
(``simulator/src/gpustack_simulator/scenario/rbac.py``). Kueue's CRDs are installed as
storage-only stand-in copies (``standin_kueue_crds``: nothing admits or drains here; a
ClusterQueue's status is what a test writes into it).

Every expected name, label, spec and table row is the walkthrough's
(``shared/spec/instancetype-walkthrough.md``), copied once in ``walkthrough_expected``, with the
documented departures made explicit where they apply: the shared view's once-max counts cards
(``current_reading``), a custom type's entrance is the FNV-1a of its name (``CUSTOM_ENTRANCE``),
and the derived type's unstated ``coresPercentageOvercommit`` (``without_overcommit``; all three
in ``docs/instancetypes.md``).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest
import standin_kueue_crds
import trio
import yaml

from gpustack_devicemanager.daemon import Running, ServeOptions, serve
from gpustack_kube.client import KubeClient
from gpustack_kube.config import load_config
from gpustack_kube.paths import (
    ADMISSION_CHECKS,
    CLUSTER_QUEUES,
    DEVICES,
    INSTANCE_TYPES,
    NAMESPACES,
    NODE_FEATURES,
    NODES,
    SECRETS,
)
from gpustack_simulator.cluster.server import RunningCluster
from gpustack_simulator.procfs import write_procfs
from gpustack_simulator.recording import load_recording
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.testing import cluster_standin
from gpustack_worker.instances.controller import ControllerOptions
from gpustack_worker.instancetypes.controller import LEASE, InstanceTypeController
from gpustack_worker.nodefeatures import run_node_features
from gpustack_worker.settings import OperatorSettings
from patience import HANG
from walkthrough_expected import (
    A10G_FLAVOR,
    A10G_QUEUE,
    A10G_TYPE,
    AWARE_QUEUE,
    CPU_FLAVOR,
    CUSTOM_ENTRANCE,
    CUSTOM_TYPE,
    NODE_A10G_FLAVORS,
    SECTION_1_CATALOG,
    SECTION_1_FLAVORS,
    SECTION_1_QUEUE_ROWS,
    SECTION_1_ROWS,
    SECTION_2_ROWS,
    SECTION_4_ROWS,
    SECTION_5_CATALOG,
    SECTION_5_ROWS,
    catalog_rows,
    current,
    names,
    without_overcommit,
)

REPO = Path(__file__).resolve().parents[2]
TYPE_CRD = REPO / "clusters" / "crds" / "instancetypes.worker.gpustack.ai.yaml"
FLAVOR_CRD = REPO / "clusters" / "crds" / "instancetypeflavors.worker.gpustack.ai.yaml"
SYSTEM = "gpustack-system"
NAMESPACES_MADE = ("default", "team-a", "kube-system", SYSTEM)
T = TypeVar("T")
# The walkthrough's lists (walkthrough_expected) in the shapes compared here: the stand-in's
# objects as sets of names, the catalog as kubectl's rows.
FLAVORS_1 = frozenset(SECTION_1_FLAVORS)
QUEUES_1 = frozenset(names(SECTION_1_QUEUE_ROWS))
CATALOG_1 = catalog_rows(SECTION_1_CATALOG)
CATALOG_5 = catalog_rows(SECTION_5_CATALOG)

# -- kubectl's table, from the CRDs' printer columns ---------------------------------------------


def _columns(path: Path) -> list[dict[str, Any]]:
    (version,) = yaml.safe_load(path.read_text())["spec"]["versions"]
    columns: list[dict[str, Any]] = version["additionalPrinterColumns"]
    return [c for c in columns if c.get("priority", 0) == 0]


def _cell(obj: dict[str, Any], json_path: str) -> str:
    value: Any = obj
    for key in json_path.lstrip(".").split("."):
        value = value.get(key) if isinstance(value, dict) else None
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def table(objects: list[dict[str, Any]], crd: Path) -> list[str]:
    """``kubectl get`` rows (NAME and the printer columns but AGE), runs of blanks collapsed."""
    columns = [c for c in _columns(crd) if c["name"] != "Age"]
    rows = [
        " ".join([o["metadata"]["name"], *(_cell(o, c["jsonPath"]) for c in columns)]).split()
        for o in sorted(objects, key=lambda o: o["metadata"]["name"])
    ]
    return [" ".join(r) for r in rows]


# -- the system under test ------------------------------------------------------------------------


@dataclass
class Chain:
    cluster: RunningCluster
    admin: KubeClient
    controller: InstanceTypeController

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        found = self.cluster.state.store.list(kind)
        return [o for o in found if namespace is None or o["metadata"]["namespace"] == namespace]

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        return self.cluster.state.store.get(kind, namespace, name)

    def names(self, kind: str, namespace: str | None = None) -> set[str]:
        return {o["metadata"]["name"] for o in self.list(kind, namespace)}

    def rows(self) -> list[str]:
        return table(self.list("InstanceType"), TYPE_CRD)

    def catalog(self) -> list[str]:
        return table(self.list("InstanceTypeFlavor"), FLAVOR_CRD)

    async def manage(self, node: str, managed: bool) -> None:
        """§2: flip ``gpustack.ai/managed`` on the node's worker NodeFeature."""
        path = NODE_FEATURES.path(SYSTEM, f"{node}-gpustack-worker")
        value = "true" if managed else "false"
        await self.admin.patch(path, {"spec": {"labels": {"gpustack.ai/managed": value}}})

    async def setting(self, key: str, value: str) -> None:
        data = {key: base64.b64encode(value.encode()).decode()}
        await self.admin.patch(SECRETS.path(SYSTEM, "gpustack-settings"), {"data": data})


async def eventually(probe: Callable[[], T], what: str, timeout: float = HANG) -> T:
    """``probe()`` once it is truthy; fails with the last value it returned."""
    last: T | None = None
    with trio.move_on_after(timeout):
        while True:
            last = probe()
            if last:
                return last
            await trio.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}; last: {last!r}")


def _labelled(cluster: RunningCluster) -> bool:
    """All four nodes carry their pool keys (the worker's and, where any, a Device Manager's)."""
    nodes = {n["metadata"]["name"]: n["metadata"].get("labels") or {}
             for n in cluster.state.store.list("Node")}  # fmt: skip
    keys = {
        "node-cpu": "general.feature.gpustack.ai/amd-epyc-7r13.count",
        "node-a10g": "acceleratable.feature.gpustack.ai/nvidia-a10g.count",
        "node-t4-a": "acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count",
        "node-t4-b": "acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count",
    }
    return all(key in nodes.get(node, {}) for node, key in keys.items()) and all(
        "general.feature.gpustack.ai/intel-xeon-platinum-8259cl.count" in nodes[n]
        for n in ("node-t4-a", "node-t4-b")
    )


@asynccontextmanager
async def open_chain(
    tmp_path: Path,
    *,
    kueue: bool,
    before: Callable[[KubeClient], Awaitable[None]] | None = None,
) -> AsyncIterator[Chain]:
    """The walkthrough's cluster labelled as NFD would, and the controller on it.

    ``before``: what an administrator does (as admin) once the nodes are labelled, before the
    controller starts.
    """
    async with cluster_standin("walkthrough", tmp_path / "cluster") as cluster:
        admin_config = load_config(cluster.kubeconfig, context="admin")
        worker_config = load_config(cluster.kubeconfig, context="worker", environ={})
        assert admin_config is not None
        assert worker_config is not None
        async with (
            KubeClient(admin_config) as admin,
            KubeClient(worker_config) as worker,
            trio.open_nursery() as nursery,
        ):
            if kueue:
                await standin_kueue_crds.install(admin)
            for name in NAMESPACES_MADE:
                body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
                await admin.create(NAMESPACES.path(), body)
            managers = await _start_device_managers(nursery, cluster, tmp_path)
            features = trio.CancelScope()

            async def node_features() -> None:
                with features:
                    await run_node_features(worker, SYSTEM, period=1.0)

            nursery.start_soon(node_features)
            await eventually(lambda: _labelled(cluster), "the nodes' NFD labels")
            # Stopped once the labels are in: the worker's task writes gpustack.ai/managed=true
            # for every node (node-management-manual is not served yet), and §2 flips it off.
            features.cancel()
            if before is not None:
                await before(admin)
            settings = OperatorSettings(worker, SYSTEM, environ={})
            controller = InstanceTypeController(
                worker,
                ControllerOptions(system_namespace=SYSTEM, lease_name=LEASE, leader_election=False),
                settings=settings,
                kueue_probe=0.5,
                check_period=0.2,
            )
            running = trio.CancelScope()

            async def run_controller() -> None:
                with running:
                    async with trio.open_nursery() as inner:
                        inner.start_soon(settings.run)
                        inner.start_soon(controller.run)

            nursery.start_soon(run_controller)
            try:
                yield Chain(cluster, admin, controller)
            finally:
                await controller.drain()
                running.cancel()
                for manager in managers:
                    manager.shutdown.set()  # each serve() returns after closing its client


async def _start_device_managers(
    nursery: trio.Nursery, cluster: RunningCluster, tmp_path: Path
) -> list[Running]:
    expanded = cluster.state.expanded
    started: list[Running] = []
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
        started.append(await nursery.start(partial(serve, options, backend, kube=kube)))
    return started


def _spec(obj: dict[str, Any] | None) -> dict[str, Any]:
    return dict((obj or {}).get("spec") or {})


async def _activate_check(chain: Chain) -> None:
    """What the node-devices check's controller does (another module): Active=True."""
    check = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
             "metadata": {"name": "gpustack-node-devices"},
             "spec": {"controllerName": "gpustack.ai/node-devices"}}  # fmt: skip
    await chain.admin.create(ADMISSION_CHECKS.path(), check)
    active = {"type": "Active", "status": "True", "reason": "Active", "message": "serving",
              "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    await chain.admin.patch(
        ADMISSION_CHECKS.path(name="gpustack-node-devices", subresource="status"),
        {"status": {"conditions": [active]}},
    )


# -- the tests ------------------------------------------------------------------------------------


async def test_sections_1_and_2_flavors_queues_types_and_a_node_leaving(tmp_path: Path) -> None:
    async with open_chain(tmp_path, kueue=True) as chain:
        # §1: seven flavors, three queues, three types, their rows.
        await eventually(lambda: chain.names("ResourceFlavor") == FLAVORS_1, "7 flavors")
        for recorded in (A10G_FLAVOR, CPU_FLAVOR):
            stored = chain.get("ResourceFlavor", recorded["metadata"]["name"])
            assert stored is not None
            assert stored["metadata"]["labels"] == recorded["metadata"]["labels"]
            assert stored["spec"] == recorded["spec"]
        expected = current(SECTION_1_ROWS)
        await eventually(lambda: chain.rows() == expected, "§1's kubectl get instancetypes")
        await eventually(lambda: chain.catalog() == CATALOG_1, "§1's catalog")
        stored_type = chain.get("InstanceType", "gpustack--nvidia-a10g-linux-amd64")
        assert stored_type is not None
        assert stored_type["metadata"]["labels"] == A10G_TYPE["metadata"]["labels"]
        assert stored_type["spec"] == without_overcommit(A10G_TYPE["spec"])
        status = {k: v for k, v in stored_type["status"].items() if k != "summary"}
        status["acceleratorShared"]["onceMaxRequest"] = "10"  # the walkthrough's reading
        # Its CPU cell (0/0 in §1's table), which the walkthrough's trimmed status leaves out.
        assert status.pop("cpu") == {"capacity": "0", "onceMaxRequest": "0", "remaining": "0"}
        assert status == A10G_TYPE["status"]
        await eventually(lambda: chain.names("ClusterQueue") == QUEUES_1, "3 queues")

        # The check is not there yet: no queue names it (Kueue would hold the queue inactive).
        a10g = chain.get("ClusterQueue", "gpustack--nvidia-a10g-linux-amd64")
        assert a10g is not None
        assert "admissionChecksStrategy" not in a10g["spec"]
        assert a10g["metadata"]["labels"] == A10G_QUEUE["metadata"]["labels"]
        assert a10g["spec"]["resourceGroups"] == A10G_QUEUE["spec"]["resourceGroups"]
        assert (a10g["spec"]["namespaceSelector"], a10g["spec"]["stopPolicy"]) == ({}, "None")
        # Once it reports Active, the accelerated queues reference it; the CPU queue never.
        await _activate_check(chain)

        def named_check() -> dict[str, Any] | None:
            found = chain.get("ClusterQueue", "gpustack--nvidia-a10g-linux-amd64")
            return found if "admissionChecksStrategy" in _spec(found) else None

        a10g = await eventually(named_check, "the A10G queue naming the check")
        assert {k: a10g["spec"][k] for k in A10G_QUEUE["spec"]} == A10G_QUEUE["spec"]

        def t4_named() -> dict[str, Any] | None:  # queues are aligned one by one, by name
            found = chain.get("ClusterQueue", "gpustack--nvidia-tesla-t4-linux-amd64")
            return found if "admissionChecksStrategy" in _spec(found) else None

        t4 = await eventually(t4_named, "the T4 queue naming the check")
        assert _spec(t4)["admissionChecksStrategy"] == A10G_QUEUE["spec"]["admissionChecksStrategy"]
        assert [f["name"] for f in _spec(t4)["resourceGroups"][0]["flavors"]] == [
            "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d",
            "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d",
        ]  # smallest nodes first
        generic = chain.get("ClusterQueue", "gpustack--generic-linux-amd64")
        assert "admissionChecksStrategy" not in _spec(generic)
        assert _spec(generic)["resourceGroups"][0]["coveredResources"] == ["cpu"]

        # An entrance LocalQueue per type in every non-system namespace, and in a new one.
        entrances = {r.split()[1]: r.split()[0] for r in SECTION_1_ROWS}
        for namespace in ("default", "team-a"):
            await eventually(
                lambda ns=namespace: chain.names("LocalQueue", ns) == set(entrances),
                f"the entrances in {namespace}",
            )
        for local in chain.list("LocalQueue", "default"):
            assert local["spec"]["clusterQueue"] == entrances[local["metadata"]["name"]]
        assert not chain.list("LocalQueue", "kube-system")
        assert not chain.list("LocalQueue", SYSTEM)
        new = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-new"}}
        await chain.admin.create(NAMESPACES.path(), new)
        await eventually(lambda: chain.names("LocalQueue", "team-new") == set(entrances),
                         "the entrances in a new namespace")  # fmt: skip

        # §2, with the A10G queue holding a reservation: node-a10g leaves management.
        a10g_path = CLUSTER_QUEUES.path(name="gpustack--nvidia-a10g-linux-amd64")
        await chain.admin.patch(f"{a10g_path}/status", {"status": {"reservingWorkloads": 1}})
        await chain.manage("node-a10g", managed=False)
        expected = current(SECTION_2_ROWS)
        await eventually(lambda: chain.rows() == expected, "§2's rows (48/68, the A10G 0/0)")
        await eventually(
            lambda: chain.names("ResourceFlavor") == FLAVORS_1 - NODE_A10G_FLAVORS,
            "the now-nodeless flavors retired",
        )

        def draining() -> dict[str, Any] | None:
            found = chain.get("ClusterQueue", "gpustack--nvidia-a10g-linux-amd64")
            return found if _spec(found).get("stopPolicy") == "HoldAndDrain" else None

        held = await eventually(draining, "the A10G queue drained")
        await trio.sleep(1.0)  # reconciles come and go: the groups stay while it reserves
        held = chain.get("ClusterQueue", "gpustack--nvidia-a10g-linux-amd64")
        assert _spec(held)["resourceGroups"] == A10G_QUEUE["spec"]["resourceGroups"]
        await chain.admin.patch(f"{a10g_path}/status", {"status": {"reservingWorkloads": 0}})
        await eventually(
            lambda: _spec(chain.get("ClusterQueue", "gpustack--nvidia-a10g-linux-amd64")).get(
                "resourceGroups") == [],
            "the drained queue's groups emptied",
        )  # fmt: skip

        # Re-managed: one reconcile rebuilds the flavors and restores every count.
        await chain.manage("node-a10g", managed=True)
        await eventually(lambda: chain.names("ResourceFlavor") == FLAVORS_1, "7 again")
        expected = current(SECTION_1_ROWS)
        await eventually(lambda: chain.rows() == expected, "§1's rows again")

        def reopened() -> dict[str, Any] | None:
            found = chain.get("ClusterQueue", "gpustack--nvidia-a10g-linux-amd64")
            return found if _spec(found).get("stopPolicy") == "None" else None

        a10g = await eventually(reopened, "the A10G queue reopened")
        assert {k: a10g["spec"][k] for k in A10G_QUEUE["spec"]} == A10G_QUEUE["spec"]


async def test_a_deleted_type_custom_types_and_section_5(tmp_path: Path) -> None:
    async with open_chain(tmp_path, kueue=True) as chain:
        expected = current(SECTION_1_ROWS)
        await eventually(lambda: chain.rows() == expected, "§1's rows")
        a10g = "gpustack--nvidia-a10g-linux-amd64"

        # A derived type an administrator deletes is authored again, at the current presets.
        before = chain.get("InstanceType", a10g)
        assert before is not None
        await chain.admin.delete(INSTANCE_TYPES.path(name=a10g))

        def reauthored() -> dict[str, Any] | None:
            found = chain.get("InstanceType", a10g)
            fresh = found and found["metadata"]["uid"] != before["metadata"]["uid"]
            return found if fresh else None

        again = await eventually(reauthored, "the A10G type authored again")
        assert (again["metadata"]["labels"], again["spec"]) == (
            A10G_TYPE["metadata"]["labels"], without_overcommit(A10G_TYPE["spec"]),
        )  # fmt: skip
        await eventually(lambda: chain.rows() == expected, "its row back")
        assert chain.get("ClusterQueue", a10g) is not None

        # §4: a custom type gets a queue named after it and an entrance in every namespace.
        manifest = {"apiVersion": "worker.gpustack.ai/v1alpha1", **CUSTOM_TYPE}
        await chain.admin.create(INSTANCE_TYPES.path(), manifest)
        (custom,) = [r for r in current(SECTION_4_ROWS) if r.split()[0] == "a10g-12c128g"]
        await eventually(lambda: custom in chain.rows(), "the custom type's row")
        queue = await eventually(lambda: chain.get("ClusterQueue", "a10g-12c128g"), "its queue")
        assert queue["spec"]["resourceGroups"] == A10G_QUEUE["spec"]["resourceGroups"]
        await eventually(lambda: CUSTOM_ENTRANCE in chain.names("LocalQueue", "default"),
                         "its entrance")  # fmt: skip
        await chain.admin.delete(INSTANCE_TYPES.path(name="a10g-12c128g"))
        await eventually(lambda: chain.get("ClusterQueue", "a10g-12c128g") is None, "queue gone")
        await eventually(lambda: CUSTOM_ENTRANCE not in chain.names("LocalQueue", "default"),
                         "entrance gone")  # fmt: skip
        await eventually(lambda: chain.rows() == expected, "§1's rows after §4")

        # §5: CPU-aware types appear beside the collapsed ones; the flavors are untouched.
        flavors = {f["metadata"]["name"]: f for f in chain.list("ResourceFlavor")}
        assert set(flavors) == FLAVORS_1
        await chain.setting("instance-type-aware-cpu-manufacturer", "true")
        expected = current(SECTION_5_ROWS)
        await eventually(lambda: chain.rows() == expected, "§5's rows")
        await eventually(lambda: sorted(chain.catalog()) == sorted(CATALOG_5),
                         "§5's catalog")  # fmt: skip
        aware = await eventually(
            lambda: chain.get("ClusterQueue", AWARE_QUEUE["metadata"]["name"]),
            "the aware A10G queue",
        )
        assert aware["metadata"]["labels"] == AWARE_QUEUE["metadata"]["labels"]
        after = {f["metadata"]["name"]: f for f in chain.list("ResourceFlavor")}
        assert after == flavors  # byte for byte, resourceVersions included: never rewritten
        await eventually(lambda: len(chain.names("LocalQueue", "default")) == 8, "8 entrances")
        # Turned off again: the catalog collapses; the types made stay (create-only).
        await chain.setting("instance-type-aware-cpu-manufacturer", "false")
        await eventually(lambda: chain.catalog() == CATALOG_1, "§1's catalog again")
        assert chain.rows() == expected
        assert {f["metadata"]["name"]: f for f in chain.list("ResourceFlavor")} == flavors


async def test_without_kueue_types_are_still_derived_and_kueue_is_taken_up_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gpustack.worker.instancetypes")
    async with open_chain(tmp_path, kueue=False) as chain:
        expected = current(SECTION_1_ROWS)
        await eventually(lambda: chain.rows() == expected, "§1's rows without Kueue")
        await eventually(lambda: chain.catalog() == CATALOG_1, "§1's catalog")
        # Two more looks for Kueue, counted (a fixed 1.5 s may hold none on a loaded machine).
        looks = 0
        look = chain.controller._kueue_served

        async def counted() -> bool:
            nonlocal looks
            looks += 1
            return await look()

        chain.controller._kueue_served = counted  # type: ignore[method-assign]
        await eventually(lambda: looks >= 3, "two more looks for Kueue")  # the third has ended
        assert not chain.controller.kueue
        kueue_kinds = {"resourceflavor", "clusterqueue", "localqueue"}
        kueue_writes = [w for w in chain.controller.writes if w[1].split()[0] in kueue_kinds]
        assert kueue_writes == []
        said = [r.getMessage() for r in caplog.records if "is not served" in r.getMessage()]
        assert len(said) == 1, said  # once, not once per look
        # Kueue installed meanwhile: taken up without a restart.
        await standin_kueue_crds.install(chain.admin)
        await eventually(lambda: chain.names("ResourceFlavor") == FLAVORS_1, "7 flavors")
        await eventually(lambda: chain.names("ClusterQueue") == QUEUES_1, "3 queues")


async def test_a_key_that_can_name_nothing_leaves_out_its_own_pool_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A key that is a valid label but no valid object name (``hygon-k100_ai``, as the demo's
    Hygon K100 publishes, found on the real control plane) cannot name a ResourceFlavor: the
    API server refuses it (422). Every other pool is still written, and the worker says why
    once (before: the refusal stopped the whole reconcile, at every retry)."""
    caplog.set_level(logging.WARNING, logger="gpustack.worker.instancetypes")
    bad = "acceleratable.feature.gpustack.ai/hygon-k100_ai"

    async def label(admin: KubeClient) -> None:
        labels = {bad: "true", f"{bad}.count": "2"}
        await admin.patch(NODES.path(name="node-cpu"), {"metadata": {"labels": labels}})

    async with open_chain(tmp_path, kueue=True, before=label) as chain:
        expected = current(SECTION_1_ROWS)
        await eventually(lambda: chain.rows() == expected, "§1's rows beside the bad key")
        await eventually(lambda: chain.catalog() == CATALOG_1, "§1's catalog")
        await eventually(lambda: chain.names("ResourceFlavor") == FLAVORS_1, "7 flavors")
        await eventually(lambda: chain.names("ClusterQueue") == QUEUES_1, "3 queues")
        said = [r.getMessage() for r in caplog.records if "cannot be named" in r.getMessage()]
        assert len(said) == 1, said
        assert "gpustack--amd-epyc-7r13--hygon-k100_ai-linux-amd64-2d" in said[0]
        assert "node-cpu" in said[0]


async def test_a_pool_seen_before_its_cards_devices_waits_for_them(tmp_path: Path) -> None:
    """A node's accelerator labels can arrive before its Devices (NFD and the Devices are two
    writes). A derived type's spec is immutable once created, so authoring it then froze
    ``feature`` at no fractions (logicalSliced.maxSize 0, found by a clean-clone CI run of the
    walkthrough). The type waits for the cards' Devices and is authored from them."""
    key = "acceleratable.feature.gpustack.ai/nvidia-l4"

    async def label(admin: KubeClient) -> None:
        labels = {key: "true", f"{key}.count": "1", f"{key}.product": "NVIDIA-L4"}
        await admin.patch(NODES.path(name="node-cpu"), {"metadata": {"labels": labels}})

    async with open_chain(tmp_path, kueue=True, before=label) as chain:
        a10g = "gpustack--nvidia-a10g-linux-amd64"
        await eventually(lambda: chain.get("InstanceType", a10g), "the A10G's type")
        assert not [n for n in chain.names("InstanceType") if "nvidia-l4" in n]
        published = chain.get("Devices", "node-a10g")
        assert published is not None
        group = dict(published["spec"]["groups"][0], id="l4")
        slices = group["accelerators"][0]["status"]["logicalSliced"]["count"]
        assert slices > 0
        body = {"apiVersion": published["apiVersion"], "kind": "Devices",
                "metadata": {"name": "node-cpu"}, "spec": {"groups": [group]}}  # fmt: skip
        await chain.admin.create(DEVICES.path(), body)
        l4 = "gpustack--nvidia-l4-linux-amd64"
        stored = await eventually(lambda: chain.get("InstanceType", l4), "the L4's type")
        logical = stored["spec"]["feature"]["logicalSliced"]
        assert logical["maxSize"] == slices
        assert logical["memoryPercentageStep"] == 1  # the reference's step for a sliceable card
