# The library's C names, spelled as its header spells them (a binding, not our API):
# ruff: noqa: N801, N802, N815
"""A ctypes binding for Cambricon CNDev (``libcndev.so``, shipped with Neuware).

Only the entry points the Cambricon backend calls are declared. Facts taken from ``cndev.h``
(the header gpustack-operator vendors in ``binding/cndev``):

- ``cndevRet_t`` counts up from ``CNDEV_SUCCESS = 0`` to ``CNDEV_ERROR_TIMEOUT = 17``; the enum is
  a plain C ``int``. ``CNDEV_ERROR_FUNCTION_NOT_FOUND`` (-99998) and
  ``CNDEV_ERROR_LIBRARY_NOT_FOUND`` (-99999) are not the header's: gpustack's ``pycndev`` and the
  operator's Go binding define them, at these values, for failures before any driver call.
- ``cndevDevice_t`` is an ``int32`` handle (``cndevGetDeviceHandleByIndex`` writes it).
- Most structs open with an **input** ``version`` the caller stamps (``CNDEV_VERSION_6``); the
  layout and the answer depend on it, so every method here takes the version as an argument and
  a recording keeps it as part of the call. ``cndevMemoryInfoV2_t``, ``cndevPCIeInfoV2_t`` and
  ``cndevDevicePowerInfo_t`` carry no version field.
- Units: card memory is "MB" in the header and MiB in fact (the operator, ``cnmon`` and
  gpustack-runtime all read it as MiB); per-process memory is **KiB**; power is W.
- The two process lists (``cndevGetProcessInfo``, ``cndevGetProcessUtilization``) take
  ``unsigned *count`` (in: rows the buffer holds; out: rows written) and a buffer whose first row
  carries the version. A buffer too small for the list answers ``CNDEV_ERROR_INSUFFICIENT_SPACE``
  with ``*count`` set to the rows the library holds *now*; callers loop (Cambricon's own
  samples and device plugin do) because the list can grow again before the next call.

Importing this module loads nothing: :func:`load_library` opens the library, and the replay
simulator hands :class:`Cndev` a fake library with the same C ABI instead.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from typing import Any, Final

from gpustack_vendors.bindings.calls import CLibrary, StatusError
from gpustack_vendors.bindings.loader import LibraryNotFound, open_first, with_override

# -- cndevRet_t -----------------------------------------------------------------------------------

CNDEV_SUCCESS: Final = 0
CNDEV_ERROR_NO_DRIVER: Final = 1
CNDEV_ERROR_LOW_DRIVER_VERSION: Final = 2
CNDEV_ERROR_UNSUPPORTED_API_VERSION: Final = 3
CNDEV_ERROR_UNINITIALIZED: Final = 4
CNDEV_ERROR_INVALID_ARGUMENT: Final = 5
CNDEV_ERROR_INVALID_DEVICE_ID: Final = 6
CNDEV_ERROR_UNKNOWN: Final = 7
CNDEV_ERROR_MALLOC: Final = 8
CNDEV_ERROR_INSUFFICIENT_SPACE: Final = 9
CNDEV_ERROR_NOT_SUPPORTED: Final = 10
CNDEV_ERROR_INVALID_LINK: Final = 11
CNDEV_ERROR_NO_DEVICES: Final = 12
CNDEV_ERROR_NO_PERMISSION: Final = 13
CNDEV_ERROR_NOT_FOUND: Final = 14
CNDEV_ERROR_IN_USE: Final = 15
CNDEV_ERROR_DUPLICATE: Final = 16
CNDEV_ERROR_TIMEOUT: Final = 17
CNDEV_ERROR_FUNCTION_NOT_FOUND: Final = -99998
"""The binding's code for a symbol the loaded library lacks (gpustack's ``pycndev`` value)."""
CNDEV_ERROR_LIBRARY_NOT_FOUND: Final = -99999

_STATUS_NAMES: Final[dict[int, str]] = {
    CNDEV_SUCCESS: "CNDEV_SUCCESS",
    CNDEV_ERROR_NO_DRIVER: "CNDEV_ERROR_NO_DRIVER",
    CNDEV_ERROR_LOW_DRIVER_VERSION: "CNDEV_ERROR_LOW_DRIVER_VERSION",
    CNDEV_ERROR_UNSUPPORTED_API_VERSION: "CNDEV_ERROR_UNSUPPORTED_API_VERSION",
    CNDEV_ERROR_UNINITIALIZED: "CNDEV_ERROR_UNINITIALIZED",
    CNDEV_ERROR_INVALID_ARGUMENT: "CNDEV_ERROR_INVALID_ARGUMENT",
    CNDEV_ERROR_INVALID_DEVICE_ID: "CNDEV_ERROR_INVALID_DEVICE_ID",
    CNDEV_ERROR_UNKNOWN: "CNDEV_ERROR_UNKNOWN",
    CNDEV_ERROR_MALLOC: "CNDEV_ERROR_MALLOC",
    CNDEV_ERROR_INSUFFICIENT_SPACE: "CNDEV_ERROR_INSUFFICIENT_SPACE",
    CNDEV_ERROR_NOT_SUPPORTED: "CNDEV_ERROR_NOT_SUPPORTED",
    CNDEV_ERROR_INVALID_LINK: "CNDEV_ERROR_INVALID_LINK",
    CNDEV_ERROR_NO_DEVICES: "CNDEV_ERROR_NO_DEVICES",
    CNDEV_ERROR_NO_PERMISSION: "CNDEV_ERROR_NO_PERMISSION",
    CNDEV_ERROR_NOT_FOUND: "CNDEV_ERROR_NOT_FOUND",
    CNDEV_ERROR_IN_USE: "CNDEV_ERROR_IN_USE",
    CNDEV_ERROR_DUPLICATE: "CNDEV_ERROR_DUPLICATE",
    CNDEV_ERROR_TIMEOUT: "CNDEV_ERROR_TIMEOUT",
    CNDEV_ERROR_FUNCTION_NOT_FOUND: "CNDEV_ERROR_FUNCTION_NOT_FOUND",
    CNDEV_ERROR_LIBRARY_NOT_FOUND: "CNDEV_ERROR_LIBRARY_NOT_FOUND",
}

# -- versions and sizes ---------------------------------------------------------------------------

CNDEV_VERSION_1: Final = 1
CNDEV_VERSION_5: Final = 5
CNDEV_VERSION_6: Final = 6
"""The struct version every call here stamps: the newest the header defines."""
CNDEV_UUID_SIZE: Final = 37
CNDEV_HEALTH_STATE_DEVICE_IN_PROBLEM: Final = 0
CNDEV_HEALTH_STATE_DEVICE_GOOD: Final = 1

_i32 = ctypes.c_int32
_u16 = ctypes.c_uint16
_u32 = ctypes.c_uint32
_i64 = ctypes.c_int64
_u64 = ctypes.c_uint64


# -- structs (field order and widths are the ABI) -------------------------------------------------


class cndevCardInfo_t(ctypes.Structure):
    """``cndevGetDeviceCount``'s answer: ``number`` of devices."""

    _fields_ = (("version", _i32), ("number", _u32))
    version: int
    number: int


