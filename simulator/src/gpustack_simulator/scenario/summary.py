"""The kubelet ``stats/summary`` and metrics-server figures, built from usage series.

Figures that the series leaves unmeasured stay absent (never zero), and a Pod figure is split
among its containers so the parts sum back to it exactly, as readers cross-check.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from gpustack_simulator.scenario.resolved import _Runtime, _stamp
from gpustack_simulator.scenario.series import _Point


def _split(value: int | None, parts: int) -> list[int] | None:
    """Divide a Pod figure among its containers so the parts sum back to it exactly."""
    if value is None or parts == 0:
        return None
    share, rest = divmod(value, parts)
    return [share + (rest if k == 0 else 0) for k in range(parts)]


def _memory_quantity(value: int) -> str:
    """metrics-server spells memory in Ki; a figure that is not whole Ki stays in bytes."""
    return f"{value // 1024}Ki" if value % 1024 == 0 else str(value)


def _cpu_block(time: str, nanocores: int | None, cumulative: int) -> dict[str, Any]:
    block: dict[str, Any] = {"time": time}
    if nanocores is not None:
        block["usageNanoCores"] = nanocores
    block["usageCoreNanoSeconds"] = cumulative
    return block


def _memory_block(time: str, working_set: int) -> dict[str, Any]:
    # The kubelet's working set is usage less inactive file pages, and RSS is part of it.
    return {
        "time": time,
        "usageBytes": working_set + working_set // 8,
        "workingSetBytes": working_set,
        "rssBytes": working_set - working_set // 4,
        "pageFaults": 0,
        "majorPageFaults": 0,
    }


def _fs_block(time: str, used: int, capacity: int) -> dict[str, Any]:
    return {
        "time": time,
        "availableBytes": max(capacity - used, 0),
        "capacityBytes": capacity,
        "usedBytes": used,
    }


def _pod_stats(
    runtime: _Runtime, point: _Point, now: str, t: float, capacity: int, epoch: datetime
) -> dict[str, Any]:
    cumulative = runtime.series.core_nanoseconds(t)
    count = len(runtime.containers)
    cpu_parts = _split(point.nanocores, count)
    cumulative_parts = _split(cumulative, count) or [0] * count
    memory_parts = _split(point.memory, count)
    containers = []
    for k, (name, started) in enumerate(runtime.containers):
        container: dict[str, Any] = {"name": name, "startTime": _stamp(epoch, started)}
        container["cpu"] = _cpu_block(
            now, None if cpu_parts is None else cpu_parts[k], cumulative_parts[k]
        )
        if memory_parts is not None:
            container["memory"] = _memory_block(now, memory_parts[k])
        containers.append(container)
    entry: dict[str, Any] = {
        "podRef": {"name": runtime.name, "namespace": runtime.namespace, "uid": runtime.uid},
        "startTime": _stamp(epoch, runtime.started),
        "containers": containers,
        "cpu": _cpu_block(now, point.nanocores, cumulative),
    }
    if point.memory is not None:
        entry["memory"] = _memory_block(now, point.memory)
    if point.storage is not None:
        entry["ephemeral-storage"] = _fs_block(now, point.storage, capacity)
    return entry


SYSTEM_CPU_NANOCORES = 180_000_000
SYSTEM_MEMORY_BYTES = 3 << 30
SYSTEM_STORAGE_BYTES = 24 << 30
"""What the node itself (kubelet, runtime, OS) adds on top of its Pods in the node block."""


def _node_stats(
    node: str,
    now: str,
    epoch: datetime,
    t: float,
    capacity: int,
    cpu: int,
    memory: int,
    storage: int,
    cumulative: int,
) -> dict[str, Any]:
    return {
        "nodeName": node,
        "startTime": _stamp(epoch, -86_400),
        "cpu": _cpu_block(
            now,
            cpu + SYSTEM_CPU_NANOCORES,
            cumulative + math.floor(SYSTEM_CPU_NANOCORES * (86_400 + max(t, 0))),
        ),
        "memory": _memory_block(now, memory + SYSTEM_MEMORY_BYTES),
        "fs": _fs_block(now, storage + SYSTEM_STORAGE_BYTES, capacity),
    }
