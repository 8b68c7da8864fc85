"""The Iluvatar backend over every Iluvatar recording, then IXML's NVML-copied conventions.

Expected values are recomputed here from the recording's raw answers (NVML structs in bytes, mW,
``NOT_FOUND`` for an idle card), never from the backend's own helpers.
"""

from __future__ import annotations

import ctypes
import dataclasses
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
from gpustack_simulator.recording import (
    Fault,
    Raises,
    Recording,
    load_recording,
    parse_recording,
)
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.replay.ixml_lib import FakeIxmlLib
from gpustack_simulator.synth.iluvatar_nodes import IluvatarNode, IluvatarProc, bi_v150_node
from gpustack_simulator.synth.timeline import NodeSpec, VirtualClock, const
from gpustack_simulator.synth.write import synthesize
from gpustack_vendors.iluvatar import backend as iluvatar
from gpustack_vendors.iluvatar import ixml
from gpustack_vendors.iluvatar.ixml import (
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INSUFFICIENT_SIZE,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_TIMEOUT,
    NVML_VALUE_NOT_AVAILABLE_ULL,
    Ixml,
    IXMLError,
    IxmlLibraryNotFound,
    c_nvmlProcessInfo_v1_t,
    ixmlDevice_t,
    load_library,
)

RECORDINGS = Path(__file__).resolve().parents[3] / "recordings" / "iluvatar"
ILUVATAR = sorted(RECORDINGS.glob("*.yaml"))
BI_V150 = RECORDINGS / "bi-v150.yaml"
MIB = 1 << 20
runner = CliRunner()


# -- reading the recording independently -------------------------------------------------------


def answer(recording: Recording, fn: str, args: list[Any], t: float = 0.0) -> Any:
    for call in recording.library("ixml").calls:
        if call.fn == fn and list(call.args) == args:
            return None if call.raises is not None else ret_at(call, t)
    raise AssertionError(f"{fn}{args} not recorded")


def raised(recording: Recording, fn: str, args: list[Any]) -> int | None:
    for call in recording.library("ixml").calls:
        if call.fn == fn and list(call.args) == args:
            return None if call.raises is None else call.raises.code
    raise AssertionError(f"{fn}{args} not recorded")


def refs(recording: Recording) -> list[str]:
    return [f"gpu{i}" for i in range(answer(recording, "nvmlDeviceGetCount_v2", []))]


