"""The Hygon backend over every Hygon recording, then the cases the spec names.

The suite half runs unchanged against each ``recordings/hygon/*.yaml``; its expected values are
recomputed here from the recording's raw answers (ROCm SMI bytes, millidegrees, microwatts and
raw ``cu_occupancy``; ``libhydmi_mig`` structs, handles and the instance registry), never from
the backend's own helpers, so a backend that mis-converts, mis-attributes or drops a figure fails.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from recorded import ret_at

from gpustack_core.reasons import QueryReason
from gpustack_simulator.recorder import RecordingProxy, exercise
from gpustack_simulator.recording import (
    Call,
    Fault,
    Raises,
    Recording,
    call_key,
    load_recording,
)
from gpustack_simulator.replay import hygon_standin
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.replay.hygon_standin import HyDmiCodec, hydmi_module, rocm_smi_module
from gpustack_simulator.replay.rocm_smi_standin import RocmSmiCodec
from gpustack_simulator.synth.hygon_nodes import NODES
from gpustack_simulator.synth.timeline import VirtualClock
from gpustack_simulator.synth.write import synthesize
from gpustack_vendors import errors
from gpustack_vendors.bindings import rocm_smi
from gpustack_vendors.bindings.rocm_smi import ROCMSMIError
from gpustack_vendors.hygon import hydmi
from gpustack_vendors.hygon.backend import HygonBackend
from gpustack_vendors.hygon.hydmi import HyDmiError

RECORDINGS = Path(__file__).resolve().parents[3] / "recordings" / "hygon"
HYGON = sorted(RECORDINGS.glob("*.yaml"))
MIB = 1 << 20
INVALID = 0xFFFFFFFF
TIMES = (0.0, 15.0, 30.0, 45.0)


# -- reading the recording independently -------------------------------------------------------


def calls(recording: Recording, library: str, fn: str) -> list[Call]:
    return [c for c in recording.library(library).calls if c.fn == fn]


def answer(recording: Recording, library: str, fn: str, args: list[Any], t: float = 0.0) -> Any:
    for call in calls(recording, library, fn):
        if list(call.args) == args:
            return ret_at(call, t)
    raise AssertionError(f"{fn}{args} not recorded")


def rsmi(recording: Recording, fn: str, *args: Any, t: float = 0.0) -> Any:
    return answer(recording, "rocm_smi", fn, list(args), t)


def dmi(recording: Recording, fn: str, *args: Any, t: float = 0.0) -> Any:
    return answer(recording, "hydmi_mig", fn, list(args), t)


def spelled(packed: int) -> str:
    """ROCm SMI's BDFID (domain 63-32, bus 15-8, device 7-3, function 2-0) as text."""
    return (
        f"{packed >> 32:04x}:{(packed >> 8) & 0xFF:02x}:{(packed >> 3) & 0x1F:02x}.{packed & 0x7}"
    )


def cards(recording: Recording) -> list[tuple[int, str, str]]:
    """(ROCm SMI index, ``GPU-<unique id>``, bus id) of every card."""
    return [
        (
            i,
            f"GPU-{rsmi(recording, 'rsmi_dev_unique_id_get', i):x}",
            spelled(rsmi(recording, "rsmi_dev_pci_id_get", i)),
        )
        for i in range(rsmi(recording, "rsmi_num_monitor_devices"))
    ]


def mig_enabled(recording: Recording) -> bool:
    library = recording.library("hydmi_mig")
    return library.load.ok and dmi(recording, "nvmlGetSystemMigMode")[0] == 1


def expected_partitions(recording: Recording, bus_id: str) -> set[tuple[str, int, str, int, int]]:
    """(id, slot, profile, MiB, CUs) of every MIG device the recording shows on a card."""
    card = {"_handle": bus_id}
    index = dmi(recording, "nvmlDeviceGetIndex", card)
    registry = dmi(recording, "dmi_mig_registry")
    profiles = {}
    for p in range(4):
        info = dmi(recording, "nvmlDeviceGetGpuInstanceProfileInfo", card, p)
        if info is not None:
            profiles[info["id"]] = info
    found = set()
    for call in calls(recording, "hydmi_mig", "nvmlDeviceGetMigDeviceHandleByIndex"):
        if call.args[0] != card or call.ret is msgspec.UNSET:
            continue
        mig = call.ret
        gi = dmi(recording, "nvmlDeviceGetGpuInstanceId", mig)
        ci = dmi(recording, "nvmlDeviceGetComputeInstanceId", mig)
        info = dmi(
            recording,
            "nvmlGpuInstanceGetInfo",
            dmi(recording, "nvmlDeviceGetGpuInstanceById", card, gi),
        )
        assert info["device"] == card
        profile = profiles[info["profile_id"]]
        uuid = registry[f"dev{index}gi{gi}ci{ci}.conf"]
        total = dmi(recording, "nvmlDeviceGetMemoryInfo", mig)["total"]
        found.add(
            (
                f"MIG-{uuid}",
                info["placement"]["start"],
                profile["name"].removeprefix("MIG "),
                math.ceil(total / MIB),
                profile["cu_count"],
            )
        )
    return found


