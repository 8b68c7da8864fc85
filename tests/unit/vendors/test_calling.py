"""``_call`` names a failure after the bound function it was handed, for every kind of binding.

Backends call ``self._call(self._lib.fn, ...)``; the error's function name is ``fn.__name__``,
which must be the library's own name whatever the binding is: a module function (pynvml,
amdsmi), a method of our ctypes bindings, or the recorder's proxy closure around either. The
messages are what operators and tests read ("mxSmlGetDeviceCount: MXSML error 17").
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import cast

import msgspec
import pynvml
import pytest

import gpustack_vendors
from gpustack_simulator.recorder import RecordingProxy
from gpustack_simulator.recording import Fault, Raises, Recording, load_recording
from gpustack_simulator.replay import amdsmi_standin, rocm_smi_standin
from gpustack_simulator.replay.amdsmi_standin import AmdsmiCodec
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.replay.mxsml_standin import MxsmlCodec
from gpustack_simulator.synth.timeline import VirtualClock
from gpustack_vendors.amd.backend import AmdBackend
from gpustack_vendors.amd.surface import AmdSmiSurface
from gpustack_vendors.calling import BindingBackend, same
from gpustack_vendors.metax.backend import MxsmlCallError
from gpustack_vendors.metax.mxsml import MXSML_ERROR_FUNCTION_NOT_FOUND, Mxsml, MXSMLError
from gpustack_vendors.nvidia.backend import NvmlCallError

RECORDINGS = Path(__file__).resolve().parents[3] / "recordings"


class _Mxsml(BindingBackend):
    call_error = MxsmlCallError
    binding_error = MXSMLError


class _Nvml(BindingBackend):
    call_error = NvmlCallError
    binding_error = pynvml.NVMLError


def test_a_ctypes_binding_method_names_the_library_function() -> None:
    binding = Mxsml(object())  # a library without the symbol: the binding raises its own code
    with pytest.raises(MxsmlCallError) as failure:
        _Mxsml()._call(binding.mxSmlGetDeviceCount)
    assert failure.value.fn == "mxSmlGetDeviceCount"
    assert failure.value.code == MXSML_ERROR_FUNCTION_NOT_FOUND
    assert str(failure.value).startswith("mxSmlGetDeviceCount: MXSML error ")


def test_the_recorder_proxy_names_the_function_it_wraps() -> None:
    proxy = RecordingProxy(Mxsml(object()), MxsmlCodec())
    with pytest.raises(MxsmlCallError) as failure:
        _Mxsml()._call(proxy.mxSmlGetDeviceCount)
    assert failure.value.fn == "mxSmlGetDeviceCount"
    assert [o.fn for o in proxy.observations] == ["mxSmlGetDeviceCount"]


def test_a_module_function_names_itself() -> None:
    """pynvml before init: every call fails with NVML's UNINITIALIZED, named by the function."""
    with pytest.raises(NvmlCallError) as failure:
        _Nvml()._call(pynvml.nvmlDeviceGetHandleByIndex, 0)
    assert failure.value.fn == "nvmlDeviceGetHandleByIndex"
    assert str(failure.value) == (
        f"nvmlDeviceGetHandleByIndex: NVML error {pynvml.NVML_ERROR_UNINITIALIZED}"
    )


def test_maybe_is_absent_on_a_failure_and_converts_an_answer() -> None:
    backend = _Mxsml()
    assert backend._maybe(same, Mxsml(object()).mxSmlGetDeviceCount) is None
    assert backend._maybe(int, lambda text: text, "7") == 7


# -- AMD and Hygon: two libraries each, the same promise -----------------------------------------

AMD = RECORDINGS / "amd" / "rx7800xt.yaml"
HYGON_MIG = RECORDINGS / "hygon" / "bw-c3000-mig.yaml"


def _refusing(path: Path, fn: str, error: str, code: int) -> Recording:
    """The recording with every call of ``fn`` answering ``error`` ``code`` for the first minute."""
    fault = Fault(fn=fn, start=0.0, end=60.0, raises=Raises(type=error, code=code))
    return msgspec.structs.replace(load_recording(path), faults=(fault,))