def mib_up(value: int) -> int:
    return -(-value // MIB)


@pytest.fixture(params=ILUVATAR, ids=lambda p: p.name)
def recorded(request: pytest.FixtureRequest) -> Iterator[tuple[Recording, Any, VirtualClock]]:
    recording = load_recording(request.param)
    clock = VirtualClock()
    backend = replay_backend(recording, clock=clock)
    yield recording, backend, clock
    backend.close()


# -- the suite, over every Iluvatar recording --------------------------------------------------

# The round trip, lazy loading, the paths tried and the CLI's detect, alike for every
# ctypes-bound manufacturer: tests/unit/vendors/test_vendor_suites.py (one row per vendor).


def test_detect_reports_every_card_from_the_raw_answers(recorded: Any) -> None:
    recording, backend, _ = recorded
    detection = backend.detect()
    assert detection.manufacturer == "iluvatar"
    cuda = answer(recording, "nvmlSystemGetCudaDriverVersion", [])
    for device, ref in zip(detection.devices, refs(recording), strict=True):
        handle = [{"_handle": ref}]
        memory = answer(recording, "nvmlDeviceGetMemoryInfo_v2", handle)
        pci = answer(recording, "nvmlDeviceGetPciInfo_v3", handle)
        assert device.id == answer(recording, "nvmlDeviceGetUUID", handle)
        assert device.name == answer(recording, "nvmlDeviceGetName", handle)
        assert device.memory_mib == mib_up(memory["total"])  # bytes → MiB, up
        domain, bus, rest = pci["busId"].split(":")
        assert device.pci_bus_id == f"{int(domain, 16):04x}:{bus.lower()}:{rest.lower()}"
        assert device.driver_version == answer(recording, "nvmlSystemGetDriverVersion", [])
        assert device.runtime_version == f"{cuda // 1000}.{cuda % 1000 // 10}"
        assert device.unhealthy is (answer(recording, "ixmlDeviceGetHealth", handle) != 0)


@pytest.mark.parametrize("t", [0.0, 15.0, 30.0, 45.0])
def test_card_samples_follow_the_timeline(recorded: Any, t: float) -> None:
    recording, backend, clock = recorded
    backend.detect()
    clock.now = t
    for sample, ref in zip(backend.sample(), refs(recording), strict=True):
        handle = [{"_handle": ref}]
        memory = answer(recording, "nvmlDeviceGetMemoryInfo_v2", handle, t)
        assert (sample.memory_total_mib, sample.memory_used_mib) == (
            mib_up(memory["total"]),
            mib_up(memory["used"]),
        )
        util = answer(recording, "nvmlDeviceGetUtilizationRates", handle, t)
        assert sample.cores_utilization_percent == util["gpu"]
        assert sample.temperature_celsius == answer(
            recording, "nvmlDeviceGetTemperature", [*handle, 0], t
        )
        assert sample.power_watts == answer(recording, "nvmlDeviceGetPowerUsage", handle, t) / 1000


@pytest.mark.parametrize("t", [0.0, 30.0])
def test_process_rows_are_bytes_and_compute_is_unsupported(recorded: Any, t: float) -> None:
    recording, backend, clock = recorded
    ids = [d.id for d in backend.detect().devices]
    clock.now = t
    result = backend.processes(ids)
    assert list(result) == ids
    for device_id, ref in zip(ids, refs(recording), strict=True):
        args = [{"_handle": ref}]
        entry = result[device_id]
        if raised(recording, "nvmlDeviceGetComputeRunningProcesses", args) == NVML_ERROR_NOT_FOUND:
            assert entry.rows == ()  # NOT_FOUND: an idle card, not a failure
        else:
            listed = answer(recording, "nvmlDeviceGetComputeRunningProcesses", args, t)
            assert [(r.pid, r.memory_bytes, r.cores_percent) for r in entry.rows] == [
                (
                    p["pid"],
                    None
                    if p["usedGpuMemory"] == NVML_VALUE_NOT_AVAILABLE_ULL
                    else p["usedGpuMemory"],
                    None,
                )
                for p in listed
            ]
        assert entry.memory_reason is None
        assert entry.cores_reason is QueryReason.UNSUPPORTED  # a capability, not a fault


def test_unknown_device_reads_transient_memory_and_unsupported_compute(recorded: Any) -> None:
    _, backend, _ = recorded
    backend.detect()
    entry = backend.processes(["GPU-not-here"])["GPU-not-here"]
    assert (entry.memory_reason, entry.cores_reason) == (
        QueryReason.TRANSIENT_DRIVER_ERROR,
        QueryReason.UNSUPPORTED,
    )


# -- named cases --------------------------------------------------------------------------------


def test_the_idle_card_answers_not_found_and_reads_no_process() -> None:
    backend = replay_backend(load_recording(BI_V150), clock=VirtualClock())
    busy, idle = (d.id for d in backend.detect().devices)
    result = backend.processes([busy, idle])
    assert [(r.pid, bytes_to_mib(r.memory_bytes or 0)) for r in result[busy].rows] == [
        (7101, 12288),
        (7102, 1536),
    ]
    assert (result[idle].rows, result[idle].memory_reason) == ((), None)


def test_a_process_ixml_cannot_size_is_absent_not_zero() -> None:
    node = bi_v150_node()
    unsized = IluvatarProc(7103, const(NVML_VALUE_NOT_AVAILABLE_ULL))
    card = dataclasses.replace(node.cards[0], procs=(unsized,))
    node = dataclasses.replace(node, cards=(card, node.cards[1]))
    spec = NodeSpec[IluvatarNode]("x.yaml", "unsized", ("test",), node, samples=1)
    recording = parse_recording(synthesize("iluvatar", spec), source="unsized")
    backend = replay_backend(recording, clock=VirtualClock())
    device = backend.detect().devices[0].id
    [row] = backend.processes([device])[device].rows
    assert (row.pid, row.memory_bytes, row.cores_percent) == (7103, None, None)


def _with_faults(*faults: Fault) -> Recording:
    return msgspec.structs.replace(load_recording(BI_V150), faults=faults)


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (NVML_ERROR_NO_PERMISSION, QueryReason.PERMISSION),
        (NVML_ERROR_NOT_SUPPORTED, QueryReason.UNSUPPORTED),
        (NVML_ERROR_INSUFFICIENT_SIZE, QueryReason.TRUNCATED),
        (NVML_ERROR_TIMEOUT, QueryReason.TRANSIENT_DRIVER_ERROR),
    ],
)
def test_a_refused_process_list_gives_its_reason(code: int, reason: QueryReason) -> None:
    fault = Fault(
        fn="nvmlDeviceGetComputeRunningProcesses",
        start=0.0,
        end=60.0,
        raises=Raises(type="IXMLError", code=code),
    )
    backend = replay_backend(_with_faults(fault), clock=VirtualClock())
    device = backend.detect().devices[0].id
    entry = backend.processes([device])[device]
    assert (entry.rows, entry.memory_reason, entry.cores_reason) == (
        (),
        reason,
        QueryReason.UNSUPPORTED,
    )