def mig_ref(recording: Recording, partition_id: str) -> str:
    """The recording's ref of a partition's own handle, found through the registry."""
    registry = dmi(recording, "dmi_mig_registry")
    name = next(n for n, uuid in registry.items() if f"MIG-{uuid}" == partition_id)
    dev, gi, ci = map(int, re.findall(r"\d+", name))
    for call in calls(recording, "hydmi_mig", "nvmlDeviceGetMigDeviceHandleByIndex"):
        if call.ret is msgspec.UNSET:
            continue
        mig = call.ret
        if (
            dmi(recording, "nvmlDeviceGetIndex", call.args[0]) == dev
            and dmi(recording, "nvmlDeviceGetGpuInstanceId", mig) == gi
            and dmi(recording, "nvmlDeviceGetComputeInstanceId", mig) == ci
        ):
            return str(mig["_handle"])
    raise AssertionError(partition_id)


def expected_rows(recording: Recording, index: int, t: float) -> list[tuple[int, int, int]]:
    """(pid, VRAM bytes, raw cu_occupancy) of every listed process using device ``index``."""
    rows = []
    for listed in rsmi(recording, "rsmi_compute_process_info_get", t=t):
        pid = listed["process_id"]
        if index in rsmi(recording, "rsmi_compute_process_gpus_get", pid, t=t):
            info = rsmi(recording, "rsmi_compute_process_info_by_device_get", pid, index, t=t)
            rows.append((pid, info["vram_usage"], info["cu_occupancy"]))
    return rows


@pytest.fixture(params=HYGON, ids=lambda p: p.name)
def hygon(request: pytest.FixtureRequest) -> Iterator[tuple[Recording, Any, VirtualClock]]:
    recording = load_recording(request.param)
    clock = VirtualClock()
    backend = replay_backend(recording, clock=clock)
    yield recording, backend, clock
    backend.close()


# -- the suite, over every Hygon recording ---------------------------------------------------


def test_recordings_exist() -> None:
    assert {p.name for p in HYGON} >= {"bw-c3000.yaml", "bw-c3000-mig.yaml", "k100-ai.yaml"}
    for path in HYGON:
        recording = load_recording(path)
        assert recording.vendor == "hygon"
        assert recording.provenance.kind == "synthesized"
        assert recording.provenance.sources
        assert [lib.id for lib in recording.libraries] == ["rocm_smi", "hydmi_mig"]


@pytest.mark.parametrize("spec", NODES, ids=lambda s: s.file)
def test_committed_recordings_are_what_the_recorder_writes(spec: Any) -> None:
    """Synthesized through the recorder over our bindings, never edited by hand."""
    assert (RECORDINGS / spec.file).read_text() == synthesize("hygon", spec)


def test_detect_reports_every_card_by_its_unique_id(hygon: Any) -> None:
    recording, backend, _ = hygon
    detection = backend.detect()
    assert detection.manufacturer == "hygon"
    expected = cards(recording)
    assert [(d.index, d.id, d.pci_bus_id) for d in detection.devices] == expected
    for device, (index, _, bus_id) in zip(detection.devices, expected, strict=True):
        assert device.name == rsmi(recording, "rsmi_dev_name_get", index)
        total = rsmi(recording, "rsmi_dev_memory_total_get", index, 0)
        assert device.memory_mib == math.ceil(total / MIB)  # bytes, rounded up once
        assert device.unhealthy is False
        assert device.driver_version == (rsmi(recording, "rsmi_version_str_get", 0) or "")
        if mig_enabled(recording):
            partitions = {
                (p.id, p.slot, p.profile, p.memory_mib, p.cores) for p in device.partitions
            }
            assert partitions == expected_partitions(recording, bus_id)
            assert all(p.parent_id == device.id for p in device.partitions)
            # The card's CUs are what its profiles span (20 × 4 = 40 × 2 = 80 × 1 on BW).
            assert device.cores == 80
        else:
            assert device.partitions == ()
            assert device.cores is None  # ROCm SMI states no CU count; nothing is invented


