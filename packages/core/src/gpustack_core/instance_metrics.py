"""``InstanceMetrics``: the body of ``GET …/instances/<name>/metrics``.

Every figure is a ``Total``/``Used`` pair. A total is the Instance's declaration and is always
present; a used figure is a measurement and is **omitted** (``None`` here) when nothing measured
it — ``0`` means measured-and-idle. ``omit_defaults`` is what turns ``None`` into an absent key.
"""

from __future__ import annotations

from datetime import datetime

from gpustack_core import contract
from gpustack_core.wire import Wire

API_GROUP = contract.API_GROUP
API_VERSION = f"{API_GROUP}/{contract.API_VERSION}"
KIND = "InstanceMetrics"


class AcceleratorMetrics(Wire, frozen=True, kw_only=True):
    """One entry per grant: the Instance's own figures, whatever the allocation did to the card."""

    id: str
    """The device's identifier, or under ``Partitioned`` the partition's own (a MIG UUID)."""
    mode: str
    """The mode's name (``Exclusive`` … ``Visibility``), as on every exporter ``mode`` label."""
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    memory_utilization_percent: int | None = None
    cores_utilization_percent: int | None = None
    temperature_celsius: int | None = None
    power_usage_watts: float | None = None
    unhealthy: bool
    """Always written: the whole device's health carries every share of it down."""


class Sample(Wire, frozen=True, kw_only=True):
    """One current sample; nothing is stored, so there is no history to page through."""

    timestamp: datetime
    cpu_total_milli_cores: int
    cpu_used_milli_cores: int | None = None
    memory_total_mib: int
    memory_used_mib: int | None = None
    storage_total_mib: int
    storage_used_mib: int | None = None
    accelerators: list[AcceleratorMetrics] | None = None
    """Absent when no Device Manager could answer; an empty list when none was allocated."""


class ObjectMeta(Wire, frozen=True, kw_only=True):
    """The identity of the Instance the sample belongs to."""

    name: str
    namespace: str
    uid: str = ""


class InstanceMetrics(Wire, frozen=True, kw_only=True):
    """The subresource's response object: a Kubernetes object, so ``kind``/``apiVersion`` always."""

    kind: str
    api_version: str
    metadata: ObjectMeta
    sample: Sample

    @classmethod
    def of(cls, metadata: ObjectMeta, sample: Sample) -> InstanceMetrics:
        """Build the response for one Instance with the fixed ``kind`` and ``apiVersion``."""
        return cls(kind=KIND, api_version=API_VERSION, metadata=metadata, sample=sample)