def test_a_lost_card_is_unhealthy() -> None:
    fault = Fault(
        fn="nvmlDeviceGetMemoryInfo_v2",
        start=10.0,
        end=60.0,
        raises=Raises(type="IXMLError", code=NVML_ERROR_GPU_IS_LOST),
    )
    clock = VirtualClock()
    backend = replay_backend(_with_faults(fault), clock=clock)
    backend.detect()
    clock.now = 15.0
    sample = backend.sample()[0]
    assert (sample.unhealthy, sample.memory_used_mib) == (True, None)


def test_scenario_slices_read_memory_and_no_compute(tmp_path: Path) -> None:
    assert slice_usages("iluvatar", BI_V150, 30.0, tmp_path) == {
        "infer-a": (12288, None),
        "notebook-b": (1536, None),
    }


# -- the binding over the C-ABI fake ------------------------------------------------------------


class Handles:
    """Addresses the fake hands out, as IXML's handle pointers."""

    def __init__(self) -> None:
        self.buffers = [ctypes.create_string_buffer(1) for _ in range(2)]

    def __getitem__(self, index: int) -> ixmlDevice_t:
        return ixmlDevice_t(ctypes.addressof(self.buffers[index]))


def rows(*pids: int) -> list[c_nvmlProcessInfo_v1_t]:
    return [c_nvmlProcessInfo_v1_t(pid, pid * MIB) for pid in pids]


def test_struct_layouts_match_nvml() -> None:
    assert ctypes.sizeof(c_nvmlProcessInfo_v1_t) == 16
    assert c_nvmlProcessInfo_v1_t.usedGpuMemory.offset == 8
    assert ixml.nvmlMemory_v2 == 0x02000028
    assert ctypes.sizeof(ixml.c_nvmlPciInfo_t) == 16 + 5 * 4 + 32


def test_handles_are_pointers_the_fake_writes_and_reads_back() -> None:
    handles = Handles()
    script = Script(nvmlDeviceGetHandleByIndex_v2=[handles[1]], nvmlDeviceGetUUID=["GPU-1"])
    smi = Ixml(FakeIxmlLib(script))
    handle = smi.nvmlDeviceGetHandleByIndex_v2(1)
    assert isinstance(handle, ixmlDevice_t)
    assert handle.value == handles[1].value
    assert smi.nvmlDeviceGetUUID(handle) == "GPU-1"
    assert script.asked[1][1][0].value == handles[1].value  # type: ignore[attr-defined]


def test_processes_probe_then_fill() -> None:
    handles = Handles()
    script = Script(nvmlDeviceGetComputeRunningProcesses=[rows(1, 2, 3)])
    smi = Ixml(FakeIxmlLib(script))
    assert [r.pid for r in smi.nvmlDeviceGetComputeRunningProcesses(handles[0])] == [1, 2, 3]
    assert script.count("nvmlDeviceGetComputeRunningProcesses") == 2


def test_no_process_is_one_probe() -> None:
    script = Script(nvmlDeviceGetComputeRunningProcesses=[[]])
    assert Ixml(FakeIxmlLib(script)).nvmlDeviceGetComputeRunningProcesses(Handles()[0]) == []
    assert script.count("nvmlDeviceGetComputeRunningProcesses") == 1


