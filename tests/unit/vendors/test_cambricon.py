"""The Cambricon backend over every Cambricon recording, then the cases CNDev makes hard.

Expected values are recomputed here from the recording's raw answers (CNDev structs, process
memory in KiB, ``ipuUtil`` rows present only for busy processes), never from the backend's own
helpers, so a backend that mis-converts, mis-joins or drops a figure fails.
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
from gpustack_simulator.replay import cndev_standin
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.replay.cndev_lib import FakeCndevLib
from gpustack_simulator.synth.timeline import VirtualClock
from gpustack_vendors.cambricon import backend as cambricon
from gpustack_vendors.cambricon import cndev
from gpustack_vendors.cambricon.cndev import (
    CNDEV_ERROR_FUNCTION_NOT_FOUND,
    CNDEV_ERROR_INSUFFICIENT_SPACE,
    CNDEV_ERROR_NO_PERMISSION,
    CNDEV_ERROR_NOT_SUPPORTED,
    CNDEV_ERROR_TIMEOUT,
    CNDEV_ERROR_UNKNOWN,
    CNDEV_ERROR_UNSUPPORTED_API_VERSION,
    CNDEV_SUCCESS,
    Cndev,
    CNDevError,
    cndevProcessInfo_t,
    cndevProcessUtilization_t,
    load_library,
)

RECORDINGS = Path(__file__).resolve().parents[3] / "recordings" / "cambricon"
CAMBRICON = sorted(RECORDINGS.glob("*.yaml"))
KIB = 1024
V6 = cndev.CNDEV_VERSION_6
runner = CliRunner()


# -- reading the recording independently -------------------------------------------------------


def answer(recording: Recording, fn: str, args: list[Any], t: float = 0.0) -> Any:
    for call in recording.library("cndev").calls:
        if call.fn == fn and list(call.args) == args:
            return ret_at(call, t)
    raise AssertionError(f"{fn}{args} not recorded")


def handles(recording: Recording) -> list[int]:
    count = answer(recording, "cndevGetDeviceCount", [V6])
    return [answer(recording, "cndevGetDeviceHandleByIndex", [i]) for i in range(count)]


def uuid_of(recording: Recording, handle: int) -> str:
    return "MLU-" + answer(recording, "cndevGetUUID", [handle, V6])["uuid"]


@pytest.fixture(params=CAMBRICON, ids=lambda p: p.name)
def recorded(request: pytest.FixtureRequest) -> Iterator[tuple[Recording, Any, VirtualClock]]:
    recording = load_recording(request.param)
    clock = VirtualClock()
    backend = replay_backend(recording, clock=clock)
    yield recording, backend, clock
    backend.close()


# -- the suite, over every Cambricon recording -------------------------------------------------

# The round trip, lazy loading, the paths tried and the CLI's detect, alike for every
# ctypes-bound manufacturer: tests/unit/vendors/test_vendor_suites.py (one row per vendor).


def test_detect_reports_every_card_from_the_raw_answers(recorded: Any) -> None:
    recording, backend, _ = recorded
    detection = backend.detect()
    assert detection.manufacturer == "cambricon"
    assert detection.notes == ()
    assert [d.index for d in detection.devices] == list(range(len(handles(recording))))
    for device, handle in zip(detection.devices, handles(recording), strict=True):
        pcie = answer(recording, "cndevGetPCIeInfoV2", [handle])
        version = answer(recording, "cndevGetVersionInfo", [handle, V6])
        health = answer(recording, "cndevGetCardHealthState", [handle, V6])
        memory = answer(recording, "cndevGetMemoryUsageV2", [handle])
        assert device.id == uuid_of(recording, handle)
        assert device.name == answer(recording, "cndevGetCardNameStringByDevId", [handle])
        assert device.memory_mib == memory["physicalMemoryTotal"]  # "MB" that are MiB: as is
        assert device.pci_bus_id == (
            f"{pcie['domain']:04x}:{pcie['bus']:02x}:{pcie['device']:02x}.{pcie['function']}"
        )
        assert device.driver_version == (
            f"{version['driverMajorVersion']}.{version['driverMinorVersion']}."
            f"{version['driverBuildVersion']}"
        )
        assert device.unhealthy is (health["health"] == 0)
        assert device.partitions == ()


@pytest.mark.parametrize("t", [0.0, 15.0, 30.0, 45.0])
def test_card_samples_follow_the_timeline(recorded: Any, t: float) -> None:
    recording, backend, clock = recorded
    backend.detect()
    clock.now = t
    samples = backend.sample()
    assert len(samples) == len(handles(recording))
    for sample, handle in zip(samples, handles(recording), strict=True):
        memory = answer(recording, "cndevGetMemoryUsageV2", [handle], t)
        assert sample.id == uuid_of(recording, handle)
        assert (sample.memory_total_mib, sample.memory_used_mib) == (
            memory["physicalMemoryTotal"],
            memory["physicalMemoryUsed"],
        )
        utilization = answer(recording, "cndevGetDeviceUtilizationInfo", [handle, V6], t)
        assert sample.cores_utilization_percent == utilization["averageCoreUtilization"]
        temperature = answer(recording, "cndevGetTemperatureInfo", [handle, V6], t)
        assert sample.temperature_celsius == temperature["chip"]
        power = answer(recording, "cndevGetDevicePowerInfo", [handle], t)
        assert sample.power_watts == float(power["usage"])  # W already
        assert sample.unhealthy is False


@pytest.mark.parametrize("t", [0.0, 30.0, 45.0])
def test_process_rows_are_kib_times_1024_and_ipu_util(recorded: Any, t: float) -> None:
    recording, backend, clock = recorded
    ids = [d.id for d in backend.detect().devices]
    clock.now = t
    result = backend.processes(ids)
    assert list(result) == ids
    for handle in handles(recording):
        entry = result[uuid_of(recording, handle)]
        listed = answer(recording, "cndevGetProcessInfo", [handle, V6], t)
        busy = {
            row["pid"]: row["ipuUtil"]
            for row in answer(recording, "cndevGetProcessUtilization", [handle, V6], t)
        }
        assert [(r.pid, r.memory_bytes) for r in entry.rows] == [
            (row["pid"], row["physicalMemoryUsed"] * KIB) for row in listed
        ]
        # No utilization row: idle in the sampling period, a measured 0 — not an absence.
        assert [r.cores_percent for r in entry.rows] == [busy.get(row["pid"], 0) for row in listed]
        assert (entry.memory_reason, entry.cores_reason) == (None, None)


def test_unknown_device_gets_an_entry_with_a_reason(recorded: Any) -> None:
    _, backend, _ = recorded
    known = backend.detect().devices[0].id
    result = backend.processes(["MLU-not-here", known])
    assert list(result) == ["MLU-not-here", known]
    assert result["MLU-not-here"].rows == ()
    assert result["MLU-not-here"].memory_reason is QueryReason.TRANSIENT_DRIVER_ERROR
    assert result["MLU-not-here"].cores_reason is QueryReason.TRANSIENT_DRIVER_ERROR


def test_partitions_answer_every_id_as_unsupported(recorded: Any) -> None:
    _, backend, _ = recorded
    result = backend.partitions(["MLU-x/mim1"])
    assert result["MLU-x/mim1"].memory_reason is QueryReason.UNSUPPORTED
    assert result["MLU-x/mim1"].cores_reason is QueryReason.UNSUPPORTED


# -- named cases --------------------------------------------------------------------------------

MLU370 = RECORDINGS / "mlu370-x8.yaml"


def test_a_kib_figure_that_is_not_whole_mib_rounds_up_once_summed() -> None:
    backend = replay_backend(load_recording(MLU370), clock=VirtualClock())
    card = backend.detect().devices[0].id
    rows = {r.pid: r.memory_bytes for r in backend.processes([card])[card].rows}
    assert rows == {6101: 8_389_120 * KIB, 6102: 1_536 * KIB}  # exact: no rounding in the backend
    assert 8_389_120 % KIB  # not a whole MiB
    assert 1_536 % KIB
    assert bytes_to_mib(rows[6101]) == 8193  # 8192.5 MiB reads 8193, never 8192
    # The Device Manager sums bytes first: 8192.5 + 1.5 = 8194 MiB, where rounding each row
    # first would have claimed 8193 + 2 = 8195.
    assert bytes_to_mib(rows[6101] + rows[6102]) == 8194


def test_compute_follows_the_process_from_idle_to_busy() -> None:
    clock = VirtualClock()
    backend = replay_backend(load_recording(MLU370), clock=clock)
    card = backend.detect().devices[0].id
    idle = backend.processes([card])[card]
    assert [(r.pid, r.cores_percent) for r in idle.rows] == [(6101, 0), (6102, 0)]
    assert idle.cores_reason is None
    clock.now = 30.0
    busy = backend.processes([card])[card]
    assert [(r.pid, r.cores_percent) for r in busy.rows] == [(6101, 71), (6102, 0)]
    [sample, _] = backend.sample()
    assert (sample.cores_utilization_percent, sample.power_watts) == (68, 187.0)


def _with_faults(*faults: Fault) -> Recording:
    return msgspec.structs.replace(load_recording(MLU370), faults=faults)


def _fault(fn: str, code: int) -> Fault:
    return Fault(fn=fn, start=0.0, end=60.0, raises=Raises(type="CNDevError", code=code))


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (CNDEV_ERROR_NOT_SUPPORTED, QueryReason.UNSUPPORTED),
        (CNDEV_ERROR_UNSUPPORTED_API_VERSION, QueryReason.UNSUPPORTED),
        (CNDEV_ERROR_FUNCTION_NOT_FOUND, QueryReason.UNSUPPORTED),
        (CNDEV_ERROR_NO_PERMISSION, QueryReason.PERMISSION),
        (CNDEV_ERROR_TIMEOUT, QueryReason.TRANSIENT_DRIVER_ERROR),
        (CNDEV_ERROR_INSUFFICIENT_SPACE, QueryReason.TRUNCATED),
        (CNDEV_ERROR_UNKNOWN, QueryReason.TRANSIENT_DRIVER_ERROR),
    ],
)
def test_a_refused_utilization_list_takes_compute_off_and_leaves_memory(
    code: int, reason: QueryReason
) -> None:
    backend = replay_backend(_with_faults(_fault("cndevGetProcessUtilization", code)))
    card = backend.detect().devices[0].id
    entry = backend.processes([card])[card]
    assert [(r.pid, r.memory_bytes) for r in entry.rows] == [
        (6101, 8_389_120 * KIB),
        (6102, 1_536 * KIB),
    ]
    assert [r.cores_percent for r in entry.rows] == [None, None]
    assert (entry.memory_reason, entry.cores_reason) == (None, reason)


def test_a_refused_memory_list_keeps_the_utilization_rows_without_memory() -> None:
    recording = _with_faults(_fault("cndevGetProcessInfo", CNDEV_ERROR_NO_PERMISSION))
    clock = VirtualClock()
    backend = replay_backend(recording, clock=clock)
    card = backend.detect().devices[0].id
    clock.now = 30.0
    entry = backend.processes([card])[card]
    assert [(r.pid, r.memory_bytes, r.cores_percent) for r in entry.rows] == [(6101, None, 71)]
    assert (entry.memory_reason, entry.cores_reason) == (QueryReason.PERMISSION, None)


def test_a_refused_card_figure_is_absent_and_the_others_read() -> None:
    backend = replay_backend(
        _with_faults(_fault("cndevGetTemperatureInfo", CNDEV_ERROR_TIMEOUT)), clock=VirtualClock()
    )
    backend.detect()
    sample = backend.sample()[0]
    assert sample.temperature_celsius is None
    assert (sample.memory_used_mib, sample.power_watts) == (8707, 32.0)


def test_error_table_uses_header_codes() -> None:
    assert (CNDEV_ERROR_INSUFFICIENT_SPACE, CNDEV_ERROR_NOT_SUPPORTED) == (9, 10)
    assert (CNDEV_ERROR_NO_PERMISSION, CNDEV_ERROR_TIMEOUT) == (13, 17)
    assert cambricon.CNDEV[cndev.CNDEV_ERROR_IN_USE] is QueryReason.TRANSIENT_DRIVER_ERROR
    assert set(cambricon.CNDEV) <= {
        v for k, v in vars(cndev).items() if k.startswith("CNDEV_ERROR_")
    }


def test_scenario_slices_read_the_rounded_sum_and_measured_compute(tmp_path: Path) -> None:
    """Through the Device Manager's own tick: each Sliced Instance reads its own process."""
    usages = slice_usages("cambricon", MLU370, 30.0, tmp_path)
    assert usages["train-a"] == (8193, 71)
    assert usages["notebook-b"] == (2, 0)  # measured idle: a zero, not an absence


