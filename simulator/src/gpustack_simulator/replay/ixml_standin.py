"""IXML replay: our real binding, over a fake C library that answers from a recording.

The IXML binding is ours (an NVML copy under another soname), so :func:`build_binding` hands back
a real :class:`~gpustack_vendors.iluvatar.ixml.Ixml` whose library is a
:class:`~gpustack_simulator.replay.ixml_lib.FakeIxmlLib` asking the replayer: the binding's probe
and fill of the process list run as they would on a node. Recordings hold what the binding's
methods returned, recorded through :func:`as_module`; device handles are refs (``gpu0``), and
replay mints a fresh ``ixmlDevice_t`` per ref whose address identifies it.
"""

from __future__ import annotations

import ctypes
import types
from collections.abc import Hashable, Sequence
from typing import Any, Final

from gpustack_simulator.recording import Recording
from gpustack_simulator.replay.binding_standin import (
    BindingCodec,
    ReplayAnswer,
    binding_module,
    replayer_behind,
    struct_table,
)
from gpustack_simulator.replay.engine import Clock, Replayer
from gpustack_simulator.replay.ixml_lib import FakeIxmlLib
from gpustack_vendors.iluvatar import ixml
from gpustack_vendors.iluvatar.ixml import (
    NVML_ERROR_FUNCTION_NOT_FOUND,
    Ixml,
    IXMLError,
    ixmlDevice_t,
)

LIBRARY_ID = "ixml"

FUNCTIONS: Final = (
    "nvmlInit_v2",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPowerUsage",
    "ixmlDeviceGetHealth",
    "nvmlDeviceGetComputeRunningProcesses",
)
"""The binding's methods, which are also the C symbols the fake library answers."""


class IxmlCodec(BindingCodec):
    """IXML's values: NVML structs, ints, strings and ``ixmlDevice_t`` handles."""

    library_id = LIBRARY_ID
    init_functions = frozenset({"nvmlInit_v2"})
    label = "IXML"
    structs = struct_table(
        ixml.c_nvmlMemory_t,
        ixml.c_nvmlMemory_v2_t,
        ixml.c_nvmlUtilization_t,
        ixml.c_nvmlPciInfo_t,
        ixml.c_nvmlProcessInfo_v1_t,
    )
    error_type = IXMLError
    not_found_code = NVML_ERROR_FUNCTION_NOT_FOUND

    def __init__(self) -> None:
        self._keepalive: list[ctypes.Array[ctypes.c_char]] = []

    def is_handle(self, value: object) -> bool:
        """Device handles are ``ixmlDevice_t`` (an opaque pointer)."""
        return isinstance(value, ixmlDevice_t)

    def handle_key(self, handle: object) -> Hashable:
        """The library hands back the same address for the same device."""
        if not isinstance(handle, ixmlDevice_t):
            raise TypeError(f"not an IXML handle: {handle!r}")
        return handle.value

    def make_handle(self, ref: str) -> object:
        """A distinct live address per ref, kept alive as long as the codec."""
        target = ctypes.create_string_buffer(1)
        self._keepalive.append(target)
        return ixmlDevice_t(ctypes.addressof(target))

    def name_handle(self, fn: str, args: Sequence[Any], position: int | None) -> str:
        """``gpu<index>`` for ``nvmlDeviceGetHandleByIndex_v2``."""
        if fn == "nvmlDeviceGetHandleByIndex_v2" and args:
            return f"gpu{args[0]}"
        return f"{fn}({','.join(map(str, args))})"


def build_binding(
    recording: Recording, *, clock: Clock | None = None, null_probe_success: bool = False
) -> Ixml:
    """Our real IXML binding over a fake library whose answers come from ``recording``."""
    replayer = Replayer(recording, IxmlCodec(), clock=clock)
    return Ixml(FakeIxmlLib(ReplayAnswer(replayer), null_probe_success=null_probe_success))


def replayer_of(binding: Ixml) -> Replayer:
    """The replayer behind a binding made by :func:`build_binding`."""
    return replayer_behind(binding.lib, FakeIxmlLib, "IXML")


def as_module(binding: Ixml) -> types.ModuleType:
    """The binding's methods as a module, the shape the recorder's proxy wraps."""
    return binding_module(binding, "ixml", "IXML binding methods", FUNCTIONS, IXMLError)
