"""The MetaX backend over every MetaX recording, then MXSML's size conventions and its id trap.

Expected values are recomputed here from the recording's raw answers (KiB device memory, byte
process memory, mW rails, hundredths of a degree), never from the backend's own helpers.
"""

from __future__ import annotations

import ctypes
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from recorded import ret_at
from typer.testing import CliRunner
from vendor_helpers import Script, slice_usages

from gpustack_core.reasons import QueryReason
from gpustack_core.units import bytes_to_mib
from gpustack_simulator.recording import Fault, Raises, Recording, load_recording
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.replay.mxsml_lib import FakeMxsmlLib
from gpustack_simulator.synth.timeline import VirtualClock
from gpustack_vendors.metax import backend as metax
from gpustack_vendors.metax import mxsml
from gpustack_vendors.metax.mxsml import (
    MXSML_ERROR_BUSY_DEVICE,
    MXSML_ERROR_FAILURE,
    MXSML_ERROR_FUNCTION_NOT_FOUND,
    MXSML_ERROR_INSUFFICIENT_SIZE,
    MXSML_ERROR_OPERATION_NOT_SUPPORT,
    MXSML_ERROR_PERMISSION_DENIED,
    MXSML_SUCCESS,
    Mxsml,
    MXSMLError,
    mxSmlBoardWayElectricInfo_t,
    mxSmlProcessInfo_v3_t,
)

RECORDINGS = Path(__file__).resolve().parents[3] / "recordings" / "metax"
METAX = sorted(RECORDINGS.glob("*.yaml"))
C600 = RECORDINGS / "c600.yaml"
MIB = 1 << 20
XCORE, HOTSPOT, DRIVER = 4, 0, 1
runner = CliRunner()


# -- reading the recording independently -------------------------------------------------------


def answer(recording: Recording, fn: str, args: list[Any], t: float = 0.0) -> Any:
    for call in recording.library("mxsml").calls:
        if call.fn == fn and list(call.args) == args:
            return ret_at(call, t)
    raise AssertionError(f"{fn}{args} not recorded")


def count(recording: Recording) -> int:
    return int(answer(recording, "mxSmlGetDeviceCount", []))


