"""Hygon's bindings over their C-ABI fakes: layouts, out-parameters, handles, errors, loading."""

from __future__ import annotations

import copy
import ctypes
import ctypes.util
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gpustack_simulator.replay.hydmi_lib import FakeHyDmiLib
from gpustack_simulator.replay.hygon_rocm_smi_lib import FakeHygonRocmSmiLib
from gpustack_vendors.bindings import rocm_smi
from gpustack_vendors.bindings.rocm_smi import ROCMSMIError, RocmSmiLibraryNotFound
from gpustack_vendors.hygon import hydmi
from gpustack_vendors.hygon import rocm_smi as hygon_rocm_smi
from gpustack_vendors.hygon.hydmi import (
    DirectoryRegistry,
    HyDmiError,
    HyDmiLibraryNotFound,
    HyDmiMig,
    dmiGpuInstanceInfo_t,
    dmiGpuInstancePlacement_t,
    dmiGpuInstanceProfileInfo_t,
    dmiMemory_t,
    dmiUtilization_t,
)
from gpustack_vendors.hygon.rocm_smi import HygonRocmSmi


class Script:
    """An ``answer`` callback: fixed answers per symbol, every call logged with its arguments."""

    def __init__(self, **answers: object) -> None:
        self.answers = answers
        self.asked: list[tuple[str, tuple[object, ...]]] = []

    def __call__(self, name: str, args: tuple[object, ...]) -> object:
        self.asked.append((name, args))
        value = self.answers[name]
        if isinstance(value, BaseException):
            raise value
        return value(*args) if callable(value) else value


def offsets(struct: type[ctypes.Structure]) -> list[tuple[str, int, int]]:
    return [
        (f[0], getattr(struct, f[0]).offset, getattr(struct, f[0]).size) for f in struct._fields_
    ]


# -- libhydmi_mig: layouts and codes --------------------------------------------------------------


def test_structs_follow_the_vendor_header_not_pynvml() -> None:
    assert offsets(dmiGpuInstanceProfileInfo_t) == [
        ("id", 0, 4),
        ("gi_count_max", 4, 4),
        ("cu_count", 8, 4),
        ("gpu_slice_count", 12, 4),
        ("memory_size_MB", 16, 8),
        ("name", 24, 256),
    ]
    assert ctypes.sizeof(dmiGpuInstanceProfileInfo_t) == 280
    assert offsets(dmiGpuInstanceInfo_t) == [
        ("device", 0, 8),
        ("id", 8, 4),
        ("profile_id", 12, 4),
        ("placement", 16, 8),
    ]
    assert offsets(dmiGpuInstancePlacement_t) == [("start", 0, 4), ("size", 4, 4)]
    assert offsets(dmiMemory_t) == [("total", 0, 8), ("free", 8, 8), ("used", 16, 8)]
    assert offsets(dmiUtilization_t) == [("gpu", 0, 4), ("memory", 4, 4)]
    # Same name in the header, different struct: pynvml's profile info has other fields.
    nvml_fields = [f[0] for f in pynvml.c_nvmlGpuInstanceProfileInfo_t._fields_]
    assert nvml_fields != [f[0] for f in dmiGpuInstanceProfileInfo_t._fields_]


def test_return_codes_are_nvmls_verbatim() -> None:
    for name, value in vars(hydmi).items():
        if name.startswith("DMI_ERROR_"):
            assert getattr(pynvml, name.replace("DMI_", "NVML_")) == value, name
    assert hydmi.DMI_SUCCESS == pynvml.NVML_SUCCESS


def test_errors_carry_the_code_and_survive_copies() -> None:
    error = HyDmiError(hydmi.DMI_ERROR_NOT_FOUND, "nvmlDeviceGetMigDeviceHandleByIndex")
    assert str(error) == "nvmlDeviceGetMigDeviceHandleByIndex: DMI_ERROR_NOT_FOUND (6)"
    clone = pickle.loads(pickle.dumps(error))
    assert (clone.value, clone.function) == (6, "nvmlDeviceGetMigDeviceHandleByIndex")
    assert str(HyDmiError(1234)) == "DMI_ERROR_1234 (1234)"


# -- libhydmi_mig over the C-ABI fake ------------------------------------------------------------


CARD = 0x7F00_0000_1000
MIG = 0x7F00_0000_2000
GI = 0x7F00_0000_3000


