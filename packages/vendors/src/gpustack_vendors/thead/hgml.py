# The library's C names, spelled as its header spells them (a binding, not our API):
# ruff: noqa: N801, N802, N815, N816
"""A ctypes binding for T-Head HGML (``libhgml.so``), declaring only what the backend calls.

HGML is an NVML clone: every NVML call exists as ``hgml*``, with ``hgmlReturn_t`` using NVML's
numbers, ``hgmlDevice_t`` opaque pointer handles and NVML's struct layouts. Facts are taken from
gpustack ``pyhgml`` (which bundles ``libhgml.so``) and from what the NVML headers define for the
structs pyhgml does not carry:

- Enumeration and identity use the versioned symbols pyhgml calls (``hgmlDeviceGetCount_v2``,
  ``hgmlDeviceGetHandleByIndex_v2``, ``hgmlDeviceGetPciInfo_v3``); the methods here keep the
  unversioned names, as pyhgml's do. :data:`SYMBOLS` maps each method to its C symbol.
- Process lists follow NVML's convention: probe with a count of 0 and a NULL buffer, where
  ``SUCCESS`` means "none" and ``INSUFFICIENT_SIZE`` carries the count; a fill whose buffer is
  too small answers ``INSUFFICIENT_SIZE`` again with the new count.
- ``hgmlDeviceGetProcessesUtilizationInfo`` (the versioned process-utilization call) is exported
  but is a stub that always answers ``NOT_SUPPORTED`` on the PPU hosts measured; the plain
  ``hgmlDeviceGetProcessUtilization`` answers. Both are declared; the backend decides.
- ``usedGpuMemory`` of ``HGML_VALUE_NOT_AVAILABLE`` (all ones) is kept raw here; the backend
  turns it into an absent figure.

Importing this module loads nothing: :func:`load_library` opens the library, so hosts without a
PPU can import the backend and the replay simulator can hand :class:`Hgml` a fake C library.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from typing import Any, Final

from gpustack_vendors.bindings.calls import StatusError, grow_and_retry
from gpustack_vendors.bindings.loader import LibraryNotFound, open_first, returning, with_override

# -- hgmlReturn_t (NVML's numbers) ---------------------------------------------------------------

HGML_SUCCESS: Final = 0
HGML_ERROR_UNINITIALIZED: Final = 1
HGML_ERROR_INVALID_ARGUMENT: Final = 2
HGML_ERROR_NOT_SUPPORTED: Final = 3
HGML_ERROR_NO_PERMISSION: Final = 4
HGML_ERROR_ALREADY_INITIALIZED: Final = 5
HGML_ERROR_NOT_FOUND: Final = 6
HGML_ERROR_INSUFFICIENT_SIZE: Final = 7
HGML_ERROR_INSUFFICIENT_POWER: Final = 8
HGML_ERROR_DRIVER_NOT_LOADED: Final = 9
HGML_ERROR_TIMEOUT: Final = 10
HGML_ERROR_IRQ_ISSUE: Final = 11
HGML_ERROR_LIBRARY_NOT_FOUND: Final = 12
HGML_ERROR_FUNCTION_NOT_FOUND: Final = 13
"""Also what this binding raises for a symbol the loaded library lacks (see :class:`Hgml`)."""
HGML_ERROR_CORRUPTED_INFOROM: Final = 14
HGML_ERROR_GPU_IS_LOST: Final = 15
HGML_ERROR_RESET_REQUIRED: Final = 16
HGML_ERROR_OPERATING_SYSTEM: Final = 17
HGML_ERROR_LIB_RM_VERSION_MISMATCH: Final = 18
HGML_ERROR_IN_USE: Final = 19
HGML_ERROR_MEMORY: Final = 20
HGML_ERROR_NO_DATA: Final = 21
HGML_ERROR_INSUFFICIENT_RESOURCES: Final = 23
HGML_ERROR_ARGUMENT_VERSION_MISMATCH: Final = 25
HGML_ERROR_DEPRECATED: Final = 26
HGML_ERROR_NOT_READY: Final = 27
HGML_ERROR_GPU_NOT_FOUND: Final = 28
HGML_ERROR_UNKNOWN: Final = 999

_STATUS_TEXT: Final[dict[int, str]] = {
    value: name
    for name, value in list(globals().items())
    if name.startswith("HGML_ERROR_") or name == "HGML_SUCCESS"
}

# -- enums and sizes -------------------------------------------------------------------------------

HGML_TEMPERATURE_GPU: Final = 0
HGML_DEVICE_MIG_DISABLE: Final = 0
HGML_DEVICE_MIG_ENABLE: Final = 1
HGML_VALUE_NOT_AVAILABLE_ULONGLONG: Final = 0xFFFFFFFFFFFFFFFF
"""``usedGpuMemory`` when the driver cannot size a process's memory."""

