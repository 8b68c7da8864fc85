"""One fake kubelet per scenario node, inside the cluster stand-in's process (``simulator up``).

On a cluster every node's kubelet serves ``kubelet.sock`` for device plugins and the
PodResources socket, reports each registered resource in its Node's status (capacity: every
device; allocatable: the healthy ones) and calls ``Allocate`` before it starts a container that
requests one. Here the stand-in's node simulator starts the Pods, so the kubelets live beside
it: :class:`NodeKubelets` starts one :class:`~gpustack_simulator.fakekubelet.FakeKubelet` per
node that runs a Device Manager, plugs :class:`~.admission.DeviceAdmission` into the node
simulator, and copies every plugin's device counts into its Node.

The scenario's own Pods were "admitted before the stand-in started": their annotation names the
device IDs a plugin granted, so each kubelet's PodResources is seeded with exactly those, as a
real kubelet's checkpoint would hold them. The Device Manager's grant confirmation then believes
the scenario's Pods, and a Pod whose annotation is edited afterwards is not believed.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import trio

from gpustack_core.allocation import read_allocation
from gpustack_core.decoding import ContractError
from gpustack_core.resources import ResourceNames
from gpustack_core.tokens import parse_token_id
from gpustack_kube.kubeletapi.api import HEALTHY
from gpustack_simulator.cluster.resources import NODE, POD
from gpustack_simulator.cluster.state import ClusterState
from gpustack_simulator.fakekubelet import FakeKubelet
from gpustack_simulator.fakekubelet.admission import DeviceAdmission
from gpustack_simulator.up import node_sockets

log = logging.getLogger("gpustack.simulator.fakekubelet")

Assigned = dict[tuple[str, str, str], dict[str, list[str]]]
SYNC_PERIOD = 0.5
"""How often the Nodes' statuses are brought in step with the plugins' device lists."""


def seed_assignments(pods: Iterable[Mapping[str, Any]], node: str) -> Assigned:
    """What a kubelet of ``node`` had assigned to the given Pods, from their annotations.

    Each annotated device ID goes to the resource of the mode its card was granted in (the ID
    names the group and card; the annotation's entry for that card names the mode). A Pod
    whose annotation does not decode, or an ID that is not a plugin ID, assigns nothing.
    """
    assigned: Assigned = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        if (pod.get("spec") or {}).get("nodeName") != node:
            continue
        try:
            read = read_allocation(
                meta.get("annotations"), pod=f"{meta.get('namespace')}/{meta.get('name')}"
            )
        except ContractError as exc:
            log.warning("seeding no kubelet assignment: %s", exc)
            continue
        for container, entry in read.containers.items():
            modes = {
                (group.id, accelerator.id): ResourceNames.of(group.manufacturer).plugin_resource(
                    accelerator.mode
                )
                for group in entry.devices.groups
                for accelerator in group.accelerators
            }
            held: dict[str, list[str]] = {}
            for device_id in entry.device_ids:
                try:
                    token = parse_token_id(device_id)
                except ValueError:
                    continue
                resource = modes.get((token.group, token.accelerator))
                if resource is not None:
                    held.setdefault(resource, []).append(device_id)
            if held:
                assigned[(meta["namespace"], meta["name"], container)] = held
    return assigned


def node_resources(kubelet: FakeKubelet) -> tuple[dict[str, str], dict[str, str]]:
    """Capacity and allocatable of every registered resource, as the kubelet reports them."""
    capacity: dict[str, str] = {}
    allocatable: dict[str, str] = {}
    for resource in sorted(kubelet.plugins):
        devices = kubelet.devices(resource)
        capacity[resource] = str(len(devices))
        allocatable[resource] = str(sum(1 for h in devices.values() if h == HEALTHY))
    return capacity, allocatable


def _holds(stored: Mapping[str, str] | None, wanted: Mapping[str, str]) -> bool:
    return all((stored or {}).get(k) == v for k, v in wanted.items())


class NodeKubelets:
    """The fake kubelets of every Device Manager node; sockets under ``root/<node>/``.

    The layout is :func:`gpustack_simulator.up.node_sockets`, which ``simulator up`` points
    each Device Manager at.
    """

    def __init__(self, state: ClusterState, root: Path) -> None:
        self.state = state
        self.root = root
        self.kubelets: dict[str, FakeKubelet] = {}

    def start(self) -> None:
        """Start one kubelet per node that runs a Device Manager, PodResources seeded."""
        pods = self.state.store.list(POD)
        for node in sorted({dm.node for dm in self.state.expanded.device_managers}):
            socket, pod_resources = node_sockets(self.root, node)
            shutil.rmtree(self.root / node, ignore_errors=True)  # a previous run's sockets
            kubelet = FakeKubelet(socket.parent, pod_resources.parent)
            kubelet.assigned.update(seed_assignments(pods, node))
            for namespace, name, _ in kubelet.assigned:
                found = self.state.store.get(POD, namespace, name)
                if found is not None:
                    kubelet.owners[(namespace, name)] = found["metadata"]["uid"]
            kubelet.start()
            self.kubelets[node] = kubelet

    def stop(self) -> None:
        """Stop every kubelet's servers."""
        for kubelet in self.kubelets.values():
            kubelet.stop()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Admit Pods through the kubelets and keep the Nodes' statuses current, until cancelled."""
        async with trio.open_nursery() as nursery:
            self.state.device_admission = DeviceAdmission(self.state, self.kubelets, nursery)
            task_status.started()
            try:
                while True:
                    self.sync_nodes()
                    await trio.sleep(SYNC_PERIOD)
            finally:
                self.state.device_admission = None

    def _forget_deleted(self, node: str, kubelet: FakeKubelet) -> None:
        """A kubelet drops the assignments of Pods that are gone (or finished) from its node."""
        for (namespace, name), uid in list(kubelet.owners.items()):
            found = self.state.store.get(POD, namespace, name)
            if (
                found is None
                or found["metadata"]["uid"] != uid
                or (found.get("status") or {}).get("phase") in {"Succeeded", "Failed"}
                or (found.get("spec") or {}).get("nodeName") != node
            ):
                kubelet.forget(namespace, name)

    def sync_nodes(self) -> None:
        """Each plugin resource into its Node's capacity and allocatable, where they differ.

        A Node that changed gets the node simulator's pass, so a Pod that was unschedulable
        for want of a resource the plugin now advertises is placed.
        """
        changed = False
        for node, kubelet in self.kubelets.items():
            self._forget_deleted(node, kubelet)
            capacity, allocatable = node_resources(kubelet)
            if not capacity:
                continue
            stored = self.state.store.get(NODE, "", node)
            if stored is None:
                continue
            status = stored.get("status") or {}
            if _holds(status.get("capacity"), capacity) and _holds(
                status.get("allocatable"), allocatable
            ):
                continue

            def mutate(obj: dict[str, Any], c: Mapping[str, str] = capacity,
                       a: Mapping[str, str] = allocatable) -> None:  # fmt: skip
                status = obj.setdefault("status", {})
                status.setdefault("capacity", {}).update(c)
                status.setdefault("allocatable", {}).update(a)

            self.state.store.update(NODE, "", node, mutate)
            log.info("node %s: plugin resources %s", node, capacity)
            changed = True
        if changed and self.state.node_changed is not None:
            self.state.node_changed()
