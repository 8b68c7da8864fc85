"""The AMD backend over every AMD recording, then the cases the spec names.

The suite half runs unchanged against each ``recordings/amd/*.yaml``; its expected values are
recomputed here from the recording's raw answers (amdsmi dicts with ``"N/A"``, ROCm SMI rows in
bytes with raw ``cu_occupancy``), never from the backend's own helpers, so a backend that
mis-converts, mis-joins or drops a figure fails.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib.util
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
    parse_recording,
)
from gpustack_simulator.replay import amdsmi_api, amdsmi_standin, rocm_smi_standin
from gpustack_simulator.replay.amdsmi_standin import AmdsmiCodec
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.replay.rocm_smi_standin import RocmSmiCodec, as_module
from gpustack_simulator.synth.amd_nodes import rx7800xt_card
from gpustack_simulator.synth.amdsmi import AmdNode, AmdProc
from gpustack_simulator.synth.timeline import NodeSpec, VirtualClock, const
from gpustack_simulator.synth.write import synthesize
from gpustack_vendors import errors
from gpustack_vendors.amd.backend import AmdBackend
from gpustack_vendors.bindings import rocm_smi
from gpustack_vendors.bindings.rocm_smi import ROCMSMIError

RECORDINGS = Path(__file__).resolve().parents[3] / "recordings" / "amd"
AMD = sorted(RECORDINGS.glob("*.yaml"))
INVALID = 0xFFFFFFFF
HOTSPOT, CURRENT = 1, 0  # AmdSmiTemperatureType.HOTSPOT, AmdSmiTemperatureMetric.CURRENT
MIB = 1 << 20


# -- reading the recording independently -------------------------------------------------------


def calls(recording: Recording, library: str, fn: str) -> list[Call]:
    return [c for c in recording.library(library).calls if c.fn == fn]


def answer(recording: Recording, library: str, fn: str, args: list[Any], t: float = 0.0) -> Any:
    for call in calls(recording, library, fn):
        if list(call.args) == args:
            return ret_at(call, t)
    raise AssertionError(f"{fn}{args} not recorded")


def refs(recording: Recording) -> list[str]:
    return [h["_handle"] for h in answer(recording, "amdsmi", "amdsmi_get_processor_handles", [])]


def bus_of(recording: Recording, ref: str) -> str:
    domain, bus, rest = answer(
        recording, "amdsmi", "amdsmi_get_gpu_device_bdf", [{"_handle": ref}]
    ).split(":")
    device, function = rest.split(".")
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function)}"


def rsmi_index(recording: Recording, bus_id: str) -> int:
    """Decode ROCm SMI's BDFIDs here (domain 63-32, bus 15-8, device 7-3, function 2-0)."""
    count = answer(recording, "rocm_smi", "rsmi_num_monitor_devices", [])
    for index in range(count):
        packed = answer(recording, "rocm_smi", "rsmi_dev_pci_id_get", [index])
        spelled = (
            f"{packed >> 32:04x}:{(packed >> 8) & 0xFF:02x}:"
            f"{(packed >> 3) & 0x1F:02x}.{packed & 0x7}"
        )
        if spelled == bus_id:
            return index
    raise AssertionError(bus_id)


def figure(value: Any) -> Any:
    return None if value == "N/A" else value


def expected_rows(recording: Recording, index: int, t: float) -> list[tuple[int, int, int]]:
    """(pid, VRAM bytes, raw cu_occupancy) of every listed process using device ``index``."""
    rows = []
    for listed in answer(recording, "rocm_smi", "rsmi_compute_process_info_get", [], t):
        pid = listed["process_id"]
        if index in answer(recording, "rocm_smi", "rsmi_compute_process_gpus_get", [pid], t):
            info = answer(
                recording, "rocm_smi", "rsmi_compute_process_info_by_device_get", [pid, index], t
            )
            rows.append((pid, info["vram_usage"], info["cu_occupancy"]))
    return rows


