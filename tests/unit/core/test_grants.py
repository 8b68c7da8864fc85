"""One entry per grant: each mode's figures are the Instance's own."""

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from gpustack_core.allocation import AllocatedAccelerator, Grant
from gpustack_core.grants import resolve
from gpustack_core.modes import AllocationMode
from gpustack_core.snapshot import (
    CardFigures,
    MonitorSnapshot,
    SliceDevice,
    SlicePartition,
    SliceSection,
    SliceUsage,
    SnapshotGroup,
)
from gpustack_core.units import UNITS_PER_ACCELERATOR

NOW = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
POD = "pod-uid-1"
H100_MIB = 81_559


def card(device_id: str = "GPU-0", **figures: object) -> CardFigures:
    defaults: dict[str, object] = {
        "memory": H100_MIB,
        "memory_usage": 40_000,
        "memory_utilization": 50,
        "cores_utilization": 60,
        "temperature": 70,
        "power_usage": 400.5,
        "unhealthy": False,
    }
    return CardFigures(id=device_id, **{**defaults, **figures})  # type: ignore[arg-type]


def snapshot(
    *cards: CardFigures, manufacturer: str = "nvidia", slices: SliceSection | None = None
) -> MonitorSnapshot:
    return MonitorSnapshot(
        timestamp=NOW,
        period_seconds=15,
        groups=(SnapshotGroup(manufacturer=manufacturer, timestamp=NOW, accelerators=cards),),
        slices=slices,
    )


def grant(
    mode: AllocationMode,
    device_id: str = "GPU-0",
    *,
    container: str = "main",
    manufacturer: str = "nvidia",
    **fields: object,
) -> Grant:
    accelerator = AllocatedAccelerator(id=device_id, index=3, mode=mode, **fields)  # type: ignore[arg-type]
    return Grant(container, manufacturer, accelerator)


def measured(device_id: str = "GPU-0", **reasons: str) -> SliceDevice:
    return SliceDevice(manufacturer="nvidia", device_id=device_id, **reasons)


def usage(memory: int | None, cores: int | None, *, container: str = "main") -> SliceUsage:
    return SliceUsage(
        manufacturer="nvidia",
        pod_uid=POD,
        container=container,
        device_id="GPU-0",
        memory_used_mib=memory,
        cores_utilization_percent=cores,
    )


def only(
    grants: list[Grant], snap: MonitorSnapshot, caps: dict[tuple[str, str], int] | None = None
):  # type: ignore[no-untyped-def]
    result = resolve(grants, {"nvidia": snap}, pod_uid=POD, cores_caps=caps or {})
    assert len(result.accelerators) == 1, result
    return result.accelerators[0].metrics


def test_exclusive_reads_the_card() -> None:
    entry = only([grant(AllocationMode.EXCLUSIVE)], snapshot(card()))
    assert (entry.id, entry.mode) == ("GPU-0", "Exclusive")
    assert entry.memory_total_mib == H100_MIB
    assert entry.memory_used_mib == 40_000
    assert entry.memory_utilization_percent == 50  # ⌈40000 × 100 / 81559⌉
    assert entry.cores_utilization_percent == 60
    assert (entry.temperature_celsius, entry.power_usage_watts, entry.unhealthy) == (
        70,
        400.5,
        False,
    )


def test_shared_reads_the_card_too() -> None:
    entry = only([grant(AllocationMode.SHARED)], snapshot(card()))
    assert entry.mode == "Shared"
    assert entry.memory_used_mib == 40_000


def test_exclusive_card_without_usage_reports_it_absent() -> None:
    entry = only(
        [grant(AllocationMode.EXCLUSIVE)], snapshot(card(memory_usage=None, cores_utilization=None))
    )
    assert entry.memory_used_mib is None
    assert entry.memory_utilization_percent is None
    assert entry.cores_utilization_percent is None
    assert entry.memory_total_mib == H100_MIB


def test_quarter_slice_measuring_eleven_percent_reads_44() -> None:
    section = SliceSection(schema_version=1, devices=(measured(),), usages=(usage(19_876, 11),))
    entry = only(
        [grant(AllocationMode.SLICED, allocated=400_000)],
        snapshot(card(), slices=section),
        caps={("main", "nvidia"): 25},
    )
    assert entry.mode == "Sliced"
    assert entry.id == "GPU-0"  # a slice has no identity of its own
    assert entry.memory_total_mib == 20_389  # ⌊400000 × 81559 / 1.6e6⌋, the quota
    assert entry.memory_used_mib == 19_876  # the slice's, not the card's 40000
    assert entry.memory_utilization_percent == 98
    assert entry.cores_utilization_percent == 44
    assert entry.temperature_celsius == 70  # the whole card's


