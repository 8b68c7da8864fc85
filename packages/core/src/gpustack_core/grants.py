"""Grant resolution: turn an allocation plus Device Manager snapshots into per-grant entries.

One entry per grant, not per card. Every mode reports the same fields with the same meaning —
the figures are **the Instance's own**: a whole card's for ``Exclusive``/``Shared``, a slice's
quota and usage for ``Sliced``, a partition's own identity and figures for ``Partitioned``.
Temperature, power and health are always the whole card's: a share has none of its own.

No figure is taken on trust: one outside what a card can physically show (:mod:`.bounds`) is
left out with ``invalid_data`` in the notes, as the reference's reasons table says.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import msgspec

from gpustack_core import bounds
from gpustack_core.allocation import Grant
from gpustack_core.instance_metrics import AcceleratorMetrics
from gpustack_core.modes import AllocationMode
from gpustack_core.reasons import SectionReason
from gpustack_core.snapshot import (
    CardFigures,
    MonitorSnapshot,
    SliceDevice,
    SlicePartition,
    SliceSection,
    slices_readable,
)
from gpustack_core.units import percent_of, restate_against_cap, slice_memory_mib


@dataclass(frozen=True, slots=True)
class ResolvedAccelerator:
    """An entry plus what the exporter labels it with beyond the entry itself."""

    manufacturer: str
    index: int
    metrics: AcceleratorMetrics


class Resolution(NamedTuple):
    """The entries, and why any grant produced no entry or an entry without figures.

    The notes are logged under ``instance-metrics``; the entry itself carries no reason field.
    """

    accelerators: list[ResolvedAccelerator]
    notes: list[str]


CoresCaps = Mapping[tuple[str, str], int]
"""``(container, manufacturer)`` → the container's ``<base>.sliced.cores-percentage`` request."""


def resolve(
    grants: Iterable[Grant],
    snapshots: Mapping[str, MonitorSnapshot],
    *,
    pod_uid: str,
    cores_caps: CoresCaps,
) -> Resolution:
    """Resolve every grant of one Pod against its manufacturers' (already fresh) snapshots.

    ``snapshots`` holds one snapshot per manufacturer; a manufacturer missing from it is never
    substituted by another's, its grants are simply unanswered and noted.
    """
    by_key: dict[tuple[str, str, str], list[Grant]] = {}
    for grant in grants:
        if grant.accelerator.mode is AllocationMode.VISIBILITY:
            continue  # a sidecar sees what its sibling holds; it is not a second grant
        partition = (
            grant.accelerator.allocated_physical_id
            if grant.accelerator.mode is AllocationMode.PARTITIONED
            else ""
        )
        by_key.setdefault((grant.manufacturer, grant.accelerator.id, partition), []).append(grant)

    resolved: list[ResolvedAccelerator] = []
    notes: list[str] = []
    for (manufacturer, device_id, _), held in by_key.items():
        snapshot = snapshots.get(manufacturer)
        if snapshot is None:
            notes.append(
                f"{manufacturer}/{device_id}: no fresh snapshot from a {manufacturer} "
                "Device Manager"
            )
            continue
        card = _find_card(snapshot, manufacturer, device_id)
        if card is None:
            notes.append(f"{manufacturer}/{device_id}: not in the {manufacturer} snapshot")
            continue
        first = held[0]
        entry: AcceleratorMetrics | None
        if len(held) > 1:
            containers = ", ".join(g.container for g in held)
            notes.append(
                f"{manufacturer}/{device_id}: granted separately to {containers}; "
                "reporting the card's temperature, power and health only"
            )
            entry, note = _card_wide(card, _grant_id(first), first)
            if note:
                notes.append(f"{manufacturer}/{device_id}: {note}")
        else:
            entry, note = _resolve_one(first, card, snapshot.slices, pod_uid, cores_caps)
            if note:
                notes.append(f"{manufacturer}/{device_id}: {note}")
        if entry is not None:
            resolved.append(ResolvedAccelerator(manufacturer, first.accelerator.index, entry))
    return Resolution(resolved, notes)


