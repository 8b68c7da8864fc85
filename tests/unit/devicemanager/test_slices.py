"""The slice pass: poison, sums, invalid data, partitions, bounds — and no PID in the output."""

from __future__ import annotations

import json

import msgspec

from gpustack_core.allocation import AllocatedAccelerator, Grant
from gpustack_core.modes import AllocationMode
from gpustack_core.reasons import AttributionReason, QueryReason
from gpustack_core.snapshot import MAX_SLICE_DEVICES, MAX_SLICE_RECORDS
from gpustack_devicemanager.attribution import Attributed, NonInstance, Unattributed
from gpustack_devicemanager.slices import PodGrants, build_section, targets
from gpustack_vendors.model import DeviceProcesses, PartitionSample, ProcessRow

MIB = 1 << 20
CARD = "GPU-0"


def sliced(pod: str, container: str = "main", device: str = CARD) -> PodGrants:
    accelerator = AllocatedAccelerator(id=device, mode=AllocationMode.SLICED, allocated=400_000)
    return PodGrants(pod, (Grant(container, "nvidia", accelerator),))


def partitioned(pod: str, partition: str, container: str = "main") -> PodGrants:
    accelerator = AllocatedAccelerator(
        id=CARD, mode=AllocationMode.PARTITIONED, allocated_physical_id=partition
    )
    return PodGrants(pod, (Grant(container, "nvidia", accelerator),))


def rows(*entries: tuple[int, int | None, int | None]) -> DeviceProcesses:
    return DeviceProcesses(CARD, rows=tuple(ProcessRow(p, m, c) for p, m, c in entries))


def section(
    pods: list[PodGrants],
    processes: DeviceProcesses,
    outcomes: dict[int, object],
    card_mib: int = 81_559,
    partitions: dict[str, PartitionSample] | None = None,
):  # type: ignore[no-untyped-def]
    plan = targets(pods, "nvidia")
    return build_section(
        "nvidia",
        plan,
        {CARD: processes},
        outcomes,  # type: ignore[arg-type]
        partitions or {},
        {CARD: card_mib},
    )


def test_only_carved_devices_are_targets() -> None:
    exclusive = PodGrants(
        "p0",
        (Grant("main", "nvidia", AllocatedAccelerator(id="GPU-9", mode=AllocationMode.EXCLUSIVE)),),
    )
    amd = PodGrants(
        "p1",
        (
            Grant(
                "main", "amd", AllocatedAccelerator(id="0000:03:00.0", mode=AllocationMode.SLICED)
            ),
        ),
    )
    plan = targets([exclusive, amd, sliced("p2")], "nvidia")
    assert plan.sliced_devices == (CARD,)
    assert plan.partitions == {}


