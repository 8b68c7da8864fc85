"""CNDev replay: our real binding, over a fake C library that answers from a recording.

Like ROCm SMI, the CNDev binding is ours, and its riskiest code (version stamping, the
``INSUFFICIENT_SPACE`` loop of the process lists) sits below its Python surface. So
:func:`build_binding` hands back a real :class:`~gpustack_vendors.bindings.cndev.Cndev` whose
library is a :class:`~gpustack_simulator.replay.cndev_lib.FakeCndevLib` asking the replayer.
Recordings hold what the binding's methods returned, recorded through :func:`as_module`; every
versioned call carries its struct version as its last argument.

Fixed-size arrays inside a struct (``coreUtilization[80]``, ``reserved[16]``) are recorded up to
their last non-zero element; replay rebuilds the rest as zeros, so nothing is lost and a
recording stays readable.
"""

from __future__ import annotations

import ctypes
import types
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Final

from gpustack_simulator.recording import Raises, Recording, RowFilter
from gpustack_simulator.replay.cndev_lib import FakeCndevLib
from gpustack_simulator.replay.codec import HandleRef, encode_ctypes, fill_struct
from gpustack_simulator.replay.engine import Clock, Replayer
from gpustack_vendors.bindings import cndev
from gpustack_vendors.bindings.cndev import CNDEV_ERROR_FUNCTION_NOT_FOUND, Cndev, CNDevError
from gpustack_vendors.cambricon import CambriconBackend

LIBRARY_ID = "cndev"

FUNCTIONS: Final = (
    "cndevInit",
    "cndevRelease",
    "cndevGetDeviceCount",
    "cndevGetDeviceHandleByIndex",
    "cndevGetUUID",
    "cndevGetCardNameStringByDevId",
    "cndevGetPCIeInfoV2",
    "cndevGetMemoryUsageV2",
    "cndevGetVersionInfo",
    "cndevGetCardHealthState",
    "cndevGetDeviceUtilizationInfo",
    "cndevGetTemperatureInfo",
    "cndevGetDevicePowerInfo",
    "cndevGetProcessInfo",
    "cndevGetProcessUtilization",
)
"""The binding's methods, which are also the C symbols the fake library answers."""

_STRUCTS: Final[Mapping[str, type[ctypes.Structure]]] = {
    cls.__name__: cls
    for cls in (
        cndev.cndevCardInfo_t,
        cndev.cndevUUID_t,
        cndev.cndevPCIeInfoV2_t,
        cndev.cndevMemoryInfoV2_t,
        cndev.cndevVersionInfo_t,
        cndev.cndevCardHealthState_t,
        cndev.cndevUtilizationInfo_t,
        cndev.cndevTemperatureInfo_t,
        cndev.cndevDevicePowerInfo_t,
        cndev.cndevProcessInfo_t,
        cndev.cndevProcessUtilization_t,
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


class CndevCodec:
    """CNDev's values: structs and ints; device handles are plain ``int32`` values."""

    library_id = LIBRARY_ID
    init_functions = frozenset({"cndevInit"})
    filters: Mapping[str, RowFilter] = {}

    def encode(self, value: object, handle_ref: HandleRef) -> Any:
        """Structs with every field (zero array tails omitted), sentinels kept raw."""
        return trim_zero_tails(encode_ctypes(value, handle_ref, self))

    def build(self, type_name: str, fields: Mapping[str, Any]) -> object:
        """Rebuild with the binding's own struct class."""
        cls = _STRUCTS.get(type_name)
        if cls is None:
            raise KeyError(f"CNDev binding has no struct {type_name!r}")
        struct = cls()
        fill_struct(struct, fields, self)
        return struct

    def error(self, raises: Raises) -> BaseException:
        """``CNDevError(code)``: the fake library turns it back into the returned status."""
        return CNDevError(raises.code)

    def describe_error(self, exc: BaseException) -> Raises | None:
        """Only ``CNDevError`` is the binding's; ``.value`` is the ``cndevRet_t``."""
        if isinstance(exc, CNDevError):
            return Raises(type=type(exc).__name__, code=int(exc.value))
        return None

    def missing(self, fn: str) -> BaseException:
        """The binding's own code for a symbol the library lacks."""
        return CNDevError(CNDEV_ERROR_FUNCTION_NOT_FOUND, fn)

    def is_handle(self, value: object) -> bool:
        """CNDev handles are ``int32`` values, recorded as themselves."""
        return False

    def handle_key(self, handle: object) -> Hashable:
        """Never called: CNDev handles are plain ints."""
        raise TypeError("CNDev handles are plain ints")

    def make_handle(self, ref: str) -> object:
        """Never called: CNDev handles are plain ints."""
        raise TypeError(f"CNDev handles are plain ints (asked for {ref!r})")

    def name_handle(self, fn: str, args: Sequence[Any], position: int | None) -> str:
        """Never called: CNDev handles are plain ints."""
        raise TypeError("CNDev handles are plain ints")


def build_binding(recording: Recording, *, clock: Clock | None = None) -> Cndev:
    """Our real CNDev binding over a fake library whose answers come from ``recording``."""
    replayer = Replayer(recording, CndevCodec(), clock=clock)
    return Cndev(FakeCndevLib(_Answer(replayer)))


class _Answer:
    """``FakeCndevLib``'s callback: one replayed call per C call."""

    def __init__(self, replayer: Replayer) -> None:
        self.replayer = replayer

    def __call__(self, name: str, args: tuple[object, ...]) -> object:
        return self.replayer.invoke(name, args, {})


def replayer_of(binding: Cndev) -> Replayer:
    """The replayer behind a binding made by :func:`build_binding`."""
    lib = binding.lib
    if not isinstance(lib, FakeCndevLib) or not isinstance(lib.answer, _Answer):
        raise TypeError("not a replayed CNDev binding")
    return lib.answer.replayer


def as_module(binding: Cndev) -> types.ModuleType:
    """The binding's methods as a module, the shape the recorder's proxy wraps."""
    module = types.ModuleType("cndev", doc="CNDev binding methods")
    for name in FUNCTIONS:
        setattr(module, name, getattr(binding, name))
    module.__dict__.update(CNDevError=CNDevError)
    return module


def replay_backend(recording: Recording, *, clock: Clock | None = None) -> CambriconBackend:
    """The Cambricon backend over :func:`build_binding`: what ``replay_backend`` hands out."""
    return CambriconBackend(build_binding(recording, clock=clock))