def _resolve_one(
    grant: Grant,
    card: CardFigures,
    section: SliceSection | None,
    pod_uid: str,
    cores_caps: CoresCaps,
) -> tuple[AcceleratorMetrics | None, str]:
    mode = grant.accelerator.mode
    if mode is AllocationMode.SLICED:
        return _sliced(grant, card, section, pod_uid, cores_caps)
    if mode is AllocationMode.PARTITIONED:
        return _partitioned(grant, card, section, pod_uid)
    total, total_note = bounds.card_memory(card.memory)
    used, memory_note = _physical(card.memory_usage, total, "memory")
    cores, cores_note = _physical(card.cores_utilization, CORES_CAPACITY, "cores")
    entry, card_note = _entry(card, card.id, grant, total=total, used=used, cores=cores)
    return entry, _join(total_note, memory_note, cores_note, card_note)


CORES_CAPACITY = bounds.PERCENT_CAPACITY
"""A whole card's compute utilization, in percent, can be no more than all of it."""


def _physical(value: int | None, capacity: int | None, what: str) -> tuple[int | None, str]:
    """``value`` when it fits, from 0 to the physical ``capacity`` it is measured against.

    A figure larger than what it measures (10^12 MiB used on a 40 GiB card, 300 % of a card's
    compute) or below nothing (a negative reading) is no measurement: it is dropped with
    ``invalid_data`` and noted, never published. Usage over a *slice's quota* is legitimate and
    not checked here; the card's own capacity is the bound. With no stated capacity the
    physical ceiling of any card's memory is (:data:`~.bounds.MAX_CARD_MEMORY_MIB`).
    """
    ceiling = capacity if capacity is not None and capacity > 0 else bounds.MAX_CARD_MEMORY_MIB
    return bounds.within(value, 0, ceiling, what)


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def _sliced(
    grant: Grant,
    card: CardFigures,
    section: SliceSection | None,
    pod_uid: str,
    cores_caps: CoresCaps,
) -> tuple[AcceleratorMetrics, str]:
    card_total, total_note = bounds.card_memory(card.memory)
    total = slice_memory_mib(grant.accelerator.allocated, card_total or 0)
    used, cores, note = _slice_figures(grant, card.id, section, pod_uid)
    used, memory_note = _physical(used, card_total, "memory")
    cores, cores_note = _physical(cores, CORES_CAPACITY, "cores")
    if cores is not None:
        cores = restate_against_cap(cores, cores_caps.get((grant.container, grant.manufacturer), 0))
    entry, card_note = _entry(card, card.id, grant, total=total, used=used, cores=cores)
    return entry, _join(note, total_note, memory_note, cores_note, card_note)


def _partitioned(
    grant: Grant,
    card: CardFigures,
    section: SliceSection | None,
    pod_uid: str,
) -> tuple[AcceleratorMetrics | None, str]:
    record = _find_partition(grant, section, pod_uid)
    partition_id = record.id if record is not None else grant.accelerator.allocated_physical_id
    if not partition_id:
        return None, (
            "partition has no allocatedPhysicalID in its allocation and no record in "
            "the snapshot; it reports again once its Pod is re-allocated"
        )
    if record is None:
        note = _unreadable_reason(section) or "no partition record in the snapshot"
        entry, card_note = _entry(card, partition_id, grant, total=None, used=None, cores=None)
        return entry, _join(note, card_note)
    note = "; ".join(
        f"{what}: {reason}"
        for what, reason in (("memory", record.memory_reason), ("cores", record.cores_reason))
        if reason
    )
    card_memory, card_total_note = bounds.card_memory(card.memory)
    total, total_note = _physical(record.memory_total_mib, card_memory, "partition memory")
    used, memory_note = _physical(
        None if record.memory_reason else record.memory_used_mib,
        total if total is not None else card_memory,
        "memory",
    )
    cores, cores_note = _physical(
        None if record.cores_reason else record.cores_utilization_percent,
        CORES_CAPACITY,
        "cores",
    )
    entry, card_note = _entry(card, partition_id, grant, total=total, used=used, cores=cores)
    return entry, _join(note, card_total_note, total_note, memory_note, cores_note, card_note)