@pytest.mark.parametrize(
    ("path", "fn", "error", "code", "note"),
    [
        (
            AMD,
            "amdsmi_get_gpu_device_bdf",
            "AmdSmiLibraryException",
            2,
            "processor 0: no PCI bus id, so no id (amdsmi_get_gpu_device_bdf: AMD SMI error 2)",
        ),
        (
            AMD,
            "rsmi_num_monitor_devices",
            "ROCMSMIError",
            4,
            "ROCm SMI devices unreadable (rsmi_num_monitor_devices: ROCm SMI error 4)",
        ),
        (
            HYGON_MIG,
            "rsmi_dev_unique_id_get",
            "ROCMSMIError",
            4,
            "device 0: no unique id or PCI address, so no id "
            "(rsmi_dev_unique_id_get: ROCm SMI error 4)",
        ),
        (
            HYGON_MIG,
            "nvmlDeviceGetCount",
            "HyDmiError",
            999,
            "no partitions: MIG state unreadable (nvmlDeviceGetCount: libhydmi_mig error 999)",
        ),
    ],
)
def test_amd_and_hygon_name_a_failure_after_the_bound_function(
    path: Path, fn: str, error: str, code: int, note: str
) -> None:
    """Both backends call each library through the surface's bound function, and a failure's
    note names that function and its library: what the replay stand-ins' methods carry, as
    amdsmi's module functions and our ctypes bindings' methods do on a node."""
    backend = replay_backend(_refusing(path, fn, error, code), clock=VirtualClock())
    try:
        assert note in backend.detect().notes
    finally:
        backend.close()


def test_the_recorder_proxy_around_amd_smi_names_the_function_it_wraps() -> None:
    """Recording an AMD node wraps amdsmi in the proxy: its closures carry amdsmi's names."""
    recording = _refusing(AMD, "amdsmi_get_gpu_device_bdf", "AmdSmiLibraryException", 2)
    proxy = RecordingProxy(amdsmi_standin.build_module(recording), AmdsmiCodec())
    backend = AmdBackend(
        cast("AmdSmiSurface", proxy),
        rocm_smi_standin.build_binding(recording),
        clock=VirtualClock(),
    )
    try:
        notes = backend.detect().notes
    finally:
        backend.close()
    assert "processor 0: no PCI bus id, so no id (amdsmi_get_gpu_device_bdf: AMD SMI error 2)" in (
        notes
    )
    assert "amdsmi_get_gpu_device_bdf" in [o.fn for o in proxy.observations]


# -- no library function is called by a name looked up at run time ---------------------------

VENDORS_SRC = Path(gpustack_vendors.__file__).parent
CALLERS = frozenset(
    {"_call", "_maybe", "_amd", "_rocm", "_mig", "rocm", "quietly", "call_rocm_smi"}
)
"""What a backend makes its library calls through."""


def _surface_functions() -> frozenset[str]:
    """Every call any backend's surface declares (the names a string could stand in for)."""
    names: set[str] = set()
    for module in (*VENDORS_SRC.glob("*/surface.py"), *VENDORS_SRC.glob("surfaces/*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ClassDef):
                names.update(f.name for f in node.body if isinstance(f, ast.FunctionDef))
    return frozenset(n for n in names if not n.startswith("_"))


def calls_by_name(source: str, functions: frozenset[str]) -> list[str]:
    """Where ``source`` reaches a library function by a string: ``getattr(binding, fn)`` with a
    name not written out, or a library function's name handed to a caller as text."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func.attr if isinstance(node.func, ast.Attribute) else None
        callee = node.func.id if isinstance(node.func, ast.Name) else callee
        if callee == "getattr" and not isinstance(node.args[1], ast.Constant):
            found.append((node.lineno, f"line {node.lineno}: getattr by a computed name"))
        if callee in CALLERS:
            named = [
                a.value
                for a in node.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value in functions
            ]
            found.extend((node.lineno, f"line {node.lineno}: {callee}({n!r}, ...)") for n in named)
    return [text for _, text in sorted(found)]


SHARED = ("rocm_common.py", "calling.py", "nvml_shaped.py")
BACKEND_MODULES = sorted([*VENDORS_SRC.glob("*/backend.py"), *(VENDORS_SRC / m for m in SHARED)])


@pytest.mark.parametrize("module", BACKEND_MODULES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_backend_calls_its_library_through_bound_functions(module: Path) -> None:
    """So the surface's argument and return types reach every call site and mypy checks them."""
    assert calls_by_name(module.read_text(), _surface_functions()) == []


def test_the_check_finds_calls_by_name() -> None:
    """Planted: the two shapes the AMD and Hygon backends had before their typed call sites."""
    planted = (
        "def _amd(self, fn, *args):\n"
        "    return getattr(self._amdsmi, fn)(*args)\n"
        "self._rocm('rsmi_num_monitor_devices')\n"
        "quietly(self._amd, 'amdsmi_shut_down')\n"
        "self._call(self._lib.rsmi_init, 'rsmi_init is data here, not a call')\n"
    )
    functions = frozenset({"rsmi_num_monitor_devices", "amdsmi_shut_down"})
    assert calls_by_name(planted, functions) == [
        "line 2: getattr by a computed name",
        "line 3: _rocm('rsmi_num_monitor_devices', ...)",
        "line 4: quietly('amdsmi_shut_down', ...)",
    ]