HGML_DEVICE_UUID_V2_BUFFER_SIZE: Final = 96
HGML_DEVICE_NAME_V2_BUFFER_SIZE: Final = 96
HGML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE: Final = 80
HGML_DEVICE_PCI_BUS_ID_BUFFER_SIZE: Final = 32
HGML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE: Final = 16


def _struct_version(struct: type[ctypes.Structure], version: int) -> int:
    """NVML's ``NVML_STRUCT_VERSION``: the struct's size with the version in the top byte."""
    return ctypes.sizeof(struct) | (version << 24)


# -- structs ---------------------------------------------------------------------------------------


class struct_c_hgmlDevice_t(ctypes.Structure):
    """The opaque device the handle points at."""


c_hgmlDevice_t = ctypes.POINTER(struct_c_hgmlDevice_t)
"""A device handle: the library hands back the same pointer for the same device."""


class c_hgmlMemory_t(ctypes.Structure):
    """``hgmlDeviceGetMemoryInfo``: bytes."""

    _fields_ = (
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    )
    total: int
    free: int
    used: int


class c_hgmlUtilization_t(ctypes.Structure):
    """``hgmlDeviceGetUtilizationRates``: percent over the driver's sample window."""

    _fields_ = (
        ("gpu", ctypes.c_uint),
        ("memory", ctypes.c_uint),
    )
    gpu: int
    memory: int


class hgmlPciInfo_t(ctypes.Structure):
    """``hgmlDeviceGetPciInfo_v3``: ``busId`` is ``%08X:%02X:%02X.0``."""

    _fields_ = (
        ("busIdLegacy", ctypes.c_char * HGML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE),
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("pciDeviceId", ctypes.c_uint),
        ("pciSubSystemId", ctypes.c_uint),
        ("busId", ctypes.c_char * HGML_DEVICE_PCI_BUS_ID_BUFFER_SIZE),
    )
    busIdLegacy: bytes
    domain: int
    bus: int
    device: int
    pciDeviceId: int
    pciSubSystemId: int
    busId: bytes


class c_hgmlProcessInfo_t(ctypes.Structure):
    """One compute process (``_v3`` layout, same as ``_v2``): memory in bytes, raw sentinel."""

    _fields_ = (
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    )
    pid: int
    usedGpuMemory: int
    gpuInstanceId: int
    computeInstanceId: int


class c_hgmlProcessUtilizationSample_t(ctypes.Structure):
    """``hgmlDeviceGetProcessUtilization``: one sample (several per PID are possible)."""

    _fields_ = (
        ("pid", ctypes.c_uint),
        ("timeStamp", ctypes.c_ulonglong),
        ("smUtil", ctypes.c_uint),
        ("memUtil", ctypes.c_uint),
        ("encUtil", ctypes.c_uint),
        ("decUtil", ctypes.c_uint),
    )
    pid: int
    timeStamp: int
    smUtil: int
    memUtil: int
    encUtil: int
    decUtil: int


