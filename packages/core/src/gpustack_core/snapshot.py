"""The Device Manager's ``/monitor/snapshot`` envelope.

Only the latest sample is kept and served. ``slices`` is optional and its absence means "could
not measure", which is different from an empty section ("measured, nothing carved"). Raw PIDs
never appear here: they never leave the Device Manager.

The leaf records (cards, usages, devices, partitions, confirmed grants) hold scalars only, so
they are declared ``gc=False``: no reference cycle can pass through them, and a tick at the bounds
makes some 4,600 of them, which as tracked objects set off collections that re-scan the whole
daemon's heap (the informer's Pods included) every few ticks.
"""

from __future__ import annotations

from dataclasses import dataclass
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

ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)
"""The timestamp served before the first monitor tick (Go's zero time)."""


class CardFigures(Wire, frozen=True, kw_only=True, gc=False):
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


class SliceUsage(Wire, frozen=True, kw_only=True, gc=False):
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


class SliceDevice(Wire, frozen=True, kw_only=True, gc=False):
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


class SlicePartition(Wire, frozen=True, kw_only=True, gc=False):
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


class ConfirmedGrant(Wire, frozen=True, kw_only=True, gc=False):
    """A grant on this manager's cards that the kubelet's record confirms (``confirm.py``)."""

    pod_uid: str
    container: str
    device_id: str
    """The card (for a partition: its parent card), as in the grant's ``id``."""


class MonitorSnapshot(Wire, frozen=True, kw_only=True):
    """The envelope served at ``/monitor/snapshot``."""

    timestamp: datetime = ZERO_TIME
    period_seconds: int = 0
    groups: tuple[SnapshotGroup, ...] = ()
    slices: SliceSection | None = None
    grants: tuple[ConfirmedGrant, ...] | None = None
    """Which annotation grants on these cards the kubelet confirmed. Absent: the manager could
    not cross-check (no PodResources), and readers take the annotation as it is; present, a
    grant not listed is a claim nobody allocated, and no figure of its card is reported for it.
    An extension beyond the reference snapshot; readers that do not know it ignore it."""


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


MAX_MONITOR_PERIOD = timedelta(minutes=5)
"""The longest monitor period a consumer may be configured to expect; its bound is three."""

MAX_CLOCK_SKEW = timedelta(seconds=10)
"""How far a snapshot's timestamp may lie ahead of the consumer's clock (NTP-synced nodes
differ by milliseconds); beyond it the stamp is not evidence of anything and the snapshot is
dropped, since a stamp far in the future would otherwise count as fresh for as long as it
claims."""

DEFAULT_MONITOR_PERIOD = timedelta(seconds=15)


@dataclass(frozen=True)
class Freshness:
    """The consumer's own expectation of how often a Device Manager stores a snapshot.

    A snapshot decides nothing about its own freshness: its ``periodSeconds`` is believed only
    when it is *shorter* than the period the consumer was configured with (a stricter bound),
    never longer, so ``periodSeconds: 1e9`` cannot keep a dead producer's figures alive.
    """

    monitor_period: timedelta = DEFAULT_MONITOR_PERIOD
    max_skew: timedelta = MAX_CLOCK_SKEW

    def __post_init__(self) -> None:
        if not timedelta(0) < self.monitor_period <= MAX_MONITOR_PERIOD:
            raise ValueError(
                f"monitor period {self.monitor_period} must be positive and at most "
                f"{MAX_MONITOR_PERIOD}"
            )

    def bound(self, snapshot: MonitorSnapshot) -> timedelta:
        """Three periods: the producer's stated one if shorter than ours, else ours."""
        period = self.monitor_period
        if 0 < snapshot.period_seconds < period.total_seconds():
            period = timedelta(seconds=snapshot.period_seconds)
        return FRESHNESS_PERIODS * period

    def problem(self, snapshot: MonitorSnapshot, now: datetime) -> str | None:
        """Why the snapshot may not be used at ``now``, or ``None`` when it is fresh."""
        stamp = snapshot.timestamp
        if stamp <= ZERO_TIME:
            return "no monitor tick has completed yet"
        age = now - stamp
        if age < -self.max_skew:
            return (
                f"stamped {stamp.isoformat()}, {-age} ahead of this clock "
                f"(at most {self.max_skew} of skew is accepted)"
            )
        bound = self.bound(snapshot)
        if age > bound:
            return f"of {stamp.isoformat()} is stale at {now.isoformat()} (older than {bound})"
        return None

    def is_fresh(self, snapshot: MonitorSnapshot, now: datetime) -> bool:
        """Stored at most three periods before ``now`` and at most ``max_skew`` after it."""
        return self.problem(snapshot, now) is None

    def unchanged_for(self, snapshot: MonitorSnapshot, now: datetime) -> timedelta:
        """How long after ``now`` the producer cannot yet have stored a newer snapshot.

        A Device Manager stores at most one snapshot per period, so asking again before the
        next tick can only be answered ``304``. The period is the stricter of the stated and
        the configured one (as in :meth:`bound`), and the age is clamped into ``[0, period]``
        so a skewed clock on either side can shorten the wait but never stretch it past one
        period: a consumer holding a snapshot this long is at most one tick behind.
        """
        period = self.bound(snapshot) / FRESHNESS_PERIODS
        if snapshot.timestamp <= ZERO_TIME:
            return timedelta(0)
        age = min(max(now - snapshot.timestamp, timedelta(0)), period)
        return period - age


DEFAULT_FRESHNESS_POLICY = Freshness()


def is_fresh(
    snapshot: MonitorSnapshot, now: datetime, freshness: Freshness = DEFAULT_FRESHNESS_POLICY
) -> bool:
    """Whether a consumer may use the snapshot (see :class:`Freshness`)."""
    return freshness.is_fresh(snapshot, now)


def slices_readable(section: SliceSection | None) -> bool:
    """Whether this consumer understands the section's schema (``[1, 1]``)."""
    return section is not None and section.schema_version == SLICE_SCHEMA_VERSION
