"""The HGML binding over its C-ABI fake: NVML's layouts and size protocol, errors, loading."""

from __future__ import annotations

import copy
import ctypes
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pynvml
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner
from vendor_helpers import Script

from gpustack_cli.main import app
from gpustack_simulator.replay.hgml_lib import FakeHgmlLib
from gpustack_vendors.thead import hgml as h
from gpustack_vendors.thead.hgml import Hgml, HGMLError, HgmlLibraryNotFound, load_library


def binding(**answers: list[object]) -> tuple[Hgml, Script, FakeHgmlLib]:
    script = Script(**answers)
    lib = FakeHgmlLib(script)
    return Hgml(lib), script, lib


def proc(pid: int, used: int = 1 << 30) -> h.c_hgmlProcessInfo_t:
    return h.c_hgmlProcessInfo_t(pid, used, 0xFFFFFFFF, 0xFFFFFFFF)


def handle() -> Any:
    target = h.struct_c_hgmlDevice_t()
    pointer = ctypes.pointer(target)
    pointer._keep = target  # type: ignore[attr-defined]
    return ctypes.cast(pointer, h.c_hgmlDevice_t)


# -- NVML's layouts and codes ----------------------------------------------------------------------

PAIRS = [
    (h.c_hgmlProcessInfo_t, pynvml.c_nvmlProcessInfo_v2_t),
    (h.c_hgmlProcessUtilizationSample_t, pynvml.c_nvmlProcessUtilizationSample_t),
    (h.c_hgmlProcessUtilizationInfo_v1_t, pynvml.c_nvmlProcessUtilizationInfo_v1_t),
    (h.c_hgmlProcessesUtilizationInfo_t, pynvml.c_nvmlProcessesUtilizationInfo_v1_t),
    (h.c_hgmlMemory_t, pynvml.c_nvmlMemory_t),
    (h.c_hgmlUtilization_t, pynvml.c_nvmlUtilization_t),
    (h.hgmlPciInfo_t, pynvml.nvmlPciInfo_t),
]


@pytest.mark.parametrize(("ours", "nvml"), PAIRS, ids=lambda c: c.__name__)
def test_structs_have_nvmls_layout(ours: Any, nvml: Any) -> None:
    """HGML is an NVML clone: field for field, offset for offset, as the installed pynvml."""
    names = [f[0] for f in ours._fields_]
    assert names == [f[0] for f in nvml._fields_]
    assert ctypes.sizeof(ours) == ctypes.sizeof(nvml)
    assert [getattr(ours, n).offset for n in names] == [getattr(nvml, n).offset for n in names]


def test_codes_are_nvmls_numbers() -> None:
    ours = {k.removeprefix("HGML_"): v for k, v in vars(h).items() if k.startswith("HGML_ERROR_")}
    for name, value in ours.items():
        assert getattr(pynvml, f"NVML_{name}") == value, name
    assert h.hgmlProcessesUtilizationInfo_v1 == 0x1000018


# -- process lists ---------------------------------------------------------------------------------


def test_no_processes_is_one_probe() -> None:
    hgml, _, lib = binding(hgmlDeviceGetComputeRunningProcesses=[[]])
    assert hgml.hgmlDeviceGetComputeRunningProcesses(handle()) == []
    assert lib.calls == ["hgmlDeviceGetComputeRunningProcesses_v3"]


def test_rows_come_back_with_every_field_and_the_sentinel_raw() -> None:
    rows = [proc(10), proc(11, h.HGML_VALUE_NOT_AVAILABLE_ULONGLONG)]
    hgml, script, _ = binding(hgmlDeviceGetComputeRunningProcesses=[rows])
    got = hgml.hgmlDeviceGetComputeRunningProcesses(handle())
    assert [(p.pid, p.usedGpuMemory) for p in got] == [
        (10, 1 << 30),
        (11, 0xFFFFFFFFFFFFFFFF),
    ]
    assert all(p._b_base_ is None for p in got)  # copies, not views of the buffer
    assert script.count("hgmlDeviceGetComputeRunningProcesses") == 2  # probe, then fill


def test_a_list_growing_between_probe_and_fill_is_retried() -> None:
    small = [proc(pid) for pid in range(2)]
    large = [proc(pid) for pid in range(40)]  # past the slack
    hgml, script, _ = binding(hgmlDeviceGetComputeRunningProcesses=[small, large])
    assert len(hgml.hgmlDeviceGetComputeRunningProcesses(handle())) == 40
    # probe (2), fill (40 > capacity: INSUFFICIENT_SIZE), probe (40), fill
    assert script.count("hgmlDeviceGetComputeRunningProcesses") == 4


def test_a_list_that_never_stops_growing_raises_instead_of_truncating() -> None:
    asked = 0

    def answer(name: str, args: tuple[object, ...]) -> object:
        nonlocal asked
        asked += 1
        return [proc(pid) for pid in range(5 * 3**asked)]

    with pytest.raises(HGMLError) as raised:
        Hgml(FakeHgmlLib(answer)).hgmlDeviceGetComputeRunningProcesses(handle())
    assert raised.value.value == h.HGML_ERROR_INSUFFICIENT_SIZE
    assert asked == 6