def _slice_figures(
    grant: Grant, device_id: str, section: SliceSection | None, pod_uid: str
) -> tuple[int | None, int | None, str]:
    """The Figures rule for a logical slice: ``(memoryUsedMiB, whole-card cores %, note)``.

    A device absent from ``slices.devices`` was not measured: both figures absent. A measured
    device with no record for this container reads ``0`` for each figure whose reason is empty —
    the container simply ran nothing there.
    """
    unreadable = _unreadable_reason(section)
    if unreadable or section is None:
        return None, None, unreadable
    device = _find_device(section, grant.manufacturer, device_id)
    if device is None:
        return None, None, "device not measured in the snapshot's slices section"
    usage = next(
        (
            u
            for u in section.usages
            if u.manufacturer == grant.manufacturer
            and u.device_id == device_id
            and u.pod_uid == pod_uid
            and u.container == grant.container
        ),
        None,
    )
    memory: int | None = None
    cores: int | None = None
    if not device.memory_reason:
        memory = 0 if usage is None else usage.memory_used_mib
    if not device.cores_reason:
        cores = 0 if usage is None else usage.cores_utilization_percent
    note = "; ".join(
        f"{what}: {reason}"
        for what, reason in (("memory", device.memory_reason), ("cores", device.cores_reason))
        if reason
    )
    return memory, cores, note


def _unreadable_reason(section: SliceSection | None) -> str:
    if section is None:
        return "the Device Manager could not measure shares (no slices section)"
    if not slices_readable(section):
        return (
            f"{SectionReason.VERSION_SKEW}: slices schemaVersion {section.schema_version} "
            "is not one this consumer reads"
        )
    return ""


def _entry(
    card: CardFigures,
    entry_id: str,
    grant: Grant,
    *,
    total: int | None,
    used: int | None,
    cores: int | None,
) -> tuple[AcceleratorMetrics, str]:
    """The entry, with the card's temperature and power as far as they are physical."""
    entry, note = _card_wide(card, entry_id, grant)
    return msgspec.structs.replace(
        entry,
        memory_total_mib=total,
        memory_used_mib=used,
        memory_utilization_percent=(
            percent_of(used, total) if used is not None and total is not None else None
        ),
        cores_utilization_percent=cores,
    ), note


def _card_wide(card: CardFigures, entry_id: str, grant: Grant) -> tuple[AcceleratorMetrics, str]:
    """An entry that cannot hold any one grant's figures: identity and card-wide state only."""
    temperature, temperature_note = bounds.temperature(card.temperature)
    power, power_note = bounds.power(card.power_usage)
    entry = AcceleratorMetrics(
        id=entry_id,
        mode=grant.accelerator.mode.api_name,
        temperature_celsius=temperature,
        power_usage_watts=power,
        unhealthy=card.unhealthy,
    )
    return entry, _join(temperature_note, power_note)


def _grant_id(grant: Grant) -> str:
    if grant.accelerator.mode is not AllocationMode.PARTITIONED:
        return grant.accelerator.id
    return grant.accelerator.allocated_physical_id or grant.accelerator.id


def _find_card(snapshot: MonitorSnapshot, manufacturer: str, device_id: str) -> CardFigures | None:
    return next(
        (
            card
            for group in snapshot.groups
            if group.manufacturer == manufacturer
            for card in group.accelerators
            if card.id == device_id
        ),
        None,
    )


def _find_device(section: SliceSection, manufacturer: str, device_id: str) -> SliceDevice | None:
    return next(
        (d for d in section.devices if d.manufacturer == manufacturer and d.device_id == device_id),
        None,
    )


def _find_partition(
    grant: Grant, section: SliceSection | None, pod_uid: str
) -> SlicePartition | None:
    """The partition record for this grant, matched by the identifier its allocation recorded."""
    if section is None or not slices_readable(section):
        return None
    wanted = grant.accelerator.allocated_physical_id
    return next(
        (
            p
            for p in section.partitions
            if p.manufacturer == grant.manufacturer
            and p.device_id == grant.accelerator.id
            and p.pod_uid == pod_uid
            and p.container == grant.container
            and (not wanted or p.id == wanted)
        ),
        None,
    )


def manufacturers(grants: Sequence[Grant]) -> list[str]:
    """The distinct manufacturers an allocation spans, each read from its own Device Manager."""
    return sorted(
        {g.manufacturer for g in grants if g.accelerator.mode is not AllocationMode.VISIBILITY}
    )
