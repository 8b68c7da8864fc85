"""The DCMI binding over its C-ABI fake: the output-only count hazard, layouts, errors, loading."""

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

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner
from vendor_helpers import Script

from gpustack_cli.main import app
from gpustack_core.reasons import QueryReason
from gpustack_simulator.recording import load_recording
from gpustack_simulator.replay import dcmi_standin
from gpustack_simulator.replay.dcmi_lib import FakeDcmiLib
from gpustack_vendors.ascend import dcmi as d
from gpustack_vendors.ascend.backend import DCMI_REASONS, AscendBackend
from gpustack_vendors.ascend.dcmi import Dcmi, DCMIError, DcmiLibraryNotFound, load_library

RECORDINGS = Path(__file__).resolve().parents[3] / "recordings" / "ascend"
MIB = 1 << 20


def binding(**answers: list[object]) -> tuple[Dcmi, Script, FakeDcmiLib]:
    script = Script(**answers)
    lib = FakeDcmiLib(script)
    return Dcmi(lib), script, lib


def procs(n: int, start: int = 1000) -> list[d.dcmi_proc_mem_info]:
    return [d.dcmi_proc_mem_info(start + i, (i + 1) * MIB) for i in range(n)]


# -- layouts ---------------------------------------------------------------------------------------


def test_struct_layouts_match_the_header() -> None:
    # int + (padding) + unsigned long: 16 bytes on LP64, the row stride the library writes at.
    assert (d.dcmi_proc_mem_info.proc_mem_usage.offset, ctypes.sizeof(d.dcmi_proc_mem_info)) == (
        8,
        16,
    )
    # u64, u32, (pad), u64, i32, u32
    assert [
        getattr(d.dcmi_hbm_info, f).offset for f in ("memory_size", "freq", "memory_usage")
    ] == [
        0,
        8,
        16,
    ]
    assert ctypes.sizeof(d.dcmi_hbm_info) == 32
    assert ctypes.sizeof(d.dcmi_chip_info_v2) == 4 * 32 + 4
    assert ctypes.sizeof(d.dcmi_die_id) == 20
    assert d.dcmi_vdev_query_stru.query_info.offset == 8  # vdev_id, then 8-aligned info
    assert d.dcmi_soc_total_resource.vdev_id.size == 4 * d.DCMI_SOC_SPLIT_MAX


def test_codes_match_the_header() -> None:
    assert d.DCMI_ERROR_NOT_SUPPORT == -8255
    assert d.DCMI_ERROR_NOT_SUPPORT_IN_CONTAINER == -8013
    assert d.DCMI_ERROR_OPER_NOT_PERMITTED == -8002
    assert (d.DCMI_ERROR_TIME_OUT, d.DCMI_ERROR_NOT_REDAY) == (-8006, -8012)
    assert (d.DCMI_ERROR_IS_UPGRADING, d.DCMI_ERROR_RESOURCE_OCCUPIED) == (-8017, -8020)
    assert d.DCMI_ERROR_FUNCTION_NOT_FOUND == -99998  # pydcmi's, kept for the logs


def test_reason_table_maps_the_documented_classes() -> None:
    codes = {v for k, v in vars(d).items() if k.startswith("DCMI_ERROR_")}
    assert set(DCMI_REASONS) <= codes
    assert DCMI_REASONS[d.DCMI_ERROR_NOT_SUPPORT] is QueryReason.UNSUPPORTED
    assert DCMI_REASONS[d.DCMI_ERROR_NOT_SUPPORT_IN_CONTAINER] is QueryReason.UNSUPPORTED
    assert DCMI_REASONS[d.DCMI_ERROR_OPER_NOT_PERMITTED] is QueryReason.PERMISSION
    assert DCMI_REASONS[d.DCMI_ERROR_NOT_REDAY] is QueryReason.TRANSIENT_DRIVER_ERROR
    assert DCMI_REASONS[d.DCMI_ERROR_LIST_TRUNCATED] is QueryReason.TRUNCATED


