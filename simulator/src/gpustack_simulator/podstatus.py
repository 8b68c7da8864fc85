"""What a kubelet reports of a Pod whose containers it started: one function, two kubelets.

The cluster stand-in's node simulator and the real control plane's node agent
(:mod:`gpustack_simulator.controlplane.nodeagent`) both "run" Pods without a container
runtime; both report them Running through :func:`running_status`, so a Pod looks the same to
the daemons whichever API server it lives in.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from gpustack_core.quantity import QuantityError, canonical_quantity, parse_quantity

CONDITIONS = (
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
)


def container_id(uid: str, container: str) -> str:
    """A stable ``containerd://`` ID for a container of a Pod (the same on every restart)."""
    digest = hashlib.sha256(f"{uid}/{container}".encode()).hexdigest()
    return f"containerd://{digest}"


def _quantities(asked: Mapping[str, Any]) -> dict[str, Fraction | str]:
    parsed: dict[str, Fraction | str] = {}
    for name in ("cpu", "memory"):
        if name in asked:
            try:
                parsed[name] = parse_quantity(str(asked[name]))
            except (QuantityError, ValueError):
                parsed[name] = str(asked[name])
    return parsed


def qos_class(spec: Mapping[str, Any]) -> str:
    """The Pod's QoS class as the API server computes it at creation (cpu and memory only).

    Quantities are compared by value: ``64Gi`` and ``68719476736`` are the same request (the
    real server said so, refusing a Burstable status for a Guaranteed Pod the string
    comparison had misjudged).
    """
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    asked = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in asked):
        return "BestEffort"
    guaranteed = True
    for resources in asked:
        limits = _quantities(resources.get("limits") or {})
        requests = {**limits, **_quantities(resources.get("requests") or {})}
        if set(limits) != {"cpu", "memory"} or requests != limits:
            guaranteed = False
    return "Guaranteed" if guaranteed else "Burstable"


_MILLI = Fraction(1, 1000)


def _canonical(quantities: dict[str, Any], *, milli: bool = False) -> None:
    for name, written in quantities.items():
        try:
            value = written
            if milli:  # a container's resources are rounded up to 1m (1.0001 → 1001m)
                parsed = parse_quantity(written)
                value = f"{math.ceil(parsed / _MILLI)}m" if parsed % _MILLI else written
            quantities[name] = canonical_quantity(value)
        except QuantityError:
            continue  # validation refuses it with its own message


def canonical_pod_quantities(pod: dict[str, Any]) -> None:
    """Every container's requests and limits as kube-apiserver stores them.

    Checked against kube-apiserver v1.37.2: a request left out defaults to its limit, every
    quantity is rounded up to a thousandth (``0.1m`` → ``1m``) and written canonically
    (``320000`` → ``320k``), so a client reading the Pod back sees the server's spelling.
    """
    spec = pod.get("spec") or {}
    for container in (*(spec.get("initContainers") or ()), *(spec.get("containers") or ())):
        resources = container.get("resources")
        if not isinstance(resources, dict):
            continue
        limits = resources.get("limits")
        if isinstance(limits, dict) and limits:
            requests = resources.setdefault("requests", {})
            if isinstance(requests, dict):
                for name, value in limits.items():
                    requests.setdefault(name, value)
        for field in ("limits", "requests"):
            if isinstance(resources.get(field), dict):
                _canonical(resources[field], milli=True)


def canonical_node_quantities(node: dict[str, Any]) -> None:
    """A Node's capacity and allocatable as kube-apiserver stores them."""
    status = node.get("status") or {}
    for field in ("capacity", "allocatable"):
        if isinstance(status.get(field), dict):
            _canonical(status[field])


def running_status(
    pod: Mapping[str, Any],
    *,
    host_ip: str,
    pod_ip: str,
    now: str,
    container_ids: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``status`` of ``pod`` with every container started and ready at ``now``.

    ``container_ids`` names a container's ID where the caller knows it (a scenario Pod whose
    processes carry it in their cgroups); every other container gets :func:`container_id`.
    Init containers are reported terminated with ``Completed``, as after a normal start.
    """
    meta, spec = pod["metadata"], pod.get("spec") or {}
    known = container_ids or {}

    def started(container: Mapping[str, Any]) -> dict[str, Any]:
        name = container["name"]
        cid = known.get(name) or container_id(meta["uid"], name)
        digest = cid.rsplit("//", 1)[-1]
        return {
            "name": name,
            "image": container.get("image", ""),
            "imageID": f"{container.get('image', '')}@sha256:{digest[::-1][:64]}",
            "containerID": cid,
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": now}},
        }

    def completed(container: Mapping[str, Any]) -> dict[str, Any]:
        entry = started(container)
        entry.update(ready=True, started=False)
        entry["state"] = {
            "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now,
                           "finishedAt": now, "containerID": entry["containerID"]}
        }  # fmt: skip
        return entry

    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": [
            {"type": kind, "status": "True", "lastTransitionTime": now} for kind in CONDITIONS
        ],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}] if host_ip else [],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}] if pod_ip else [],
        "startTime": now,
        "containerStatuses": [started(c) for c in spec.get("containers") or ()],
        # Set by the API server at creation and immutable after: a kubelet reports it as is.
        "qosClass": (pod.get("status") or {}).get("qosClass") or qos_class(spec),
    }
    inits = spec.get("initContainers") or ()
    if inits:
        status["initContainerStatuses"] = [completed(c) for c in inits]
    return status