class cndevUUID_t(ctypes.Structure):
    """The bare UUID (the tools print it with an ``MLU-`` prefix) and the 64-bit NCS UUID."""

    _fields_ = (
        ("version", _i32),
        ("uuid", ctypes.c_char * CNDEV_UUID_SIZE),
        ("ncsUUID64", _u64),
    )
    version: int
    uuid: bytes
    ncsUUID64: int


class cndevPCIeInfoV2_t(ctypes.Structure):
    """PCIe identity; no version field."""

    _fields_ = (
        ("subsystemId", _u32),
        ("deviceId", _u32),
        ("vendor", _u16),
        ("subsystemVendor", _u16),
        ("domain", _u32),
        ("bus", _u32),
        ("device", _u32),
        ("function", _u32),
        ("moduleId", _u16),
        ("slotId", _u16),
        ("reserved", _u32 * 8),
    )
    subsystemId: int
    deviceId: int
    vendor: int
    subsystemVendor: int
    domain: int
    bus: int
    device: int
    function: int
    moduleId: int
    slotId: int


class cndevMemoryInfoV2_t(ctypes.Structure):
    """Card memory in the header's "MB", which is MiB; no version field."""

    _fields_ = (
        ("physicalMemoryTotal", _i64),
        ("physicalMemoryUsed", _i64),
        ("reservedMemory", _i64),
        ("virtualMemoryTotal", _i64),
        ("virtualMemoryUsed", _i64),
        ("globalMemory", _u64),
        ("reserved", _u64 * 16),
    )
    physicalMemoryTotal: int
    physicalMemoryUsed: int
    reservedMemory: int
    virtualMemoryTotal: int
    virtualMemoryUsed: int
    globalMemory: int


