"""A stand-in for the ``amdsmi`` package that answers from a recording.

amdsmi returns **dicts** whose sentinels are already the string ``"N/A"``; they are recorded and
replayed verbatim, so the backend's handling of ``"N/A"`` is what the tests exercise. Processor
handles are ``c_void_p`` (recorded as ``{"_handle": "gpu<position>"}``, the position in
``amdsmi_get_processor_handles()``), and every call checks its argument types the way amdsmi does
before anything is looked up, so a backend passing a bare int where amdsmi wants an enum fails
here as it would on a GPU node. Errors are rebuilt from ``err_code`` through amdsmi's own
``_check_res`` rule: RETRY and TIMEOUT get their subclasses, everything else
``AmdSmiLibraryException``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Hashable, Mapping, Sequence
from enum import IntEnum
from typing import Any, Final, cast

from gpustack_simulator.recording import Raises, Recording, RowFilter
from gpustack_simulator.replay import amdsmi_api
from gpustack_simulator.replay.codec import HandleRef, encode_ctypes
from gpustack_simulator.replay.engine import Clock, Replayer
from gpustack_vendors.amd.surface import (
    AmdActivity,
    AmdAsicInfo,
    AmdDriverInfo,
    AmdPowerInfo,
    AmdVramUsage,
    NotAvailable,
)

LIBRARY_ID = "amdsmi"

MISSING_STATUS: Final = amdsmi_api.AMDSMI_STATUS_FAIL_LOAD_SYMBOL
"""What a call the recording lacks raises.