@pytest.fixture(params=AMD, ids=lambda p: p.name)
def amd(request: pytest.FixtureRequest) -> Iterator[tuple[Recording, Any, VirtualClock]]:
    recording = load_recording(request.param)
    clock = VirtualClock()
    backend = replay_backend(recording, clock=clock)
    yield recording, backend, clock
    backend.close()


# -- the suite, over every AMD recording -----------------------------------------------------


def test_recordings_exist() -> None:
    assert {p.name for p in AMD} >= {"mi300x-8x.yaml", "rx7800xt.yaml"}


def test_detect_reports_every_card_with_its_bus_id_and_figures(amd: Any) -> None:
    recording, backend, _ = amd
    detection = backend.detect()
    assert detection.manufacturer == "amd"
    assert [d.index for d in detection.devices] == list(range(len(refs(recording))))
    rocm = answer(recording, "amdsmi", "amdsmi_get_rocm_version", [])
    for device, ref in zip(detection.devices, refs(recording), strict=True):
        handle = [{"_handle": ref}]
        asic = answer(recording, "amdsmi", "amdsmi_get_gpu_asic_info", handle)
        vram = answer(recording, "amdsmi", "amdsmi_get_gpu_vram_usage", handle)
        assert device.id == device.pci_bus_id == bus_of(recording, ref)
        assert device.memory_mib == vram["vram_total"]  # MiB already: no conversion
        assert device.name == asic["market_name"]
        assert device.cores == figure(asic["num_compute_units"])
        assert device.runtime_version == rocm[1]
        assert device.partitions == ()
        assert device.unhealthy is False
    driver = answer(
        recording, "amdsmi", "amdsmi_get_gpu_driver_info", [{"_handle": refs(recording)[0]}]
    )["driver_version"]
    assert {d.driver_version for d in detection.devices} == {driver}


@pytest.mark.parametrize("t", [0.0, 15.0, 30.0, 45.0])
def test_card_samples_follow_the_timeline(amd: Any, t: float) -> None:
    recording, backend, clock = amd
    backend.detect()
    clock.now = t
    samples = backend.sample()
    assert len(samples) == len(refs(recording))
    for card, ref in zip(samples, refs(recording), strict=True):
        handle = [{"_handle": ref}]
        assert card.id == bus_of(recording, ref)
        vram = answer(recording, "amdsmi", "amdsmi_get_gpu_vram_usage", handle, t)
        assert (card.memory_total_mib, card.memory_used_mib) == (
            vram["vram_total"],
            figure(vram["vram_used"]),
        )
        activity = answer(recording, "amdsmi", "amdsmi_get_gpu_activity", handle, t)
        assert card.cores_utilization_percent == figure(activity["gfx_activity"])
        assert card.temperature_celsius == answer(
            recording, "amdsmi", "amdsmi_get_temp_metric", [*handle, HOTSPOT, CURRENT], t
        )
        power = answer(recording, "amdsmi", "amdsmi_get_power_info", handle, t)
        watts = next(
            power[k]
            for k in ("socket_power", "current_socket_power", "average_socket_power")
            if power[k] != "N/A"
        )
        assert card.power_watts == float(watts)
        assert card.unhealthy is False


@pytest.mark.parametrize("t", [0.0, 45.0])
def test_process_rows_match_rocm_smi_by_bus_id(amd: Any, t: float) -> None:
    recording, backend, clock = amd
    detection = backend.detect()
    clock.now = t
    ids = [d.id for d in detection.devices]
    result = backend.processes(ids)
    assert list(result) == ids  # one entry per requested device, always
    for device_id, entry in result.items():
        raw = expected_rows(recording, rsmi_index(recording, device_id), t)
        assert [(r.pid, r.memory_bytes) for r in entry.rows] == [(p, v) for p, v, _ in raw]
        assert entry.memory_reason is None
        if any(cu == INVALID for _, _, cu in raw):
            assert [r.cores_percent for r in entry.rows] == [None] * len(raw)
            assert entry.cores_reason is QueryReason.UNSUPPORTED
        else:
            assert [r.cores_percent for r in entry.rows] == [cu for _, _, cu in raw]
            assert entry.cores_reason is None