class cndevVersionInfo_t(ctypes.Structure):
    """MCU and MLU driver versions."""

    _fields_ = (
        ("version", _i32),
        ("mcuMajorVersion", _u32),
        ("mcuMinorVersion", _u32),
        ("mcuBuildVersion", _u32),
        ("driverMajorVersion", _u32),
        ("driverMinorVersion", _u32),
        ("driverBuildVersion", _u32),
    )
    version: int
    mcuMajorVersion: int
    mcuMinorVersion: int
    mcuBuildVersion: int
    driverMajorVersion: int
    driverMinorVersion: int
    driverBuildVersion: int


class cndevCardHealthState_t(ctypes.Structure):
    """``health`` 1 is good, 0 in problem (the ``cndevHealthStateEnum_t`` convention)."""

    _fields_ = (
        ("version", _i32),
        ("health", _i32),
        ("deviceState", _i32),
        ("driverState", _i32),
    )
    version: int
    health: int
    deviceState: int
    driverState: int


class cndevUtilizationInfo_t(ctypes.Structure):
    """The average MLU core utilization, and one figure per core."""

    _fields_ = (
        ("version", _i32),
        ("averageCoreUtilization", _i32),
        ("coreUtilization", _i32 * 80),
    )
    version: int
    averageCoreUtilization: int


class cndevTemperatureInfo_t(ctypes.Structure):
    """Temperatures in °C; ``chip`` is the chip-top maximum."""

    _fields_ = (
        ("version", _i32),
        ("board", _i32),
        ("cluster", _i32 * 20),
        ("memoryDie", _i32 * 8),
        ("chip", _i32),
        ("airInlet", _i32),
        ("airOutlet", _i32),
        ("memory", _i32),
        ("videoInput", _i32),
        ("cpu", _i32),
        ("isp", _i32),
    )
    version: int
    board: int
    chip: int


class cndevDevicePowerInfo_t(ctypes.Structure):
    """Power in W; no version field."""

    _fields_ = (
        ("usage", _i32),
        ("cap", _i32),
        ("machine", _i32),
        ("tdp", _i32),
        ("maxPower", _i32),
        ("reserved", _i32 * 16),
    )
    usage: int
    cap: int
    machine: int
    tdp: int
    maxPower: int


class cndevProcessInfo_t(ctypes.Structure):
    """One process on a device; both memory figures are **KiB**."""

    _fields_ = (
        ("version", _i32),
        ("pid", _u32),
        ("physicalMemoryUsed", _u64),
        ("virtualMemoryUsed", _u64),
    )
    version: int
    pid: int
    physicalMemoryUsed: int
    virtualMemoryUsed: int