def test_slice_over_its_quota_reads_above_its_total() -> None:
    section = SliceSection(schema_version=1, devices=(measured(),), usages=(usage(25_000, 40),))
    entry = only(
        [grant(AllocationMode.SLICED, allocated=400_000)],
        snapshot(card(), slices=section),
        caps={("main", "nvidia"): 25},
    )
    assert entry.memory_total_mib is not None
    assert entry.memory_used_mib is not None
    assert entry.memory_used_mib > entry.memory_total_mib  # not clamped
    assert entry.memory_utilization_percent == 123
    assert entry.cores_utilization_percent == 160


def test_measured_device_without_a_record_reads_zero_per_answered_figure() -> None:
    section = SliceSection(schema_version=1, devices=(measured(cores_reason="unsupported"),))
    entry = only(
        [grant(AllocationMode.SLICED, allocated=400_000)], snapshot(card(), slices=section)
    )
    assert entry.memory_used_mib == 0  # measured: ran nothing there
    assert entry.memory_utilization_percent == 0
    assert entry.cores_utilization_percent is None  # unsupported stays absent


def test_unmeasured_slice_reports_no_usage_rather_than_the_cards() -> None:
    for section in (
        None,  # the Device Manager could not measure shares
        SliceSection(schema_version=1),  # this device was not queried
        SliceSection(schema_version=2, devices=(measured(),), usages=(usage(5, 5),)),  # skew
        SliceSection(
            schema_version=1,
            devices=(measured(memory_reason="no_pod_component", cores_reason="no_pod_component"),),
        ),
    ):
        result = resolve(
            [grant(AllocationMode.SLICED, allocated=400_000)],
            {"nvidia": snapshot(card(), slices=section)},
            pod_uid=POD,
            cores_caps={},
        )
        entry = result.accelerators[0].metrics
        assert entry.memory_total_mib == 20_389, section  # the total is the allocation's
        assert entry.memory_used_mib is None, section
        assert entry.cores_utilization_percent is None, section
        assert result.notes, section


def test_slice_record_of_another_container_or_pod_is_not_ours() -> None:
    other_container = usage(7_000, 30, container="sidecar")
    other_pod = SliceUsage(
        manufacturer="nvidia",
        pod_uid="someone-else",
        container="main",
        device_id="GPU-0",
        memory_used_mib=9_000,
        cores_utilization_percent=50,
    )
    section = SliceSection(
        schema_version=1, devices=(measured(),), usages=(other_container, other_pod)
    )
    entry = only(
        [grant(AllocationMode.SLICED, allocated=400_000)], snapshot(card(), slices=section)
    )
    assert entry.memory_used_mib == 0
    assert entry.cores_utilization_percent == 0


def partition(memory_used: int | None = 0, **fields: object) -> SlicePartition:
    return SlicePartition(
        manufacturer="nvidia",
        pod_uid=POD,
        container="main",
        device_id="GPU-0",
        id="MIG-aaaa",
        memory_total_mib=9856,
        memory_used_mib=memory_used,
        **fields,
    )  # type: ignore[arg-type]


def mig_grant(**fields: object) -> Grant:
    return grant(
        AllocationMode.PARTITIONED,
        allocated_physical_profile="1g.10gb",
        allocated_physical_id="MIG-aaaa",
        allocated=200_000,
        **fields,
    )


def test_partition_names_and_sizes_itself() -> None:
    section = SliceSection(schema_version=1, partitions=(partition(cores_reason="unsupported"),))
    entry = only([mig_grant()], snapshot(card(), slices=section))
    assert entry.id == "MIG-aaaa"  # the partition's own UUID, not the parent card's
    assert entry.mode == "Partitioned"
    assert entry.memory_total_mib == 9856  # not 10240 (the profile name) nor 81559 / 8
    assert entry.memory_used_mib == 0  # idle partition: a measured zero
    assert entry.memory_utilization_percent == 0
    assert entry.cores_utilization_percent is None  # never the card's, never restated
    assert entry.temperature_celsius == 70


def test_unmeasured_partition_is_absent_not_zero() -> None:
    section = SliceSection(
        schema_version=1,
        partitions=(partition(memory_used=None, memory_reason="transient_driver_error"),),
    )
    entry = only([mig_grant()], snapshot(card(), slices=section))
    assert entry.id == "MIG-aaaa"
    assert entry.memory_total_mib == 9856
    assert entry.memory_used_mib is None
    assert entry.memory_utilization_percent is None