# -- the binding over the C-ABI fake ------------------------------------------------------------


def binding(**answers: list[object]) -> tuple[Cndev, Script, FakeCndevLib]:
    script = Script(**answers)
    lib = FakeCndevLib(script)
    return Cndev(lib), script, lib


def procs(n: int, start: int = 1) -> list[cndevProcessInfo_t]:
    return [cndevProcessInfo_t(0, pid, pid * 1000 + 1, 0) for pid in range(start, start + n)]


def test_struct_layouts_match_the_header() -> None:
    assert [cndevProcessInfo_t.version.offset, cndevProcessInfo_t.pid.offset] == [0, 4]
    assert cndevProcessInfo_t.physicalMemoryUsed.offset == 8
    assert ctypes.sizeof(cndevProcessInfo_t) == 24
    assert ctypes.sizeof(cndevProcessUtilization_t) == 28
    assert cndev.cndevUUID_t.ncsUUID64.offset == 48  # 4 + uuid[37], aligned to 8
    assert ctypes.sizeof(cndev.cndevMemoryInfoV2_t) == 6 * 8 + 16 * 8
    assert ctypes.sizeof(cndev.cndevDevicePowerInfo_t) == 21 * 4


def test_a_list_within_the_first_buffer_is_one_call() -> None:
    smi, script, _ = binding(cndevGetProcessInfo=[procs(3)])
    rows = smi.cndevGetProcessInfo(7, V6)
    assert [r.pid for r in rows] == [1, 2, 3]
    assert {r.version for r in rows} == {V6}
    assert script.asked == [("cndevGetProcessInfo", (7, V6))]


