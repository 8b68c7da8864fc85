"""The slice pass: per-share usage for every carved device on the node, or a reason why not.

Pure: it takes what the monitor tick already read (the node's Pods, the backend's process rows
and partition figures, the attribution of each PID) and decides what the snapshot's ``slices``
section says. Raw PIDs go in and never come out.

The rules, each a consumer-visible promise:

* Only devices held in ``Sliced`` or ``Partitioned`` mode are queried and reported.
* **One unplaceable row poisons the whole device**: both figures absent, the first reason kept,
  no records — a partial sum must never be published as a complete one.
* Sums are in native bytes and converted to MiB once, rounded up (a non-zero sum is ≥ 1).
* A device whose rows sum above its physical memory is ``invalid_data``.
* Bounds: 4096 records, 256 devices; a device that does not fit is dropped whole (``bounded``)
  and the section says ``truncated``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from msgspec import structs

from gpustack_core.allocation import Grant
from gpustack_core.modes import AllocationMode
from gpustack_core.reasons import AttributionReason, QueryReason, SectionReason
from gpustack_core.snapshot import (
    MAX_SLICE_DEVICES,
    MAX_SLICE_RECORDS,
    SLICE_SCHEMA_VERSION,
    SliceDevice,
    SlicePartition,
    SliceSection,
    SliceUsage,
)
from gpustack_core.units import bytes_to_mib
from gpustack_devicemanager.attribution import Attributed, NonInstance, Outcome, Unattributed
from gpustack_vendors.model import DeviceProcesses, PartitionSample

AMBIGUOUS = frozenset({AttributionReason.AMBIGUOUS_POD, AttributionReason.AMBIGUOUS_CONTAINER})


@dataclass(frozen=True)
class PodGrants:
    """One Pod's UID and its grants, as the node-pod index read them from the annotation."""

    pod_uid: str
    grants: tuple[Grant, ...]


@dataclass(frozen=True)
class Targets:
    """What this tick must read: carved devices and the partitions, by id."""

    sliced_devices: tuple[str, ...]
    partitions: Mapping[str, tuple[str, str, str]]
    """partition id → (pod UID, container, parent device id); ids claimed twice are dropped."""
    notes: tuple[str, ...] = ()


def targets(pods: Iterable[PodGrants], manufacturer: str) -> Targets:
    """Devices held in ``Sliced`` mode, and partitions held in ``Partitioned`` mode, by us."""
    sliced: set[str] = set()
    claims: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    notes: list[str] = []
    for pod in pods:
        for grant in pod.grants:
            if grant.manufacturer != manufacturer:
                continue
            accelerator = grant.accelerator
            if accelerator.mode is AllocationMode.SLICED:
                sliced.add(accelerator.id)
            elif accelerator.mode is AllocationMode.PARTITIONED:
                if not accelerator.allocated_physical_id:
                    notes.append(
                        f"pod {pod.pod_uid} container {grant.container}: partition on "
                        f"{accelerator.id} has no allocatedPhysicalID"
                    )
                    continue
                claims[accelerator.allocated_physical_id].append(
                    (pod.pod_uid, grant.container, accelerator.id)
                )
    partitions: dict[str, tuple[str, str, str]] = {}
    for partition_id, holders in claims.items():
        if len(holders) > 1:
            notes.append(
                f"partition {partition_id} is claimed by {len(holders)} containers; not reported"
            )
            continue
        partitions[partition_id] = holders[0]
    return Targets(tuple(sorted(sliced)), partitions, tuple(notes))


@dataclass
class _DeviceResult:
    diagnostics: SliceDevice
    usages: list[SliceUsage] = field(default_factory=list)