def kib_to_mib_up(kib: int) -> int:
    return -(-kib // 1024)


@pytest.fixture(params=METAX, ids=lambda p: p.name)
def recorded(request: pytest.FixtureRequest) -> Iterator[tuple[Recording, Any, VirtualClock]]:
    recording = load_recording(request.param)
    clock = VirtualClock()
    backend = replay_backend(recording, clock=clock)
    yield recording, backend, clock
    backend.close()


# -- the suite, over every MetaX recording -----------------------------------------------------

# The round trip, lazy loading, the paths tried and the CLI's detect, alike for every
# ctypes-bound manufacturer: tests/unit/vendors/test_vendor_suites.py (one row per vendor).


def test_detect_reports_every_card_from_the_raw_answers(recorded: Any) -> None:
    recording, backend, _ = recorded
    detection = backend.detect()
    assert detection.manufacturer == "metax"
    assert [d.index for d in detection.devices] == list(range(count(recording)))
    maca = answer(recording, "mxSmlGetMacaVersion", [])
    driver = answer(recording, "mxSmlGetDeviceVersion", [0, DRIVER])
    for device in detection.devices:
        info = answer(recording, "mxSmlGetDeviceInfo", [device.index])
        memory = answer(recording, "mxSmlGetMemoryInfo", [device.index])
        assert device.id == info["uuid"]
        assert device.name == info["deviceName"]
        assert device.pci_bus_id == info["bdfId"]
        assert device.memory_mib == kib_to_mib_up(memory["vramTotal"])  # KiB → MiB
        assert (device.driver_version, device.runtime_version) == (driver, maca)
        assert device.unhealthy is False


@pytest.mark.parametrize("t", [0.0, 15.0, 30.0, 45.0])
def test_card_samples_follow_the_timeline(recorded: Any, t: float) -> None:
    recording, backend, clock = recorded
    backend.detect()
    clock.now = t
    for sample, index in zip(backend.sample(), range(count(recording)), strict=True):
        memory = answer(recording, "mxSmlGetMemoryInfo", [index], t)
        assert sample.id == answer(recording, "mxSmlGetDeviceInfo", [index])["uuid"]
        assert (sample.memory_total_mib, sample.memory_used_mib) == (
            kib_to_mib_up(memory["vramTotal"]),
            kib_to_mib_up(memory["vramUse"]),
        )
        assert sample.cores_utilization_percent == answer(
            recording, "mxSmlGetDeviceIpUsage", [index, XCORE], t
        )
        hotspot = answer(recording, "mxSmlGetTemperatureInfo", [index, HOTSPOT], t)
        assert sample.temperature_celsius == hotspot // 100  # hundredths of a degree
        rails = answer(recording, "mxSmlGetBoardPowerInfo", [index], t)
        assert sample.power_watts == sum(rail["power"] for rail in rails) / 1000  # mW → W


@pytest.mark.parametrize("t", [0.0, 30.0, 45.0])
def test_process_rows_are_this_index_entries_and_compute_is_unsupported(
    recorded: Any, t: float
) -> None:
    recording, backend, clock = recorded
    ids = [d.id for d in backend.detect().devices]
    clock.now = t
    result = backend.processes(ids)
    assert list(result) == ids
    for index, device_id in enumerate(ids):
        expected = []
        for process in answer(recording, "mxSmlGetSingleGpuProcess_v3", [index], t):
            entries = process["processGpuInfo"][: process["gpuNumber"]]
            mine = [e for e in entries if e["gpuId"] == index]  # the index, never the physical id
            if mine:
                expected.append((process["processId"], mine[0]["gpuMemoryUsage"], None))
        entry = result[device_id]
        assert [(r.pid, r.memory_bytes, r.cores_percent) for r in entry.rows] == expected
        assert entry.memory_reason is None
        assert entry.cores_reason is QueryReason.UNSUPPORTED  # a capability, not a fault


def test_unknown_device_reads_transient_memory_and_unsupported_compute(recorded: Any) -> None:
    _, backend, _ = recorded
    backend.detect()
    entry = backend.processes(["GPU-not-here"])["GPU-not-here"]
    assert entry.rows == ()
    assert entry.memory_reason is QueryReason.TRANSIENT_DRIVER_ERROR
    assert entry.cores_reason is QueryReason.UNSUPPORTED


def test_partitions_answer_every_id_as_unsupported(recorded: Any) -> None:
    _, backend, _ = recorded
    assert backend.partitions(["sgpu-1"])["sgpu-1"].memory_reason is QueryReason.UNSUPPORTED


# -- named cases --------------------------------------------------------------------------------


def test_a_c600_process_holding_an_allocation_reads_16_mib() -> None:
    backend = replay_backend(load_recording(C600), clock=VirtualClock())
    card = backend.detect().devices[0].id
    [row] = backend.processes([card])[card].rows
    assert (row.pid, row.memory_bytes, row.cores_percent) == (8101, 16 * MIB, None)
    assert bytes_to_mib(row.memory_bytes or 0) == 16


def test_rows_match_the_index_not_the_physical_gpu_id() -> None:
    recording = load_recording(C600)
    physical = [answer(recording, "mxSmlGetDeviceInfo", [i])["gpuId"] for i in range(2)]
    assert physical == [1, 2]  # never equal to the index on this node
    clock = VirtualClock()
    backend = replay_backend(recording, clock=clock)
    card0, card1 = (d.id for d in backend.detect().devices)
    clock.now = 30.0
    result = backend.processes([card0, card1])
    assert [r.pid for r in result[card0].rows] == [8101]
    assert [(r.pid, r.memory_bytes) for r in result[card1].rows] == [(8102, 4096 * MIB)]


def test_a_process_on_two_devices_is_reported_on_each_with_its_own_bytes() -> None:
    row = mxSmlProcessInfo_v3_t()
    row.processId, row.gpuNumber = 77, 2
    for slot, (gpu, used) in enumerate(((1, 5 * MIB), (0, 2 * MIB))):
        row.processGpuInfo[slot].gpuId = gpu
        row.processGpuInfo[slot].gpuMemoryUsage = used
    stray = mxSmlProcessInfo_v3_t()  # a row naming only another device
    stray.processId, stray.gpuNumber = 78, 1
    stray.processGpuInfo[0].gpuId = 1
    assert metax._rows_for(0, [row, stray]) == (metax.ProcessRow(77, 2 * MIB, None),)
    assert [r.pid for r in metax._rows_for(1, [row, stray])] == [77, 78]


def _with_faults(*faults: Fault) -> Recording:
    return msgspec.structs.replace(load_recording(C600), faults=faults)


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (MXSML_ERROR_PERMISSION_DENIED, QueryReason.PERMISSION),
        (MXSML_ERROR_INSUFFICIENT_SIZE, QueryReason.TRUNCATED),
        (MXSML_ERROR_OPERATION_NOT_SUPPORT, QueryReason.UNSUPPORTED),
        (MXSML_ERROR_FUNCTION_NOT_FOUND, QueryReason.UNSUPPORTED),
        (MXSML_ERROR_BUSY_DEVICE, QueryReason.TRANSIENT_DRIVER_ERROR),
        (MXSML_ERROR_FAILURE, QueryReason.TRANSIENT_DRIVER_ERROR),
    ],
)
def test_a_refused_process_list_gives_its_reason_and_compute_stays_unsupported(
    code: int, reason: QueryReason
) -> None:
    fault = Fault(
        fn="mxSmlGetSingleGpuProcess_v3",
        args=(0,),
        start=0.0,
        end=60.0,
        raises=Raises(type="MXSMLError", code=code),
    )
    backend = replay_backend(_with_faults(fault), clock=VirtualClock())
    card0, card1 = (d.id for d in backend.detect().devices)
    result = backend.processes([card0, card1])
    assert (result[card0].rows, result[card0].memory_reason) == ((), reason)
    assert result[card0].cores_reason is QueryReason.UNSUPPORTED
    assert result[card1].memory_reason is None  # the other card still reads