def test_handles_go_out_and_come_back_as_the_same_pointer() -> None:
    script = Script(
        nvmlDeviceGetHandleByPciBusId=ctypes.c_void_p(CARD),
        nvmlDeviceGetMigDeviceHandleByIndex=MIG,
        nvmlDeviceGetGpuInstanceId=3,
        nvmlDeviceGetIndex=0,
    )
    dmi = HyDmiMig(FakeHyDmiLib(script))
    card = dmi.nvmlDeviceGetHandleByPciBusId("0000:1b:00.0")
    assert isinstance(card, ctypes.c_void_p)
    assert card.value == CARD
    mig = dmi.nvmlDeviceGetMigDeviceHandleByIndex(card, 5)
    assert mig.value == MIG
    assert dmi.nvmlDeviceGetGpuInstanceId(mig) == 3
    assert dmi.nvmlDeviceGetIndex(CARD) == 0  # a bare address is a handle too
    (_, (bus,)), (_, (parent, index)), (_, (asked,)), (_, (raw,)) = script.asked
    assert bus == "0000:1b:00.0"  # the address crosses as bytes and is answered as text
    assert (parent.value, index) == (CARD, 5)
    assert asked.value == MIG
    assert raw.value == CARD


def test_out_parameters_carry_structs_pairs_and_counts() -> None:
    profile = dmiGpuInstanceProfileInfo_t(3, 4, 20, 1, 16380, b"MIG 2g.15gb")
    info = dmiGpuInstanceInfo_t(CARD, 3, 3, dmiGpuInstancePlacement_t(2, 1))
    script = Script(
        nvmlGetSystemMigMode=(1, 0),
        nvmlDeviceGetCount=8,
        nvmlDeviceGetGpuInstanceProfileInfo=profile,
        nvmlDeviceGetGpuInstanceById=GI,
        nvmlGpuInstanceGetInfo=info,
        nvmlDeviceGetMemoryInfo=dmiMemory_t(17175674880, 0, 17175674880),
        nvmlDeviceGetUtilizationRates=dmiUtilization_t(85, 28),
    )
    dmi = HyDmiMig(FakeHyDmiLib(script))
    assert dmi.nvmlGetSystemMigMode() == (1, 0)
    assert dmi.nvmlDeviceGetCount() == 8
    got = dmi.nvmlDeviceGetGpuInstanceProfileInfo(CARD, 0)
    assert (got.id, got.cu_count, got.memory_size_MB, got.name) == (3, 20, 16380, b"MIG 2g.15gb")
    gi = dmi.nvmlDeviceGetGpuInstanceById(CARD, 3)
    read = dmi.nvmlGpuInstanceGetInfo(gi)
    assert (read.device, read.id, read.placement.start, read.placement.size) == (CARD, 3, 2, 1)
    assert dmi.nvmlDeviceGetMemoryInfo(MIG).total == 17175674880
    assert dmi.nvmlDeviceGetUtilizationRates(MIG).gpu == 85


def test_a_non_success_status_raises_with_its_code_and_function() -> None:
    script = Script(nvmlDeviceGetMigDeviceHandleByIndex=HyDmiError(hydmi.DMI_ERROR_NOT_FOUND))
    with pytest.raises(HyDmiError) as raised:
        HyDmiMig(FakeHyDmiLib(script)).nvmlDeviceGetMigDeviceHandleByIndex(CARD, 9)
    assert raised.value.value == hydmi.DMI_ERROR_NOT_FOUND
    assert raised.value.function == "nvmlDeviceGetMigDeviceHandleByIndex"


def test_a_missing_symbol_is_function_not_found_and_calls_nothing() -> None:
    script = Script(nvmlDeviceGetUtilizationRates=dmiUtilization_t(1, 1), nvmlDeviceGetCount=2)
    lib = FakeHyDmiLib(script, missing={"nvmlDeviceGetUtilizationRates"})
    dmi = HyDmiMig(lib)
    with pytest.raises(HyDmiError) as raised:
        dmi.nvmlDeviceGetUtilizationRates(MIG)
    assert raised.value.value == hydmi.DMI_ERROR_FUNCTION_NOT_FOUND
    assert dmi.nvmlDeviceGetCount() == 2  # the others still work
    assert lib.calls == ["nvmlDeviceGetCount"]


def test_the_fake_refuses_what_the_c_types_cannot_hold() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        HyDmiMig(FakeHyDmiLib(Script(nvmlDeviceGetCount=-1))).nvmlDeviceGetCount()
    with pytest.raises(TypeError, match="live handle"):
        HyDmiMig(
            FakeHyDmiLib(Script(nvmlDeviceGetHandleByPciBusId=0))
        ).nvmlDeviceGetHandleByPciBusId("x")
    with pytest.raises(TypeError, match="dmiMemory_t"):
        HyDmiMig(
            FakeHyDmiLib(Script(nvmlDeviceGetMemoryInfo=dmiUtilization_t()))
        ).nvmlDeviceGetMemoryInfo(MIG)