def test_unknown_device_gets_an_entry_with_a_reason(amd: Any) -> None:
    _, backend, _ = amd
    known = backend.detect().devices[0].id
    result = backend.processes(["0000:ff:1f.7", known])
    assert list(result) == ["0000:ff:1f.7", known]
    assert result["0000:ff:1f.7"].memory_reason is QueryReason.TRANSIENT_DRIVER_ERROR
    assert result["0000:ff:1f.7"].cores_reason is QueryReason.TRANSIENT_DRIVER_ERROR
    assert result["0000:ff:1f.7"].rows == ()
    assert result[known].memory_reason is None


def test_partitions_answer_every_id_as_unsupported(amd: Any) -> None:
    _, backend, _ = amd
    card = backend.detect().devices[0].id
    result = backend.partitions([card, "anything"])
    assert list(result) == [card, "anything"]
    for sample in result.values():
        assert sample.memory_total_mib is None
        assert sample.memory_reason is QueryReason.UNSUPPORTED
        assert sample.cores_reason is QueryReason.UNSUPPORTED


@pytest.mark.parametrize("path", AMD, ids=lambda p: p.name)
def test_record_of_replay_round_trips(path: Path) -> None:
    """record(replay(R)) == R for both libraries, handles and series included."""
    original = load_recording(path)
    clock = VirtualClock()
    amdsmi_proxy = RecordingProxy(
        amdsmi_standin.build_module(original, clock=clock), AmdsmiCodec(), clock=clock
    )
    binding = rocm_smi_standin.build_binding(original, clock=clock)
    rocm_proxy = RecordingProxy(as_module(binding), RocmSmiCodec(), clock=clock)
    assert original.loop_seconds is not None
    exercise(
        AmdBackend(amdsmi_proxy, rocm_proxy, clock=clock),
        samples=round(original.loop_seconds / 15),
        interval=15.0,
        sleep=clock.sleep,
    )
    for proxy, library in ((amdsmi_proxy, "amdsmi"), (rocm_proxy, "rocm_smi")):
        before = original.library(library)
        again = proxy.library(library, before.binding)
        assert {call_key(c): c for c in again.calls} == {call_key(c): c for c in before.calls}
        assert again.handles == before.handles


# -- named cases --------------------------------------------------------------------------------


def test_rdna3_memory_per_process_is_present_and_compute_absent_with_its_reason() -> None:
    clock = VirtualClock()
    backend = replay_backend(load_recording(RECORDINGS / "rx7800xt.yaml"), clock=clock)
    [card] = backend.detect().devices
    assert (card.id, card.cores, card.memory_mib) == ("0000:04:00.0", 60, 16368)
    entry = backend.processes([card.id])[card.id]
    assert [(r.pid, r.memory_bytes) for r in entry.rows] == [(7001, 10 << 30), (7002, 512 << 20)]
    assert [r.cores_percent for r in entry.rows] == [None, None]  # never 0: 0 reads as idle
    assert entry.cores_reason is QueryReason.UNSUPPORTED
    assert entry.memory_reason is None
    [sample] = backend.sample()
    assert (sample.memory_used_mib, sample.cores_utilization_percent) == (11077, 100)


def test_one_unmeasured_row_takes_compute_off_the_whole_card() -> None:
    """A partial sum would under-report the card: no row keeps its compute figure."""
    card = dataclasses.replace(
        rx7800xt_card(),
        procs=(
            AmdProc(11, const(1 << 30), const(30)),
            AmdProc(12, const(2 << 30), const(INVALID)),
        ),
    )
    spec = NodeSpec[AmdNode](
        "mixed.yaml",
        "one measured row, one not",
        ("test",),
        AmdNode("6.16.13", "7.2.0", (card,)),
        samples=1,
    )
    recording = parse_recording(synthesize("amd", spec), source="mixed")
    backend = replay_backend(recording, clock=VirtualClock())
    [device] = backend.detect().devices
    entry = backend.processes([device.id])[device.id]
    assert [(r.pid, r.memory_bytes, r.cores_percent) for r in entry.rows] == [
        (11, 1 << 30, None),
        (12, 2 << 30, None),
    ]
    assert entry.cores_reason is QueryReason.UNSUPPORTED
    assert entry.memory_reason is None