amdsmi has no "function not found" status of its own. ``FAIL_LOAD_SYMBOL`` is the library's code
for an entry point it could not resolve, the nearest match for "this answer does not exist here"
and the counterpart of NVML's FUNCTION_NOT_FOUND and of our ROCm SMI binding's choice.
``NOT_SUPPORTED`` was rejected: it would claim the *device* lacks the feature, so a recording
with a gap would pass for a card without a capability.
"""

_HANDLE: Final = "handle"
_Check = tuple[str | type[IntEnum], ...]

FUNCTIONS: Final[Mapping[str, _Check]] = {
    # name: the type each positional argument must have (amdsmi raises AmdSmiParameterException
    # before calling the library otherwise). Names are amdsmi 7.0.2's; one a backend starts
    # calling is added here, since a name absent from the real package must stay absent.
    "amdsmi_init": (amdsmi_api.AmdSmiInitFlags,),
    "amdsmi_shut_down": (),
    "amdsmi_get_socket_handles": (),
    "amdsmi_get_processor_handles": (),
    "amdsmi_get_processor_handle_from_bdf": (),
    "amdsmi_get_gpu_device_bdf": (_HANDLE,),
    "amdsmi_get_gpu_device_uuid": (_HANDLE,),
    "amdsmi_get_gpu_enumeration_info": (_HANDLE,),
    "amdsmi_get_gpu_driver_info": (_HANDLE,),
    "amdsmi_get_gpu_asic_info": (_HANDLE,),
    "amdsmi_get_gpu_kfd_info": (_HANDLE,),
    "amdsmi_get_gpu_vram_usage": (_HANDLE,),
    "amdsmi_get_gpu_memory_total": (_HANDLE, amdsmi_api.AmdSmiMemoryType),
    "amdsmi_get_gpu_memory_usage": (_HANDLE, amdsmi_api.AmdSmiMemoryType),
    "amdsmi_get_gpu_activity": (_HANDLE,),
    "amdsmi_get_gpu_metrics_info": (_HANDLE,),
    "amdsmi_get_temp_metric": (
        _HANDLE,
        amdsmi_api.AmdSmiTemperatureType,
        amdsmi_api.AmdSmiTemperatureMetric,
    ),
    "amdsmi_get_power_info": (_HANDLE,),
    "amdsmi_get_gpu_process_list": (_HANDLE,),
    "amdsmi_get_gpu_compute_partition": (_HANDLE,),
    "amdsmi_get_gpu_memory_partition": (_HANDLE,),
    "amdsmi_get_lib_version": (),
    "amdsmi_get_rocm_version": (),
}

_DEFAULTS: Final[Mapping[str, tuple[object, ...]]] = {
    # ``amdsmi_init(flag=AmdSmiInitFlags.INIT_AMD_GPUS)``: filled in, so both spellings of the
    # same call have one identity in the recording.
    "amdsmi_init": (amdsmi_api.AmdSmiInitFlags.INIT_AMD_GPUS,),
}

_TUPLES: Final = frozenset({"amdsmi_get_rocm_version"})
"""Calls amdsmi answers with a tuple (recorded as a list)."""


class AmdsmiCodec:
    """amdsmi's values: dicts (``"N/A"`` kept), ``c_void_p`` handles, ``AmdSmiLibraryException``."""

    library_id = LIBRARY_ID
    init_functions = frozenset({"amdsmi_init"})
    filters: Mapping[str, RowFilter] = {}

    def __init__(self) -> None:
        self._keepalive: list[ctypes.Array[ctypes.c_char]] = []

    def encode(self, value: object, handle_ref: HandleRef) -> Any:
        """Enums become their numbers; everything else is JSON-shaped already."""
        if isinstance(value, IntEnum):
            return int(value)
        return encode_ctypes(value, handle_ref, self)

    def build(self, type_name: str, fields: Mapping[str, Any]) -> object:
        """No structs cross amdsmi's Python surface; a tagged value is a bad recording."""
        raise KeyError(f"amdsmi returns dicts, not structs: unexpected _type {type_name!r}")

    def error(self, raises: Raises) -> BaseException:
        """The class amdsmi's ``_check_res`` would raise for this status."""
        try:
            amdsmi_api.check_res(raises.code)
        except amdsmi_api.AmdSmiLibraryException as exc:
            return exc
        raise ValueError(f"amdsmi: status {raises.code} is success, not an error")

    def describe_error(self, exc: BaseException) -> Raises | None:
        """Library errors carry ``err_code``; parameter errors are the caller's bug, not data."""
        if isinstance(exc, amdsmi_api.AmdSmiLibraryException):
            return Raises(type=type(exc).__name__, code=int(exc.err_code))
        return None

    def missing(self, fn: str) -> BaseException:
        """See :data:`MISSING_STATUS`."""
        return amdsmi_api.AmdSmiLibraryException(MISSING_STATUS)

    def is_handle(self, value: object) -> bool:
        """Processor handles are ``c_void_p``."""
        return isinstance(value, amdsmi_api.amdsmi_processor_handle)

    def handle_key(self, handle: object) -> Hashable:
        """A new ``c_void_p`` comes back per call; the address names the device."""
        return handle.value if isinstance(handle, ctypes.c_void_p) else None

    def make_handle(self, ref: str) -> object:
        """A distinct live address per ref, kept alive as long as the codec."""
        target = ctypes.create_string_buffer(1)
        self._keepalive.append(target)
        return amdsmi_api.amdsmi_processor_handle(ctypes.addressof(target))

    def name_handle(self, fn: str, args: Sequence[Any], position: int | None) -> str:
        """``gpu<position>`` for the processor-handle list: rocm-smi's ordinal."""
        if fn == "amdsmi_get_processor_handles" and position is not None:
            return f"gpu{position}"
        return f"{fn}({','.join(map(str, args))})"


