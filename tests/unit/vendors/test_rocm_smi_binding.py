"""The ROCm SMI binding over a C-ABI fake: size negotiation, errors, loading."""

from __future__ import annotations

import copy
import ctypes
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from vendor_helpers import Script

from gpustack_simulator.replay.rocm_smi_lib import FakeRocmSmiLib
from gpustack_vendors.bindings import rocm_smi
from gpustack_vendors.bindings.rocm_smi import (
    CU_OCCUPANCY_INVALID,
    RSMI_STATUS_BUSY,
    RSMI_STATUS_FAIL_LOAD_SYMBOL,
    RSMI_STATUS_INSUFFICIENT_SIZE,
    RSMI_STATUS_INVALID_ARGS,
    RSMI_STATUS_NOT_SUPPORTED,
    RSMI_STATUS_PERMISSION,
    RSMI_STATUS_SUCCESS,
    RSMI_STATUS_UNEXPECTED_SIZE,
    RSMI_STATUS_UNKNOWN_ERROR,
    RocmSmi,
    ROCMSMIError,
    RocmSmiLibraryNotFound,
    load_library,
    pci_address,
    rsmi_process_info_t,
)

U32 = 0xFFFFFFFF
U64 = 0xFFFFFFFFFFFFFFFF

Row = tuple[int, int, int, int, int]
FIELDS = ("process_id", "pasid", "vram_usage", "sdma_usage", "cu_occupancy")


def info(row: Row) -> rsmi_process_info_t:
    return rsmi_process_info_t(*row)


def as_row(value: rsmi_process_info_t) -> Row:
    return (value.process_id, value.pasid, value.vram_usage, value.sdma_usage, value.cu_occupancy)


def binding(**answers: list[object]) -> tuple[RocmSmi, Script, FakeRocmSmiLib]:
    script = Script(**answers)
    lib = FakeRocmSmiLib(script)
    return RocmSmi(lib), script, lib


# -- layout ---------------------------------------------------------------------------------------


def test_process_info_layout_matches_the_header() -> None:
    # uint32, uint32, uint64, uint64, uint32: natural alignment puts the u64s at 8 and 16.
    offsets = [getattr(rsmi_process_info_t, name).offset for name in FIELDS]
    sizes = [getattr(rsmi_process_info_t, name).size for name in FIELDS]
    assert offsets == [0, 4, 8, 16, 24]
    assert sizes == [4, 4, 8, 8, 4]
    assert ctypes.sizeof(rsmi_process_info_t) == 32


def test_status_values_match_the_header() -> None:
    assert (RSMI_STATUS_NOT_SUPPORTED, RSMI_STATUS_PERMISSION) == (2, 4)
    assert (RSMI_STATUS_INSUFFICIENT_SIZE, RSMI_STATUS_UNEXPECTED_SIZE) == (11, 13)
    assert (RSMI_STATUS_BUSY, RSMI_STATUS_FAIL_LOAD_SYMBOL) == (16, 22)
    assert rocm_smi.RSMI_INITIALIZATION_ERROR == rocm_smi.RSMI_STATUS_INIT_ERROR == 8
    assert RSMI_STATUS_UNKNOWN_ERROR == CU_OCCUPANCY_INVALID == U32


# -- process list ---------------------------------------------------------------------------------


def test_no_processes_is_one_probe_and_no_fill() -> None:
    smi, script, lib = binding(rsmi_compute_process_info_get=[[]])
    assert smi.rsmi_compute_process_info_get() == []
    assert script.count("rsmi_compute_process_info_get") == 1
    assert lib.calls == ["rsmi_compute_process_info_get"]


def test_processes_round_trip_every_field() -> None:
    rows: list[Row] = [
        (4242, 7, 3 << 30, 1_500_000, 37),
        (U32, U32, U64, U64, CU_OCCUPANCY_INVALID),
        (1, 0, 0, 0, 0),
    ]
    smi, script, _ = binding(rsmi_compute_process_info_get=[[info(r) for r in rows]])
    got = smi.rsmi_compute_process_info_get()
    assert [as_row(p) for p in got] == rows
    assert all(type(p) is rsmi_process_info_t for p in got)
    assert script.count("rsmi_compute_process_info_get") == 2  # probe, then fill