class c_hgmlProcessUtilizationInfo_v1_t(ctypes.Structure):
    """``hgmlDeviceGetProcessesUtilizationInfo``'s row (NVML's ``_v1`` adds jpg and ofa)."""

    _fields_ = (
        ("timeStamp", ctypes.c_ulonglong),
        ("pid", ctypes.c_uint),
        ("smUtil", ctypes.c_uint),
        ("memUtil", ctypes.c_uint),
        ("encUtil", ctypes.c_uint),
        ("decUtil", ctypes.c_uint),
        ("jpgUtil", ctypes.c_uint),
        ("ofaUtil", ctypes.c_uint),
    )
    timeStamp: int
    pid: int
    smUtil: int
    memUtil: int
    encUtil: int
    decUtil: int
    jpgUtil: int
    ofaUtil: int


class c_hgmlProcessesUtilizationInfo_t(ctypes.Structure):
    """The versioned call's in/out header: the caller's array and its capacity."""

    _fields_ = (
        ("version", ctypes.c_uint),
        ("processSamplesCount", ctypes.c_uint),
        ("lastSeenTimeStamp", ctypes.c_ulonglong),
        ("procUtilArray", ctypes.POINTER(c_hgmlProcessUtilizationInfo_v1_t)),
    )
    version: int
    processSamplesCount: int
    lastSeenTimeStamp: int
    procUtilArray: Any


hgmlProcessesUtilizationInfo_v1: Final = _struct_version(c_hgmlProcessesUtilizationInfo_t, 1)
"""``0x1000018``, as NVML's ``nvmlProcessesUtilizationInfo_v1``."""

# -- errors ----------------------------------------------------------------------------------------


def status_name(value: int) -> str:
    """The header's name for a return code, from a static table."""
    return _STATUS_TEXT.get(value, f"HGML_ERROR_{value}")


class HGMLError(StatusError):
    """A non-success ``hgmlReturn_t``; consumers branch on :attr:`value` (NVML's numbers).

    One class for every code; ``args`` is ``(value, function)`` so it pickles and copies.
    """

    status_name = staticmethod(status_name)


class HgmlLibraryNotFound(LibraryNotFound):
    """No candidate path could be opened; the message names every path and why each failed."""


# -- the wrapper -----------------------------------------------------------------------------------

SYMBOLS: Final[dict[str, str]] = {
    "hgmlInit": "hgmlInitWithFlags",
    "hgmlShutdown": "hgmlShutdown",
    "hgmlSystemGetDriverVersion": "hgmlSystemGetDriverVersion",
    "hgmlSystemGetHggcDriverVersion": "hgmlSystemGetHggcDriverVersion",
    "hgmlDeviceGetCount": "hgmlDeviceGetCount_v2",
    "hgmlDeviceGetHandleByIndex": "hgmlDeviceGetHandleByIndex_v2",
    "hgmlDeviceGetUUID": "hgmlDeviceGetUUID",
    "hgmlDeviceGetName": "hgmlDeviceGetName",
    "hgmlDeviceGetPciInfo": "hgmlDeviceGetPciInfo_v3",
    "hgmlDeviceGetNumGpuCores": "hgmlDeviceGetNumGpuCores",
    "hgmlDeviceGetMemoryInfo": "hgmlDeviceGetMemoryInfo",
    "hgmlDeviceGetUtilizationRates": "hgmlDeviceGetUtilizationRates",
    "hgmlDeviceGetTemperature": "hgmlDeviceGetTemperature",
    "hgmlDeviceGetPowerUsage": "hgmlDeviceGetPowerUsage",
    "hgmlDeviceGetMigMode": "hgmlDeviceGetMigMode",
    "hgmlDeviceGetMaxMigDeviceCount": "hgmlDeviceGetMaxMigDeviceCount",
    "hgmlDeviceGetMigDeviceHandleByIndex": "hgmlDeviceGetMigDeviceHandleByIndex",
    "hgmlDeviceGetComputeRunningProcesses": "hgmlDeviceGetComputeRunningProcesses_v3",
    "hgmlDeviceGetProcessUtilization": "hgmlDeviceGetProcessUtilization",
    "hgmlDeviceGetProcessesUtilizationInfo": "hgmlDeviceGetProcessesUtilizationInfo",
}
"""Each method of :class:`Hgml` and the C symbol it calls (pyhgml's choice of versions)."""