def test_a_longer_list_is_asked_again_at_the_size_cndev_reports() -> None:
    smi, script, _ = binding(cndevGetProcessInfo=[procs(40)])
    assert [r.pid for r in smi.cndevGetProcessInfo(0, V6)] == list(range(1, 41))
    assert script.count("cndevGetProcessInfo") == 2  # 16 rows: INSUFFICIENT_SPACE, then 40


def test_a_list_growing_between_calls_is_asked_again_never_cut() -> None:
    # 20 rows answer the 16-row buffer, 50 answer the 20-row one, 50 fill the 50-row one.
    smi, script, _ = binding(
        cndevGetProcessUtilization=[
            [cndevProcessUtilization_t(0, pid, 1, 0, 0, 0, 0) for pid in range(n)]
            for n in (20, 50, 50)
        ]
    )
    rows = smi.cndevGetProcessUtilization(0, V6)
    assert [r.pid for r in rows] == list(range(50))
    assert script.count("cndevGetProcessUtilization") == 3


def test_a_list_that_never_stops_growing_raises_instead_of_truncating() -> None:
    asked = 0

    def answer_(name: str, args: tuple[object, ...]) -> object:
        nonlocal asked
        asked += 1
        return procs(16 * 3**asked)  # always past the size the last answer reported

    with pytest.raises(CNDevError) as raised:
        Cndev(FakeCndevLib(answer_)).cndevGetProcessInfo(0, V6)
    assert raised.value.value == CNDEV_ERROR_INSUFFICIENT_SPACE
    assert asked == cndev.LIST_ATTEMPTS


