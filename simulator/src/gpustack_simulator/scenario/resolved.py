"""Intermediate records of expansion: grants resolved against cards, measurable Pods.

Kept apart from the expander so the object builders and the kubelet summary can share them
without importing the expander itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gpustack_core.modes import AllocationMode
from gpustack_simulator.scenario.inventory import _Card
from gpustack_simulator.scenario.series import _Series
from gpustack_simulator.scenario.validation import _PodPlan
from gpustack_vendors.model import PartitionInfo


def _stamp(epoch: datetime, offset: float) -> str:
    """RFC 3339 in UTC with ``Z``, fractional seconds only where there are any."""
    moment = epoch + timedelta(seconds=offset)
    text = moment.astimezone(UTC).isoformat()
    return text.replace("+00:00", "Z")


def _fnv64a(text: str) -> str:
    value = 0xCBF29CE484222325
    for byte in text.encode():
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{value:016x}"


@dataclass(frozen=True)
class _Grant:
    """A grant resolved against the node's recordings."""

    path: str
    pod: _PodPlan
    container: str
    mode: AllocationMode
    card: _Card
    partition: PartitionInfo | None
    memory_percent: int | None
    cores_percent: int | None


@dataclass
class _Runtime:
    """What the kubelet and metrics-server stand-ins need of one measurable Pod."""

    namespace: str
    name: str
    uid: str
    node: str
    labels: dict[str, str]
    started: float
    containers: tuple[tuple[str, float], ...]
    """App containers that run, with their start offsets: the per-container split."""
    series: _Series