class cndevProcessUtilization_t(ctypes.Structure):
    """One process's utilization of the device's engines, in percent of the device."""

    _fields_ = (
        ("version", _i32),
        ("pid", _u32),
        ("ipuUtil", _u32),
        ("jpuUtil", _u32),
        ("vpuDecUtil", _u32),
        ("vpuEncUtil", _u32),
        ("memUtil", _u32),
    )
    version: int
    pid: int
    ipuUtil: int
    jpuUtil: int
    vpuDecUtil: int
    vpuEncUtil: int
    memUtil: int


# -- errors ---------------------------------------------------------------------------------------


def status_name(value: int) -> str:
    """The header's name for a status, from a static table (never from the library)."""
    return _STATUS_NAMES.get(value, f"CNDEV_STATUS_{value}")


class CNDevError(StatusError):
    """A non-success ``cndevRet_t``; consumers branch on :attr:`value`, never on the text.

    ``args`` is ``(value, function)`` so the exception pickles and copies without losing the code.
    """

    status_name = staticmethod(status_name)


class CndevLibraryNotFound(LibraryNotFound):
    """No candidate path could be opened; the message names every path and why each failed."""


# -- the wrapper ----------------------------------------------------------------------------------

LIST_ATTEMPTS: Final = 4
"""Calls before a process list that keeps outgrowing its buffer is reported as truncated."""

INITIAL_ROWS: Final = 16
"""First buffer size, as Cambricon's device plugin allocates (``1 << 4``)."""

MAX_ROWS: Final = 4096
"""A count past this is no process list: refused rather than allocated (as the operator does)."""

_Status = Callable[..., int]


