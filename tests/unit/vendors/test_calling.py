"""``_call`` names a failure after the bound function it was handed, for every kind of binding.

Backends call ``self._call(self._lib.fn, ...)``; the error's function name is ``fn.__name__``,
which must be the library's own name whatever the binding is: a module function (pynvml,
amdsmi), a method of our ctypes bindings, or the recorder's proxy closure around either. The
messages are what operators and tests read ("mxSmlGetDeviceCount: MXSML error 17").
"""

from __future__ import annotations

import pynvml
import pytest

from gpustack_simulator.recorder import RecordingProxy
from gpustack_simulator.replay.mxsml_standin import MxsmlCodec
from gpustack_vendors.calling import BindingBackend, same
from gpustack_vendors.metax.backend import MxsmlCallError
from gpustack_vendors.metax.mxsml import MXSML_ERROR_FUNCTION_NOT_FOUND, Mxsml, MXSMLError
from gpustack_vendors.nvidia.backend import NvmlCallError


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