def test_scenario_slices_read_16_mib_and_no_compute(tmp_path: Path) -> None:
    # Before t=30 s card 1 runs nothing, so its slice has no usage record yet.
    assert slice_usages("metax", C600, 0.0, tmp_path / "t0") == {"maca-sample": (16, None)}
    assert slice_usages("metax", C600, 30.0, tmp_path / "t30")["llm-b"] == (4096, None)


# -- the binding over the C-ABI fake: MXSML's size conventions ------------------------------------


def process(pid: int, gpu: int = 0, used: int = MIB) -> mxSmlProcessInfo_v3_t:
    row = mxSmlProcessInfo_v3_t()
    row.processId, row.gpuNumber = pid, 1
    row.processGpuInfo[0].gpuId = gpu
    row.processGpuInfo[0].gpuMemoryUsage = used
    return row


def binding(*, truncation: Any = "silent", **answers: list[object]) -> tuple[Mxsml, Script, Any]:
    script = Script(**answers)
    lib = FakeMxsmlLib(script, truncation=truncation)
    return Mxsml(lib), script, lib


def test_struct_layouts_match_the_header() -> None:
    assert ctypes.sizeof(mxsml.mxSmlProcessGpuInfo_v3_t) == 56
    assert mxsml.mxSmlProcessGpuInfo_v3_t.gpuMemoryUsage.offset == 40
    assert mxSmlProcessInfo_v3_t.processGpuInfo.offset == 72
    assert ctypes.sizeof(mxSmlProcessInfo_v3_t) == 72 + 64 * 56
    assert ctypes.sizeof(mxsml.mxSmlDeviceInfo_t) == 184
    assert ctypes.sizeof(mxsml.mxSmlMemoryInfo_t) == 6 * ctypes.sizeof(ctypes.c_long)


def test_the_size_0_call_answers_success_and_writes_no_row() -> None:
    """The hazard itself: a reader trusting SUCCESS from a size-0 call has a count, no rows."""
    lib = FakeMxsmlLib(Script(mxSmlGetSingleGpuProcess_v3=[[process(1), process(2)]]))
    rows = (mxSmlProcessInfo_v3_t * 1)()
    number = ctypes.c_uint(0)
    status = lib.mxSmlGetSingleGpuProcess_v3(0, ctypes.pointer(number), rows)
    assert (status, number.value, rows[0].processId) == (MXSML_SUCCESS, 2, 0)


def test_the_binding_never_asks_with_size_0() -> None:
    smi, _, lib = binding(mxSmlGetSingleGpuProcess_v3=[[process(1)]])
    assert [r.processId for r in smi.mxSmlGetSingleGpuProcess_v3(0)] == [1]
    assert lib.capacities == [mxsml.INITIAL_ROWS]


def test_a_silently_filled_buffer_is_read_again_larger() -> None:
    listed = [process(pid) for pid in range(20)]
    smi, _, lib = binding(mxSmlGetSingleGpuProcess_v3=[listed])
    assert [r.processId for r in smi.mxSmlGetSingleGpuProcess_v3(0)] == list(range(20))
    assert lib.capacities == [16, 32]  # the 16-row fill came back full: maybe cut, so again


def test_a_list_exactly_filling_the_buffer_costs_one_more_read_not_its_tail() -> None:
    smi, _, lib = binding(mxSmlGetSingleGpuProcess_v3=[[process(pid) for pid in range(16)]])
    assert len(smi.mxSmlGetSingleGpuProcess_v3(0)) == 16
    assert lib.capacities == [16, 32]