class AmdsmiStandin:
    """amdsmi's interface answering from a recording.

    The calls of :class:`~gpustack_vendors.amd.surface.AmdSmiSurface` are typed methods here,
    so mypy checks this stand-in against the surface the AMD backend declares; the other
    functions of :data:`FUNCTIONS` and amdsmi's exceptions, enums and constants are attributes,
    as on ``amdsmi`` itself. Every call checks its arguments the way amdsmi does.
    """

    AmdSmiInitFlags = amdsmi_api.AmdSmiInitFlags
    AmdSmiTemperatureType = amdsmi_api.AmdSmiTemperatureType
    AmdSmiTemperatureMetric = amdsmi_api.AmdSmiTemperatureMetric
    AmdSmiLibraryException = amdsmi_api.AmdSmiLibraryException

    def __init__(self, replayer: Replayer, doc: str) -> None:
        self.__name__ = "amdsmi"
        self.__doc__ = doc
        self._replayer = replayer
        amdsmi_api.install(self)
        typed = set(dir(type(self)))
        for name in FUNCTIONS:
            if name not in typed:
                setattr(self, name, _replaying(replayer, name))
        self.__dict__["__replayer__"] = replayer

    def _call(self, name: str, *args: object) -> Any:
        return _answer(self._replayer, name, args, {})

    def amdsmi_init(self, flag: int | None = None) -> None:
        if flag is None:  # amdsmi's default flag, filled in by check_arguments
            self._call("amdsmi_init")
        else:
            self._call("amdsmi_init", flag)

    def amdsmi_shut_down(self) -> None:
        self._call("amdsmi_shut_down")

    def amdsmi_get_processor_handles(self) -> list[object]:
        return cast("list[object]", self._call("amdsmi_get_processor_handles"))

    def amdsmi_get_rocm_version(self) -> tuple[bool, str]:
        return cast("tuple[bool, str]", self._call("amdsmi_get_rocm_version"))

    def amdsmi_get_gpu_driver_info(self, processor_handle: object) -> AmdDriverInfo:
        return cast("AmdDriverInfo", self._call("amdsmi_get_gpu_driver_info", processor_handle))

    def amdsmi_get_gpu_device_bdf(self, processor_handle: object) -> str:
        return cast("str", self._call("amdsmi_get_gpu_device_bdf", processor_handle))

    def amdsmi_get_gpu_asic_info(self, processor_handle: object) -> AmdAsicInfo:
        return cast("AmdAsicInfo", self._call("amdsmi_get_gpu_asic_info", processor_handle))

    def amdsmi_get_gpu_vram_usage(self, processor_handle: object) -> AmdVramUsage:
        return cast("AmdVramUsage", self._call("amdsmi_get_gpu_vram_usage", processor_handle))

    def amdsmi_get_gpu_activity(self, processor_handle: object) -> AmdActivity:
        return cast("AmdActivity", self._call("amdsmi_get_gpu_activity", processor_handle))

    def amdsmi_get_temp_metric(
        self, processor_handle: object, sensor_type: int, metric: int
    ) -> int | NotAvailable:
        answer = self._call("amdsmi_get_temp_metric", processor_handle, sensor_type, metric)
        return cast("int | NotAvailable", answer)

    def amdsmi_get_power_info(self, processor_handle: object) -> AmdPowerInfo:
        return cast("AmdPowerInfo", self._call("amdsmi_get_power_info", processor_handle))


def build_module(recording: Recording, *, clock: Clock | None = None) -> AmdsmiStandin:
    """An object with amdsmi's interface (a module's attributes), answering from ``recording``."""
    replayer = Replayer(recording, AmdsmiCodec(), clock=clock)
    return AmdsmiStandin(replayer, f"replay of {recording.description}")


def check_arguments(name: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Apply amdsmi's defaults and type checks; shared with the synthetic binding."""
    if not args and name in _DEFAULTS:
        args = _DEFAULTS[name]
    for value, expected in zip(args, FUNCTIONS.get(name, ()), strict=False):
        if expected == _HANDLE:
            amdsmi_api.expect_handle(value)
        elif isinstance(expected, type):
            amdsmi_api.expect(value, expected)
    return args


def _answer(replayer: Replayer, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    args = check_arguments(name, args)
    value = replayer.invoke(name, args, kwargs)
    return tuple(value) if name in _TUPLES and isinstance(value, list) else value


def _replaying(replayer: Replayer, name: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        return _answer(replayer, name, args, kwargs)

    call.__name__ = call.__qualname__ = name
    return call