def test_cu_occupancy_invalid_is_kept_raw() -> None:
    smi, _, _ = binding(
        rsmi_compute_process_info_get=[[info((10, 1, 4096, 0, CU_OCCUPANCY_INVALID))]]
    )
    (proc,) = smi.rsmi_compute_process_info_get()
    assert proc.cu_occupancy == CU_OCCUPANCY_INVALID == 0xFFFFFFFF


def test_rows_are_copies_not_views_of_the_buffer() -> None:
    smi, _, _ = binding(rsmi_compute_process_info_get=[[info((1, 2, 3, 4, 5))]])
    (proc,) = smi.rsmi_compute_process_info_get()
    assert proc._b_base_ is None  # owns its memory: does not pin the oversized buffer


def test_list_growing_once_between_probe_and_fill_is_retried() -> None:
    small = [info((pid, 0, pid * 10, 0, 0)) for pid in range(1, 3)]
    large = [info((pid, 0, pid * 10, 0, 0)) for pid in range(1, 41)]  # past the slack
    smi, script, _ = binding(rsmi_compute_process_info_get=[small, large])
    got = smi.rsmi_compute_process_info_get()
    assert [p.process_id for p in got] == list(range(1, 41))
    # probe (2), fill (40 > capacity: INSUFFICIENT_SIZE), probe (40), fill.
    assert script.count("rsmi_compute_process_info_get") == 4


def test_list_that_never_stops_growing_raises_instead_of_truncating() -> None:
    asked = 0

    def answer(name: str, args: tuple[object, ...]) -> object:
        nonlocal asked
        asked += 1  # 15, 45, 135, … rows: every fill finds the list past the re-probed count
        return [info((pid, 0, 0, 0, 0)) for pid in range(5 * 3**asked)]

    with pytest.raises(ROCMSMIError) as raised:
        RocmSmi(FakeRocmSmiLib(answer)).rsmi_compute_process_info_get()
    assert raised.value.value == RSMI_STATUS_INSUFFICIENT_SIZE
    assert raised.value.function == "rsmi_compute_process_info_get"
    assert asked == 6  # three bounded probe-and-fill rounds


def test_list_that_shrinks_after_the_probe_returns_only_written_rows() -> None:
    three = [info((pid, 0, 0, 0, 0)) for pid in (5, 6, 7)]
    smi, _, _ = binding(rsmi_compute_process_info_get=[three, three[:1]])
    assert [p.process_id for p in smi.rsmi_compute_process_info_get()] == [5]


@pytest.mark.parametrize(
    "status", [RSMI_STATUS_PERMISSION, RSMI_STATUS_BUSY, RSMI_STATUS_UNKNOWN_ERROR]
)
def test_error_status_surfaces_with_its_value(status: int) -> None:
    smi, _, _ = binding(rsmi_compute_process_info_get=[ROCMSMIError(status)])
    with pytest.raises(ROCMSMIError) as raised:
        smi.rsmi_compute_process_info_get()
    assert raised.value.value == status
    assert rocm_smi.status_name(status) in str(raised.value)


def test_error_on_the_fill_call_surfaces_too() -> None:
    rows = [info((1, 0, 0, 0, 0))]
    smi, _, _ = binding(rsmi_compute_process_info_get=[rows, ROCMSMIError(RSMI_STATUS_BUSY)])
    with pytest.raises(ROCMSMIError) as raised:
        smi.rsmi_compute_process_info_get()
    assert raised.value.value == RSMI_STATUS_BUSY


def test_a_library_claiming_more_rows_than_room_is_refused() -> None:
    class Overclaiming:
        def rsmi_compute_process_info_get(self, procs: Any, num_items: Any) -> int:
            num_items[0] = 1 if procs is None else 1000
            return RSMI_STATUS_SUCCESS

    with pytest.raises(ROCMSMIError) as raised:
        RocmSmi(Overclaiming()).rsmi_compute_process_info_get()
    assert raised.value.value == RSMI_STATUS_UNEXPECTED_SIZE


# -- missing symbols ------------------------------------------------------------------------------


def test_missing_symbol_raises_fail_load_symbol_and_calls_nothing() -> None:
    script = Script(rsmi_compute_process_gpus_get=[[0]])
    lib = FakeRocmSmiLib(script, missing={"rsmi_compute_process_gpus_get"})
    with pytest.raises(ROCMSMIError) as raised:
        RocmSmi(lib).rsmi_compute_process_gpus_get(1)
    assert raised.value.value == RSMI_STATUS_FAIL_LOAD_SYMBOL
    assert "rsmi_compute_process_gpus_get" in str(raised.value)
    assert script.asked == []