# -- the output-only process count -----------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 7, d.MAX_PROC_NUM])
def test_up_to_the_documented_maximum_every_row_comes_back(n: int) -> None:
    dcmi, _, lib = binding(dcmi_get_device_resource_info=[procs(n)])
    rows = dcmi.dcmi_get_device_resource_info(0, 0)
    assert [(r.proc_id, r.proc_mem_usage) for r in rows] == [
        (1000 + i, (i + 1) * MIB) for i in range(n)
    ]
    assert all(type(r) is d.dcmi_proc_mem_info and r._b_base_ is None for r in rows)
    assert lib.calls == ["dcmi_get_device_resource_info"]  # one call: there is no probe
    assert lib.overruns == []


@pytest.mark.parametrize("n", [d.MAX_PROC_NUM + 1, d.MAX_PROC_NUM + d.GUARD_ROWS])
def test_a_count_above_the_maximum_is_truncation_and_lands_in_the_guard(n: int) -> None:
    dcmi, _, lib = binding(dcmi_get_device_resource_info=[procs(n)])
    with pytest.raises(DCMIError) as raised:
        dcmi.dcmi_get_device_resource_info(0, 0)
    assert raised.value.value == d.DCMI_ERROR_LIST_TRUNCATED
    assert lib.overruns == []  # every row the library wrote fell inside the binding's buffer


def test_a_list_past_the_guard_is_truncation_and_the_fake_reports_the_overrun() -> None:
    n = d.MAX_PROC_NUM + d.GUARD_ROWS + 5
    dcmi, _, lib = binding(dcmi_get_device_resource_info=[procs(n)])
    with pytest.raises(DCMIError) as raised:
        dcmi.dcmi_get_device_resource_info(0, 0)
    assert raised.value.value == d.DCMI_ERROR_LIST_TRUNCATED
    # The real library would have written 5 rows past the buffer; the fake says so.
    assert lib.overruns == [("dcmi_get_device_resource_info", n - 5, n)]


def test_the_library_ignores_the_count_passed_in() -> None:
    """The hazard itself, at the C ABI: a count of 1 going in still gets every row written."""
    lib = FakeDcmiLib(Script(dcmi_get_device_resource_info=[procs(3)]))
    buffer = (d.dcmi_proc_mem_info * 8)()
    count = ctypes.c_int(1)
    assert lib.dcmi_get_device_resource_info(0, 0, buffer, ctypes.byref(count)) == d.DCMI_SUCCESS
    assert count.value == 3
    assert [row.proc_id for row in buffer[:3]] == [1000, 1001, 1002]
    single = d.dcmi_proc_mem_info()  # pydcmi's single struct: room for one row
    count = ctypes.c_int(1)
    lib.dcmi_get_device_resource_info(0, 0, ctypes.byref(single), ctypes.byref(count))
    assert count.value == 3
    assert lib.overruns == [("dcmi_get_device_resource_info", 1, 3)]


class _Lying:
    """A library writing more rows than the count it reports (or a negative count)."""

    def __init__(self, written: int, reported: int) -> None:
        self.written, self.reported = written, reported

    def dcmi_get_device_resource_info(self, card: Any, device: Any, buf: Any, num: Any) -> int:
        for i in range(self.written):
            buf[i] = d.dcmi_proc_mem_info(i + 1, 4096)
        num._obj.value = self.reported
        return d.DCMI_SUCCESS


def test_a_row_written_past_the_reported_count_is_truncation() -> None:
    with pytest.raises(DCMIError) as raised:
        Dcmi(_Lying(written=5, reported=3)).dcmi_get_device_resource_info(0, 0)
    assert raised.value.value == d.DCMI_ERROR_LIST_TRUNCATED
    with pytest.raises(DCMIError) as raised:
        Dcmi(_Lying(written=d.MAX_PROC_NUM + 1, reported=2)).dcmi_get_device_resource_info(0, 0)
    assert raised.value.value == d.DCMI_ERROR_LIST_TRUNCATED


def test_a_negative_count_is_refused() -> None:
    with pytest.raises(DCMIError) as raised:
        Dcmi(_Lying(written=0, reported=-1)).dcmi_get_device_resource_info(0, 0)
    assert raised.value.value == d.DCMI_ERROR_UNEXPECTED_COUNT


@given(st.integers(min_value=0, max_value=d.MAX_PROC_NUM + d.GUARD_ROWS + 10))
def test_any_list_length_is_complete_or_truncated_never_short(n: int) -> None:
    dcmi, _, _ = binding(dcmi_get_device_resource_info=[procs(n)])
    if n > d.MAX_PROC_NUM:
        with pytest.raises(DCMIError) as raised:
            dcmi.dcmi_get_device_resource_info(0, 0)
        assert raised.value.value == d.DCMI_ERROR_LIST_TRUNCATED
    else:
        assert len(dcmi.dcmi_get_device_resource_info(0, 0)) == n


