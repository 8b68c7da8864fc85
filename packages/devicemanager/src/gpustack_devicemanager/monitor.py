"""The monitor: every period, sample the cards, run the slice pass, publish one snapshot.

A tick is one blocking unit of work (vendor library calls, ``/proc`` reads) and runs in a worker
thread; the loop around it lives in the daemon's nursery. A tick that raises keeps the previous
snapshot and is logged — stale data ages out through the consumers' freshness rule instead of
being replaced by an empty one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import trio

from gpustack_core.snapshot import (
    CardFigures,
    ConfirmedGrant,
    MonitorSnapshot,
    SliceSection,
    SnapshotGroup,
)
from gpustack_core.units import percent_of
from gpustack_devicemanager.attribution import AttributionCache, PodRecord, attribute
from gpustack_devicemanager.holder import SnapshotHolder
from gpustack_devicemanager.podview import NodePod, PodEntry, decoded
from gpustack_devicemanager.slices import PodGrants, build_section, targets
from gpustack_vendors.model import CardSample
from gpustack_vendors.protocol import Backend

log = logging.getLogger("gpustack.devicemanager.monitor")
reasons_log = logging.getLogger("instance-accelerator-metrics")

RunSync = Callable[..., Awaitable[Any]]
"""How blocking work leaves the event loop: a worker thread in production, inline in tests."""

PodsSource = Callable[[], Sequence[PodEntry] | None]
"""The node's Pods (decoded by the informer, or raw API objects), or ``None`` when there is no
cluster (standalone) or the index has not synced yet: then the snapshot carries no ``slices``
(could not measure)."""


@dataclass
class TickContext:
    """What a tick needs besides the backend; survives across ticks for log de-duplication."""

    manufacturer: str
    period: float
    proc_root: Path
    warned: set[str] = field(default_factory=set)
    last_reasons: dict[str, tuple[str, str]] = field(default_factory=dict)
    attribution: AttributionCache = field(default_factory=AttributionCache)
    """Placed processes by PID and start time: a steady tick reads one file per PID."""
    pod_views: dict[int, tuple[NodePod, PodRecord, PodGrants | None]] = field(default_factory=dict)
    """Each Pod entry's record and grants, by the entry's identity: the informer keeps one
    (immutable) entry per Pod until the Pod changes, so an unchanged Pod costs a lookup. The
    entry itself is held too, so its ``id`` cannot be reused while it is a key; entries not
    seen in a tick are dropped at its end."""
    confirming: bool = False
    """The Pods' grants were checked against the kubelet's record (confirmation.py): the
    snapshot then lists the grants that stand, for the worker to hold its reads to."""


def card_figures(sample: CardSample) -> CardFigures:
    """A backend's card sample in the snapshot's terms; utilization from used over total."""
    return CardFigures(
        id=sample.id,
        memory=sample.memory_total_mib,
        memory_usage=sample.memory_used_mib,
        memory_utilization=(
            percent_of(sample.memory_used_mib, sample.memory_total_mib)
            if sample.memory_used_mib is not None
            else None
        ),
        cores_utilization=sample.cores_utilization_percent,
        temperature=sample.temperature_celsius,
        power_usage=sample.power_watts,
        unhealthy=sample.unhealthy,
    )


def _node_pods(
    raw: Sequence[PodEntry], context: TickContext
) -> tuple[dict[str, PodRecord], list[PodGrants]]:
    """The node's Pods and their grants; a malformed one costs only itself, logged once.

    Entries from the informer arrive decoded with their annotation already parsed; only raw
    objects (from callers without an informer) are decoded here.
    """
    records: dict[str, PodRecord] = {}
    grants: list[PodGrants] = []
    skipped: list[str] = []
    entries = decoded(raw, skipped)
    for problem in skipped:
        _warn_once(context, f"pod:{problem}", "skipping a Pod the API returned: %s", problem)
    seen = context.pod_views
    views: dict[int, tuple[NodePod, PodRecord, PodGrants | None]] = {}
    for entry in entries:
        pod = entry.pod
        view = seen.get(id(entry))
        if view is None or view[0] is not entry:
            held = PodGrants(pod.metadata.uid, entry.grants) if entry.grants else None
            view = (entry, PodRecord.from_pod(pod), held)
        views[id(entry)] = view
        records[pod.metadata.uid] = view[1]
        if entry.grant_error is not None:
            _warn_once(
                context,
                f"annotation:{pod.metadata.uid}:{entry.grant_error}",
                "ignoring the allocation annotation: %s",
                entry.grant_error,
            )
            continue
        if view[2] is not None:
            grants.append(view[2])
    context.pod_views = views
    return records, grants


def _warn_once(context: TickContext, key: str, message: str, *args: object) -> None:
    if key not in context.warned:
        context.warned.add(key)
        log.warning(message, *args)


def tick(
    backend: Backend, pods: Sequence[PodEntry] | None, context: TickContext, now: datetime
) -> MonitorSnapshot:
    """One monitor pass (blocking): cards, then — when the node's Pods are known — slices."""
    cards = backend.sample()
    group = SnapshotGroup(
        manufacturer=context.manufacturer,
        timestamp=now,
        accelerators=tuple(card_figures(c) for c in cards),
    )
    section: SliceSection | None = None
    confirmed: tuple[ConfirmedGrant, ...] | None = None
    if pods is not None:
        records, grants = _node_pods(pods, context)
        if context.confirming:
            confirmed = _confirmed_grants(grants, context.manufacturer)
        plan = targets(grants, context.manufacturer)
        for note in plan.notes:
            _warn_once(context, f"plan:{note}", "%s", note)
        processes = backend.processes(plan.sliced_devices) if plan.sliced_devices else {}
        pids = {row.pid for entry in processes.values() for row in entry.rows}
        outcomes = attribute(pids, context.proc_root, records, cache=context.attribution)
        partitions = backend.partitions(sorted(plan.partitions)) if plan.partitions else {}
        section = build_section(
            context.manufacturer,
            plan,
            processes,
            outcomes,
            partitions,
            {c.id: c.memory_total_mib for c in cards},
        )
        _log_reasons(section, context)
    return MonitorSnapshot(
        timestamp=now,
        period_seconds=math.ceil(context.period),
        groups=(group,),
        slices=section,
        grants=confirmed,
    )