@pytest.mark.parametrize("t", TIMES)
def test_card_samples_follow_the_timeline(hygon: Any, t: float) -> None:
    recording, backend, clock = hygon
    backend.detect()
    clock.now = t
    samples = backend.sample()
    assert [s.id for s in samples] == [card_id for _, card_id, _ in cards(recording)]
    for sample, (index, _, _) in zip(samples, cards(recording), strict=True):
        total = rsmi(recording, "rsmi_dev_memory_total_get", index, 0, t=t)
        used = rsmi(recording, "rsmi_dev_memory_usage_get", index, 0, t=t)
        assert (sample.memory_total_mib, sample.memory_used_mib) == (
            math.ceil(total / MIB),
            math.ceil(used / MIB),
        )
        assert sample.cores_utilization_percent == rsmi(
            recording, "rsmi_dev_busy_percent_get", index, t=t
        )
        millidegrees = rsmi(recording, "rsmi_dev_temp_metric_get", index, 0, 0, t=t)
        assert sample.temperature_celsius == round(millidegrees / 1000)
        microwatts = rsmi(recording, "rsmi_dev_power_ave_get", index, 0, t=t)
        assert sample.power_watts == microwatts / 1_000_000
        assert sample.unhealthy is False


@pytest.mark.parametrize("t", TIMES)
def test_process_rows_match_rocm_smi(hygon: Any, t: float) -> None:
    recording, backend, clock = hygon
    detection = backend.detect()
    clock.now = t
    ids = [d.id for d in detection.devices]
    result = backend.processes(ids)
    assert list(result) == ids
    for device, entry in zip(detection.devices, result.values(), strict=True):
        raw = expected_rows(recording, device.index, t)
        assert [(r.pid, r.memory_bytes) for r in entry.rows] == [(p, v) for p, v, _ in raw]
        assert entry.memory_reason is None
        if any(cu == INVALID for _, _, cu in raw):
            assert [r.cores_percent for r in entry.rows] == [None] * len(raw)
            assert entry.cores_reason is QueryReason.UNSUPPORTED
        else:
            assert [r.cores_percent for r in entry.rows] == [cu for _, _, cu in raw]
            assert entry.cores_reason is None


@pytest.mark.parametrize("t", TIMES)
def test_partitions_are_read_on_their_own_handles(hygon: Any, t: float) -> None:
    recording, backend, clock = hygon
    detection = backend.detect()
    clock.now = t
    ids = [p.id for d in detection.devices for p in d.partitions]
    result = backend.partitions([*ids, "MIG-not-a-partition"])
    assert set(result) == {*ids, "MIG-not-a-partition"}
    for device in detection.devices:
        for partition in device.partitions:
            sample = result[partition.id]
            ref = {"_handle": mig_ref(recording, partition.id)}
            memory = dmi(recording, "nvmlDeviceGetMemoryInfo", ref, t=t)
            rates = dmi(recording, "nvmlDeviceGetUtilizationRates", ref, t=t)
            assert sample.parent_id == device.id
            assert (sample.memory_total_mib, sample.memory_used_mib) == (
                math.ceil(memory["total"] / MIB),
                math.ceil(memory["used"] / MIB),
            )
            assert sample.cores_utilization_percent == rates["gpu"]
            assert (sample.memory_reason, sample.cores_reason) == (None, None)
    unknown = result["MIG-not-a-partition"]
    assert (unknown.memory_total_mib, unknown.cores_utilization_percent) == (None, None)
    # Hygon serves partition compute, so an unknown partition is a transient gap, not a
    # capability the library lacks.
    assert unknown.memory_reason is unknown.cores_reason is QueryReason.TRANSIENT_DRIVER_ERROR


def test_unknown_device_gets_an_entry_with_a_reason(hygon: Any) -> None:
    _, backend, _ = hygon
    known = backend.detect().devices[0].id
    result = backend.processes(["GPU-ffffffffffffffff", known])
    assert list(result) == ["GPU-ffffffffffffffff", known]
    assert result["GPU-ffffffffffffffff"].rows == ()
    assert result["GPU-ffffffffffffffff"].memory_reason is QueryReason.TRANSIENT_DRIVER_ERROR
    assert result[known].memory_reason is None