def test_a_probe_answering_success_with_a_count_is_read_by_its_count() -> None:
    """nvml-mock's answer: a status-only reader would see no processes at all."""
    script = Script(nvmlDeviceGetComputeRunningProcesses=[rows(7, 8)])
    smi = Ixml(FakeIxmlLib(script, null_probe_success=True))
    assert [r.pid for r in smi.nvmlDeviceGetComputeRunningProcesses(Handles()[0])] == [7, 8]


def test_a_list_growing_between_probe_and_fill_is_filled_again_never_cut() -> None:
    script = Script(nvmlDeviceGetComputeRunningProcesses=[rows(1), rows(1, 2, 3), rows(1, 2, 3)])
    smi = Ixml(FakeIxmlLib(script))
    assert [r.pid for r in smi.nvmlDeviceGetComputeRunningProcesses(Handles()[0])] == [1, 2, 3]
    assert script.count("nvmlDeviceGetComputeRunningProcesses") == 3  # probe, short fill, fill


def test_a_list_that_never_stops_growing_raises_insufficient_size() -> None:
    asked = 0

    def grow(name: str, args: tuple[object, ...]) -> object:
        nonlocal asked
        asked += 1
        return rows(*range(1, 2 + asked * 3))

    with pytest.raises(IXMLError) as failure:
        Ixml(FakeIxmlLib(grow)).nvmlDeviceGetComputeRunningProcesses(Handles()[0])
    assert failure.value.value == NVML_ERROR_INSUFFICIENT_SIZE
    assert asked == 1 + ixml.LIST_ATTEMPTS


@given(first=st.integers(0, 30), second=st.integers(0, 30))
def test_any_change_between_probe_and_fill_gives_a_whole_list(first: int, second: int) -> None:
    script = Script(
        nvmlDeviceGetComputeRunningProcesses=[
            rows(*range(1, first + 1)),
            rows(*range(1, second + 1)),
        ]
    )
    got = [
        r.pid for r in Ixml(FakeIxmlLib(script)).nvmlDeviceGetComputeRunningProcesses(Handles()[0])
    ]
    assert got == (list(range(1, second + 1)) if first else [])


def test_memory_v2_is_version_stamped_and_v1_is_the_fallback() -> None:
    script = Script(
        nvmlDeviceGetMemoryInfo=[ixml.c_nvmlMemory_t(32 << 30, 31 << 30, 1 << 30)],
    )
    lib = FakeIxmlLib(script, missing={"nvmlDeviceGetMemoryInfo_v2"})
    smi = Ixml(lib)
    with pytest.raises(IXMLError) as failure:
        smi.nvmlDeviceGetMemoryInfo_v2(Handles()[0])
    assert failure.value.value == NVML_ERROR_FUNCTION_NOT_FOUND
    backend_memory = iluvatar.IluvatarBackend.__new__(iluvatar.IluvatarBackend)
    backend_memory._lib = smi
    backend_memory._v1_only = set()
    assert backend_memory._memory("GPU-0", Handles()[0]).total == 32 << 30
    assert backend_memory._v1_only == {"GPU-0"}  # remembered: v2 is not asked again
    unstamped = ixml.c_nvmlMemory_v2_t()
    status = FakeIxmlLib(Script()).nvmlDeviceGetMemoryInfo_v2(
        Handles()[0], ctypes.pointer(unstamped)
    )
    assert status == NVML_ERROR_ARGUMENT_VERSION_MISMATCH


def test_errors_pickle_with_their_code() -> None:
    clone = pickle.loads(pickle.dumps(IXMLError(NVML_ERROR_NOT_FOUND, "x")))
    assert (clone.value, str(clone)) == (NVML_ERROR_NOT_FOUND, "x: NVML_ERROR_NOT_FOUND (6)")


# -- loading --------------------------------------------------------------------------------------


def test_a_libixml_without_nvml_symbols_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """libupnp's XML parser ships as libixml.so too: loading it is not finding IXML."""

    class XmlParser:
        ixmlParseBuffer = object()  # noqa: N815 - libupnp's spelling

    monkeypatch.setattr(ctypes, "CDLL", lambda path: XmlParser())
    with pytest.raises(IxmlLibraryNotFound) as failure:
        load_library(["libixml.so"])
    assert "no nvmlInit_v2: not Iluvatar's IXML" in str(failure.value)