def test_partition_compute_reported_where_measured_without_restatement() -> None:
    section = SliceSection(schema_version=1, partitions=(partition(cores_utilization_percent=85),))
    entry = only([mig_grant()], snapshot(card(), slices=section), caps={("main", "nvidia"): 25})
    assert entry.cores_utilization_percent == 85


def test_partition_without_a_record_keeps_its_allocated_identity() -> None:
    result = resolve(
        [mig_grant()], {"nvidia": snapshot(card(), slices=None)}, pod_uid=POD, cores_caps={}
    )
    entry = result.accelerators[0].metrics
    assert entry.id == "MIG-aaaa"
    assert entry.memory_total_mib is None
    assert entry.memory_used_mib is None
    assert entry.unhealthy is False


def test_partition_without_an_allocated_id_is_not_reported_as_the_card() -> None:
    result = resolve(
        [grant(AllocationMode.PARTITIONED, allocated_physical_profile="1g.10gb")],
        {"nvidia": snapshot(card())},
        pod_uid=POD,
        cores_caps={},
    )
    assert result.accelerators == []
    assert "allocatedPhysicalID" in result.notes[0]


def test_two_partitions_of_one_card_are_two_entries() -> None:
    second = SlicePartition(
        manufacturer="nvidia",
        pod_uid=POD,
        container="worker",
        device_id="GPU-0",
        id="MIG-bbbb",
        memory_total_mib=19_968,
        memory_used_mib=1_024,
    )
    section = SliceSection(schema_version=1, partitions=(partition(), second))
    result = resolve(
        [
            mig_grant(),
            grant(AllocationMode.PARTITIONED, container="worker", allocated_physical_id="MIG-bbbb"),
        ],
        {"nvidia": snapshot(card(), slices=section)},
        pod_uid=POD,
        cores_caps={},
    )
    assert [
        (a.metrics.id, a.metrics.memory_total_mib, a.metrics.memory_used_mib)
        for a in result.accelerators
    ] == [("MIG-aaaa", 9856, 0), ("MIG-bbbb", 19_968, 1_024)]


def test_visibility_is_not_a_second_grant() -> None:
    section = SliceSection(schema_version=1, devices=(measured(),), usages=(usage(100, 10),))
    result = resolve(
        [
            grant(AllocationMode.SLICED, allocated=400_000),
            grant(AllocationMode.VISIBILITY, container="sshd"),
        ],
        {"nvidia": snapshot(card(), slices=section)},
        pod_uid=POD,
        cores_caps={("main", "nvidia"): 25},
    )
    assert len(result.accelerators) == 1
    assert result.accelerators[0].metrics.cores_utilization_percent == 40


def test_one_card_granted_to_two_containers_reports_card_wide_state_only() -> None:
    section = SliceSection(
        schema_version=1,
        devices=(measured(),),
        usages=(usage(100, 10), usage(200, 20, container="b")),
    )
    result = resolve(
        [
            grant(AllocationMode.SLICED, allocated=400_000),
            grant(AllocationMode.SLICED, container="b", allocated=400_000),
        ],
        {"nvidia": snapshot(card(unhealthy=True), slices=section)},
        pod_uid=POD,
        cores_caps={},
    )
    [entry] = [a.metrics for a in result.accelerators]
    assert entry.id == "GPU-0"
    assert entry.memory_total_mib is None
    assert entry.memory_used_mib is None
    assert entry.cores_utilization_percent is None
    assert (entry.temperature_celsius, entry.power_usage_watts, entry.unhealthy) == (
        70,
        400.5,
        True,
    )
    assert "granted separately" in result.notes[0]


def test_another_manufacturers_snapshot_is_never_substituted() -> None:
    amd_grant = grant(AllocationMode.EXCLUSIVE, "0000:8a:00.0", manufacturer="amd")
    result = resolve(
        [amd_grant, grant(AllocationMode.EXCLUSIVE)],
        {"nvidia": snapshot(card(), card("0000:8a:00.0"))},
        pod_uid=POD,
        cores_caps={},
    )
    assert [a.metrics.id for a in result.accelerators] == ["GPU-0"]
    assert any("amd" in note for note in result.notes)


