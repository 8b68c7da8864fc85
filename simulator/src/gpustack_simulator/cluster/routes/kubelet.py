"""The kubelet behind the node proxy and metrics.k8s.io, both answered from usage series."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from quart import Response

from gpustack_core.quantity import QuantityError, parse_quantity
from gpustack_core.status import StatusError, no_route, not_found
from gpustack_simulator.cluster.podstats import running_pod_stats
from gpustack_simulator.cluster.routes.base import Caller, RouteBase, json_response, list_item
from gpustack_simulator.cluster.selectors import Narrowing
from gpustack_simulator.cluster.state import (
    NODE,
    POD,
)

if TYPE_CHECKING:
    from gpustack_simulator.cluster.apiserver import ApiServer


class KubeletRoutes(RouteBase):
    """``nodes/<name>/proxy/stats/summary`` and ``metrics.k8s.io`` PodMetrics."""

    api: ApiServer

    async def node_proxy(self, caller: Caller, name: str, rest: str) -> Response:
        """The kubelet's ``stats/summary`` through the node proxy; 503 while unreachable."""
        self.require_method("GET")
        self.authorize(caller, "get", "nodes", subresource="proxy", name=name)
        node = self.state.store.get(NODE, "", name)
        if node is None:
            raise not_found("nodes", name)
        if rest.rstrip("/") != "stats/summary":
            raise StatusError(404, f"the kubelet stand-in serves only stats/summary, not {rest!r}")
        if self.state.fault_active("kubelet-unreachable", name) is not None:
            address = _internal_ip(node)
            raise StatusError(
                503,
                f"error trying to reach service: dial tcp {address}:10250: "
                "connect: connection refused",
            )
        return json_response(self._summary(name, node))

    def _summary(self, name: str, node: Mapping[str, Any]) -> dict[str, Any]:
        """The scenario's series for its Pods, plus the Pods the node simulator runs there.

        A node created through the API has no series: its node block is an idle node's.
        """
        t = self.state.clock()
        try:
            summary = self.state.expanded.summary(name, t)
        except KeyError:
            summary = _idle_node(name, node, _scenario_stamp(self.state.expanded.epoch, t))
        block = summary["node"]
        summary["pods"] = [
            *(summary.get("pods") or ()),
            *running_pod_stats(
                # This node's Pods only, from the store's node index (a fleet has thousands).
                self.state.store.candidates(POD, None, Narrowing(node_name=name)),
                name,
                self.api.nodes.managed,
                time=str(block["cpu"]["time"]),
                capacity=int(block.get("fs", {}).get("capacityBytes") or 0),
            ),
        ]
        return summary

    # -- metrics.k8s.io ---------------------------------------------------------------------

    async def pod_metrics(
        self, caller: Caller, ns: str | None = None, name: str | None = None
    ) -> Response:
        """``metrics.k8s.io`` PodMetrics, one or a list; 404 while the API is absent."""
        self.require_method("GET")
        if self.state.fault_active("metrics-api-absent") is not None:
            raise no_route()
        group = "metrics.k8s.io"
        now = self.state.clock()
        if name is not None:
            self.authorize(caller, "get", "pods", group=group, namespace=ns or "", name=name)
            metrics = self.state.expanded.pod_metrics(ns or "", name, now)
            if metrics is None:
                raise not_found("pods", name, group)
            return json_response(metrics)
        self.authorize(caller, "list", "pods", group=group, namespace=ns or "")
        items = []
        for pod in self.state.store.list(POD, ns):
            meta = pod["metadata"]
            metrics = self.state.expanded.pod_metrics(meta["namespace"], meta["name"], now)
            if metrics is not None:
                items.append(list_item(metrics))
        return json_response(
            {
                "kind": "PodMetricsList",
                "apiVersion": f"{group}/v1beta1",
                "metadata": {},
                "items": items,
            }
        )


def _scenario_stamp(epoch: datetime, t: float) -> str:
    return (epoch + timedelta(seconds=t)).astimezone(UTC).isoformat().replace("+00:00", "Z")


def _idle_node(name: str, node: Mapping[str, Any], time: str) -> dict[str, Any]:
    """The summary of a node nothing measured yet runs on: present, idle figures."""
    raw = (node.get("status") or {}).get("capacity", {}).get("ephemeral-storage", "0")
    try:
        capacity = int(parse_quantity(str(raw)))
    except (QuantityError, ValueError):
        capacity = 0
    return {
        "node": {
            "nodeName": name,
            "startTime": node["metadata"].get("creationTimestamp", time),
            "cpu": {"time": time, "usageNanoCores": 0, "usageCoreNanoSeconds": 0},
            "memory": {"time": time, "usageBytes": 0, "workingSetBytes": 0, "rssBytes": 0},
            "fs": {
                "time": time,
                "availableBytes": capacity,
                "capacityBytes": capacity,
                "usedBytes": 0,
            },
        },
        "pods": [],
    }


def _internal_ip(node: Mapping[str, Any]) -> str:
    for address in node.get("status", {}).get("addresses", []):
        if address.get("type") == "InternalIP":
            return str(address.get("address"))
    return str(node["metadata"]["name"])
