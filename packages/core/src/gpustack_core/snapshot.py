"""The Device Manager's ``/monitor/snapshot`` envelope.

Only the latest sample is kept and served. ``slices`` is optional and its absence means "could
not measure", which is different from an empty section ("measured, nothing carved"). Raw PIDs
never appear here: they never leave the Device Manager.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from gpustack_core.decoding import ContractError, decode_json
from gpustack_core.wire import Wire

SLICE_SCHEMA_VERSION = 1
"""The ``slices.schemaVersion`` this code writes and the only one it reads ([1, 1])."""

MAX_SLICE_RECORDS = 4096
"""Bound on ``usages`` + ``partitions`` records, sized to fit the worker's 4 MiB read limit."""

MAX_SLICE_DEVICES = 256
"""Bound on ``devices`` diagnostics; overflow drops a device whole with reason ``bounded``."""

MAX_SNAPSHOT_BYTES = 4 << 20
"""The consumer's read limit for one snapshot response."""

FRESHNESS_PERIODS = 3
"""A snapshot older than this many monitor periods is dropped as a failing monitor."""

DEFAULT_FRESHNESS = timedelta(seconds=45)
"""Freshness bound when ``periodSeconds`` is missing or 0 (three default 15 s periods)."""

ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)
"""The timestamp served before the first monitor tick (Go's zero time)."""


class CardFigures(Wire, frozen=True, kw_only=True):
    """One accelerator's whole-card figures in native contract units (MiB, %, °C, W)."""

    id: str
    memory: int = 0
    """Total memory, MiB; ``0`` means the card did not state it."""
    memory_usage: int | None = None
    memory_utilization: int | None = None
    cores_utilization: int | None = None
    temperature: int | None = None
    power_usage: float | None = None
    unhealthy: bool
    """Required, so it is always written: health is never "unknown" on the wire."""


class SnapshotGroup(Wire, frozen=True, kw_only=True):
    """The cards of one manufacturer, sampled together."""

    manufacturer: str
    timestamp: datetime = ZERO_TIME
    accelerators: tuple[CardFigures, ...] = ()


class SliceUsage(Wire, frozen=True, kw_only=True):
    """Per (Pod, container, device) usage of a carved share; PIDs already summed away.

    ``coresUtilizationPercent`` is a share of the **whole card**, summed over the container's
    processes and capped at 100; the consumer restates it against the slice's cap.
    """

    manufacturer: str
    pod_uid: str
    container: str
    device_id: str
    memory_used_mib: int | None = None
    cores_utilization_percent: int | None = None


class SliceDevice(Wire, frozen=True, kw_only=True):
    """Diagnostics for one queried device: why a figure is absent, and how the rows fared."""

    manufacturer: str
    device_id: str
    memory_reason: str = ""
    cores_reason: str = ""
    rows_returned: int = 0
    rows_attributed: int = 0
    rows_non_instance: int = 0
    rows_unreadable: int = 0
    rows_ambiguous: int = 0
    reads_truncated: int = 0


class SlicePartition(Wire, frozen=True, kw_only=True):
    """A hardware partition read on its **own** handle: its own id, capacity and usage."""

    manufacturer: str
    pod_uid: str
    container: str
    device_id: str
    """The parent card."""
    id: str
    """The partition's own identifier (a MIG UUID on NVIDIA)."""
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    cores_utilization_percent: int | None = None
    """Present only where the vendor measures a partition's compute (Hygon)."""
    memory_reason: str = ""
    cores_reason: str = ""


class SliceSection(Wire, frozen=True, kw_only=True):
    """The per-share section; ``schemaVersion`` gates whether a consumer may read it at all."""

    schema_version: int
    truncated: bool = False
    usages: tuple[SliceUsage, ...] = ()
    devices: tuple[SliceDevice, ...] = ()
    partitions: tuple[SlicePartition, ...] = ()


class MonitorSnapshot(Wire, frozen=True, kw_only=True):
    """The envelope served at ``/monitor/snapshot``."""

    timestamp: datetime = ZERO_TIME
    period_seconds: int = 0
    groups: tuple[SnapshotGroup, ...] = ()
    slices: SliceSection | None = None


def parse_snapshot(data: bytes | str) -> MonitorSnapshot:
    """Decode a snapshot, naming the offending field on malformed input.

    Timestamps must carry a zone: a naive time cannot be aged against ``now``.
    """
    snapshot = decode_json(data, MonitorSnapshot, what="monitor snapshot")
    _require_aware(snapshot.timestamp, "$.timestamp")
    for i, group in enumerate(snapshot.groups):
        _require_aware(group.timestamp, f"$.groups[{i}].timestamp")
    return snapshot


def _require_aware(value: datetime, path: str) -> None:
    if value.tzinfo is None:
        raise ContractError(f"monitor snapshot: timestamp without a time zone - at `{path}`")


def encode_snapshot(snapshot: MonitorSnapshot) -> bytes:
    """Serialize once per monitor tick; the route serves these bytes as they are."""
    return msgspec.json.encode(snapshot)


def freshness_bound(snapshot: MonitorSnapshot) -> timedelta:
    """Three monitor periods, or 45 s when the producer did not state its period."""
    if snapshot.period_seconds <= 0:
        return DEFAULT_FRESHNESS
    return timedelta(seconds=FRESHNESS_PERIODS * snapshot.period_seconds)


def is_fresh(snapshot: MonitorSnapshot, now: datetime) -> bool:
    """Whether a consumer may use the snapshot: stored at most three periods before ``now``.

    A snapshot from the future (clock skew between nodes) is accepted: its age is not evidence
    of a failing monitor.
    """
    if snapshot.timestamp <= ZERO_TIME:
        return False
    return now - snapshot.timestamp <= freshness_bound(snapshot)


def slices_readable(section: SliceSection | None) -> bool:
    """Whether this consumer understands the section's schema (``[1, 1]``)."""
    return section is not None and section.schema_version == SLICE_SCHEMA_VERSION
