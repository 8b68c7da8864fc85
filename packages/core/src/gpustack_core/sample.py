"""Sample composition: the one function both the subresource and the exporter call.

Inputs are already fetched (the Pod, a usage measurement, fresh snapshots); this module decides
what the sample says. Keeping that decision here is what lets the two surfaces agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import NamedTuple

from gpustack_core.allocation import Grant, read_allocation
from gpustack_core.decoding import ContractError
from gpustack_core.grants import CoresCaps, ResolvedAccelerator, manufacturers, resolve
from gpustack_core.instance_metrics import Sample
from gpustack_core.modes import AllocationMode, sliced_cores_resource
from gpustack_core.pods import (
    Pod,
    Quantity,
    container_request,
    declared_totals,
    has_started,
    sum_declared,
)
from gpustack_core.snapshot import DEFAULT_FRESHNESS_POLICY, Freshness, MonitorSnapshot
from gpustack_core.units import ceil_fraction
from gpustack_core.usage import DeclaredTotals, PodUsage


class PodAccelerators(NamedTuple):
    """A Pod's accelerator entries (``None``: nothing could answer) and the reasons why not."""

    entries: list[ResolvedAccelerator] | None
    notes: list[str]


def pod_grants(pod: Pod) -> list[Grant]:
    """The Pod's grants from its allocation annotation; ``[]`` when it holds no accelerator.

    Raises :class:`ContractError` naming the Pod and the field when the annotation is malformed,
    so the caller can cost that Pod alone and keep the pass.
    """
    meta = pod.metadata
    return list(read_allocation(meta.annotations, pod=f"{meta.namespace}/{meta.name}").grants)


def cores_caps(pod: Pod, held: list[Grant]) -> CoresCaps:
    """Each sliced container's compute cap, from its ``<base>.sliced.cores-percentage`` request."""
    caps: dict[tuple[str, str], int] = {}
    for grant in held:
        if grant.accelerator.mode is not AllocationMode.SLICED:
            continue
        resource = sliced_cores_resource(grant.manufacturer)
        if resource is None:
            continue
        value = container_request(pod, grant.container, resource)
        if value is not None:
            caps[(grant.container, grant.manufacturer)] = ceil_fraction(value)
    return caps


def pod_accelerators(
    pod: Pod,
    snapshots: Mapping[str, MonitorSnapshot],
    *,
    now: datetime,
    freshness: Freshness = DEFAULT_FRESHNESS_POLICY,
    held: Sequence[Grant] | None = None,
) -> PodAccelerators:
    """Resolve a Pod's grants against the snapshots that are fresh at ``now``.

    ``held`` are the Pod's grants when the caller parsed its annotation already (the Device
    Manager does, once per Pod change); ``None`` parses it here.

    ``entries`` is ``None`` (the ``accelerators`` key is omitted) when the Pod holds
    accelerators but none of its manufacturers had a fresh snapshot: the sample still answers
    CPU, memory and storage, and the notes say why the accelerators are missing.
    """
    held = pod_grants(pod) if held is None else list(held)
    if not manufacturers(held):  # none held, or only Visibility (a sibling's card)
        return PodAccelerators([], [])
    notes: list[str] = []
    fresh: dict[str, MonitorSnapshot] = {}
    for manufacturer in manufacturers(held):
        snapshot = snapshots.get(manufacturer)
        if snapshot is None:
            continue  # resolve() notes the missing Device Manager
        problem = freshness.problem(snapshot, now)
        if problem is None:
            fresh[manufacturer] = snapshot
        else:
            notes.append(f"{manufacturer}: snapshot {problem}; dropped as a failing monitor")
    held = _confirmed(held, fresh, pod.metadata.uid, notes)
    resolution = resolve(held, fresh, pod_uid=pod.metadata.uid, cores_caps=cores_caps(pod, held))
    notes.extend(resolution.notes)
    if not fresh:
        return PodAccelerators(None, notes)
    return PodAccelerators(resolution.accelerators, notes)