def _confirmed_grants(grants: Sequence[PodGrants], manufacturer: str) -> tuple[ConfirmedGrant, ...]:
    """The grants on this manager's cards that stood the kubelet check (the tick's own read)."""
    return tuple(
        ConfirmedGrant(pod_uid=held.pod_uid, container=g.container, device_id=g.accelerator.id)
        for held in grants
        for g in held.grants
        if g.manufacturer == manufacturer
    )


def _log_reasons(section: SliceSection, context: TickContext) -> None:
    """Say why a figure is absent, under the spec's logger name, when the reason changes."""
    for device in section.devices:
        reasons = (device.memory_reason, device.cores_reason)
        if context.last_reasons.get(device.device_id) != reasons:
            context.last_reasons[device.device_id] = reasons
            if any(reasons):
                reasons_log.info(
                    "device %s: memory %s, cores %s",
                    device.device_id,
                    device.memory_reason or "measured",
                    device.cores_reason or "measured",
                )


async def run_monitor(
    backend: Backend,
    holder: SnapshotHolder,
    pods: PodsSource,
    context: TickContext,
    *,
    limiter: trio.CapacityLimiter,
    wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    run_sync: RunSync = trio.to_thread.run_sync,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Tick on a fixed period for ever; the first tick runs at once.

    The period is measured from tick start to tick start, so a slow library does not make the
    cadence drift; a tick that overruns its period is followed by the next one immediately.
    """
    await run_sync(backend.detect, limiter=limiter)
    task_status.started()
    next_at = trio.current_time()
    while True:
        started = trio.current_time()
        snapshot_pods = pods()
        try:
            snapshot = await run_sync(
                tick, backend, snapshot_pods, context, wall_clock(), limiter=limiter
            )
        except Exception:
            log.exception("monitor tick failed; keeping the previous snapshot")
        else:
            holder.publish(snapshot, trio.current_time())
            log.debug("tick took %.3f s", trio.current_time() - started)
        next_at = max(next_at + context.period, trio.current_time())
        await trio.sleep_until(next_at)