_NEGOTIATION_ATTEMPTS: Final = 3
"""Probe-and-fill rounds before a list that keeps growing is reported as ``INSUFFICIENT_SIZE``."""

_SLACK: Final = 8
"""Spare rows allocated past the probed count, so a process starting mid-call costs no retry."""

_Status = Callable[..., int]


class Hgml:
    """Pythonic calls over a ``libhgml`` object: a ``ctypes.CDLL`` or a fake with its C ABI.

    Symbols are looked up per call, so a library lacking one still serves the others; a missing
    symbol raises ``HGMLError(HGML_ERROR_FUNCTION_NOT_FOUND)``, NVML's own code for it.
    """

    def __init__(self, lib: object) -> None:
        self.lib = lib

    def _function(self, method: str) -> tuple[str, _Status]:
        symbol = SYMBOLS[method]
        try:
            function: _Status = getattr(self.lib, symbol)
        except AttributeError:
            raise HGMLError(HGML_ERROR_FUNCTION_NOT_FOUND, symbol) from None
        return symbol, function

    def _call(self, method: str, *args: object) -> None:
        symbol, function = self._function(method)
        status = int(function(*args))
        if status != HGML_SUCCESS:
            raise HGMLError(status, symbol)

    def _uint(self, method: str, *leading: object) -> int:
        value = ctypes.c_uint(0)
        self._call(method, *leading, ctypes.byref(value))
        return value.value

    def _string(self, method: str, size: int, *leading: object) -> str:
        buffer = ctypes.create_string_buffer(size)
        self._call(method, *leading, buffer, size)
        return buffer.value.decode("utf-8", errors="replace")

    def _handle(self, method: str, *leading: object) -> Any:
        handle = c_hgmlDevice_t()
        self._call(method, *leading, ctypes.byref(handle))
        return handle

    # -- library ----------------------------------------------------------------------------------

    def hgmlInit(self) -> None:
        """Initialise the library (``hgmlInitWithFlags(0)``, as pyhgml's ``hgmlInit``)."""
        self._call("hgmlInit", 0)

    def hgmlShutdown(self) -> None:
        """Release what :meth:`hgmlInit` acquired."""
        self._call("hgmlShutdown")

    def hgmlSystemGetDriverVersion(self) -> str:
        """The driver version (``1.4.1-816bc0``)."""
        return self._string("hgmlSystemGetDriverVersion", HGML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE)

    def hgmlSystemGetHggcDriverVersion(self) -> int:
        """The HGGC (CUDA-compatible) driver version, encoded as NVML encodes CUDA's (12030)."""
        version = ctypes.c_int(0)
        self._call("hgmlSystemGetHggcDriverVersion", ctypes.byref(version))
        return version.value

    # -- devices ----------------------------------------------------------------------------------

    def hgmlDeviceGetCount(self) -> int:
        """Number of devices; valid indices are ``0 … n-1``."""
        return self._uint("hgmlDeviceGetCount")

    def hgmlDeviceGetHandleByIndex(self, index: int) -> Any:
        """The device's handle (a ``c_hgmlDevice_t``)."""
        return self._handle("hgmlDeviceGetHandleByIndex", index)

    def hgmlDeviceGetUUID(self, handle: Any) -> str:
        """``GPU-…`` for a card, ``MIG-…`` for a MIG device."""
        return self._string("hgmlDeviceGetUUID", HGML_DEVICE_UUID_V2_BUFFER_SIZE, handle)

    def hgmlDeviceGetName(self, handle: Any) -> str:
        """The product name (``PPU-ZW810E``)."""
        return self._string("hgmlDeviceGetName", HGML_DEVICE_NAME_V2_BUFFER_SIZE, handle)

    def hgmlDeviceGetPciInfo(self, handle: Any) -> hgmlPciInfo_t:
        """PCI identity and bus id."""
        info = hgmlPciInfo_t()
        self._call("hgmlDeviceGetPciInfo", handle, ctypes.byref(info))
        return info

    def hgmlDeviceGetNumGpuCores(self, handle: Any) -> int:
        """The card's core count."""
        return self._uint("hgmlDeviceGetNumGpuCores", handle)

    def hgmlDeviceGetMemoryInfo(self, handle: Any) -> c_hgmlMemory_t:
        """Total, free and used memory in bytes, on a card or a MIG device's own handle."""
        memory = c_hgmlMemory_t()
        self._call("hgmlDeviceGetMemoryInfo", handle, ctypes.byref(memory))
        return memory

    def hgmlDeviceGetUtilizationRates(self, handle: Any) -> c_hgmlUtilization_t:
        """Card utilization in percent."""
        util = c_hgmlUtilization_t()
        self._call("hgmlDeviceGetUtilizationRates", handle, ctypes.byref(util))
        return util

    def hgmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        """Temperature of a sensor (``HGML_TEMPERATURE_GPU``) in °C."""
        return self._uint("hgmlDeviceGetTemperature", handle, sensor)

    def hgmlDeviceGetPowerUsage(self, handle: Any) -> int:
        """Board power in mW."""
        return self._uint("hgmlDeviceGetPowerUsage", handle)

    # -- MIG --------------------------------------------------------------------------------------

    def hgmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        """``[current, pending]``."""
        current, pending = ctypes.c_uint(0), ctypes.c_uint(0)
        self._call("hgmlDeviceGetMigMode", handle, ctypes.byref(current), ctypes.byref(pending))
        return [current.value, pending.value]

    def hgmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        """MIG slots on the card."""
        return self._uint("hgmlDeviceGetMaxMigDeviceCount", handle)

    def hgmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any:
        """The MIG device's **own** handle; an empty slot answers ``NOT_FOUND``."""
        return self._handle("hgmlDeviceGetMigDeviceHandleByIndex", handle, index)

    # -- processes --------------------------------------------------------------------------------

    def hgmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[c_hgmlProcessInfo_t]:
        """Compute processes with their memory (``_v3``), copied out of the buffer."""
        return self._negotiate(
            "hgmlDeviceGetComputeRunningProcesses",
            c_hgmlProcessInfo_t,
            lambda buffer, count: (handle, count, buffer),
        )

    def hgmlDeviceGetProcessUtilization(
        self, handle: Any, last_seen: int
    ) -> list[c_hgmlProcessUtilizationSample_t]:
        """Samples newer than ``last_seen`` (µs); none at all is ``NOT_FOUND``, as NVML."""
        stamp = ctypes.c_ulonglong(last_seen)
        return self._negotiate(
            "hgmlDeviceGetProcessUtilization",
            c_hgmlProcessUtilizationSample_t,
            lambda buffer, count: (handle, buffer, count, stamp),
        )

    def hgmlDeviceGetProcessesUtilizationInfo(
        self, handle: Any, last_seen: int
    ) -> list[c_hgmlProcessUtilizationInfo_v1_t]:
        """The versioned call: the same negotiation, with count and buffer inside a struct."""
        symbol, function = self._function("hgmlDeviceGetProcessesUtilizationInfo")
        info = c_hgmlProcessesUtilizationInfo_t()

        def probe() -> int | None:
            nonlocal info
            info = c_hgmlProcessesUtilizationInfo_t()
            info.version = hgmlProcessesUtilizationInfo_v1
            info.lastSeenTimeStamp = last_seen
            status = int(function(handle, ctypes.byref(info)))
            return _probed(status, info.processSamplesCount, symbol)

        def fill(capacity: int) -> list[Any] | None:
            buffer = (c_hgmlProcessUtilizationInfo_v1_t * capacity)()
            info.processSamplesCount = capacity
            info.procUtilArray = ctypes.cast(
                buffer, ctypes.POINTER(c_hgmlProcessUtilizationInfo_v1_t)
            )
            status = int(function(handle, ctypes.byref(info)))
            return _filled(status, buffer, info.processSamplesCount, capacity, symbol)

        return _grow(probe, fill, symbol)

    def _negotiate(
        self,
        method: str,
        row_type: Any,
        arguments: Callable[[Any, Any], tuple[object, ...]],
    ) -> list[Any]:
        """Probe with a NULL buffer, then fill; re-probe if the list outgrew the buffer.

        ``SUCCESS`` on the probe means no rows. The utilization call answers ``NOT_FOUND`` when
        no sample is newer than ``last_seen``; that, like every other code, is raised as the
        library's answer. A list still growing after the bounded rounds is raised as
        ``INSUFFICIENT_SIZE``, never returned short: a dropped process would read as free memory.
        """
        symbol, function = self._function(method)

        def probe() -> int | None:
            count = ctypes.c_uint(0)
            status = int(function(*arguments(None, ctypes.byref(count))))
            return _probed(status, count.value, symbol)

        def fill(capacity: int) -> list[Any] | None:
            buffer = (row_type * capacity)()
            count = ctypes.c_uint(capacity)
            status = int(function(*arguments(buffer, ctypes.byref(count))))
            return _filled(status, buffer, count.value, capacity, symbol)

        return _grow(probe, fill, symbol)