def test_an_insufficient_size_answer_is_read_again_at_its_size() -> None:
    listed = [process(pid) for pid in range(40)]
    smi, _, lib = binding(truncation="insufficient", mxSmlGetSingleGpuProcess_v3=[listed])
    assert len(smi.mxSmlGetSingleGpuProcess_v3(0)) == 40
    assert lib.capacities == [16, 41]


def test_a_list_growing_between_fills_is_never_returned_cut() -> None:
    smi, _, lib = binding(
        mxSmlGetSingleGpuProcess_v3=[
            [process(pid) for pid in range(n)]
            for n in (20, 40, 40)  # grows after the 1st fill
        ]
    )
    assert [r.processId for r in smi.mxSmlGetSingleGpuProcess_v3(0)] == list(range(40))
    assert lib.capacities == [16, 32, 64]


def test_a_list_that_keeps_filling_every_buffer_is_insufficient_size() -> None:
    asked = 0

    def grow(name: str, args: tuple[object, ...]) -> object:
        nonlocal asked
        asked += 1
        return [process(pid) for pid in range(16 * 2**asked)]

    with pytest.raises(MXSMLError) as raised:
        Mxsml(FakeMxsmlLib(grow)).mxSmlGetSingleGpuProcess_v3(0)
    assert raised.value.value == MXSML_ERROR_INSUFFICIENT_SIZE
    assert asked == mxsml.LIST_ATTEMPTS


@given(
    first=st.integers(0, 70),
    second=st.integers(0, 70),
    mode=st.sampled_from(["silent", "insufficient"]),
)
def test_any_growth_gives_a_whole_list_or_none(first: int, second: int, mode: str) -> None:
    smi, _, _ = binding(
        truncation=mode,
        mxSmlGetSingleGpuProcess_v3=[
            [process(pid) for pid in range(first)],
            [process(pid) for pid in range(second)],
        ],
    )
    got = [r.processId for r in smi.mxSmlGetSingleGpuProcess_v3(0)]
    assert got in (list(range(first)), list(range(second)))
    if first != second and got == list(range(first)):
        assert first < mxsml.INITIAL_ROWS  # only a first fill with room to spare is trusted


def rails(*mw: int) -> list[mxSmlBoardWayElectricInfo_t]:
    return [mxSmlBoardWayElectricInfo_t(12000, w // 12, w) for w in mw]


def test_board_power_probe_answers_insufficient_size_and_is_then_filled() -> None:
    smi, script, _ = binding(mxSmlGetBoardPowerInfo=[rails(59000, 12000)])
    assert [r.power for r in smi.mxSmlGetBoardPowerInfo(0)] == [59000, 12000]
    assert script.count("mxSmlGetBoardPowerInfo") == 2  # probe, fill


def test_a_board_without_rails_answers_the_probe_success_and_reads_empty() -> None:
    """``pymxsml`` raises ``MXSMLError(MXSML_SUCCESS)`` here; the binding reads no rails."""
    smi, script, _ = binding(mxSmlGetBoardPowerInfo=[[]])
    assert smi.mxSmlGetBoardPowerInfo(0) == []
    assert script.count("mxSmlGetBoardPowerInfo") == 1


def test_rails_growing_between_probe_and_fill_are_probed_again() -> None:
    smi, script, _ = binding(mxSmlGetBoardPowerInfo=[rails(1), rails(1, 2), rails(1, 2)])
    assert [r.power for r in smi.mxSmlGetBoardPowerInfo(0)] == [1, 2]
    assert script.count("mxSmlGetBoardPowerInfo") == 4


def test_device_count_is_the_return_value_and_strings_are_copied() -> None:
    smi, _, _ = binding(
        mxSmlGetDeviceCount=[3],
        mxSmlGetMacaVersion=["3.5.3.18"],
        mxSmlGetDeviceVersion=["3.6.11"],
    )
    assert smi.mxSmlGetDeviceCount() == 3
    assert smi.mxSmlGetMacaVersion() == "3.5.3.18"
    assert smi.mxSmlGetDeviceVersion(0, DRIVER) == "3.6.11"


def test_missing_symbol_is_function_not_found_and_the_rest_works() -> None:
    lib = FakeMxsmlLib(Script(mxSmlGetDeviceCount=[1]), missing={"mxSmlGetSingleGpuProcess_v3"})
    smi = Mxsml(lib)
    assert smi.mxSmlGetDeviceCount() == 1
    with pytest.raises(MXSMLError) as raised:
        smi.mxSmlGetSingleGpuProcess_v3(0)
    assert raised.value.value == MXSML_ERROR_FUNCTION_NOT_FOUND
    clone = pickle.loads(pickle.dumps(raised.value))
    assert (clone.value, clone.function) == (999, "mxSmlGetSingleGpuProcess_v3")