class Cndev(CLibrary):
    """Pythonic calls over a ``libcndev`` object: a ``ctypes.CDLL`` or a fake with its ABI.

    Symbols are looked up per call, so a library lacking one function still serves the others; a
    missing symbol raises ``CNDevError(CNDEV_ERROR_FUNCTION_NOT_FOUND)``.
    """

    error = CNDevError
    missing_symbol = CNDEV_ERROR_FUNCTION_NOT_FOUND

    def _struct(self, name: str, cls: Any, device: int, version: int | None) -> Any:
        """Fill one struct for a device; ``version`` is stamped where the struct has one."""
        struct = cls()
        if version is not None:
            struct.version = version
        self._call(name, ctypes.pointer(struct), device)
        return struct

    # -- library ---------------------------------------------------------------------------------

    def cndevInit(self, reserved: int = 0) -> None:
        """Initialise the library (the header names the argument ``reserved``; pass 0)."""
        self._call("cndevInit", reserved)

    def cndevRelease(self) -> None:
        """Free what :meth:`cndevInit` allocated."""
        self._call("cndevRelease")

    def cndevGetDeviceCount(self, version: int = CNDEV_VERSION_6) -> int:
        """Number of devices; valid indices are ``0 … n-1``."""
        info = cndevCardInfo_t(version, 0)
        self._call("cndevGetDeviceCount", ctypes.pointer(info))
        return int(info.number)

    def cndevGetDeviceHandleByIndex(self, index: int) -> int:
        """The ``int32`` handle every per-device call takes."""
        handle = _i32(0)
        self._call("cndevGetDeviceHandleByIndex", index, ctypes.pointer(handle))
        return int(handle.value)

    # -- per device ------------------------------------------------------------------------------

    def cndevGetUUID(self, device: int, version: int = CNDEV_VERSION_6) -> cndevUUID_t:
        """The bare UUID, as the driver writes it."""
        result: cndevUUID_t = self._struct("cndevGetUUID", cndevUUID_t, device, version)
        return result

    def cndevGetCardNameStringByDevId(self, device: int) -> str:
        """The marketing name; the C function returns ``const char *`` (NULL on failure)."""
        name: object = self._function("cndevGetCardNameStringByDevId")(device)
        if not isinstance(name, bytes):  # NULL (None), or not a C string at all
            raise CNDevError(CNDEV_ERROR_UNKNOWN, "cndevGetCardNameStringByDevId")
        return name.decode("utf-8", errors="replace")

    def cndevGetPCIeInfoV2(self, device: int) -> cndevPCIeInfoV2_t:
        """Domain, bus, device and function of the card."""
        result: cndevPCIeInfoV2_t = self._struct(
            "cndevGetPCIeInfoV2", cndevPCIeInfoV2_t, device, None
        )
        return result

    def cndevGetMemoryUsageV2(self, device: int) -> cndevMemoryInfoV2_t:
        """Card memory in MiB."""
        result: cndevMemoryInfoV2_t = self._struct(
            "cndevGetMemoryUsageV2", cndevMemoryInfoV2_t, device, None
        )
        return result

    def cndevGetVersionInfo(
        self, device: int, version: int = CNDEV_VERSION_6
    ) -> cndevVersionInfo_t:
        """MCU and driver versions."""
        result: cndevVersionInfo_t = self._struct(
            "cndevGetVersionInfo", cndevVersionInfo_t, device, version
        )
        return result

    def cndevGetCardHealthState(
        self, device: int, version: int = CNDEV_VERSION_6
    ) -> cndevCardHealthState_t:
        """The card-wide health flag."""
        result: cndevCardHealthState_t = self._struct(
            "cndevGetCardHealthState", cndevCardHealthState_t, device, version
        )
        return result

    def cndevGetDeviceUtilizationInfo(
        self, device: int, version: int = CNDEV_VERSION_6
    ) -> cndevUtilizationInfo_t:
        """Average and per-core MLU utilization."""
        result: cndevUtilizationInfo_t = self._struct(
            "cndevGetDeviceUtilizationInfo", cndevUtilizationInfo_t, device, version
        )
        return result

    def cndevGetTemperatureInfo(
        self, device: int, version: int = CNDEV_VERSION_6
    ) -> cndevTemperatureInfo_t:
        """Temperatures in °C."""
        result: cndevTemperatureInfo_t = self._struct(
            "cndevGetTemperatureInfo", cndevTemperatureInfo_t, device, version
        )
        return result

    def cndevGetDevicePowerInfo(self, device: int) -> cndevDevicePowerInfo_t:
        """Power figures in W."""
        result: cndevDevicePowerInfo_t = self._struct(
            "cndevGetDevicePowerInfo", cndevDevicePowerInfo_t, device, None
        )
        return result

    # -- process lists ---------------------------------------------------------------------------

    def cndevGetProcessInfo(
        self, device: int, version: int = CNDEV_VERSION_6
    ) -> list[cndevProcessInfo_t]:
        """Every process on the device with its memory in KiB; never a partial list."""
        return self._list("cndevGetProcessInfo", cndevProcessInfo_t, device, version)

    def cndevGetProcessUtilization(
        self, device: int, version: int = CNDEV_VERSION_6
    ) -> list[cndevProcessUtilization_t]:
        """Per-process utilization rows of the device; never a partial list."""
        return self._list("cndevGetProcessUtilization", cndevProcessUtilization_t, device, version)

    def _list(self, name: str, row_type: Any, device: int, version: int) -> list[Any]:
        """CNDev's loop: call, and on ``INSUFFICIENT_SPACE`` call again at the size it reports.

        The library sets ``*count`` to the rows it holds when the buffer is too small, but the
        list can grow again before the next call, so the loop is bounded and its exhaustion is
        raised as ``INSUFFICIENT_SPACE`` (a truncated list is never returned as a complete one).
        A library that claims more rows written than the buffer held is refused the same way:
        memory past the buffer is not rows.
        """
        function = self._function(name)
        capacity = INITIAL_ROWS
        for _ in range(LIST_ATTEMPTS):
            buffer = (row_type * capacity)()
            for row in buffer:
                row.version = version
            count = ctypes.c_uint(capacity)
            status = int(function(ctypes.pointer(count), buffer, device))
            if status == CNDEV_SUCCESS:
                if count.value > capacity:
                    raise CNDevError(CNDEV_ERROR_INSUFFICIENT_SPACE, name)
                # Copied out so the rows do not keep the oversized buffer alive.
                return [row_type.from_buffer_copy(buffer[i]) for i in range(count.value)]
            if status != CNDEV_ERROR_INSUFFICIENT_SPACE:
                raise CNDevError(status, name)
            # Growth must be strict for the retry to make progress.
            wanted = count.value if count.value > capacity else capacity * 2
            if wanted > MAX_ROWS:
                raise CNDevError(CNDEV_ERROR_INSUFFICIENT_SPACE, name)
            capacity = wanted
        raise CNDevError(CNDEV_ERROR_INSUFFICIENT_SPACE, name)