@given(st.lists(st.integers(min_value=0, max_value=2**32 - 1), max_size=40))
def test_any_process_list_round_trips(pids: list[int]) -> None:
    hgml, _, _ = binding(hgmlDeviceGetComputeRunningProcesses=[[proc(p) for p in pids]])
    assert [p.pid for p in hgml.hgmlDeviceGetComputeRunningProcesses(handle())] == pids


def sample(pid: int, stamp: int, sm: int) -> h.c_hgmlProcessUtilizationSample_t:
    return h.c_hgmlProcessUtilizationSample_t(pid, stamp, sm, 0, 0, 0)


def test_process_utilization_probes_then_fills_and_passes_last_seen() -> None:
    dev = handle()
    hgml, script, _ = binding(hgmlDeviceGetProcessUtilization=[[sample(1, 5, 40)]])
    [got] = hgml.hgmlDeviceGetProcessUtilization(dev, 3)
    assert (got.pid, got.timeStamp, got.smUtil) == (1, 5, 40)
    assert [args[1] for _, args in script.asked] == [3, 3]
    assert script.asked[0][1][0] is dev  # the binding's own handle object


def test_no_sample_since_last_seen_is_not_found() -> None:
    hgml, _, _ = binding(hgmlDeviceGetProcessUtilization=[[]])
    with pytest.raises(HGMLError) as raised:
        hgml.hgmlDeviceGetProcessUtilization(handle(), 0)
    assert raised.value.value == h.HGML_ERROR_NOT_FOUND


def info(pid: int, stamp: int, sm: int) -> h.c_hgmlProcessUtilizationInfo_v1_t:
    return h.c_hgmlProcessUtilizationInfo_v1_t(stamp, pid, sm, 0, 0, 0, 0, 0)


def test_the_versioned_call_negotiates_inside_its_struct() -> None:
    rows = [info(pid, 9, pid * 10) for pid in range(1, 4)]
    hgml, script, _ = binding(hgmlDeviceGetProcessesUtilizationInfo=[rows])
    got = hgml.hgmlDeviceGetProcessesUtilizationInfo(handle(), 0)
    assert [(r.pid, r.smUtil) for r in got] == [(1, 10), (2, 20), (3, 30)]
    assert script.count("hgmlDeviceGetProcessesUtilizationInfo") == 2


def test_the_versioned_stub_answers_not_supported() -> None:
    hgml, _, lib = binding(
        hgmlDeviceGetProcessesUtilizationInfo=[HGMLError(h.HGML_ERROR_NOT_SUPPORTED)]
    )
    with pytest.raises(HGMLError) as raised:
        hgml.hgmlDeviceGetProcessesUtilizationInfo(handle(), 0)
    assert raised.value.value == h.HGML_ERROR_NOT_SUPPORTED
    assert lib.calls == ["hgmlDeviceGetProcessesUtilizationInfo"]


def test_the_fake_checks_the_struct_version() -> None:
    lib = FakeHgmlLib(Script(hgmlDeviceGetProcessesUtilizationInfo=[[info(1, 1, 1)]]))
    header = h.c_hgmlProcessesUtilizationInfo_t()
    header.version = 2
    status = lib.hgmlDeviceGetProcessesUtilizationInfo(handle(), ctypes.byref(header))
    assert status == h.HGML_ERROR_ARGUMENT_VERSION_MISMATCH


# -- handles, strings, errors ----------------------------------------------------------------------


def test_handles_are_written_through_the_callers_pointer() -> None:
    dev = handle()
    hgml, _, _ = binding(
        hgmlDeviceGetHandleByIndex=[dev], hgmlDeviceGetMigDeviceHandleByIndex=[dev]
    )
    got = hgml.hgmlDeviceGetHandleByIndex(0)
    assert isinstance(got, h.c_hgmlDevice_t)
    assert ctypes.cast(got, ctypes.c_void_p).value == ctypes.cast(dev, ctypes.c_void_p).value


def test_strings_too_long_for_the_buffer_are_insufficient_size() -> None:
    hgml, _, lib = binding(hgmlDeviceGetName=["x" * 200], hgmlSystemGetDriverVersion=["1.4.1"])
    with pytest.raises(HGMLError) as raised:
        hgml.hgmlDeviceGetName(handle())
    assert raised.value.value == h.HGML_ERROR_INSUFFICIENT_SIZE
    assert hgml.hgmlSystemGetDriverVersion() == "1.4.1"
    assert lib.calls == ["hgmlDeviceGetName", "hgmlSystemGetDriverVersion"]


def test_a_missing_symbol_is_function_not_found_and_names_it() -> None:
    script = Script(hgmlDeviceGetProcessesUtilizationInfo=[[]])
    lib = FakeHgmlLib(script, missing={"hgmlDeviceGetProcessesUtilizationInfo"})
    with pytest.raises(HGMLError) as raised:
        Hgml(lib).hgmlDeviceGetProcessesUtilizationInfo(handle(), 0)
    assert raised.value.value == h.HGML_ERROR_FUNCTION_NOT_FOUND
    assert "hgmlDeviceGetProcessesUtilizationInfo" in str(raised.value)
    assert script.asked == []
    clone = pickle.loads(pickle.dumps(raised.value))
    assert (clone.value, clone.function) == (raised.value.value, raised.value.function)