def _round_trip(original: Recording) -> tuple[RecordingProxy, RecordingProxy | None]:
    clock = VirtualClock()
    rocm = RecordingProxy(
        rocm_smi_module(hygon_standin.build_rocm_smi(original, clock=clock)),
        RocmSmiCodec(),
        clock=clock,
    )
    proxy = None
    if not hygon_standin.dmi_missing(original):
        proxy = RecordingProxy(
            hydmi_module(hygon_standin.build_hydmi(original, clock=clock)),
            HyDmiCodec(),
            clock=clock,
        )
    assert original.loop_seconds is not None
    exercise(
        HygonBackend(rocm, proxy, dmi_missing=hygon_standin.dmi_missing(original)),
        samples=round(original.loop_seconds / 15),
        interval=15.0,
        sleep=clock.sleep,
    )
    return rocm, proxy


@pytest.mark.parametrize("path", HYGON, ids=lambda p: p.name)
def test_record_of_replay_round_trips(path: Path) -> None:
    """record(replay(R)) == R for both libraries, handles, series and the GI info's handle."""
    original = load_recording(path)
    rocm, proxy = _round_trip(original)
    pairs = [(rocm, "rocm_smi")] + ([(proxy, "hydmi_mig")] if proxy is not None else [])
    for recorder, library in pairs:
        before = original.library(library)
        again = recorder.library(library, before.binding)
        assert {call_key(c): c for c in again.calls} == {call_key(c): c for c in before.calls}
        assert again.handles == before.handles


# -- named cases --------------------------------------------------------------------------------


def test_quarter_slice_process_holds_4236_mib_then_uses_11_percent_of_the_card() -> None:
    clock = VirtualClock()
    backend = replay_backend(load_recording(RECORDINGS / "bw-c3000.yaml"), clock=clock)
    [card] = backend.detect().devices
    assert (card.id, card.name, card.memory_mib) == ("GPU-72a1c4e9b3d05f81", "BW C-3000", 65520)
    idle = backend.processes([card.id])[card.id]
    # Measured and idle while it merely holds its allocation: a zero with no reason.
    assert [(r.pid, r.memory_bytes, r.cores_percent) for r in idle.rows] == [
        (9101, 4236 * MIB, 0),
        (9102, 8192 * MIB, 0),
    ]
    assert idle.cores_reason is None
    clock.now = 30.0
    busy = backend.processes([card.id])[card.id]
    assert [(r.pid, r.memory_bytes, r.cores_percent) for r in busy.rows] == [
        (9101, 4236 * MIB, 11),
        (9102, 8192 * MIB, 0),
    ]
    figures = []
    for t in (0.0, 30.0):
        clock.now = t
        [sample] = backend.sample()
        figures.append(sample.power_watts)
    assert figures == [93.0, 223.0]  # board power follows the work


def test_busy_partition_reads_85_on_its_own_handle_while_its_siblings_read_0() -> None:
    recording = load_recording(RECORDINGS / "bw-c3000-mig.yaml")
    clock = VirtualClock()
    dmi_binding = hygon_standin.build_hydmi(recording, clock=clock)
    watched = RecordingProxy(hydmi_module(dmi_binding), HyDmiCodec(), clock=clock)
    backend = HygonBackend(hygon_standin.build_rocm_smi(recording, clock=clock), watched)
    card0, card1 = backend.detect().devices
    siblings = [p.id for p in card0.partitions]
    assert [p.profile for p in card0.partitions] == ["2g.15gb"] * 4
    assert [p.slot for p in card0.partitions] == [0, 1, 2, 3]
    assert [(p.profile, p.memory_mib, p.cores) for p in card1.partitions] == [
        ("4g.31gb", 32760, 40)
    ]
    clock.now = 30.0
    result = backend.partitions(siblings)
    readings = [(result[p].memory_used_mib, result[p].cores_utilization_percent) for p in siblings]
    assert readings == [(9216, 85), (2048, 0), (0, 0), (0, 0)]  # idle is a measured 0
    # Every compute reading went to a partition's own handle, never to the card's.
    asked = [
        o.args[0]["_handle"]
        for o in watched.observations
        if o.fn == "nvmlDeviceGetUtilizationRates"
    ]
    assert asked
    assert all("/mig" in ref for ref in asked)
    # The card's own busy figure (ROCm SMI) is a different quantity and is not what was read.
    [card_busy, _] = [s.cores_utilization_percent for s in backend.sample()]
    assert card_busy == 25


