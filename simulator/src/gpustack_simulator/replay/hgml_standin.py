"""HGML replay: our real binding, over a fake C library that answers from a recording.

:func:`build_binding` hands back a real :class:`~gpustack_vendors.thead.hgml.Hgml` whose
library is a :class:`~gpustack_simulator.replay.hgml_lib.FakeHgmlLib` asking the replayer, so
the binding's NVML-style negotiation (process lists, the versioned process-utilization header)
runs as it does on a PPU host. Recordings hold what the binding's methods returned: ctypes
structs with every field (``usedGpuMemory``'s not-available sentinel kept raw) and device
handles by ref (``gpu0``, ``gpu1/mig0``), recorded through :func:`as_module`.
"""

from __future__ import annotations

import ctypes
import types
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Final

from gpustack_simulator.recording import Raises, Recording, RowFilter
from gpustack_simulator.replay.binding_standin import (
    BindingCodec,
    ReplayAnswer,
    binding_module,
    replayer_behind,
    struct_table,
)
from gpustack_simulator.replay.engine import Clock, Replayer
from gpustack_simulator.replay.hgml_lib import FakeHgmlLib
from gpustack_vendors.thead import hgml
from gpustack_vendors.thead.hgml import SYMBOLS, Hgml, HGMLError

LIBRARY_ID = "hgml"

FUNCTIONS: Final = tuple(SYMBOLS)
"""The binding's methods; the fake library answers each from the C symbol behind it."""

_NOT_FOUND = Raises(type="HGMLError", code=hgml.HGML_ERROR_NOT_FOUND)


class HgmlCodec(BindingCodec):
    """HGML's values: ctypes structs, pointer handles, ``HGMLError`` with NVML's codes."""

    library_id = LIBRARY_ID
    init_functions = frozenset({"hgmlInit"})
    filters: Mapping[str, RowFilter] = {
        # Samples newer than the caller's lastSeenTimeStamp; none at all is NOT_FOUND. Both the
        # plain call and the versioned one take it as their second argument here.
        "hgmlDeviceGetProcessUtilization": RowFilter(
            arg=1, field="timeStamp", empty_raises=_NOT_FOUND
        ),
        "hgmlDeviceGetProcessesUtilizationInfo": RowFilter(
            arg=1, field="timeStamp", empty_raises=_NOT_FOUND
        ),
    }
    label = "HGML"
    structs = struct_table(
        hgml.c_hgmlMemory_t,
        hgml.c_hgmlUtilization_t,
        hgml.hgmlPciInfo_t,
        hgml.c_hgmlProcessInfo_t,
        hgml.c_hgmlProcessUtilizationSample_t,
        hgml.c_hgmlProcessUtilizationInfo_v1_t,
    )
    error_type = HGMLError
    not_found_code = hgml.HGML_ERROR_FUNCTION_NOT_FOUND

    def __init__(self) -> None:
        self._keepalive: list[object] = []

    def is_handle(self, value: object) -> bool:
        """Device handles are ``c_hgmlDevice_t`` (a pointer to an opaque struct)."""
        return isinstance(value, hgml.c_hgmlDevice_t)

    def handle_key(self, handle: object) -> Hashable:
        """HGML hands back the same pointer for the same device; the address is its identity."""
        return ctypes.cast(handle, ctypes.c_void_p).value  # type: ignore[arg-type]

    def make_handle(self, ref: str) -> object:
        """A distinct live pointer per ref, kept alive as long as the codec."""
        target = hgml.struct_c_hgmlDevice_t()
        self._keepalive.append(target)
        return ctypes.pointer(target)

    def name_handle(self, fn: str, args: Sequence[Any], position: int | None) -> str:
        """``gpu<index>`` for cards, ``<parent>/mig<slot>`` for MIG devices."""
        if fn == "hgmlDeviceGetHandleByIndex" and args:
            return f"gpu{args[0]}"
        if fn == "hgmlDeviceGetMigDeviceHandleByIndex" and len(args) == 2:
            parent = args[0]["_handle"] if isinstance(args[0], dict) else args[0]
            return f"{parent}/mig{args[1]}"
        return f"{fn}({','.join(map(str, args))})"


def build_binding(recording: Recording, *, clock: Clock | None = None) -> Hgml:
    """Our real HGML binding over a fake library whose answers come from ``recording``."""
    replayer = Replayer(recording, HgmlCodec(), clock=clock)
    return Hgml(FakeHgmlLib(ReplayAnswer(replayer)))


def replayer_of(binding: Hgml) -> Replayer:
    """The replayer behind a binding made by :func:`build_binding`."""
    return replayer_behind(binding.lib, FakeHgmlLib, "HGML")


def as_module(binding: Hgml) -> types.ModuleType:
    """The binding's methods as a module, the shape the recorder's proxy wraps."""
    return binding_module(binding, "hgml", "HGML binding methods", FUNCTIONS, HGMLError)