def test_a_library_claiming_more_rows_than_room_is_refused() -> None:
    class Overclaiming:
        def cndevGetProcessInfo(self, count: Any, rows: Any, device: Any) -> int:  # noqa: N802
            count[0] = 1000
            return CNDEV_SUCCESS

    with pytest.raises(CNDevError) as raised:
        Cndev(Overclaiming()).cndevGetProcessInfo(0, V6)
    assert raised.value.value == CNDEV_ERROR_INSUFFICIENT_SPACE


def test_an_undefined_struct_version_is_refused_before_anything_is_asked() -> None:
    smi, script, lib = binding(cndevGetUUID=[cndev.cndevUUID_t(6, b"x", 0)])
    with pytest.raises(CNDevError) as raised:
        smi.cndevGetUUID(0, 7)
    assert raised.value.value == CNDEV_ERROR_UNSUPPORTED_API_VERSION
    assert script.asked == []
    assert lib.calls == ["cndevGetUUID"]
    assert smi.cndevGetUUID(0, V6).uuid == b"x"


def test_missing_symbol_raises_function_not_found_and_the_rest_works() -> None:
    script = Script(cndevGetDeviceCount=[2])
    smi = Cndev(FakeCndevLib(script, missing={"cndevGetProcessUtilization"}))
    assert smi.cndevGetDeviceCount(V6) == 2
    with pytest.raises(CNDevError) as raised:
        smi.cndevGetProcessUtilization(0, V6)
    assert raised.value.value == CNDEV_ERROR_FUNCTION_NOT_FOUND
    assert "cndevGetProcessUtilization" in str(raised.value)