def _confirmed(
    held: list[Grant], fresh: Mapping[str, MonitorSnapshot], pod_uid: str, notes: list[str]
) -> list[Grant]:
    """The grants whose manager confirmed them, where it says which it confirmed.

    A snapshot with ``grants`` lists what the kubelet's record backs; a grant of that
    manufacturer missing from it is a claim written by someone other than the plugin, and is
    dropped (noted) rather than shown with that card's figures.
    """
    kept = []
    for grant in held:
        snapshot = fresh.get(grant.manufacturer)
        confirmed = snapshot.grants if snapshot is not None else None
        if confirmed is None or grant.accelerator.mode is AllocationMode.VISIBILITY:
            kept.append(grant)
            continue
        key = (pod_uid, grant.container, grant.accelerator.id)
        if any((c.pod_uid, c.container, c.device_id) == key for c in confirmed):
            kept.append(grant)
        else:
            notes.append(
                f"{grant.manufacturer} {grant.accelerator.id} for container {grant.container!r}: "
                "not confirmed by its Device Manager (no kubelet assignment); not reported"
            )
    return kept


def compose_sample(
    *,
    totals: DeclaredTotals,
    started: bool,
    usage: PodUsage | None,
    accelerators: list[ResolvedAccelerator] | None,
    now: datetime,
) -> Sample:
    """Compose one sample from a declaration and whatever was measured.

    * Nothing has ever started: the answer is the totals with every used figure a present
      ``0`` and no accelerators — nothing ran, so nothing was used, and that is an answer.
    * Started: used figures are exactly what ``usage`` measured; a figure it did not measure (or
      no usage at all, when the caller degrades rather than failing) is absent, never ``0``.
    """
    if not started:
        return Sample(
            timestamp=now,
            cpu_total_milli_cores=totals.cpu_millicores,
            cpu_used_milli_cores=0,
            memory_total_mib=totals.memory_mib,
            memory_used_mib=0,
            storage_total_mib=totals.storage_mib,
            storage_used_mib=0,
        )
    return Sample(
        timestamp=usage.timestamp if usage is not None else now,
        cpu_total_milli_cores=totals.cpu_millicores,
        cpu_used_milli_cores=usage.cpu_millicores if usage is not None else None,
        memory_total_mib=totals.memory_mib,
        memory_used_mib=usage.memory_mib if usage is not None else None,
        storage_total_mib=totals.storage_mib,
        storage_used_mib=usage.storage_mib if usage is not None else None,
        accelerators=(None if accelerators is None else [entry.metrics for entry in accelerators]),
    )


class InstanceResult(NamedTuple):
    """A composed sample, its entries with their exporter labels, and every reason noted."""

    sample: Sample
    accelerators: list[ResolvedAccelerator]
    notes: list[str]


def instance_sample(
    *,
    pod: Pod | None,
    fallback: DeclaredTotals,
    usage: PodUsage | None,
    snapshots: Mapping[str, MonitorSnapshot],
    now: datetime,
    freshness: Freshness = DEFAULT_FRESHNESS_POLICY,
    held: Sequence[Grant] | None = None,
) -> InstanceResult:
    """Compose an Instance's sample from its (already scoped) backing Pod and measurements.

    ``pod`` must already be this Instance's own (name, namespace and part-of UID matched);
    ``None`` means no Pod, and the Instance's own declaration supplies the totals. A malformed
    allocation annotation costs only the accelerators: the rest of the sample still answers.
    ``held`` is passed on to :func:`pod_accelerators` (grants already parsed, or ``None``).
    """
    started = pod_started(pod)
    notes: list[str] = []
    accelerators: list[ResolvedAccelerator] | None = None
    if started and pod is not None:
        try:
            resolved = pod_accelerators(pod, snapshots, now=now, freshness=freshness, held=held)
        except ContractError as exc:
            notes.append(str(exc))
        else:
            accelerators = resolved.entries
            notes.extend(resolved.notes)
    sample = compose_sample(
        totals=pod_totals(pod, fallback),
        started=started,
        usage=usage,
        accelerators=accelerators,
        now=now,
    )
    return InstanceResult(sample, accelerators or [], notes)


def pod_started(pod: Pod | None) -> bool:
    """The "has ever started" gate; no Pod (unscheduled, stopped) has not started."""
    return pod is not None and has_started(pod)


def pod_totals(pod: Pod | None, fallback: DeclaredTotals) -> DeclaredTotals:
    """Totals from the Pod's limits, or the Instance's own declaration when no Pod exists."""
    return declared_totals(pod) if pod is not None else fallback


def totals_from_resources(resources: Mapping[str, Quantity], *, what: str) -> DeclaredTotals:
    """Totals from an Instance's own ``spec.resources``: the answer when it has no Pod."""
    return sum_declared([(f"{what}: spec.resources", resources)])