def test_usage_summed_per_container_in_bytes_then_rounded_up_once() -> None:
    result = section(
        [sliced("pa"), sliced("pb", container="worker")],
        rows((1, MIB // 2, 10), (2, MIB // 2, 15), (3, 1, 0), (4, 5 * MIB, 70)),
        {
            1: Attributed("pa", "main"),
            2: Attributed("pa", "main"),
            3: Attributed("pb", "worker"),
            4: NonInstance("px"),
        },
    )
    usages = {(u.pod_uid, u.container): u for u in section_usages(result)}
    assert usages[("pa", "main")].memory_used_mib == 1  # 0.5 + 0.5 MiB summed first
    assert usages[("pa", "main")].cores_utilization_percent == 25
    assert usages[("pb", "worker")].memory_used_mib == 1  # a single byte still reads 1
    assert ("px", "main") not in usages  # a non-Instance pod's process is excluded
    [device] = result.devices
    assert (device.rows_returned, device.rows_attributed, device.rows_non_instance) == (4, 3, 1)
    assert device.memory_reason == device.cores_reason == ""


def section_usages(result):  # type: ignore[no-untyped-def]
    return list(result.usages)


def test_cores_sum_is_capped_at_the_whole_card() -> None:
    result = section(
        [sliced("pa")],
        rows((1, MIB, 80), (2, MIB, 70)),
        {1: Attributed("pa", "main"), 2: Attributed("pa", "main")},
    )
    assert result.usages[0].cores_utilization_percent == 100


def test_one_unplaceable_row_poisons_the_whole_device() -> None:
    result = section(
        [sliced("pa")],
        rows((1, MIB, 10), (2, MIB, 10), (3, MIB, 10)),
        {
            1: Attributed("pa", "main"),
            2: Unattributed(AttributionReason.EXITED),
            3: Unattributed(AttributionReason.MEDIATED),
        },
    )
    assert result.usages == ()
    [device] = result.devices
    assert device.memory_reason == device.cores_reason == "exited"  # the first reason is kept
    assert device.rows_unreadable == 2


def test_ambiguous_rows_are_counted_as_such() -> None:
    result = section(
        [sliced("pa")], rows((1, MIB, 10)), {1: Unattributed(AttributionReason.AMBIGUOUS_POD)}
    )
    assert result.devices[0].rows_ambiguous == 1
    assert result.devices[0].memory_reason == "ambiguous_pod"


def test_query_reasons_carry_through_per_figure() -> None:
    processes = DeviceProcesses(
        CARD, rows=(ProcessRow(1, 3 * MIB, None),), cores_reason=QueryReason.UNSUPPORTED
    )
    result = section([sliced("pa")], processes, {1: Attributed("pa", "main")})
    [usage] = result.usages
    assert usage.memory_used_mib == 3
    assert usage.cores_utilization_percent is None
    assert result.devices[0].cores_reason == "unsupported"


def test_a_row_the_driver_cannot_size_makes_memory_absent() -> None:
    result = section(
        [sliced("pa")],
        rows((1, None, 10), (2, MIB, 5)),
        {1: Attributed("pa", "main"), 2: Attributed("pa", "main")},
    )
    assert result.devices[0].memory_reason == "unsupported"
    assert result.usages[0].memory_used_mib is None
    assert result.usages[0].cores_utilization_percent == 15


def test_sum_above_the_card_is_invalid_data() -> None:
    result = section([sliced("pa")], rows((1, 90_000 * MIB, 10)), {1: Attributed("pa", "main")})
    assert result.devices[0].memory_reason == "invalid_data"
    assert result.usages[0].memory_used_mib is None


def test_partitions_are_reported_by_their_own_id_and_double_claims_dropped() -> None:
    plan = targets(
        [
            partitioned("pa", "MIG-1"),
            partitioned("pb", "MIG-2"),
            partitioned("pc", "MIG-2", container="other"),
        ],
        "nvidia",
    )
    assert set(plan.partitions) == {"MIG-1"}
    assert any("MIG-2" in note for note in plan.notes)
    result = build_section(
        "nvidia",
        plan,
        {},
        {},
        {"MIG-1": PartitionSample("MIG-1", CARD, 9856, 0, cores_reason=QueryReason.UNSUPPORTED)},
        {},
    )
    [record] = result.partitions
    assert (record.id, record.device_id, record.memory_total_mib, record.memory_used_mib) == (
        "MIG-1",
        CARD,
        9856,
        0,
    )
    assert record.cores_reason == "unsupported"


def test_bounds_drop_devices_whole_and_say_truncated() -> None:
    pods = [sliced(f"p{d}-{c}", device=f"GPU-{d:03}") for d in range(300) for c in range(20)]
    plan = targets(pods, "nvidia")
    processes = {
        f"GPU-{d:03}": DeviceProcesses(
            f"GPU-{d:03}", rows=tuple(ProcessRow(d * 100 + c, MIB, 1) for c in range(20))
        )
        for d in range(300)
    }
    outcomes = {d * 100 + c: Attributed(f"p{d}-{c}", "main") for d in range(300) for c in range(20)}
    result = build_section("nvidia", plan, processes, outcomes, {}, {})  # type: ignore[arg-type]
    assert result.truncated
    assert len(result.devices) == MAX_SLICE_DEVICES
    assert len(result.usages) + len(result.partitions) <= MAX_SLICE_RECORDS
    bounded = [d for d in result.devices if d.memory_reason == "bounded"]
    assert bounded
    assert all(u.device_id not in {d.device_id for d in bounded} for u in result.usages)


def test_no_pid_leaves_the_pass() -> None:
    pids = [48213, 51877, 60001]
    result = section(
        [sliced("pa")],
        rows(*[(p, MIB, 5) for p in pids]),
        {p: Attributed("pa", "main") for p in pids},
    )
    text = json.dumps(msgspec.to_builtins(result))
    assert not any(str(pid) in text for pid in pids)