def test_a_real_library_without_the_symbols_answers_function_not_found() -> None:
    """Through ``ctypes.CDLL`` itself: libc loads, and every MIG symbol is missing from it."""
    libc = ctypes.util.find_library("c")
    if libc is None:
        pytest.skip("no libc to stand in for a library without the symbols")
    dmi = hydmi.load_library([libc])
    assert isinstance(dmi.lib, ctypes.CDLL)
    with pytest.raises(HyDmiError) as raised:
        dmi.nvmlGetSystemMigMode()
    assert raised.value.value == hydmi.DMI_ERROR_FUNCTION_NOT_FOUND


# -- the instance registry -----------------------------------------------------------------------


def test_registry_reads_each_compute_instances_uuid(tmp_path: Path) -> None:
    ci = tmp_path / "ci"
    ci.mkdir()
    (ci / "dev0gi3ci0.conf").write_text(
        "gi_id: 3\nprofile_id: 3\nci_id: 0\nmig_uuid: 5b3c9e1a-7d2f-4c86-9a0e-1f2b3c4d5e60\n"
    )
    (ci / "dev1gi1ci0.conf").write_text("mig_uuid: old\nci_id: 0\nmig_uuid:  6c4d-70 \n")
    (ci / "dev2gi5ci0.conf").write_text("truncated: yes\n")  # no uuid: left out
    assert DirectoryRegistry(tmp_path).read() == {
        "dev0gi3ci0.conf": "5b3c9e1a-7d2f-4c86-9a0e-1f2b3c4d5e60",
        "dev1gi1ci0.conf": "6c4d-70",  # the last line wins
    }
    assert HyDmiMig(FakeHyDmiLib(Script()), DirectoryRegistry(tmp_path)).dmi_mig_registry()


def test_no_registry_directory_means_no_instances(tmp_path: Path) -> None:
    assert DirectoryRegistry(tmp_path / "absent").read() == {}