def _device(
    manufacturer: str,
    device_id: str,
    processes: DeviceProcesses,
    outcomes: Mapping[int, Outcome],
    card_memory_mib: int | None,
) -> _DeviceResult:
    """Attribute one device's rows and sum them per container, or poison the device."""
    counts = {
        "returned": len(processes.rows),
        "attributed": 0,
        "non_instance": 0,
        "unreadable": 0,
        "ambiguous": 0,
    }
    memory_reason: str = processes.memory_reason or ""
    cores_reason: str = processes.cores_reason or ""
    poison = ""
    memory_sum: dict[tuple[str, str], int] = defaultdict(int)
    cores_sum: dict[tuple[str, str], int] = defaultdict(int)
    memory_missing = False
    total_bytes = 0
    for row in processes.rows:
        outcome = outcomes.get(row.pid, Unattributed(AttributionReason.EXITED))
        if isinstance(outcome, Unattributed):
            counts["ambiguous" if outcome.reason in AMBIGUOUS else "unreadable"] += 1
            poison = poison or outcome.reason
            continue
        if row.memory_bytes is not None:
            total_bytes += row.memory_bytes
        if isinstance(outcome, NonInstance):
            counts["non_instance"] += 1
            continue
        assert isinstance(outcome, Attributed)
        counts["attributed"] += 1
        key = (outcome.pod_uid, outcome.container)
        if row.memory_bytes is None:
            memory_missing = True
        else:
            memory_sum[key] += row.memory_bytes
        cores_sum[key] += row.cores_percent or 0
    if poison:
        memory_reason = memory_reason or poison
        cores_reason = cores_reason or poison
    if not memory_reason and memory_missing:
        memory_reason = QueryReason.UNSUPPORTED  # the driver could not size a row (N/A)
    if (
        not memory_reason
        and card_memory_mib is not None
        and bytes_to_mib(total_bytes) > (card_memory_mib)
    ):
        memory_reason = SectionReason.INVALID_DATA
    diagnostics = SliceDevice(
        manufacturer=manufacturer,
        device_id=device_id,
        memory_reason=str(memory_reason),
        cores_reason=str(cores_reason),
        rows_returned=counts["returned"],
        rows_attributed=counts["attributed"],
        rows_non_instance=counts["non_instance"],
        rows_unreadable=counts["unreadable"],
        rows_ambiguous=counts["ambiguous"],
        reads_truncated=1 if QueryReason.TRUNCATED in (memory_reason, cores_reason) else 0,
    )
    result = _DeviceResult(diagnostics)
    if poison or (memory_reason and cores_reason):
        return result
    for key in sorted(set(memory_sum) | set(cores_sum)):
        pod_uid, container = key
        result.usages.append(
            SliceUsage(
                manufacturer=manufacturer,
                pod_uid=pod_uid,
                container=container,
                device_id=device_id,
                memory_used_mib=None if memory_reason else bytes_to_mib(memory_sum.get(key, 0)),
                cores_utilization_percent=None if cores_reason else min(cores_sum.get(key, 0), 100),
            )
        )
    return result


def build_section(
    manufacturer: str,
    plan: Targets,
    processes: Mapping[str, DeviceProcesses],
    outcomes: Mapping[int, Outcome],
    partitions: Mapping[str, PartitionSample],
    card_memory_mib: Mapping[str, int],
) -> SliceSection:
    """Assemble the section from what the tick read, applying the bounds last."""
    devices: list[_DeviceResult] = [
        _device(
            manufacturer,
            device_id,
            processes.get(
                device_id, DeviceProcesses.unread(device_id, QueryReason.TRANSIENT_DRIVER_ERROR)
            ),
            outcomes,
            card_memory_mib.get(device_id),
        )
        for device_id in plan.sliced_devices
    ]
    records: list[SlicePartition] = []
    for partition_id in sorted(plan.partitions):
        pod_uid, container, parent = plan.partitions[partition_id]
        sample = partitions.get(partition_id) or PartitionSample.unread(
            partition_id, QueryReason.TRANSIENT_DRIVER_ERROR, QueryReason.TRANSIENT_DRIVER_ERROR
        )
        records.append(
            SlicePartition(
                manufacturer=manufacturer,
                pod_uid=pod_uid,
                container=container,
                device_id=parent,
                id=partition_id,
                memory_total_mib=sample.memory_total_mib,
                memory_used_mib=sample.memory_used_mib,
                cores_utilization_percent=sample.cores_utilization_percent,
                memory_reason=str(sample.memory_reason or ""),
                cores_reason=str(sample.cores_reason or ""),
            )
        )
    return _bounded(
        devices, records[:MAX_SLICE_RECORDS], truncated=len(records) > MAX_SLICE_RECORDS
    )


def _bounded(
    devices: Sequence[_DeviceResult], partitions: list[SlicePartition], *, truncated: bool
) -> SliceSection:
    budget = MAX_SLICE_RECORDS - len(partitions)
    kept_devices: list[SliceDevice] = []
    usages: list[SliceUsage] = []
    for result in devices:
        if len(kept_devices) >= MAX_SLICE_DEVICES:
            truncated = True
            break
        if len(result.usages) > budget:
            truncated = True
            kept_devices.append(_drop(result.diagnostics))
            continue
        budget -= len(result.usages)
        usages.extend(result.usages)
        kept_devices.append(result.diagnostics)
    return SliceSection(
        schema_version=SLICE_SCHEMA_VERSION,
        truncated=truncated,
        usages=tuple(usages),
        devices=tuple(kept_devices),
        partitions=tuple(partitions),
    )


def _drop(diagnostics: SliceDevice) -> SliceDevice:
    """A device whose records did not fit: both figures absent, said so."""
    return structs.replace(
        diagnostics,
        memory_reason=SectionReason.BOUNDED.value,
        cores_reason=SectionReason.BOUNDED.value,
    )
