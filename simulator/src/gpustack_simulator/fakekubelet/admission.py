"""The kubelet's device admission, for Pods the cluster stand-in's node simulator starts.

A real kubelet admitting a Pod asks each device plugin whose resource a container requests to
``Allocate`` the devices it picked, container by container, and starts the containers only
when every plugin answered; a refusal fails the Pod (``UnexpectedAdmissionError``). Plugged
into ``ClusterState.device_admission``, this does the same against the fake kubelets of the
nodes that have one: a bound Pod requesting a registered resource stays Pending while the
calls run on a worker thread (the plugin calls back into the stand-in to write the Pod's
annotation, so the stand-in's loop must stay free), then starts.

The devices picked are the plugin's ``GetPreferredAllocation`` answer where it offers one,
else the first healthy ones no container holds — the kubelet's own order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import grpc
import trio

from gpustack_core.quantity import QuantityError, parse_quantity
from gpustack_simulator.cluster.resources import POD
from gpustack_simulator.cluster.state import ClusterState
from gpustack_simulator.fakekubelet import FakeKubelet

log = logging.getLogger("gpustack.simulator.fakekubelet")

WATCH_LAG = 0.3
"""Seconds between a Pod's binding and its kubelet's first device call."""


class DeviceAdmission:
    """``ClusterState.device_admission`` over one fake kubelet per node."""

    def __init__(
        self, state: ClusterState, kubelets: Mapping[str, FakeKubelet], nursery: trio.Nursery
    ) -> None:
        self.state = state
        self.kubelets = kubelets
        self._nursery = nursery
        self._admitting: set[str] = set()
        self._node_locks: dict[str, trio.Lock] = {}
        """One admission at a time per node, as a kubelet admits Pods one by one: the next
        Pod's devices are picked only once the previous Allocate answered."""
        self.admitted: set[str] = set()
        """UIDs of Pods whose every device request was allocated."""

    def __call__(self, pod: dict[str, Any], start: Callable[[], None]) -> bool:
        """Start now (nothing to allocate, or already done), or allocate first."""
        uid = pod["metadata"]["uid"]
        kubelet = self.kubelets.get(pod["spec"].get("nodeName", ""))
        if kubelet is None or uid in self.admitted:
            return True
        if uid in self._admitting:
            return False
        asks = asks_of(pod, set(kubelet.plugins))
        if not asks:
            return True
        self._admitting.add(uid)
        self._nursery.start_soon(self._admit, kubelet, pod, asks, start)
        return False

    async def _admit(
        self,
        kubelet: FakeKubelet,
        pod: dict[str, Any],
        asks: list[tuple[str, str, int]],
        start: Callable[[], None],
    ) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        try:
            # A kubelet learns of the binding through its own watch, as the node's Device
            # Manager does, so the plugin has seen the Pod when it is asked to prefer devices.
            await trio.sleep(WATCH_LAG)
            node = pod["spec"].get("nodeName", "")
            async with self._node_locks.setdefault(node, trio.Lock()):
                kubelet.adopt(*key, meta["uid"])
                for container, resource, count in asks:
                    ids = await trio.to_thread.run_sync(pick, kubelet, resource, count)
                    await trio.to_thread.run_sync(kubelet.allocate, resource, ids, key, container)
        except (grpc.RpcError, ValueError) as exc:
            message = refusal(exc)
            log.warning("Pod %s/%s not admitted: %s", *key, message)
            self._fail(key, message)
            return
        finally:
            self._admitting.discard(meta["uid"])
        self.admitted.add(meta["uid"])
        start()

    def _fail(self, key: tuple[str, str], message: str) -> None:
        def mutate(pod: dict[str, Any]) -> None:
            pod["status"] = {
                "phase": "Failed",
                "reason": "UnexpectedAdmissionError",
                "message": f"Allocate failed due to {message}, which is unexpected",
            }

        if self.state.store.get(POD, *key) is not None:
            self.state.update_pod(*key, mutate)


def asks_of(pod: Mapping[str, Any], registered: set[str]) -> list[tuple[str, str, int]]:
    """(container, resource, count) for every registered resource a container requests.

    Shared by the stand-in's admission and the real control plane's node agent, so both
    kubelets ask the plugins for the same devices in the same order.
    """
    spec = pod["spec"]
    asks = []
    for container in (*(spec.get("initContainers") or ()), *(spec.get("containers") or ())):
        resources = container.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for resource in sorted(asked):
            if resource not in registered:
                continue
            try:
                count = int(parse_quantity(str(asked[resource])))
            except (QuantityError, ValueError):
                continue
            if count > 0:
                asks.append((container["name"], resource, count))
    return asks


def pick(kubelet: FakeKubelet, resource: str, count: int) -> list[str]:
    """The devices a kubelet would pick: the plugin's preference, else the first free ones.

    ``ValueError`` when fewer healthy free devices exist than asked.
    """
    held = {i for resources in kubelet.assigned.values() for i in resources.get(resource, ())}
    available = [
        i
        for i, health in kubelet.devices(resource).items()
        if health == "Healthy" and i not in held
    ]
    if len(available) < count:
        raise ValueError(f"{resource}: {count} asked, {len(available)} healthy and free")
    plugin = kubelet.plugins[resource]
    if plugin.options.get_preferred_allocation_available:
        chosen = kubelet.preferred(resource, available, count)
        if len(chosen) == count:
            return chosen
    return available[:count]


def refusal(exc: BaseException) -> str:
    """A plugin's refusal as the kubelet words it (the gRPC details, or the error's text)."""
    details = getattr(exc, "details", None)
    return str(details()) if callable(details) else str(exc)