def test_mi300x_process_holds_memory_idle_then_runs_a_kernel() -> None:
    clock = VirtualClock()
    backend = replay_backend(load_recording(RECORDINGS / "mi300x-8x.yaml"), clock=clock)
    devices = backend.detect().devices
    assert len(devices) == 8
    assert {(d.name, d.cores, d.memory_mib) for d in devices} == {
        ("AMD Instinct MI300X OAM", 304, 196592)
    }
    gpu2 = devices[2].id
    idle = backend.processes([gpu2])[gpu2]
    # Measured and idle: a zero with no reason, not an absence.
    assert [(r.pid, r.memory_bytes, r.cores_percent) for r in idle.rows] == [
        (4242, 61_440 << 20, 0)
    ]
    assert idle.cores_reason is None
    clock.now = 30.0
    busy = backend.processes([gpu2])[gpu2]
    assert [(r.pid, r.memory_bytes, r.cores_percent) for r in busy.rows] == [
        (4242, 61_440 << 20, 87)
    ]
    figures = []
    for t in (0.0, 30.0):
        clock.now = t
        card = next(c for c in backend.sample() if c.id == gpu2)
        figures.append((card.power_watts, card.cores_utilization_percent))
    assert figures == [(138.0, 0), (612.0, 98)]


def test_one_process_on_two_cards_is_attributed_per_card() -> None:
    backend = replay_backend(load_recording(RECORDINGS / "mi300x-8x.yaml"), clock=VirtualClock())
    devices = backend.detect().devices
    gpu3, gpu4, gpu0 = devices[3].id, devices[4].id, devices[0].id
    result = backend.processes([gpu3, gpu4, gpu0])
    assert [(r.pid, r.memory_bytes, r.cores_percent) for r in result[gpu3].rows] == [
        (5150, 40_960 << 20, 41),
        (5151, 8_192 << 20, 0),
    ]
    assert [(r.pid, r.memory_bytes, r.cores_percent) for r in result[gpu4].rows] == [
        (5150, 40_960 << 20, 39)
    ]
    assert result[gpu0].rows == ()
    assert result[gpu0].memory_reason is None  # no processes: measured, not unknown


def _direct(path: Path, clock: VirtualClock) -> tuple[AmdBackend, rocm_smi.RocmSmi]:
    recording = load_recording(path)
    binding = rocm_smi_standin.build_binding(recording, clock=clock)
    module = amdsmi_standin.build_module(recording, clock=clock)
    return AmdBackend(module, binding, clock=clock), binding


def list_calls(binding: rocm_smi.RocmSmi) -> int:
    """C calls of the process-list symbol (probe and fill each count)."""
    return sum(1 for name in binding.lib.calls if name == "rsmi_compute_process_info_get")


def test_process_list_is_reused_within_one_second() -> None:
    clock = VirtualClock()
    backend, binding = _direct(RECORDINGS / "mi300x-8x.yaml", clock)
    gpu2 = backend.detect().devices[2].id
    clock.now = 29.5
    first = backend.processes([gpu2])[gpu2]
    made = list_calls(binding)
    assert made > 0
    clock.now = 30.4  # the recording has the kernel running now, but the list is 0.9 s old
    again = backend.processes([gpu2])[gpu2]
    assert list_calls(binding) == made  # no second process-list call
    assert again == first
    assert [r.cores_percent for r in again.rows] == [0]  # reused, so still the idle reading
    clock.now = 30.5  # a full second after the last call: a new list
    fresh = backend.processes([gpu2])[gpu2]
    assert list_calls(binding) > made
    assert [r.cores_percent for r in fresh.rows] == [87]