def test_cards_outside_the_allocation_are_never_returned() -> None:
    result = resolve(
        [grant(AllocationMode.EXCLUSIVE, "GPU-1")],
        {"nvidia": snapshot(card("GPU-0"), card("GPU-1"), card("GPU-2"))},
        pod_uid=POD,
        cores_caps={},
    )
    assert [(a.metrics.id, a.index, a.manufacturer) for a in result.accelerators] == [
        ("GPU-1", 3, "nvidia")
    ]


def test_allocated_card_missing_from_the_snapshot_is_noted() -> None:
    result = resolve(
        [grant(AllocationMode.EXCLUSIVE, "GPU-9")],
        {"nvidia": snapshot(card())},
        pod_uid=POD,
        cores_caps={},
    )
    assert result.accelerators == []
    assert "GPU-9" in result.notes[0]


# --- properties ---------------------------------------------------------------------------

MODES = st.sampled_from(
    [
        AllocationMode.EXCLUSIVE,
        AllocationMode.SHARED,
        AllocationMode.SLICED,
        AllocationMode.PARTITIONED,
    ]
)


@given(
    card_mib=st.integers(min_value=1, max_value=2**20),
    units=st.integers(min_value=1, max_value=UNITS_PER_ACCELERATOR),
    measured_cores=st.integers(min_value=0, max_value=100),
    used=st.integers(min_value=0, max_value=2**21),
    cap=st.integers(min_value=0, max_value=100),
)
def test_sliced_entry_properties(
    card_mib: int, units: int, measured_cores: int, used: int, cap: int
) -> None:
    section = SliceSection(
        schema_version=1, devices=(measured(),), usages=(usage(used, measured_cores),)
    )
    entry = only(
        [grant(AllocationMode.SLICED, allocated=units)],
        snapshot(card(memory=card_mib), slices=section),
        caps={("main", "nvidia"): cap},
    )
    assert entry.memory_total_mib == max(units * card_mib // UNITS_PER_ACCELERATOR, 1)
    expected = measured_cores if cap in (0, 100) else -(-measured_cores * 100 // cap)
    assert entry.cores_utilization_percent == expected
    if used <= card_mib:
        # the slice's own figure, never clamped to its quota
        assert entry.memory_used_mib == used
        assert entry.memory_utilization_percent == -(-used * 100 // entry.memory_total_mib)
    else:  # more than the whole card holds: no measurement at all
        assert entry.memory_used_mib is None
        assert entry.memory_utilization_percent is None


@given(
    modes=st.lists(MODES, min_size=1, max_size=6),
    temperature=st.integers(min_value=0, max_value=120),
    power=st.floats(min_value=0, max_value=2000, allow_nan=False),
    unhealthy=st.booleans(),
)
def test_card_wide_state_and_scope_hold_in_every_mode(
    modes: list[AllocationMode], temperature: int, power: float, unhealthy: bool
) -> None:
    cards = [
        card(f"GPU-{i}", temperature=temperature + i, power_usage=power, unhealthy=unhealthy)
        for i in range(len(modes) + 2)
    ]
    held = [
        grant(mode, f"GPU-{i}", container=f"c{i}", allocated_physical_id=f"MIG-{i}")
        for i, mode in enumerate(modes)
    ]
    partitions = tuple(
        SlicePartition(
            manufacturer="nvidia",
            pod_uid=POD,
            container=f"c{i}",
            device_id=f"GPU-{i}",
            id=f"MIG-{i}",
            memory_total_mib=9856,
            memory_used_mib=i,
        )
        for i, mode in enumerate(modes)
        if mode is AllocationMode.PARTITIONED
    )
    section = SliceSection(
        schema_version=1,
        partitions=partitions,
        devices=tuple(measured(f"GPU-{i}") for i in range(len(modes))),
    )
    result = resolve(held, {"nvidia": snapshot(*cards, slices=section)}, pod_uid=POD, cores_caps={})
    assert len(result.accelerators) == len(modes)  # one entry per grant
    for i, (mode, resolved) in enumerate(zip(modes, result.accelerators, strict=True)):
        entry = resolved.metrics
        assert entry.mode == mode.api_name
        assert entry.id == (f"MIG-{i}" if mode is AllocationMode.PARTITIONED else f"GPU-{i}")
        # Temperature, power and health are always the whole card's.
        assert entry.temperature_celsius == temperature + i
        assert entry.power_usage_watts == power
        assert entry.unhealthy is unhealthy
    # The two cards nobody was granted never appear.
    assert {a.metrics.id for a in result.accelerators}.isdisjoint(
        {f"GPU-{len(modes)}", f"GPU-{len(modes) + 1}"}
    )
