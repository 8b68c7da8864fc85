"""The kubelet ``stats/summary`` entries of Pods the node simulator runs.

A Pod created through the API runs no process here, so what its kubelet would measure is an
idle Pod: every figure is present and ``0`` (the contract's "measured and idle", not
"unmeasured"), the ephemeral-storage capacity is the node filesystem's, and the times are the
summary's own. That keeps the node block, which already sums the scenario's Pods, consistent
with the Pod entries without inventing a usage series nobody recorded. Scenario Pods keep the
series their scenario gives them; these entries are only added for Pods the simulator started.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any


def _idle_cpu(time: str) -> dict[str, Any]:
    return {"time": time, "usageNanoCores": 0, "usageCoreNanoSeconds": 0}


def _idle_memory(time: str) -> dict[str, Any]:
    return {
        "time": time,
        "usageBytes": 0,
        "workingSetBytes": 0,
        "rssBytes": 0,
        "pageFaults": 0,
        "majorPageFaults": 0,
    }


def _started(status: Mapping[str, Any], name: str, fallback: str) -> str:
    for container in status.get("containerStatuses") or ():
        if container.get("name") == name:
            running = (container.get("state") or {}).get("running") or {}
            return str(running.get("startedAt") or fallback)
    return fallback


def running_pod_stats(
    pods: Iterable[Mapping[str, Any]],
    node: str,
    managed: Collection[str],
    *,
    time: str,
    capacity: int,
) -> list[dict[str, Any]]:
    """Summary entries for the Running Pods on ``node`` whose UID is in ``managed``.

    A terminating Pod is still listed while its containers run, as a kubelet lists it.
    """
    entries = []
    for pod in pods:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        if (
            meta.get("uid") not in managed
            or spec.get("nodeName") != node
            or status.get("phase") != "Running"
        ):
            continue
        start = str(status.get("startTime") or meta.get("creationTimestamp") or time)
        entries.append(
            {
                "podRef": {
                    "name": meta["name"],
                    "namespace": meta.get("namespace", ""),
                    "uid": meta["uid"],
                },
                "startTime": start,
                "containers": [
                    {
                        "name": c["name"],
                        "startTime": _started(status, c["name"], start),
                        "cpu": _idle_cpu(time),
                        "memory": _idle_memory(time),
                    }
                    for c in spec.get("containers") or ()
                ],
                "cpu": _idle_cpu(time),
                "memory": _idle_memory(time),
                "ephemeral-storage": {
                    "time": time,
                    "availableBytes": capacity,
                    "capacityBytes": capacity,
                    "usedBytes": 0,
                },
            }
        )
    return entries