def test_a_call_missing_from_the_recording_raises_the_bindings_own_error() -> None:
    recording = load_recording(RECORDINGS / "rx7800xt.yaml")
    module = amdsmi_standin.build_module(recording, clock=VirtualClock())
    module.amdsmi_init(module.AmdSmiInitFlags.INIT_AMD_GPUS)
    [handle] = module.amdsmi_get_processor_handles()
    with pytest.raises(module.AmdSmiLibraryException) as never_recorded:
        module.amdsmi_get_gpu_device_uuid(handle)
    assert never_recorded.value.err_code == amdsmi_api.AMDSMI_STATUS_FAIL_LOAD_SYMBOL
    with pytest.raises(module.AmdSmiLibraryException) as other_sensor:
        module.amdsmi_get_temp_metric(
            handle, module.AmdSmiTemperatureType.EDGE, module.AmdSmiTemperatureMetric.CURRENT
        )
    assert other_sensor.value.err_code == 5
    binding = rocm_smi_standin.build_binding(recording, clock=VirtualClock())
    binding.rsmi_init(0)
    with pytest.raises(ROCMSMIError) as rocm:
        binding.rsmi_compute_process_info_by_device_get(7001, 3)  # device 3 never asked
    assert rocm.value.value == rocm_smi.RSMI_STATUS_FAIL_LOAD_SYMBOL


def test_stand_in_returns_dicts_with_na_and_checks_types_like_amdsmi() -> None:
    module = amdsmi_standin.build_module(
        load_recording(RECORDINGS / "rx7800xt.yaml"), clock=VirtualClock()
    )
    module.amdsmi_init()  # amdsmi's default flag: the same recorded call as INIT_AMD_GPUS
    [handle] = module.amdsmi_get_processor_handles()
    assert isinstance(handle, ctypes.c_void_p)
    assert module.amdsmi_get_processor_handles()[0] is handle
    asic = module.amdsmi_get_gpu_asic_info(handle)
    assert isinstance(asic, dict)
    assert asic["oam_id"] == "N/A"
    assert asic["target_graphics_version"] == "gfx1101"
    assert module.amdsmi_get_power_info(handle)["current_socket_power"] == "N/A"
    assert module.amdsmi_get_rocm_version() == (True, "7.2.0")
    with pytest.raises(module.AmdSmiParameterException) as not_a_handle:
        module.amdsmi_get_gpu_vram_usage(0)
    assert not_a_handle.value.err_code is None
    with pytest.raises(module.AmdSmiParameterException):
        module.amdsmi_get_temp_metric(handle, 1, 0)  # bare ints: amdsmi wants its enums


def _with_faults(path: Path, *faults: Fault) -> Recording:
    recording = load_recording(path)
    return msgspec.structs.replace(recording, faults=faults)


def test_stand_in_exceptions_carry_err_code_and_map_by_code() -> None:
    recording = _with_faults(
        RECORDINGS / "rx7800xt.yaml",
        Fault(
            fn="amdsmi_get_gpu_activity",
            start=10.0,
            end=20.0,
            raises=Raises(type="AmdSmiRetryException", code=9),
        ),
        Fault(
            fn="amdsmi_get_temp_metric",
            start=10.0,
            end=20.0,
            raises=Raises(type="AmdSmiLibraryException", code=2),
        ),
    )
    clock = VirtualClock()
    module = amdsmi_standin.build_module(recording, clock=clock)
    module.amdsmi_init()
    [handle] = module.amdsmi_get_processor_handles()
    clock.now = 12.0
    with pytest.raises(module.AmdSmiRetryException) as retry:
        module.amdsmi_get_gpu_activity(handle)
    assert isinstance(retry.value, module.AmdSmiLibraryException)
    assert retry.value.err_code == 9
    assert "AMDSMI_STATUS_RETRY" in str(retry.value)
    clock.now = 0.0  # replay time counts from the backend's own init
    backend = replay_backend(recording, clock=clock)
    backend.detect()
    clock.now = 12.0
    [sample] = backend.sample()
    assert (sample.cores_utilization_percent, sample.temperature_celsius) == (None, None)
    assert sample.memory_used_mib == 11077  # the other figures still read
    clock.now = 20.0
    [sample] = backend.sample()
    assert (sample.cores_utilization_percent, sample.temperature_celsius) == (100, 51)


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
        RECORDINGS / "mi300x-8x.yaml",
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
    result = backend.processes(ids)
    assert {(e.rows, e.memory_reason, e.cores_reason) for e in result.values()} == {
        ((), reason, reason)
    }
    clock.now = 10.0
    assert backend.processes(ids)[ids[2]].rows[0].pid == 4242