def _probed(status: int, count: int, symbol: str) -> int | None:
    """A NULL-buffer probe's answer: ``None`` for no rows (``SUCCESS``), else the row count."""
    if status == HGML_SUCCESS:
        return None
    if status != HGML_ERROR_INSUFFICIENT_SIZE:
        raise HGMLError(status, symbol)
    return count


def _filled(
    status: int, buffer: ctypes.Array[Any], written: int, capacity: int, symbol: str
) -> list[Any] | None:
    """A fill's rows, or ``None`` when the list outgrew the buffer and must be probed again."""
    if status == HGML_ERROR_INSUFFICIENT_SIZE:
        return None
    if status != HGML_SUCCESS:
        raise HGMLError(status, symbol)
    return _copied(buffer, written, capacity, symbol)


def _grow(
    probe: Callable[[], int | None], fill: Callable[[int], list[Any] | None], symbol: str
) -> list[Any]:
    """HGML's bounded probe-then-fill rounds; a list still growing is ``INSUFFICIENT_SIZE``."""
    empty: list[Any] = []
    return grow_and_retry(
        probe,
        fill,
        attempts=_NEGOTIATION_ATTEMPTS,
        slack=_SLACK,
        empty=empty,
        exhausted=lambda: HGMLError(HGML_ERROR_INSUFFICIENT_SIZE, symbol),
    )