def test_a_null_card_name_is_an_error_not_an_empty_name() -> None:
    smi, _, _ = binding(cndevGetCardNameStringByDevId=[CNDevError(CNDEV_ERROR_UNKNOWN)])
    with pytest.raises(CNDevError) as raised:
        smi.cndevGetCardNameStringByDevId(0)
    assert raised.value.value == CNDEV_ERROR_UNKNOWN


def test_errors_pickle_with_their_code() -> None:
    clone = pickle.loads(pickle.dumps(CNDevError(CNDEV_ERROR_TIMEOUT, "cndevInit")))
    assert (clone.value, clone.function) == (CNDEV_ERROR_TIMEOUT, "cndevInit")
    assert str(clone) == "cndevInit: CNDEV_ERROR_TIMEOUT (17)"


u32 = st.integers(min_value=0, max_value=0xFFFFFFFF)
u64 = st.integers(min_value=0, max_value=0xFFFFFFFFFFFFFFFF)
rows_strategy = st.lists(st.tuples(u32, u64, u64), max_size=70)


@given(rows=rows_strategy)
def test_any_process_list_round_trips_exactly(rows: list[tuple[int, int, int]]) -> None:
    smi, _, _ = binding(cndevGetProcessInfo=[[cndevProcessInfo_t(0, *r) for r in rows]])
    got = smi.cndevGetProcessInfo(0, V6)
    assert [(r.pid, r.physicalMemoryUsed, r.virtualMemoryUsed) for r in got] == rows


@given(first=rows_strategy, second=rows_strategy)
def test_a_list_changing_between_calls_is_never_returned_cut(
    first: list[tuple[int, int, int]], second: list[tuple[int, int, int]]
) -> None:
    smi, _, _ = binding(
        cndevGetProcessInfo=[
            [cndevProcessInfo_t(0, *r) for r in first],
            [cndevProcessInfo_t(0, *r) for r in second],
        ]
    )
    got = [
        (r.pid, r.physicalMemoryUsed, r.virtualMemoryUsed) for r in smi.cndevGetProcessInfo(0, V6)
    ]
    # The first call saw `first`; if it fit, that is the answer, else every later call sees
    # `second`, returned whole.
    assert got == (first if len(first) <= cndev.INITIAL_ROWS else second)


# -- loading --------------------------------------------------------------------------------------


def test_load_library_declares_signatures(monkeypatch: pytest.MonkeyPatch) -> None:
    class Symbol:
        argtypes: list[object] | None = None
        restype: object = None

    class Library:
        def __init__(self) -> None:
            self.cndevGetProcessInfo = Symbol()
            self.cndevGetCardNameStringByDevId = Symbol()

    monkeypatch.setattr(ctypes, "CDLL", lambda path: Library())
    lib = load_library(["/any/libcndev.so"]).lib
    assert lib.cndevGetProcessInfo.restype is ctypes.c_int32  # type: ignore[attr-defined]
    assert lib.cndevGetProcessInfo.argtypes == [  # type: ignore[attr-defined]
        ctypes.POINTER(ctypes.c_uint),
        ctypes.POINTER(cndevProcessInfo_t),
        ctypes.c_int32,
    ]
    assert lib.cndevGetCardNameStringByDevId.restype is ctypes.c_char_p  # type: ignore[attr-defined]


def test_a_call_missing_from_the_recording_raises_the_bindings_own_error() -> None:
    smi = cndev_standin.build_binding(load_recording(MLU370), clock=VirtualClock())
    smi.cndevInit(0)
    with pytest.raises(CNDevError) as raised:
        smi.cndevGetUUID(5, V6)  # no such handle was ever asked about
    assert raised.value.value == CNDEV_ERROR_FUNCTION_NOT_FOUND