def test_a_failed_per_device_read_withholds_that_card_only() -> None:
    recording = _with_faults(
        RECORDINGS / "mi300x-8x.yaml",
        Fault(
            fn="rsmi_compute_process_info_by_device_get",
            args=(5151, 3),
            start=0.0,
            end=60.0,
            raises=Raises(type="ROCMSMIError", code=rocm_smi.RSMI_STATUS_PERMISSION),
        ),
    )
    backend = replay_backend(recording, clock=VirtualClock())
    devices = backend.detect().devices
    result = backend.processes([devices[3].id, devices[4].id])
    assert result[devices[3].id].rows == ()  # 5150's row alone would be a short sum
    assert result[devices[3].id].memory_reason is QueryReason.PERMISSION
    assert [r.pid for r in result[devices[4].id].rows] == [5150]


# -- the copied interface and the error tables -------------------------------------------------


def _amdsmi_source(name: str) -> str:
    """Read the installed amdsmi's source as text: importing it needs libamd_smi.so."""
    spec = importlib.util.find_spec("amdsmi")
    assert spec is not None
    assert spec.submodule_search_locations is not None
    return (Path(next(iter(spec.submodule_search_locations))) / name).read_text()


def test_copied_status_codes_match_the_installed_amdsmi() -> None:
    wrapper = _amdsmi_source("amdsmi_wrapper.py")
    real = {
        m[1]: int(m[2])
        for m in re.finditer(r"^(AMDSMI_STATUS_\w+) = (\d+)\s*$", wrapper, re.MULTILINE)
    }
    copied = {k: v for k, v in vars(amdsmi_api).items() if k.startswith("AMDSMI_STATUS_")}
    assert copied == real


def test_copied_enums_match_the_installed_amdsmi() -> None:
    wrapper = _amdsmi_source("amdsmi_wrapper.py")
    values = {
        m[1]: int(m[2]) for m in re.finditer(r"^(AMDSMI_\w+) = (\d+)\s*$", wrapper, re.MULTILINE)
    }
    interface = _amdsmi_source("amdsmi_interface.py")
    for enum in amdsmi_api.ENUMS:
        body = re.search(rf"class {enum.__name__}\(IntEnum\):\n(.*?)\n\n\n", interface, re.DOTALL)
        assert body is not None, enum.__name__
        real = {
            m[1]: values[m[2]]
            for m in re.finditer(r"^\s+(\w+) = amdsmi_wrapper\.(\w+)", body[1], re.MULTILINE)
        }
        assert dict(enum.__members__.items()) == real, enum.__name__


def test_error_tables_use_real_status_codes() -> None:
    amd_codes = {v for k, v in vars(amdsmi_api).items() if k.startswith("AMDSMI_STATUS_")}
    rocm_codes = {v for k, v in vars(rocm_smi).items() if k.startswith("RSMI_STATUS_")}
    assert set(errors.AMDSMI) <= amd_codes
    assert set(errors.ROCM_SMI) <= rocm_codes
    assert errors.AMDSMI[amdsmi_api.AMDSMI_STATUS_NO_PERM] is QueryReason.PERMISSION
    assert errors.AMDSMI[amdsmi_api.AMDSMI_STATUS_RETRY] is QueryReason.TRANSIENT_DRIVER_ERROR
    assert errors.AMDSMI[amdsmi_api.AMDSMI_STATUS_OUT_OF_RESOURCES] is QueryReason.TRUNCATED
    assert errors.ROCM_SMI[rocm_smi.RSMI_STATUS_PERMISSION] is QueryReason.PERMISSION
    assert errors.ROCM_SMI[rocm_smi.RSMI_STATUS_INSUFFICIENT_SIZE] is QueryReason.TRUNCATED
    assert errors.ROCM_SMI[rocm_smi.RSMI_STATUS_FAIL_LOAD_SYMBOL] is QueryReason.UNSUPPORTED