def test_symbol_unknown_to_the_fake_is_an_attribute_error() -> None:
    lib = FakeRocmSmiLib(Script())
    with pytest.raises(AttributeError):
        _ = lib.rsmi_dev_unique_id_get


def test_one_missing_symbol_leaves_the_others_working() -> None:
    script = Script(rsmi_num_monitor_devices=[4])
    lib = FakeRocmSmiLib(script, missing={"rsmi_compute_process_info_get"})
    smi = RocmSmi(lib)
    assert smi.rsmi_num_monitor_devices() == 4
    with pytest.raises(ROCMSMIError) as raised:
        smi.rsmi_compute_process_info_get()
    assert raised.value.value == RSMI_STATUS_FAIL_LOAD_SYMBOL


# -- other calls ----------------------------------------------------------------------------------


def test_process_gpus_negotiation() -> None:
    smi, script, _ = binding(rsmi_compute_process_gpus_get=[[3, 0, 7]])
    assert smi.rsmi_compute_process_gpus_get(4242) == [3, 0, 7]
    assert script.asked == [("rsmi_compute_process_gpus_get", (4242,))] * 2


def test_process_gpus_empty_and_growing() -> None:
    smi, script, _ = binding(rsmi_compute_process_gpus_get=[[]])
    assert smi.rsmi_compute_process_gpus_get(1) == []
    assert script.count("rsmi_compute_process_gpus_get") == 1

    many = list(range(32))
    smi, _, _ = binding(rsmi_compute_process_gpus_get=[[0], many])
    assert smi.rsmi_compute_process_gpus_get(1) == many


def test_pci_id_and_device_count() -> None:
    bdfid = (0x0001 << 32) | (0x3 << 28) | (0xC1 << 8) | (0x1F << 3) | 0x5
    smi, script, _ = binding(rsmi_dev_pci_id_get=[bdfid], rsmi_num_monitor_devices=[8])
    assert smi.rsmi_dev_pci_id_get(2) == bdfid
    assert ("rsmi_dev_pci_id_get", (2,)) in script.asked
    assert smi.rsmi_num_monitor_devices() == 8
    assert pci_address(bdfid) == "0001:c1:1f.5"  # the partition bits [31:28] are not the bus
    assert pci_address(0x0300) == "0000:03:00.0"


def test_info_by_device() -> None:
    row: Row = (77, 3, 123456789, 42, 12)
    smi, script, _ = binding(rsmi_compute_process_info_by_device_get=[info(row)])
    assert as_row(smi.rsmi_compute_process_info_by_device_get(77, 1)) == row
    assert script.asked == [("rsmi_compute_process_info_by_device_get", (77, 1))]


def test_init_and_shut_down_pass_flags_and_statuses() -> None:
    smi, script, _ = binding(rsmi_init=[None], rsmi_shut_down=[ROCMSMIError(RSMI_STATUS_BUSY)])
    smi.rsmi_init()
    smi.rsmi_init(1)
    assert script.asked == [("rsmi_init", (0,)), ("rsmi_init", (1,))]
    with pytest.raises(ROCMSMIError) as raised:
        smi.rsmi_shut_down()
    assert raised.value.value == RSMI_STATUS_BUSY


def test_fake_follows_the_c_conventions_for_null_and_short_buffers() -> None:
    rows = [info((pid, 0, 0, 0, 0)) for pid in (1, 2, 3)]
    lib = FakeRocmSmiLib(Script(rsmi_compute_process_info_get=[rows]))
    count = ctypes.c_uint32(99)
    assert lib.rsmi_compute_process_info_get(None, ctypes.byref(count)) == RSMI_STATUS_SUCCESS
    assert count.value == 3
    buffer = (rsmi_process_info_t * 2)()
    count = ctypes.c_uint32(2)
    status = lib.rsmi_compute_process_info_get(buffer, ctypes.pointer(count))
    assert status == RSMI_STATUS_INSUFFICIENT_SIZE
    assert count.value == 2  # rows written, as src/rocm_smi.cc leaves it
    assert [b.process_id for b in buffer] == [1, 2]
    assert lib.rsmi_compute_process_info_get(buffer, None) == RSMI_STATUS_INVALID_ARGS


