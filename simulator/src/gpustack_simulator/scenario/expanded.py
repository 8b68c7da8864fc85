""":class:`Expanded`: a scenario as the stand-ins serve it, objects plus behaviour over time.

The stand-ins never read the scenario again; everything they answer (RBAC, kubelet summary,
pod metrics, the procfs each Device Manager sees) is asked of this one value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpustack_simulator.recording import ProcEntry
from gpustack_simulator.scenario.rbac import allowed
from gpustack_simulator.scenario.resolved import _Runtime, _stamp
from gpustack_simulator.scenario.schema import DeviceManagerSpec, Fault, Rule, UserSpec
from gpustack_simulator.scenario.summary import _memory_quantity, _node_stats, _pod_stats, _split


@dataclass
class Expanded:
    """A scenario as the stand-ins serve it: exact Kubernetes objects plus their behaviour.

    Objects carry no ``resourceVersion``: the stand-in's store assigns those as it serves, and
    Device Manager Pods carry an empty ``podIP`` until the stand-in knows where each listens.
    """

    description: str
    epoch: datetime
    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    instances: list[dict[str, Any]]
    device_managers: list[DeviceManagerSpec]
    users: list[UserSpec]
    faults: list[Fault]
    rules: dict[str, tuple[Rule, ...]]
    applied: list[dict[str, Any]] = field(default_factory=list)
    """The scenario's ``apply`` objects, in order: created through the API by ``simulator up``."""
    _runtimes: dict[tuple[str, str], _Runtime] = field(default_factory=dict, repr=False)
    _procs: dict[str, dict[str, ProcEntry]] = field(default_factory=dict, repr=False)
    _storage_capacity: dict[str, int] = field(default_factory=dict, repr=False)
    _node_index: tuple[tuple[int, ...], dict[str, list[_Runtime]]] | None = field(
        default=None, repr=False, compare=False
    )

    # -- authorization ---------------------------------------------------------------------

    def allowed(
        self,
        user: str,
        groups: Sequence[str] | None = None,
        *,
        verb: str,
        group: str,
        resource: str,
        subresource: str = "",
        namespace: str = "",
        name: str = "",
    ) -> tuple[bool, str]:
        """:func:`allowed` over this scenario's rules; ``groups`` default to the user's own."""
        if groups is None:
            groups = next((u.groups for u in self.users if u.name == user), ())
        return allowed(
            self.rules,
            user,
            groups,
            verb=verb,
            group=group,
            resource=resource,
            subresource=subresource,
            namespace=namespace,
            name=name,
        )

    def user_for_token(self, token: str) -> UserSpec | None:
        """The user a bearer token authenticates as (a TokenReview's answer), if any."""
        return next((u for u in self.users if u.token == token), None)

    def fault_active(self, kind: str, node: str | None, t: float) -> bool:
        """Whether a fault of ``kind`` covers ``node`` (or the cluster) at time ``t``."""
        return any(f.kind == kind and f.active(node, t) for f in self.faults)

    # -- measurements ----------------------------------------------------------------------

    def _node_names(self) -> list[str]:
        return [n["metadata"]["name"] for n in self.nodes]

    def _on_node(self, node: str) -> list[_Runtime] | None:
        """The node's Pod runtimes, in the scenario's order; ``None``: no such node.

        Indexed once (nodes and runtimes are fixed once expanded), so a kubelet summary costs
        one node's Pods, not a visit of every scenario Pod and node; rebuilt if either list
        was replaced.
        """
        basis = (id(self.nodes), len(self.nodes), id(self._runtimes), len(self._runtimes))
        if self._node_index is None or self._node_index[0] != basis:
            index: dict[str, list[_Runtime]] = {name: [] for name in self._node_names()}
            for runtime in self._runtimes.values():
                index.get(runtime.node, []).append(runtime)
            self._node_index = (basis, index)
        return self._node_index[1].get(node)

    def summary(self, node: str, t: float) -> dict[str, Any]:
        """The node's kubelet ``/stats/summary`` at scenario time ``t``.

        Faults are not applied here: whether the kubelet answers at all is the stand-in's
        decision (``fault_active``), what it would say is this one's.
        """
        runtimes = self._on_node(node)
        if runtimes is None:
            raise KeyError(f"no node {node!r} in this scenario")
        now = _stamp(self.epoch, t)
        capacity = self._storage_capacity.get(node, 0)
        entries: list[dict[str, Any]] = []
        cpu_sum, memory_sum, storage_sum, cumulative = 0, 0, 0, 0
        for runtime in runtimes:
            point = runtime.series.at(t)
            if point is None:
                continue
            entries.append(_pod_stats(runtime, point, now, t, capacity, self.epoch))
            cpu_sum += point.nanocores or 0
            memory_sum += point.memory or 0
            storage_sum += point.storage or 0
            cumulative += runtime.series.core_nanoseconds(t)
        return {
            "node": _node_stats(
                node, now, self.epoch, t, capacity, cpu_sum, memory_sum, storage_sum, cumulative
            ),
            "pods": entries,
        }

    def pod_metrics(self, namespace: str, name: str, t: float) -> dict[str, Any] | None:
        """metrics.k8s.io's ``PodMetrics`` for the Pod at ``t``; ``None`` when it has no usage.

        ``None`` covers an unknown Pod, one that never started and one whose first usage point
        lies after ``t``: metrics-server answers 404 for all three.
        """
        runtime = self._runtimes.get((namespace, name))
        if runtime is None:
            return None
        point = runtime.series.at(t)
        if point is None or (point.nanocores is None and point.memory is None):
            return None
        now = _stamp(self.epoch, t)
        cpu_parts = _split(point.nanocores, len(runtime.containers))
        memory_parts = _split(point.memory, len(runtime.containers))
        containers = []
        for k, (container, _) in enumerate(runtime.containers):
            usage: dict[str, str] = {}
            if cpu_parts is not None:
                usage["cpu"] = f"{cpu_parts[k]}n"
            if memory_parts is not None:
                usage["memory"] = _memory_quantity(memory_parts[k])
            containers.append({"name": container, "usage": usage})
        return {
            "kind": "PodMetrics",
            "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "creationTimestamp": now,
                "labels": dict(runtime.labels),
            },
            "timestamp": now,
            "window": "15s",
            "containers": containers,
        }

    def procs(self, node: str) -> dict[str, ProcEntry]:
        """The host process table the node's Device Managers see through their fake procfs."""
        if self._on_node(node) is None:
            raise KeyError(f"no node {node!r} in this scenario")
        return dict(self._procs.get(node, {}))