def test_truncation_reaches_the_backend_as_the_whole_devices_reason() -> None:
    """Against the replay fake: a recorded list over the maximum is ``truncated``, not short."""
    recording = load_recording(RECORDINGS / "310p3-duo.yaml")
    dcmi = dcmi_standin.build_binding(recording)
    replayer = dcmi_standin.replayer_of(dcmi)
    backend = AscendBackend(dcmi)
    [first, _] = backend.detect().devices
    real = replayer.invoke

    def more(name: str, args: tuple[object, ...], kwargs: Any) -> object:
        if name == "dcmi_get_device_resource_info":
            return procs(d.MAX_PROC_NUM + 3)
        return real(name, args, kwargs)

    replayer.invoke = more  # type: ignore[method-assign]
    entry = backend.processes([first.id])[first.id]
    assert entry.rows == ()
    assert (entry.memory_reason, entry.cores_reason) == (QueryReason.TRUNCATED,) * 2


# -- other calls -----------------------------------------------------------------------------------


def test_card_list_past_the_offered_capacity_is_read_whole() -> None:
    cards = list(range(d.CARD_LIST_LEN + 6))
    dcmi, script, _ = binding(dcmi_get_card_list=[cards])
    assert dcmi.dcmi_get_card_list() == cards
    assert [name for name, _ in script.asked] == ["dcmi_get_card_list"] * 2  # retried once


def test_scalars_and_structs_pass_through() -> None:
    chip = d.dcmi_chip_info_v2(b"Ascend", b"910B2", b"V1", 24, b"")
    dcmi, script, _ = binding(
        dcmi_get_device_logic_id=[5],
        dcmi_get_device_chip_info_v2=[chip],
        dcmi_get_device_power_info=[999],
        dcmi_get_device_utilization_rate=[37],
        dcmi_get_driver_version=["25.2.0"],
    )
    assert dcmi.dcmi_get_device_logic_id(3, 1) == 5
    assert script.asked[-1] == ("dcmi_get_device_logic_id", (3, 1))  # (card, device), not C order
    info = dcmi.dcmi_get_device_chip_info_v2(0, 0)
    assert (info.chip_name, info.aicore_cnt) == (b"910B2", 24)
    assert dcmi.dcmi_get_device_power_info(0, 0) == 999
    assert dcmi.dcmi_get_device_utilization_rate(0, 0, d.DCMI_INPUT_TYPE_AICORE) == 37
    assert script.asked[-1][1] == (0, 0, 2)
    assert dcmi.dcmi_get_driver_version() == "25.2.0"


def test_vdev_queries_go_through_dcmi_get_device_info_with_its_size_protocol() -> None:
    query = d.dcmi_vdev_query_stru()
    query.vdev_id = 100
    query.query_info.name = b"vir12_3c_32g"
    dcmi, script, lib = binding(dcmi_get_vdev_resource=[query])
    got = dcmi.dcmi_get_vdev_resource(0, 0, 100)
    assert got.query_info.name == b"vir12_3c_32g"
    assert script.asked == [("dcmi_get_vdev_resource", (0, 0, 100))]  # vdev_id read from buf
    assert lib.calls == ["dcmi_get_device_info"]
    # A buffer declared smaller than the struct is refused before anything is written.
    small = d.dcmi_vdev_query_stru()
    size = ctypes.c_uint(8)
    status = lib.dcmi_get_device_info(
        0, 0, d.DCMI_MAIN_CMD_VDEV_MNG, 0, ctypes.byref(small), ctypes.byref(size)
    )
    assert status == d.DCMI_ERROR_INVALID_PARAMETER
    # A sub-command the fake does not serve is NOT_SUPPORT, as the driver answers it.
    size = ctypes.c_uint(ctypes.sizeof(small))
    status = lib.dcmi_get_device_info(0, 0, 99, 0, ctypes.byref(small), ctypes.byref(size))
    assert status == d.DCMI_ERROR_NOT_SUPPORT