def test_fake_refuses_values_the_c_type_cannot_hold() -> None:
    smi, _, _ = binding(rsmi_num_monitor_devices=[U32 + 1])
    with pytest.raises(ValueError, match="does not fit"):
        smi.rsmi_num_monitor_devices()


# -- errors and loading ---------------------------------------------------------------------------


def test_error_message_comes_from_the_static_table() -> None:
    assert str(ROCMSMIError(RSMI_STATUS_PERMISSION)).startswith("RSMI_STATUS_PERMISSION (4)")
    assert str(ROCMSMIError(1234)) == "unknown ROCm SMI status 1234"
    clone = pickle.loads(pickle.dumps(ROCMSMIError(RSMI_STATUS_BUSY, "rsmi_init")))
    assert (clone.value, clone.function) == (RSMI_STATUS_BUSY, "rsmi_init")


def test_load_library_names_every_path_tried() -> None:
    paths = ["/nonexistent/a/librocm_smi64.so", "/nonexistent/b/librocm_smi64.so.7"]
    with pytest.raises(RocmSmiLibraryNotFound) as raised:
        load_library(paths)
    message = str(raised.value)
    assert all(path in message for path in paths)
    assert raised.value.tried == tuple(paths)
    assert isinstance(raised.value, OSError)
    assert copy.copy(raised.value).tried == tuple(paths)
    assert pickle.loads(pickle.dumps(raised.value)).tried == tuple(paths)


def test_load_library_default_search_starts_with_the_override(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tried: list[str] = []

    def refuse(path: str) -> ctypes.CDLL:
        tried.append(path)
        raise OSError(f"{path}: cannot open shared object file")

    monkeypatch.setenv("ROCM_SMI_LIB", "/custom/librocm_smi64.so")
    monkeypatch.setattr(ctypes, "CDLL", refuse)
    with pytest.raises(RocmSmiLibraryNotFound) as raised:
        load_library()
    assert tried == ["/custom/librocm_smi64.so", *rocm_smi.DEFAULT_PATHS]
    assert "/opt/hyhal/lib/librocm_smi64.so" in str(raised.value)


def test_load_library_declares_signatures(monkeypatch: pytest.MonkeyPatch) -> None:
    class Symbol:
        argtypes: list[object] | None = None
        restype: object = None

    class Library:
        def __init__(self) -> None:
            self.rsmi_compute_process_info_get = Symbol()

    def open_library(path: str) -> Library:
        return Library()

    monkeypatch.setattr(ctypes, "CDLL", open_library)
    smi = load_library(["/any/librocm_smi64.so"])
    symbol = smi.lib.rsmi_compute_process_info_get  # type: ignore[attr-defined]
    assert symbol.restype is ctypes.c_uint32
    assert symbol.argtypes == [
        ctypes.POINTER(rsmi_process_info_t),
        ctypes.POINTER(ctypes.c_uint32),
    ]


# -- property -------------------------------------------------------------------------------------

u32s = st.integers(min_value=0, max_value=U32)
u64s = st.integers(min_value=0, max_value=U64)
rows_strategy = st.lists(st.tuples(u32s, u32s, u64s, u64s, u32s), max_size=50)


@given(rows=rows_strategy)
def test_any_process_list_round_trips_exactly(rows: list[Row]) -> None:
    smi, script, _ = binding(rsmi_compute_process_info_get=[[info(r) for r in rows]])
    assert [as_row(p) for p in smi.rsmi_compute_process_info_get()] == rows
    assert script.count("rsmi_compute_process_info_get") == (2 if rows else 1)


@given(first=rows_strategy, second=rows_strategy)
def test_a_list_changing_between_probe_and_fill_is_never_truncated(
    first: list[Row], second: list[Row]
) -> None:
    smi, _, _ = binding(
        rsmi_compute_process_info_get=[[info(r) for r in first], [info(r) for r in second]]
    )
    got = [as_row(p) for p in smi.rsmi_compute_process_info_get()]
    # The probe saw `first`, every later call `second`: the answer is `second` in full, or
    # nothing when the probe found no processes (no fill is made then).
    assert got == (second if first else [])
