"""MXSML replay: our real binding, over a fake C library that answers from a recording.

The MXSML binding is ours, and its riskiest code (the per-call size conventions, the full-buffer
retry of the process list) sits below its Python surface. So :func:`build_binding` hands back a
real :class:`~gpustack_vendors.bindings.mxsml.Mxsml` whose library is a
:class:`~gpustack_simulator.replay.mxsml_lib.FakeMxsmlLib` asking the replayer. Recordings hold
what the binding's methods returned, recorded through :func:`as_module`; devices are indices.

Fixed-size arrays inside a struct (a process's ``processGpuInfo[64]``) are recorded up to
their last non-zero element; replay rebuilds the rest as zeros, so nothing is lost and a
recording stays readable.
"""

from __future__ import annotations

import ctypes
import types
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Final

from gpustack_simulator.recording import Raises, Recording, RowFilter
from gpustack_simulator.replay.codec import HandleRef, encode_ctypes, fill_struct
from gpustack_simulator.replay.engine import Clock, Replayer
from gpustack_simulator.replay.mxsml_lib import FakeMxsmlLib, Truncation
from gpustack_vendors.bindings import mxsml
from gpustack_vendors.bindings.mxsml import MXSML_ERROR_FUNCTION_NOT_FOUND, Mxsml, MXSMLError
from gpustack_vendors.metax import MetaxBackend

LIBRARY_ID = "mxsml"

FUNCTIONS: Final = (
    "mxSmlInit",
    "mxSmlGetDeviceCount",
    "mxSmlGetMacaVersion",
    "mxSmlGetDeviceVersion",
    "mxSmlGetDeviceInfo",
    "mxSmlGetMemoryInfo",
    "mxSmlGetDeviceIpUsage",
    "mxSmlGetTemperatureInfo",
    "mxSmlGetBoardPowerInfo",
    "mxSmlGetSingleGpuProcess_v3",
)
"""The binding's methods, which are also the C symbols the fake library answers."""

_STRUCTS: Final[Mapping[str, type[ctypes.Structure]]] = {
    cls.__name__: cls
    for cls in (
        mxsml.mxSmlDeviceInfo_t,
        mxsml.mxSmlMemoryInfo_t,
        mxsml.mxSmlBoardWayElectricInfo_t,
        mxsml.mxSmlProcessGpuInfo_v3_t,
        mxsml.mxSmlProcessInfo_v3_t,
    )
}


def trim_zero_tails(value: Any) -> Any:
    """Drop the trailing zero elements of every array field inside an encoded struct."""
    if isinstance(value, list):
        return [trim_zero_tails(item) for item in value]
    if not isinstance(value, dict):
        return value
    trimmed: dict[str, Any] = {}
    for key, raw in value.items():
        item = trim_zero_tails(raw)
        if "_type" in value and isinstance(item, list):
            end = len(item)
            while end and _is_zero(item[end - 1]):
                end -= 1
            item = item[:end]
        trimmed[key] = item
    return trimmed


def _is_zero(value: Any) -> bool:
    if isinstance(value, dict):
        return all(_is_zero(v) for k, v in value.items() if k != "_type")
    if isinstance(value, list):
        return not value
    return value in (0, "")


class MxsmlCodec:
    """MXSML's values: structs, ints and strings; devices are plain indices."""

    library_id = LIBRARY_ID
    init_functions = frozenset({"mxSmlInit"})
    filters: Mapping[str, RowFilter] = {}

    def encode(self, value: object, handle_ref: HandleRef) -> Any:
        """Structs with every field (zero array tails omitted), sentinels kept raw."""
        return trim_zero_tails(encode_ctypes(value, handle_ref, self))

    def build(self, type_name: str, fields: Mapping[str, Any]) -> object:
        """Rebuild with the binding's own struct class."""
        cls = _STRUCTS.get(type_name)
        if cls is None:
            raise KeyError(f"MXSML binding has no struct {type_name!r}")
        struct = cls()
        fill_struct(struct, fields, self)
        return struct

    def error(self, raises: Raises) -> BaseException:
        """``MXSMLError(code)``: the fake library turns it back into the returned status."""
        return MXSMLError(raises.code)

    def describe_error(self, exc: BaseException) -> Raises | None:
        """Only ``MXSMLError`` is the binding's; ``.value`` is the ``mxSmlReturn_t``."""
        if isinstance(exc, MXSMLError):
            return Raises(type=type(exc).__name__, code=int(exc.value))
        return None

    def missing(self, fn: str) -> BaseException:
        """The binding's own code for a symbol the library lacks."""
        return MXSMLError(MXSML_ERROR_FUNCTION_NOT_FOUND, fn)

    def is_handle(self, value: object) -> bool:
        """MXSML names devices by index; nothing it returns is a handle."""
        return False

    def handle_key(self, handle: object) -> Hashable:
        """Never called: MXSML has no handles."""
        raise TypeError("MXSML has no handles")

    def make_handle(self, ref: str) -> object:
        """Never called: MXSML has no handles."""
        raise TypeError(f"MXSML has no handles (asked for {ref!r})")

    def name_handle(self, fn: str, args: Sequence[Any], position: int | None) -> str:
        """Never called: MXSML has no handles."""
        raise TypeError("MXSML has no handles")


def build_binding(
    recording: Recording, *, clock: Clock | None = None, truncation: Truncation = "silent"
) -> Mxsml:
    """Our real MXSML binding over a fake library whose answers come from ``recording``."""
    replayer = Replayer(recording, MxsmlCodec(), clock=clock)
    return Mxsml(FakeMxsmlLib(_Answer(replayer), truncation=truncation))


class _Answer:
    """``FakeMxsmlLib``'s callback: one replayed call per C call."""

    def __init__(self, replayer: Replayer) -> None:
        self.replayer = replayer

    def __call__(self, name: str, args: tuple[object, ...]) -> object:
        return self.replayer.invoke(name, args, {})


def replayer_of(binding: Mxsml) -> Replayer:
    """The replayer behind a binding made by :func:`build_binding`."""
    lib = binding.lib
    if not isinstance(lib, FakeMxsmlLib) or not isinstance(lib.answer, _Answer):
        raise TypeError("not a replayed MXSML binding")
    return lib.answer.replayer


def as_module(binding: Mxsml) -> types.ModuleType:
    """The binding's methods as a module, the shape the recorder's proxy wraps."""
    module = types.ModuleType("mxsml", doc="MXSML binding methods")
    for name in FUNCTIONS:
        setattr(module, name, getattr(binding, name))
    module.__dict__.update(MXSMLError=MXSMLError)
    return module


def replay_backend(recording: Recording, *, clock: Clock | None = None) -> MetaxBackend:
    """The Metax backend over :func:`build_binding`: what ``replay_backend`` hands out."""
    return MetaxBackend(build_binding(recording, clock=clock))
