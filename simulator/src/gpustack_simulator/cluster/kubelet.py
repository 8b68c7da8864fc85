"""The scheduler and kubelet half of a cluster, for Pods created through the API.

A Pod created without ``nodeName`` is bound to the first node (by name) whose labels match its
``nodeSelector`` and required node affinity, whose taints it tolerates, that is schedulable and
that still has room for its extended-resource requests in ``status.allocatable``; one that fits
nowhere stays Pending with ``PodScheduled=False`` ``Unschedulable`` and the scheduler's message.
A bound Pod is started at once: container statuses with container IDs, a Pod IP from its
node's range, ``Ready``. Deleting a bound Pod goes through Terminating (``deletionTimestamp``,
containers terminated) to gone. Services get a cluster IP and, for ``NodePort`` and
``LoadBalancer``, node ports from 30000-32767 that stay the same for the same Service port.

It runs synchronously after each write, so a test or ``kubectl`` sees the Pod Running as soon
as its create returns, and every transition reaches watches as its own event.
Scenario Pods are left as the scenario states them: their status is what the scenario tests.
"""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpustack_core.quantity import QuantityError, parse_quantity
from gpustack_core.status import StatusError
from gpustack_simulator.cluster.selectors import Narrowing
from gpustack_simulator.cluster.state import NODE, POD, ClusterState
from gpustack_simulator.podstatus import running_status

if TYPE_CHECKING:
    from gpustack_simulator.cluster.apiserver import ApiServer

NODE_PORTS = range(30000, 32768)
SERVICE_RANGE = ipaddress.ip_network("10.96.0.0/16")
POD_RANGE = "10.244.{node}.{host}"


def _stamp() -> str:
    from gpustack_simulator.cluster.apiserver import now_stamp  # noqa: PLC0415 — import cycle

    return now_stamp()


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = obj.get("metadata", {}).get("labels") or {}
    return labels


def _requirement(node: Mapping[str, Any], term: Mapping[str, Any]) -> bool:
    labels = _labels(node)
    for expr in term.get("matchExpressions") or ():
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        value = labels.get(key)
        if op == "In" and value not in values:
            return False
        if op == "NotIn" and value in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op in {"Gt", "Lt"}:
            try:
                have, bound = int(str(value)), int(values[0])
            except (ValueError, IndexError):
                return False
            if (op == "Gt" and not have > bound) or (op == "Lt" and not have < bound):
                return False
    for expr in term.get("matchFields") or ():
        name = node["metadata"]["name"]
        if expr.get("key") == "metadata.name":
            inside = name in (expr.get("values") or [])
            if (expr.get("operator") == "In") != inside:
                return False
    return True