# -- loading --------------------------------------------------------------------------------------

LIBRARY_NAME: Final = "libcndev.so"
ENV_LIBRARY: Final = "CNDEV_LIB"
"""Set to a full path to load that file instead of searching."""
ENV_HOME: Final = "NEUWARE_HOME"


def default_paths() -> tuple[str, ...]:
    """``$NEUWARE_HOME`` (default ``/usr/local/neuware``) ``lib64``, ``lib``, then the linker."""
    home = os.environ.get(ENV_HOME) or "/usr/local/neuware"
    return (
        os.path.join(home, "lib64", LIBRARY_NAME),
        os.path.join(home, "lib", LIBRARY_NAME),
        LIBRARY_NAME,
    )


_P = ctypes.POINTER
_SIGNATURES: Final[dict[str, tuple[tuple[Any, ...], Any]]] = {
    "cndevInit": ((_i32,), _i32),
    "cndevRelease": ((), _i32),
    "cndevGetDeviceCount": ((_P(cndevCardInfo_t),), _i32),
    "cndevGetDeviceHandleByIndex": ((_i32, _P(_i32)), _i32),
    "cndevGetUUID": ((_P(cndevUUID_t), _i32), _i32),
    "cndevGetCardNameStringByDevId": ((_i32,), ctypes.c_char_p),
    "cndevGetPCIeInfoV2": ((_P(cndevPCIeInfoV2_t), _i32), _i32),
    "cndevGetMemoryUsageV2": ((_P(cndevMemoryInfoV2_t), _i32), _i32),
    "cndevGetVersionInfo": ((_P(cndevVersionInfo_t), _i32), _i32),
    "cndevGetCardHealthState": ((_P(cndevCardHealthState_t), _i32), _i32),
    "cndevGetDeviceUtilizationInfo": ((_P(cndevUtilizationInfo_t), _i32), _i32),
    "cndevGetTemperatureInfo": ((_P(cndevTemperatureInfo_t), _i32), _i32),
    "cndevGetDevicePowerInfo": ((_P(cndevDevicePowerInfo_t), _i32), _i32),
    "cndevGetProcessInfo": ((_P(ctypes.c_uint), _P(cndevProcessInfo_t), _i32), _i32),
    "cndevGetProcessUtilization": (
        (_P(ctypes.c_uint), _P(cndevProcessUtilization_t), _i32),
        _i32,
    ),
}


def load_library(paths: Sequence[str] | None = None) -> Cndev:
    """Open CNDev from the first path that loads; ``paths`` replaces the default search.

    Without ``paths``: ``$CNDEV_LIB`` if set, then :func:`default_paths`. The caller still calls
    :meth:`Cndev.cndevInit`.
    """
    lib = open_first(
        with_override(ENV_LIBRARY, default_paths()) if paths is None else paths,
        library=LIBRARY_NAME,
        not_found=CndevLibraryNotFound,
        signatures=_SIGNATURES,
    )
    return Cndev(lib)