def _copied(buffer: ctypes.Array[Any], written: int, capacity: int, symbol: str) -> list[Any]:
    """The rows the library says it wrote, copied so they do not pin the oversized buffer."""
    if written > capacity:
        # Claims rows it had no room for: memory past the buffer is garbage.
        raise HGMLError(HGML_ERROR_INSUFFICIENT_SIZE, symbol)
    row_type = buffer._type_
    return [row_type.from_buffer_copy(buffer[i]) for i in range(written)]


# -- loading ---------------------------------------------------------------------------------------

LIBRARY_NAME: Final = "libhgml.so"
HELPER_NAME: Final = "libuki.so"
"""pyhgml loads this first from the same directory: ``libhgml.so`` resolves symbols from it."""

PPU_HOME: Final = "/usr/local/PPU_SDK"


def candidate_paths() -> tuple[str, ...]:
    """Where to look, in order.

    ``$HGML_LIB`` if set; then ``lib`` and ``lib64`` under ``$PPU_HOME`` (default
    ``/usr/local/PPU_SDK``); then the dynamic linker's search path.
    """
    home = os.environ.get("PPU_HOME") or PPU_HOME
    paths = (f"{home}/lib/{LIBRARY_NAME}", f"{home}/lib64/{LIBRARY_NAME}", LIBRARY_NAME)
    return with_override("HGML_LIB", paths)