def test_mig_index_space_is_node_global() -> None:
    """Card 1's only instance sits at global index 4; indices 0-3 belong to card 0."""
    recording = load_recording(RECORDINGS / "bw-c3000-mig.yaml")
    card1 = {"_handle": "0000:3d:00.0"}
    answered = {
        call.args[1]: call.raises.code if call.raises else "handle"
        for call in calls(recording, "hydmi_mig", "nvmlDeviceGetMigDeviceHandleByIndex")
        if call.args[0] == card1
    }
    assert answered == {0: 6, 1: 6, 2: 6, 3: 6, 4: "handle", 5: 6, 6: 6, 7: 6}  # 6: NOT_FOUND
    backend = replay_backend(recording, clock=VirtualClock())
    assert [p.slot for p in backend.detect().devices[1].partitions] == [0]


def test_unmeasured_cu_occupancy_takes_compute_off_the_card_and_leaves_memory() -> None:
    backend = replay_backend(load_recording(RECORDINGS / "k100-ai.yaml"), clock=VirtualClock())
    detection = backend.detect()
    card0, card1 = (d.id for d in detection.devices)
    result = backend.processes([card0, card1])
    entry = result[card0]
    assert [(r.pid, r.memory_bytes) for r in entry.rows] == [(9301, 6144 * MIB), (9302, 1024 * MIB)]
    assert [r.cores_percent for r in entry.rows] == [None, None]  # never 0: 0 reads as idle
    assert entry.cores_reason is QueryReason.UNSUPPORTED
    assert entry.memory_reason is None
    assert result[card1].rows == ()
    assert (result[card1].memory_reason, result[card1].cores_reason) == (None, None)


def test_a_node_without_the_mig_library_is_served_without_partitions() -> None:
    backend = replay_backend(load_recording(RECORDINGS / "k100-ai.yaml"), clock=VirtualClock())
    detection = backend.detect()
    assert all(d.partitions == () for d in detection.devices)
    assert any("libhydmi_mig not loaded" in note for note in detection.notes)
    [sample] = backend.partitions(["MIG-anything"]).values()
    assert sample.memory_reason is QueryReason.TRANSIENT_DRIVER_ERROR


def test_mig_off_asks_the_mig_library_for_the_mode_only() -> None:
    recording = load_recording(RECORDINGS / "bw-c3000.yaml")
    assert [c.fn for c in recording.library("hydmi_mig").calls] == ["nvmlGetSystemMigMode"]
    assert dmi(recording, "nvmlGetSystemMigMode") == [0, 0]


def _with_faults(path: Path, *faults: Fault) -> Recording:
    return msgspec.structs.replace(load_recording(path), faults=faults)


def test_a_refused_partition_reading_is_absent_with_its_reason_and_the_other_figure_reads() -> None:
    recording = _with_faults(
        RECORDINGS / "bw-c3000-mig.yaml",
        Fault(
            fn="nvmlDeviceGetUtilizationRates",
            args=({"_handle": "0000:1b:00.0/mig0"},),
            start=0.0,
            end=60.0,
            raises=Raises(type="HyDmiError", code=hydmi.DMI_ERROR_TIMEOUT),
        ),
        Fault(
            fn="nvmlDeviceGetMemoryInfo",
            args=({"_handle": "0000:1b:00.0/mig1"},),
            start=40.0,
            end=60.0,
            raises=Raises(type="HyDmiError", code=hydmi.DMI_ERROR_NO_PERMISSION),
        ),
    )
    clock = VirtualClock()
    backend = replay_backend(recording, clock=clock)
    busy, idle, *_ = (p.id for p in backend.detect().devices[0].partitions)
    clock.now = 45.0
    result = backend.partitions([busy, idle])
    assert result[busy].cores_utilization_percent is None
    assert result[busy].cores_reason is QueryReason.TRANSIENT_DRIVER_ERROR
    assert (result[busy].memory_used_mib, result[busy].memory_reason) == (9216, None)
    assert (result[idle].memory_used_mib, result[idle].memory_reason) == (
        None,
        QueryReason.PERMISSION,
    )
    assert (result[idle].cores_utilization_percent, result[idle].cores_reason) == (0, None)


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (rocm_smi.RSMI_STATUS_PERMISSION, QueryReason.PERMISSION),
        (rocm_smi.RSMI_STATUS_BUSY, QueryReason.TRANSIENT_DRIVER_ERROR),
        (rocm_smi.RSMI_STATUS_NOT_SUPPORTED, QueryReason.UNSUPPORTED),
    ],
)
def test_a_failed_process_list_gives_every_device_its_reason(
    code: int, reason: QueryReason
) -> None:
    recording = _with_faults(
        RECORDINGS / "k100-ai.yaml",
        Fault(
            fn="rsmi_compute_process_info_get",
            start=0.0,
            end=10.0,
            raises=Raises(type="ROCMSMIError", code=code),
        ),
    )
    clock = VirtualClock()
    backend = replay_backend(recording, clock=clock)
    ids = [d.id for d in backend.detect().devices]
    assert {(e.rows, e.memory_reason, e.cores_reason) for e in backend.processes(ids).values()} == {
        ((), reason, reason)
    }
    clock.now = 10.0
    assert [r.pid for r in backend.processes(ids)[ids[0]].rows] == [9301, 9302]


