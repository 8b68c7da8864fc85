"""HGML replay: our real binding, over a fake C library that answers from a recording.

:func:`build_binding` hands back a real :class:`~gpustack_vendors.bindings.hgml.Hgml` whose
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
from gpustack_simulator.replay.codec import HandleRef, encode_ctypes, fill_struct
from gpustack_simulator.replay.engine import Clock, Replayer
from gpustack_simulator.replay.hgml_lib import FakeHgmlLib
from gpustack_vendors.bindings import hgml
from gpustack_vendors.bindings.hgml import SYMBOLS, Hgml, HGMLError
from gpustack_vendors.thead import TheadBackend

LIBRARY_ID = "hgml"

FUNCTIONS: Final = tuple(SYMBOLS)
"""The binding's methods; the fake library answers each from the C symbol behind it."""

_NOT_FOUND = Raises(type="HGMLError", code=hgml.HGML_ERROR_NOT_FOUND)

_STRUCTS: Final[Mapping[str, type[ctypes.Structure]]] = {
    cls.__name__: cls
    for cls in (
        hgml.c_hgmlMemory_t,
        hgml.c_hgmlUtilization_t,
        hgml.hgmlPciInfo_t,
        hgml.c_hgmlProcessInfo_t,
        hgml.c_hgmlProcessUtilizationSample_t,
        hgml.c_hgmlProcessUtilizationInfo_v1_t,
    )
}


class HgmlCodec:
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

    def __init__(self) -> None:
        self._keepalive: list[object] = []

    def encode(self, value: object, handle_ref: HandleRef) -> Any:
        """Structs with every field; handles by ref."""
        return encode_ctypes(value, handle_ref, self)

    def build(self, type_name: str, fields: Mapping[str, Any]) -> object:
        """Rebuild with the binding's own struct class."""
        cls = _STRUCTS.get(type_name)
        if cls is None:
            raise KeyError(f"HGML binding has no struct {type_name!r}")
        struct = cls()
        fill_struct(struct, fields, self)
        return struct

    def error(self, raises: Raises) -> BaseException:
        """``HGMLError(code)``: the fake library turns it back into the returned code."""
        return HGMLError(raises.code)

    def describe_error(self, exc: BaseException) -> Raises | None:
        """Only ``HGMLError`` is the binding's; ``.value`` is the code."""
        if isinstance(exc, HGMLError):
            return Raises(type=type(exc).__name__, code=int(exc.value))
        return None

    def missing(self, fn: str) -> BaseException:
        """``FUNCTION_NOT_FOUND``: NVML's (and the binding's) code for a missing symbol."""
        return HGMLError(hgml.HGML_ERROR_FUNCTION_NOT_FOUND, fn)

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
    return Hgml(FakeHgmlLib(_Answer(replayer)))


class _Answer:
    """``FakeHgmlLib``'s callback: one replayed call per C call."""

    def __init__(self, replayer: Replayer) -> None:
        self.replayer = replayer

    def __call__(self, name: str, args: tuple[object, ...]) -> object:
        return self.replayer.invoke(name, args, {})


def replayer_of(binding: Hgml) -> Replayer:
    """The replayer behind a binding made by :func:`build_binding`."""
    lib = binding.lib
    if not isinstance(lib, FakeHgmlLib) or not isinstance(lib.answer, _Answer):
        raise TypeError("not a replayed HGML binding")
    return lib.answer.replayer


def as_module(binding: Hgml) -> types.ModuleType:
    """The binding's methods as a module, the shape the recorder's proxy wraps."""
    module = types.ModuleType("hgml", doc="HGML binding methods")
    for name in FUNCTIONS:
        setattr(module, name, getattr(binding, name))
    module.__dict__.update(HGMLError=HGMLError)
    return module


def replay_backend(recording: Recording, *, clock: Clock | None = None) -> TheadBackend:
    """The unchanged T-Head backend over :func:`build_binding`."""
    return TheadBackend(build_binding(recording, clock=clock))