_u = ctypes.c_uint
_P = ctypes.POINTER
_D = c_hgmlDevice_t

_SIGNATURES: Final = returning(
    ctypes.c_uint,
    {
        "hgmlInitWithFlags": (_u,),
        "hgmlShutdown": (),
        "hgmlSystemGetDriverVersion": (ctypes.c_char_p, _u),
        "hgmlSystemGetHggcDriverVersion": (_P(ctypes.c_int),),
        "hgmlDeviceGetCount_v2": (_P(_u),),
        "hgmlDeviceGetHandleByIndex_v2": (_u, _P(_D)),
        "hgmlDeviceGetUUID": (_D, ctypes.c_char_p, _u),
        "hgmlDeviceGetName": (_D, ctypes.c_char_p, _u),
        "hgmlDeviceGetPciInfo_v3": (_D, _P(hgmlPciInfo_t)),
        "hgmlDeviceGetNumGpuCores": (_D, _P(_u)),
        "hgmlDeviceGetMemoryInfo": (_D, _P(c_hgmlMemory_t)),
        "hgmlDeviceGetUtilizationRates": (_D, _P(c_hgmlUtilization_t)),
        "hgmlDeviceGetTemperature": (_D, _u, _P(_u)),
        "hgmlDeviceGetPowerUsage": (_D, _P(_u)),
        "hgmlDeviceGetMigMode": (_D, _P(_u), _P(_u)),
        "hgmlDeviceGetMaxMigDeviceCount": (_D, _P(_u)),
        "hgmlDeviceGetMigDeviceHandleByIndex": (_D, _u, _P(_D)),
        "hgmlDeviceGetComputeRunningProcesses_v3": (_D, _P(_u), _P(c_hgmlProcessInfo_t)),
        "hgmlDeviceGetProcessUtilization": (
            _D,
            _P(c_hgmlProcessUtilizationSample_t),
            _P(_u),
            ctypes.c_ulonglong,
        ),
        "hgmlDeviceGetProcessesUtilizationInfo": (_D, _P(c_hgmlProcessesUtilizationInfo_t)),
    },
)


def load_library(paths: Sequence[str] | None = None) -> Hgml:
    """Open HGML from the first path that loads; ``paths`` replaces the default search.

    Beside an absolute candidate, ``libuki.so`` is loaded first (``RTLD_GLOBAL``) when present,
    as pyhgml does for its bundled copy. The caller still calls :meth:`Hgml.hgmlInit`. A miss
    names the library and every path tried.
    """
    lib = open_first(
        candidate_paths() if paths is None else paths,
        library=LIBRARY_NAME,
        not_found=HgmlLibraryNotFound,
        signatures=_SIGNATURES,
        before=_load_helper,
    )
    return Hgml(lib)


def _load_helper(path: str) -> None:
    """``libuki.so`` beside an absolute candidate, ``RTLD_GLOBAL``, when it is there."""
    helper = os.path.join(os.path.dirname(path), HELPER_NAME)
    if os.path.isabs(path) and os.path.exists(helper):
        ctypes.CDLL(helper, mode=ctypes.RTLD_GLOBAL)