def test_an_unreadable_registry_is_an_error_not_an_empty_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Denied by the kernel (as for a non-root Device Manager); root would read any mode, so
    the denial is made at the listing itself rather than with chmod."""
    ci = tmp_path / "ci"
    ci.mkdir()
    real_iterdir = Path.iterdir

    def denied(self: Path) -> Any:
        if self == ci:
            raise PermissionError(13, "Permission denied", str(self))
        return real_iterdir(self)

    monkeypatch.setattr(Path, "iterdir", denied)
    with pytest.raises(HyDmiError) as raised:
        DirectoryRegistry(tmp_path).read()
    assert raised.value.value == hydmi.DMI_ERROR_NO_PERMISSION


def test_an_unlistable_registry_is_an_error_not_an_empty_one(tmp_path: Path) -> None:
    (tmp_path / "ci").write_text("a file where the directory should be")
    with pytest.raises(HyDmiError) as raised:
        DirectoryRegistry(tmp_path).read()
    assert raised.value.value == hydmi.DMI_ERROR_UNKNOWN


# -- Hygon's ROCm SMI fork over its fake ---------------------------------------------------------


def test_card_calls_write_through_their_out_parameters() -> None:
    script = Script(
        rsmi_dev_unique_id_get=0x7100F95CEE823041,
        rsmi_dev_memory_total_get=65520 << 20,
        rsmi_dev_memory_usage_get=2 << 20,
        rsmi_dev_busy_percent_get=97,
        rsmi_dev_temp_metric_get=-5_500,
        rsmi_dev_power_ave_get=223_000_000,
    )
    smi = HygonRocmSmi(FakeHygonRocmSmiLib(script))
    assert smi.rsmi_dev_unique_id_get(0) == 0x7100F95CEE823041
    assert smi.rsmi_dev_memory_total_get(0, 0) == 65520 << 20
    assert smi.rsmi_dev_memory_usage_get(0, 0) == 2 << 20
    assert smi.rsmi_dev_busy_percent_get(0) == 97
    assert smi.rsmi_dev_temp_metric_get(0, 1, 0) == -5_500  # signed: below zero is possible
    assert smi.rsmi_dev_power_ave_get(0, 0) == 223_000_000
    assert ("rsmi_dev_temp_metric_get", (0, 1, 0)) in script.asked


def test_strings_are_copied_truncated_and_terminated() -> None:
    long = "K" * 400
    smi = HygonRocmSmi(
        FakeHygonRocmSmiLib(Script(rsmi_dev_name_get=long, rsmi_version_str_get="6.3"))
    )
    assert smi.rsmi_dev_name_get(0) == "K" * (hygon_rocm_smi.NAME_BUFFER - 1)
    assert smi.rsmi_version_str_get(0) == "6.3"


def test_fork_statuses_and_missing_symbols() -> None:
    script = Script(rsmi_dev_busy_percent_get=ROCMSMIError(rocm_smi.RSMI_STATUS_NOT_SUPPORTED))
    lib = FakeHygonRocmSmiLib(script, missing={"rsmi_dev_power_ave_get"})
    smi = HygonRocmSmi(lib)
    with pytest.raises(ROCMSMIError) as unsupported:
        smi.rsmi_dev_busy_percent_get(0)
    assert unsupported.value.value == rocm_smi.RSMI_STATUS_NOT_SUPPORTED
    with pytest.raises(ROCMSMIError) as missing:
        smi.rsmi_dev_power_ave_get(0, 0)
    assert missing.value.value == rocm_smi.RSMI_STATUS_FAIL_LOAD_SYMBOL
    with pytest.raises(ValueError, match="does not fit"):
        HygonRocmSmi(
            FakeHygonRocmSmiLib(Script(rsmi_dev_busy_percent_get=1 << 32))
        ).rsmi_dev_busy_percent_get(0)


# -- loading -------------------------------------------------------------------------------------


def refusing(tried: list[str]) -> Any:
    def refuse(path: str, *args: Any, **kwargs: Any) -> ctypes.CDLL:
        tried.append(path)
        raise OSError(f"{path}: cannot open shared object file")

    return refuse


def test_mig_library_search_names_every_path_override_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tried: list[str] = []
    monkeypatch.setenv("HYDMI_MIG_LIB", "/custom/libhydmi_mig.so.1")
    monkeypatch.setattr(ctypes, "CDLL", refusing(tried))
    with pytest.raises(HyDmiLibraryNotFound) as raised:
        hydmi.load_library()
    assert tried == ["/custom/libhydmi_mig.so.1", *hydmi.DEFAULT_PATHS]
    assert tried[1] == "/opt/hyhal/lib/libhydmi_mig.so.1"
    message = str(raised.value)
    assert message.startswith("libhydmi_mig.so.1 could not be loaded. Tried: /custom/")
    assert all(path in message for path in tried)
    assert "\n" not in message
    assert pickle.loads(pickle.dumps(raised.value)).tried == tuple(tried)
    assert copy.copy(raised.value).tried == tuple(tried)


def test_mig_library_opens_rtld_local(monkeypatch: pytest.MonkeyPatch) -> None:
    modes: list[int] = []

    class Lib:
        def __init__(self, path: str, mode: int = 0) -> None:
            modes.append(mode)

    monkeypatch.setattr(ctypes, "CDLL", Lib)
    dmi = hydmi.load_library(["/anywhere/libhydmi_mig.so.1"])
    assert isinstance(dmi.lib, Lib)
    assert modes == [os.RTLD_LOCAL]  # its nvml* names must never shadow libnvidia-ml's


def test_rocm_smi_fork_is_searched_under_hyhal_first(monkeypatch: pytest.MonkeyPatch) -> None:
    tried: list[str] = []
    monkeypatch.delenv("ROCM_SMI_LIB", raising=False)
    monkeypatch.setattr(ctypes, "CDLL", refusing(tried))
    with pytest.raises(RocmSmiLibraryNotFound) as raised:
        hygon_rocm_smi.load_library()
    assert tried == list(hygon_rocm_smi.DEFAULT_PATHS)
    assert tried[0].startswith("/opt/hyhal/lib/")
    assert not any(path.startswith("/opt/rocm") for path in tried)
    assert all(path in str(raised.value) for path in tried)


def test_rocm_smi_fork_declares_the_card_signatures(monkeypatch: pytest.MonkeyPatch) -> None:
    class Symbol:
        argtypes: list[object] | None = None
        restype: object = None

    class Lib:
        def __init__(self, path: str, *args: Any) -> None:
            self.symbols = {name: Symbol() for name in hygon_rocm_smi.FUNCTIONS}

        def __getattr__(self, name: str) -> Symbol:
            try:
                return self.__dict__["symbols"][name]
            except KeyError:
                raise AttributeError(name) from None

    monkeypatch.setattr(ctypes, "CDLL", Lib)
    smi = hygon_rocm_smi.load_library(["/anywhere/librocm_smi64.so.2"])
    assert isinstance(smi, HygonRocmSmi)
    temp = smi.lib.rsmi_dev_temp_metric_get
    assert temp.argtypes is not None
    assert temp.argtypes[-1]._type_ is ctypes.c_int64
    assert temp.restype is ctypes.c_uint32
    assert smi.lib.rsmi_compute_process_info_get.restype is ctypes.c_uint32  # the base's too


def test_importing_the_backend_and_bindings_opens_no_library() -> None:
    code = (
        "import ctypes\n"
        "def boom(*a, **k): raise AssertionError('a library was opened at import')\n"
        "ctypes.CDLL = boom\n"
        "import gpustack_vendors.hygon.hydmi, gpustack_vendors.hygon.rocm_smi\n"
        "import gpustack_vendors.hygon.backend, gpustack_vendors.registry\n"
        "import gpustack_vendors.loading\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