def _affinity(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    required = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(_requirement(node, t) for t in terms)


def _tolerates(pod: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    for toleration in pod["spec"].get("tolerations") or ():
        effect = toleration.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration.get("key") == taint.get("key"):
                return True
        elif toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get(
            "value", ""
        ):
            return True
    return False


def _extended(pod: Mapping[str, Any]) -> dict[str, int]:
    """Extended-resource requests (names with a ``/``), requests falling back to limits."""
    total: dict[str, int] = {}
    for container in pod["spec"].get("containers") or ():
        resources = container.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in asked.items():
            if "/" in name and not name.startswith("kubernetes.io/"):
                try:
                    total[name] = total.get(name, 0) + int(parse_quantity(str(value)))
                except (QuantityError, ValueError):
                    continue
    return total


class NodeSimulator:
    """Binds, starts and terminates the Pods the API creates; allocates Service addresses."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.managed: set[str] = set()
        """UIDs of Pods this simulator runs (created through the API, not by the scenario)."""
        self.scripted: set[str] = {
            p["metadata"]["uid"]
            for p in state.store.list(POD)
            if p["metadata"].get("deletionTimestamp")
        }
        """Scenario Pods already terminating when the stand-in started: the scenario holds
        them in that state (a Pod seen mid-termination), so no pass finishes them."""

    # -- Pods ------------------------------------------------------------------------------

    def graceful(self, pod: Mapping[str, Any], options: Mapping[str, Any]) -> bool:
        """A bound Pod terminates through its kubelet unless the delete asks for no grace."""
        grace = options.get("gracePeriodSeconds")
        return bool(pod.get("spec", {}).get("nodeName")) and grace not in (0, "0")

    def _pending_work(self) -> list[dict[str, Any]]:
        """The Pods a pass can act on, in list order: terminating, unbound, or this simulator's.

        Read from the store's indexes, so a pass costs what it has to do, not a visit of every
        Pod (a fleet has thousands, and a pass follows every Pod write).
        """
        store = self.state.store
        found: dict[tuple[str, str], dict[str, Any]] = {}
        mine = (pod for uid in self.managed for pod in store.with_uid(POD, uid))
        for pod in (*store.deleting(POD), *store.unbound(POD), *mine):
            meta = pod["metadata"]
            found[(meta.get("namespace", ""), meta["name"])] = pod
        return [found[name] for name in sorted(found)]

    def reconcile(self, api: ApiServer) -> None:
        """Schedule what is unbound, start what is bound, finish what is terminating."""
        for pod in self._pending_work():
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                if not meta.get("finalizers") and meta["uid"] not in self.scripted:
                    self._terminate(api, pod)
                continue
            if not pod["spec"].get("nodeName"):
                self.managed.add(meta["uid"])
                self._schedule(pod)
            elif meta["uid"] in self.managed and pod.get("status", {}).get("phase") == "Pending":
                self._start(pod)

    def _terminate(self, api: ApiServer, pod: Mapping[str, Any]) -> None:
        resource = api.registry.find("", "v1", "pods")
        assert resource is not None
        if pod["metadata"]["uid"] in self.managed and pod.get("status", {}).get("phase") == (
            "Running"
        ):
            stopped = copy.deepcopy(dict(pod))
            for status in stopped["status"].get("containerStatuses") or ():
                started = (status.get("state") or {}).get("running", {}).get("startedAt")
                status["state"] = {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": started,
                        "finishedAt": _stamp(),
                        "containerID": status.get("containerID"),
                    }
                }
                status["ready"] = False
                status["started"] = False
            for condition in stopped["status"].get("conditions") or ():
                if condition.get("type") in {"Ready", "ContainersReady"}:
                    condition["status"] = "False"
            pod = self.state.store.put(POD, stopped)
        api.remove(resource, pod)
        self.managed.discard(pod["metadata"]["uid"])

    def _fits(self, pod: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
        """Why ``pod`` cannot go to ``node`` (the scheduler's reason), or ``None``."""
        selector = pod["spec"].get("nodeSelector") or {}
        if any(_labels(node).get(k) != v for k, v in selector.items()) or not _affinity(pod, node):
            return "didn't match Pod's node affinity/selector"
        if node.get("spec", {}).get("unschedulable"):
            return "were unschedulable"
        for taint in node.get("spec", {}).get("taints") or ():
            if taint.get("effect") in {"NoSchedule", "NoExecute"} and not _tolerates(pod, taint):
                return f"had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
        allocatable = node.get("status", {}).get("allocatable") or {}
        used: dict[str, int] = {}
        on_node = Narrowing(node_name=node["metadata"]["name"])
        for other in self.state.store.candidates(POD, None, on_node):
            if other["spec"].get("nodeName") == node["metadata"]["name"] and other.get(
                "status", {}
            ).get("phase") not in {"Succeeded", "Failed"}:
                for name, value in _extended(other).items():
                    used[name] = used.get(name, 0) + value
        for name, value in _extended(pod).items():
            try:
                capacity = int(parse_quantity(str(allocatable.get(name, "0"))))
            except (QuantityError, ValueError):
                capacity = 0
            if used.get(name, 0) + value > capacity:
                return f"Insufficient {name}"
        return None

    def _schedule(self, pod: Mapping[str, Any]) -> None:
        nodes = self.state.store.list(NODE)
        reasons: dict[str, int] = {}
        for node in nodes:
            reason = self._fits(pod, node)
            if reason is None:
                bound = copy.deepcopy(dict(pod))
                bound["spec"]["nodeName"] = node["metadata"]["name"]
                bound.setdefault("status", {})["conditions"] = [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": _stamp()}
                ]
                self._start(self.state.store.put(POD, bound))
                return
            reasons[reason] = reasons.get(reason, 0) + 1
        message = (
            f"0/{len(nodes)} nodes are available: "
            + ", ".join(
                f"{count} node(s) {reason}"
                if not reason.startswith("Insufficient")
                else f"{count} {reason}"
                for reason, count in sorted(reasons.items())
            )
            + "."
        )
        conditions = pod.get("status", {}).get("conditions") or []
        if any(c.get("message") == message for c in conditions):
            return
        pending = copy.deepcopy(dict(pod))
        pending.setdefault("status", {})["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": _stamp(),
            }
        ]
        self.state.store.put(POD, pending)

    def _pod_ip(self, node_name: str) -> str:
        names = [n["metadata"]["name"] for n in self.state.store.list(NODE)]
        index = names.index(node_name) + 1 if node_name in names else 0
        taken = {p.get("status", {}).get("podIP") for p in self.state.store.list(POD)}
        for host in range(2, 255):
            ip = POD_RANGE.format(node=100 + index, host=host)
            if ip not in taken:
                return ip
        raise StatusError(500, f"node {node_name} has no Pod IP left")

    def start(self, namespace: str, name: str) -> None:
        """Start a bound Pending Pod now, past the device admission (which calls this)."""
        pod = self.state.store.get(POD, namespace, name)
        if (
            pod is not None
            and pod["spec"].get("nodeName")
            and (pod.get("status", {}).get("phase") == "Pending")
        ):
            self._start(pod, admitted=True)

    def _start(self, pod: Mapping[str, Any], *, admitted: bool = False) -> None:
        """Run every container: the statuses a kubelet reports once they are up."""
        admission = self.state.device_admission
        if not admitted and admission is not None:
            meta = pod["metadata"]
            if not admission(dict(pod), lambda: self.start(meta["namespace"], meta["name"])):
                return  # the fake kubelet is calling Allocate; it starts the Pod after
        running = copy.deepcopy(dict(pod))
        meta, spec = running["metadata"], running["spec"]
        node = self.state.store.get(NODE, "", spec["nodeName"]) or {}
        host_ip = next(
            (
                a.get("address")
                for a in node.get("status", {}).get("addresses") or ()
                if a.get("type") == "InternalIP"
            ),
            "",
        )
        running["status"] = running_status(
            running, host_ip=host_ip, pod_ip=self._pod_ip(spec["nodeName"]), now=_stamp()
        )
        self.state.store.put(POD, running)

    # -- Services --------------------------------------------------------------------------

    def service_defaults(self, service: dict[str, Any], previous: Mapping[str, Any] | None) -> None:
        """Cluster IP, port defaults and node ports, as the Service REST strategy fills them."""
        spec = service.setdefault("spec", {})
        old = (previous or {}).get("spec", {})
        kind = spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if kind != "ExternalName" and not spec.get("clusterIP"):
            spec["clusterIP"] = old.get("clusterIP") or self._cluster_ip()
        if spec.get("clusterIP") and spec["clusterIP"] != "None":
            spec["clusterIPs"] = [spec["clusterIP"]]
        mine = {
            (p.get("port"), p.get("protocol", "TCP")): p.get("nodePort")
            for p in old.get("ports") or ()
        }
        taken = self._node_ports(service)
        for port in spec.get("ports") or ():
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
            if kind not in {"NodePort", "LoadBalancer"}:
                port.pop("nodePort", None)
                continue
            wanted = port.get("nodePort")
            if wanted:
                if wanted not in NODE_PORTS or wanted in taken:
                    raise StatusError(
                        422,
                        f'Service "{service["metadata"]["name"]}" is invalid: '
                        f"spec.ports[].nodePort: Invalid value: {wanted}: provided port is "
                        + (
                            "already allocated"
                            if wanted in taken
                            else "not in the valid range. The range of valid ports is 30000-32767"
                        ),
                        reason="Invalid",
                    )
            else:
                reuse = mine.get((port.get("port"), port["protocol"]))
                port["nodePort"] = reuse or next(p for p in NODE_PORTS if p not in taken)
            taken.add(port["nodePort"])

    def _node_ports(self, service: Mapping[str, Any]) -> set[int]:
        meta = service["metadata"]
        return {
            int(p["nodePort"])
            for s in self.state.store.list("Service")
            if (s["metadata"].get("namespace"), s["metadata"]["name"])
            != (meta.get("namespace"), meta["name"])
            for p in s.get("spec", {}).get("ports") or ()
            if p.get("nodePort")
        }

    def _cluster_ip(self) -> str:
        taken = {s.get("spec", {}).get("clusterIP") for s in self.state.store.list("Service")}
        for offset in range(10, SERVICE_RANGE.num_addresses - 1):
            ip = str(SERVICE_RANGE[offset])
            if ip not in taken:
                return ip
        raise StatusError(500, "the service IP range is exhausted")