def test_a_call_missing_from_the_recording_raises_the_bindings_own_error() -> None:
    recording = load_recording(RECORDINGS / "bw-c3000-mig.yaml")
    binding = hygon_standin.build_hydmi(recording, clock=VirtualClock())
    card = binding.nvmlDeviceGetHandleByPciBusId("0000:1b:00.0")
    with pytest.raises(HyDmiError) as never_recorded:
        binding.nvmlDeviceGetUtilizationRates(card)  # the backend never asks a card
    assert never_recorded.value.value == hydmi.DMI_ERROR_FUNCTION_NOT_FOUND
    rocm = hygon_standin.build_rocm_smi(recording, clock=VirtualClock())
    rocm.rsmi_init(0)
    with pytest.raises(ROCMSMIError) as other_sensor:
        rocm.rsmi_dev_temp_metric_get(0, 1, 0)  # the junction sensor was never read
    assert other_sensor.value.value == rocm_smi.RSMI_STATUS_FAIL_LOAD_SYMBOL


def test_replayed_handles_are_the_same_pointer_for_the_same_device() -> None:
    recording = load_recording(RECORDINGS / "bw-c3000-mig.yaml")
    binding = hygon_standin.build_hydmi(recording, clock=VirtualClock())
    card = binding.nvmlDeviceGetHandleByPciBusId("0000:1b:00.0")
    again = binding.nvmlDeviceGetHandleByPciBusId("0000:1b:00.0")
    assert card.value == again.value
    gi = binding.nvmlDeviceGetGpuInstanceById(card, 3)
    info = binding.nvmlGpuInstanceGetInfo(gi)
    assert info.device == card.value  # the struct's embedded pointer is the live card handle
    assert (info.id, info.profile_id, info.placement.start, info.placement.size) == (3, 3, 0, 1)


def test_error_tables_read_the_mig_library_as_nvml() -> None:
    """``libhydmi_mig`` returns NVML's enum verbatim, so NVML's table maps its codes."""
    assert errors.NVML[hydmi.DMI_ERROR_NOT_SUPPORTED] is QueryReason.UNSUPPORTED
    assert errors.NVML[hydmi.DMI_ERROR_FUNCTION_NOT_FOUND] is QueryReason.UNSUPPORTED
    assert errors.NVML[hydmi.DMI_ERROR_NO_PERMISSION] is QueryReason.PERMISSION
    assert errors.NVML[hydmi.DMI_ERROR_TIMEOUT] is QueryReason.TRANSIENT_DRIVER_ERROR
    assert errors.NVML[hydmi.DMI_ERROR_INSUFFICIENT_SIZE] is QueryReason.TRUNCATED


def test_an_instance_missing_from_the_registry_is_left_out_with_a_note() -> None:
    """Without its conf file a partition has no UUID, so no id an allocation could name."""
    recording = load_recording(RECORDINGS / "bw-c3000-mig.yaml")
    library = recording.library("hydmi_mig")
    edited = tuple(
        msgspec.structs.replace(
            call, ret={k: v for k, v in call.ret.items() if k != "dev0gi6ci0.conf"}
        )
        if call.fn == "dmi_mig_registry"
        else call
        for call in library.calls
    )
    recording = msgspec.structs.replace(
        recording,
        libraries=tuple(
            msgspec.structs.replace(lib, calls=edited) if lib.id == "hydmi_mig" else lib
            for lib in recording.libraries
        ),
    )
    detection = replay_backend(recording, clock=VirtualClock()).detect()
    assert [p.slot for p in detection.devices[0].partitions] == [0, 1, 2]
    assert any("GI 6 CI 0 has no dev0gi6ci0.conf" in note for note in detection.notes)