def test_error_codes_surface_with_their_value_and_name() -> None:
    dcmi, _, _ = binding(dcmi_get_device_hbm_info=[DCMIError(d.DCMI_ERROR_NOT_SUPPORT)])
    with pytest.raises(DCMIError) as raised:
        dcmi.dcmi_get_device_hbm_info(4, 0)
    assert raised.value.value == d.DCMI_ERROR_NOT_SUPPORT
    assert "DCMI_ERROR_NOT_SUPPORT (-8255)" in str(raised.value)
    assert raised.value.function == "dcmi_get_device_hbm_info"
    clone = pickle.loads(pickle.dumps(raised.value))
    assert (clone.value, clone.function) == (raised.value.value, raised.value.function)


def test_a_missing_symbol_is_function_not_found_and_calls_nothing() -> None:
    script = Script(dcmi_get_device_die_v2=[d.dcmi_die_id()])
    lib = FakeDcmiLib(script, missing={"dcmi_get_device_die_v2"})
    with pytest.raises(DCMIError) as raised:
        Dcmi(lib).dcmi_get_device_die_v2(0, 0, d.DCMI_DIE_TYPE_VDIE)
    assert raised.value.value == d.DCMI_ERROR_FUNCTION_NOT_FOUND
    assert script.asked == []


# -- loading ---------------------------------------------------------------------------------------


def test_load_library_names_every_path_tried() -> None:
    paths = ["/nonexistent/a/libdcmi.so", "/nonexistent/b/libdcmi.so"]
    with pytest.raises(DcmiLibraryNotFound) as raised:
        load_library(paths)
    assert all(path in str(raised.value) for path in paths)
    assert raised.value.tried == tuple(paths)
    assert isinstance(raised.value, OSError)
    assert copy.copy(raised.value).tried == tuple(paths)
    assert pickle.loads(pickle.dumps(raised.value)).tried == tuple(paths)


def test_default_search_starts_with_the_override(monkeypatch: pytest.MonkeyPatch) -> None:
    tried: list[str] = []

    def refuse(path: str, *args: Any, **kwargs: Any) -> ctypes.CDLL:
        tried.append(path)
        raise OSError(f"{path}: cannot open shared object file")

    monkeypatch.setenv("DCMI_LIB", "/custom/libdcmi.so")
    monkeypatch.setattr(ctypes, "CDLL", refuse)
    with pytest.raises(DcmiLibraryNotFound):
        load_library()
    assert tried == ["/custom/libdcmi.so", *d.DEFAULT_PATHS]
    assert "/usr/local/Ascend/driver/lib64/driver/libdcmi.so" in d.DEFAULT_PATHS


def test_load_library_declares_signatures(monkeypatch: pytest.MonkeyPatch) -> None:
    class Symbol:
        argtypes: list[object] | None = None
        restype: object = None

    class Library:
        def __init__(self) -> None:
            self.dcmi_get_device_resource_info = Symbol()

    monkeypatch.setattr(ctypes, "CDLL", lambda path: Library())
    dcmi = load_library(["/any/libdcmi.so"])
    symbol = dcmi.lib.dcmi_get_device_resource_info  # type: ignore[attr-defined]
    assert symbol.restype is ctypes.c_int
    assert symbol.argtypes == [
        ctypes.c_int,
        ctypes.c_int,
        ctypes.POINTER(d.dcmi_proc_mem_info),
        ctypes.POINTER(ctypes.c_int),
    ]


def test_nothing_loads_the_library_until_it_is_asked_for() -> None:
    """Importing the binding, the backend and the loader opens no shared object."""
    code = textwrap.dedent(
        """
        import ctypes
        opened = []
        real = ctypes.CDLL
        ctypes.CDLL = lambda *a, **k: opened.append(a[0]) or real(*a, **k)
        import gpustack_vendors.ascend.dcmi, gpustack_vendors.ascend.backend
        import gpustack_vendors.loading
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

    monkeypatch.delenv("DCMI_LIB", raising=False)
    monkeypatch.setattr(ctypes, "CDLL", refuse)
    result = CliRunner().invoke(app, ["device-manager", "detect", "--manufacturer", "ascend"])
    assert result.exit_code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "libdcmi.so could not be loaded" in lines[0]
    assert all(path in lines[0] for path in d.DEFAULT_PATHS)
    assert result.stdout == ""