def test_every_method_calls_the_symbol_pyhgml_calls() -> None:
    assert h.SYMBOLS["hgmlDeviceGetCount"] == "hgmlDeviceGetCount_v2"
    assert h.SYMBOLS["hgmlDeviceGetHandleByIndex"] == "hgmlDeviceGetHandleByIndex_v2"
    assert h.SYMBOLS["hgmlDeviceGetComputeRunningProcesses"].endswith("_v3")
    assert all(hasattr(Hgml, method) for method in h.SYMBOLS)
    assert all(hasattr(FakeHgmlLib, symbol) for symbol in h.SYMBOLS.values())


# -- loading ---------------------------------------------------------------------------------------


def test_load_library_names_every_path_tried() -> None:
    paths = ["/nonexistent/a/libhgml.so", "/nonexistent/b/libhgml.so"]
    with pytest.raises(HgmlLibraryNotFound) as raised:
        load_library(paths)
    assert all(path in str(raised.value) for path in paths)
    assert raised.value.tried == tuple(paths)
    assert copy.copy(raised.value).tried == tuple(paths)
    assert pickle.loads(pickle.dumps(raised.value)).tried == tuple(paths)


def test_default_search_order(monkeypatch: pytest.MonkeyPatch) -> None:
    tried: list[str] = []

    def refuse(path: str, *args: Any, **kwargs: Any) -> ctypes.CDLL:
        tried.append(path)
        raise OSError(f"{path}: cannot open shared object file")

    monkeypatch.setenv("HGML_LIB", "/custom/libhgml.so")
    monkeypatch.setenv("PPU_HOME", "/opt/ppu")
    monkeypatch.setattr(ctypes, "CDLL", refuse)
    with pytest.raises(HgmlLibraryNotFound):
        load_library()
    assert tried == [
        "/custom/libhgml.so",
        "/opt/ppu/lib/libhgml.so",
        "/opt/ppu/lib64/libhgml.so",
        "libhgml.so",
    ]


def test_libuki_beside_the_library_is_loaded_first_and_globally(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "libuki.so").write_bytes(b"")
    opened: list[tuple[str, int | None]] = []

    class Library:
        pass

    def open_library(path: str, mode: int | None = None) -> Library:
        opened.append((path, mode))
        return Library()

    monkeypatch.setattr(ctypes, "CDLL", open_library)
    load_library([str(tmp_path / "libhgml.so")])
    assert opened == [
        (str(tmp_path / "libuki.so"), ctypes.RTLD_GLOBAL),
        (str(tmp_path / "libhgml.so"), None),
    ]


def test_load_library_declares_signatures(monkeypatch: pytest.MonkeyPatch) -> None:
    class Symbol:
        argtypes: list[object] | None = None
        restype: object = None

    class Library:
        def __init__(self) -> None:
            self.hgmlDeviceGetComputeRunningProcesses_v3 = Symbol()

    monkeypatch.setattr(ctypes, "CDLL", lambda path, mode=None: Library())
    hgml = load_library(["libhgml.so"])
    symbol = hgml.lib.hgmlDeviceGetComputeRunningProcesses_v3  # type: ignore[attr-defined]
    assert symbol.restype is ctypes.c_uint
    assert symbol.argtypes == [
        h.c_hgmlDevice_t,
        ctypes.POINTER(ctypes.c_uint),
        ctypes.POINTER(h.c_hgmlProcessInfo_t),
    ]


def test_nothing_loads_the_library_until_it_is_asked_for() -> None:
    code = textwrap.dedent(
        """
        import ctypes
        opened = []
        real = ctypes.CDLL
        ctypes.CDLL = lambda *a, **k: opened.append(a[0]) or real(*a, **k)
        import gpustack_vendors.thead.hgml, gpustack_vendors.thead.backend, gpustack_vendors.loading
        from gpustack_simulator.replay.backends import replay_backend
        print(len(opened))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ
    )
    assert result.stdout.strip() == "0"


def test_detect_without_the_library_is_one_line_naming_it_and_every_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(path: str, *args: Any, **kwargs: Any) -> ctypes.CDLL:
        raise OSError(f"{path}: cannot open shared object file: No such file or directory")

    monkeypatch.delenv("HGML_LIB", raising=False)
    monkeypatch.delenv("PPU_HOME", raising=False)
    monkeypatch.setattr(ctypes, "CDLL", refuse)
    result = CliRunner().invoke(app, ["device-manager", "detect", "--manufacturer", "thead"])
    assert result.exit_code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "libhgml.so could not be loaded" in lines[0]
    assert all(path in lines[0] for path in h.candidate_paths())
    assert "/usr/local/PPU_SDK/lib/libhgml.so" in lines[0]
    assert result.stdout == ""
