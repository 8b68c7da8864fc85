# The library's C names, spelled as its header spells them (a binding, not our API):
# ruff: noqa: N801, N802, N815
"""A ctypes binding for MetaX MXSML (``libmxsml.so`` under ``/opt/mxdriver`` or ``/opt/maca``).

Only the entry points the MetaX backend calls are declared. Facts taken from ``MxSml.h`` (as
gpustack-operator vendors it in ``binding/mxsml``) and gpustack's ``pymxsml``:

- ``mxSmlReturn_t`` is an ``unsigned int`` enum from ``MXSML_SUCCESS = 0`` to
  ``MXSML_ERROR_LOAD_DLL_FAILURE = 26``. ``MXSML_ERROR_FUNCTION_NOT_FOUND`` (999) is
  ``pymxsml``'s code for a symbol the library lacks, kept here at the same value.
- Devices are plain ``unsigned int`` indices. ``mxSmlGetDeviceCount`` returns the count itself,
  not a status, so it cannot fail; it counts VFs too.
- ``mxSmlDeviceInfo_t.gpuId`` is the card's *physical* id. The process rows'
  ``processGpuInfo[].gpuId`` is the device's *sequence index* (the index every call takes). The
  operator's first hardware run matched the two and silently dropped every row.
- Units: ``mxSmlMemoryInfo_t`` is KiB; process ``gpuMemoryUsage`` is bytes (the header says so,
  and the operator's C600 check matched ``mx-smi``); board power ways are mW; the hotspot
  temperature is hundredths of a degree.

**Size conventions differ per call, which is the hazard.** ``mxSmlGetBoardPowerInfo`` answers its
size-0 probe with ``INSUFFICIENT_SIZE`` and the size it needs (``pymxsml`` raises
``MXSMLError(ret)`` for any other answer, ``MXSML_SUCCESS`` included). The per-device process
query answers a size-0 call with ``SUCCESS`` and the count but writes nothing, and a buffer too
small for the list may be filled to capacity with ``SUCCESS`` — a silent truncation. So a process
list is never probed with size 0, and a fill that uses every row of its buffer is retried larger,
never returned (the operator's rule: a full buffer may have had more to write).

Importing this module loads nothing: :func:`load_library` opens the library, and the replay
simulator hands :class:`Mxsml` a fake library with the same C ABI instead.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from typing import Any, Final

from gpustack_vendors.bindings.calls import CLibrary, StatusError
from gpustack_vendors.bindings.loader import LibraryNotFound, open_first, with_override

# -- mxSmlReturn_t --------------------------------------------------------------------------------

MXSML_SUCCESS: Final = 0
MXSML_ERROR_FAILURE: Final = 1
MXSML_ERROR_NO_DEVICE: Final = 2
MXSML_ERROR_OPERATION_NOT_SUPPORT: Final = 3
MXSML_ERROR_SYSFS_ERROR: Final = 4
MXSML_ERROR_SYSFS_WRITE_ERROR: Final = 5
MXSML_ERROR_INVALID_DEVICE_ID: Final = 6
MXSML_ERROR_INVALID_DIE_ID: Final = 7
MXSML_ERROR_PERMISSION_DENIED: Final = 8
MXSML_ERROR_INVALID_INPUT: Final = 9
MXSML_ERROR_INSUFFICIENT_SIZE: Final = 10
MXSML_ERROR_IO_CONTROL_FAILURE: Final = 12
MXSML_ERROR_FLR_NOT_READY: Final = 20
MXSML_ERROR_BUSY_DEVICE: Final = 23
MXSML_ERROR_LOAD_DLL_FAILURE: Final = 26
MXSML_ERROR_FUNCTION_NOT_FOUND: Final = 999
"""``pymxsml``'s code for a symbol the loaded library lacks."""

_STATUS_NAMES: Final[dict[int, str]] = {
    MXSML_SUCCESS: "MXSML_SUCCESS",
    MXSML_ERROR_FAILURE: "MXSML_ERROR_FAILURE",
    MXSML_ERROR_NO_DEVICE: "MXSML_ERROR_NO_DEVICE",
    MXSML_ERROR_OPERATION_NOT_SUPPORT: "MXSML_ERROR_OPERATION_NOT_SUPPORT",
    MXSML_ERROR_SYSFS_ERROR: "MXSML_ERROR_SYSFS_ERROR",
    MXSML_ERROR_SYSFS_WRITE_ERROR: "MXSML_ERROR_SYSFS_WRITE_ERROR",
    MXSML_ERROR_INVALID_DEVICE_ID: "MXSML_ERROR_INVALID_DEVICE_ID",
    MXSML_ERROR_INVALID_DIE_ID: "MXSML_ERROR_INVALID_DIE_ID",
    MXSML_ERROR_PERMISSION_DENIED: "MXSML_ERROR_PERMISSION_DENIED",
    MXSML_ERROR_INVALID_INPUT: "MXSML_ERROR_INVALID_INPUT",
    MXSML_ERROR_INSUFFICIENT_SIZE: "MXSML_ERROR_INSUFFICIENT_SIZE",
    MXSML_ERROR_IO_CONTROL_FAILURE: "MXSML_ERROR_IO_CONTROL_FAILURE",
    MXSML_ERROR_FLR_NOT_READY: "MXSML_ERROR_FLR_NOT_READY",
    MXSML_ERROR_BUSY_DEVICE: "MXSML_ERROR_BUSY_DEVICE",
    MXSML_ERROR_LOAD_DLL_FAILURE: "MXSML_ERROR_LOAD_DLL_FAILURE",
    MXSML_ERROR_FUNCTION_NOT_FOUND: "MXSML_ERROR_FUNCTION_NOT_FOUND",
}

# -- enums and sizes ------------------------------------------------------------------------------

MXSML_VIRTUALIZATION_MODE_NONE: Final = 0
MXSML_VIRTUALIZATION_MODE_PF: Final = 1
MXSML_VIRTUALIZATION_MODE_VF: Final = 2
MXSML_TEMPERATURE_HOTSPOT: Final = 0
MXSML_USAGE_XCORE: Final = 4
MXSML_VERSION_DRIVER: Final = 1

DEVICE_BDF_ID_SIZE: Final = 32
DEVICE_UUID_SIZE: Final = 96
DEVICE_NAME_SIZE: Final = 32
VERSION_INFO_SIZE: Final = 64
PROCESS_NAME_SIZE: Final = 64
MAX_GPU_NUM_USED_BY_PROCESS: Final = 64
SGPU_DISABLED: Final = -1
"""``sgpuId`` of a row on a device not in sGPU mode."""

_uint = ctypes.c_uint
_int = ctypes.c_int
_long = ctypes.c_long
_ulong = ctypes.c_ulong


# -- structs (field order and widths are the ABI) -------------------------------------------------


class mxSmlDeviceInfo_t(ctypes.Structure):
    """Identity of one device; ``gpuId`` is the physical id, not the index."""

    _fields_ = (
        ("deviceId", _uint),
        ("type", _uint),
        ("bdfId", ctypes.c_char * DEVICE_BDF_ID_SIZE),
        ("gpuId", _uint),
        ("nodeId", _uint),
        ("uuid", ctypes.c_char * DEVICE_UUID_SIZE),
        ("brand", _uint),
        ("mode", _uint),
        ("deviceName", ctypes.c_char * DEVICE_NAME_SIZE),
    )
    deviceId: int
    type: int
    bdfId: bytes
    gpuId: int
    nodeId: int
    uuid: bytes
    brand: int
    mode: int
    deviceName: bytes


class mxSmlMemoryInfo_t(ctypes.Structure):
    """Device memory in KiB."""

    _fields_ = (
        ("visVramTotal", _long),
        ("visVramUse", _long),
        ("vramTotal", _long),
        ("vramUse", _long),
        ("xttTotal", _long),
        ("xttUse", _long),
    )
    visVramTotal: int
    visVramUse: int
    vramTotal: int
    vramUse: int
    xttTotal: int
    xttUse: int


class mxSmlBoardWayElectricInfo_t(ctypes.Structure):
    """One board power rail: mV, mA, mW."""

    _fields_ = (("voltage", _uint), ("current", _uint), ("power", _uint))
    voltage: int
    current: int
    power: int


class mxSmlProcessGpuInfo_v3_t(ctypes.Structure):
    """One device a process uses; ``gpuId`` is the device's sequence index, memory in bytes."""

    _fields_ = (
        ("bdfId", ctypes.c_char * DEVICE_BDF_ID_SIZE),
        ("gpuId", _uint),
        ("gpuMemoryUsage", _ulong),
        ("dieId", _uint),
        ("sgpuId", _int),
    )
    bdfId: bytes
    gpuId: int
    gpuMemoryUsage: int
    dieId: int
    sgpuId: int


class mxSmlProcessInfo_v3_t(ctypes.Structure):
    """One process and the devices it uses (the first ``gpuNumber`` entries)."""

    _fields_ = (
        ("processId", _uint),
        ("processName", ctypes.c_char * PROCESS_NAME_SIZE),
        ("gpuNumber", _uint),
        ("processGpuInfo", mxSmlProcessGpuInfo_v3_t * MAX_GPU_NUM_USED_BY_PROCESS),
    )
    processId: int
    processName: bytes
    gpuNumber: int
    processGpuInfo: Any


# -- errors ---------------------------------------------------------------------------------------


def status_name(value: int) -> str:
    """The header's name for a status, from a static table (never from the library)."""
    return _STATUS_NAMES.get(value, f"MXSML_STATUS_{value}")


class MXSMLError(StatusError):
    """A non-success ``mxSmlReturn_t``; consumers branch on :attr:`value`, never on the text."""

    status_name = staticmethod(status_name)


class MxsmlLibraryNotFound(LibraryNotFound):
    """No candidate path could be opened; the message names every path and why each failed."""


# -- the wrapper ----------------------------------------------------------------------------------

LIST_ATTEMPTS: Final = 4
"""Fills before a list that keeps filling every buffer is reported as ``INSUFFICIENT_SIZE``."""

INITIAL_ROWS: Final = 16
"""Rows of the first process-list fill (each row is ~3.6 KiB: 64 device entries)."""

MAX_ROWS: Final = 4096
"""A count past this is no process list: refused rather than allocated (as the operator does)."""

_Status = Callable[..., int]


class Mxsml(CLibrary):
    """Pythonic calls over a ``libmxsml`` object: a ``ctypes.CDLL`` or a fake with its ABI.

    Symbols are looked up per call; a missing one raises
    ``MXSMLError(MXSML_ERROR_FUNCTION_NOT_FOUND)``.
    """

    error = MXSMLError
    missing_symbol = MXSML_ERROR_FUNCTION_NOT_FOUND

    def mxSmlInit(self) -> None:
        """Discover and initialise the devices."""
        self._call("mxSmlInit")

    def mxSmlGetDeviceCount(self) -> int:
        """Devices, VFs included; the C function returns the count, never a status."""
        return int(self._function("mxSmlGetDeviceCount")())

    def mxSmlGetMacaVersion(self) -> str:
        """The MACA software stack version."""
        buffer = ctypes.create_string_buffer(VERSION_INFO_SIZE)
        size = _uint(VERSION_INFO_SIZE)
        self._call("mxSmlGetMacaVersion", buffer, ctypes.pointer(size))
        return buffer.value.decode("utf-8", errors="replace")

    def mxSmlGetDeviceVersion(self, device: int, unit: int) -> str:
        """A firmware or driver version of a device (``unit`` is ``mxSmlVersionUnit_t``)."""
        buffer = ctypes.create_string_buffer(VERSION_INFO_SIZE)
        size = _uint(VERSION_INFO_SIZE)
        self._call("mxSmlGetDeviceVersion", device, unit, buffer, ctypes.pointer(size))
        return buffer.value.decode("utf-8", errors="replace")

    def mxSmlGetDeviceInfo(self, device: int) -> mxSmlDeviceInfo_t:
        """Identity of a device."""
        info = mxSmlDeviceInfo_t()
        self._call("mxSmlGetDeviceInfo", device, ctypes.pointer(info))
        return info

    def mxSmlGetMemoryInfo(self, device: int) -> mxSmlMemoryInfo_t:
        """Device memory in KiB."""
        info = mxSmlMemoryInfo_t()
        self._call("mxSmlGetMemoryInfo", device, ctypes.pointer(info))
        return info

    def mxSmlGetDeviceIpUsage(self, device: int, ip: int) -> int:
        """Percent busy of one IP block (``MXSML_USAGE_XCORE`` on C-class cards)."""
        usage = _int(0)
        self._call("mxSmlGetDeviceIpUsage", device, ip, ctypes.pointer(usage))
        return int(usage.value)

    def mxSmlGetTemperatureInfo(self, device: int, sensor: int) -> int:
        """One sensor's temperature, raw (hundredths of a degree for the hotspot)."""
        value = _int(0)
        self._call("mxSmlGetTemperatureInfo", device, sensor, ctypes.pointer(value))
        return int(value.value)

    def mxSmlGetBoardPowerInfo(self, device: int) -> list[mxSmlBoardWayElectricInfo_t]:
        """Every board power rail; the probe's ``INSUFFICIENT_SIZE`` is the protocol working.

        A probe answered ``SUCCESS`` means the board reports no rails: an empty list, not the
        ``MXSMLError(MXSML_SUCCESS)`` ``pymxsml`` raises for it. A rail list that grows between
        probe and fill is probed again, within :data:`LIST_ATTEMPTS`.
        """
        name = "mxSmlGetBoardPowerInfo"
        function = self._function(name)
        for _ in range(LIST_ATTEMPTS):
            size = _uint(0)
            status = int(
                function(device, ctypes.pointer(size), (mxSmlBoardWayElectricInfo_t * 1)())
            )
            if status == MXSML_SUCCESS:
                return []
            if status != MXSML_ERROR_INSUFFICIENT_SIZE:
                raise MXSMLError(status, name)
            capacity = size.value
            if not 0 < capacity <= MAX_ROWS:
                raise MXSMLError(MXSML_ERROR_INSUFFICIENT_SIZE, name)
            buffer = (mxSmlBoardWayElectricInfo_t * capacity)()
            written = _uint(capacity)
            status = int(function(device, ctypes.pointer(written), buffer))
            if status == MXSML_ERROR_INSUFFICIENT_SIZE:
                continue
            if status != MXSML_SUCCESS:
                raise MXSMLError(status, name)
            count = min(written.value, capacity)
            return [mxSmlBoardWayElectricInfo_t.from_buffer_copy(buffer[i]) for i in range(count)]
        raise MXSMLError(MXSML_ERROR_INSUFFICIENT_SIZE, name)

    def mxSmlGetSingleGpuProcess_v3(self, device: int) -> list[mxSmlProcessInfo_v3_t]:
        """Every process using ``device``; a list that may be truncated is never returned.

        No size-0 probe: that call answers ``SUCCESS`` and writes no rows. The first fill has
        room for :data:`INITIAL_ROWS`; a fill that uses every row may have had more to write,
        which is the only truncation signal this call gives, so it is retried at twice the size
        (or at the size an ``INSUFFICIENT_SIZE`` answer names, if larger), within
        :data:`LIST_ATTEMPTS`, and then reported as ``INSUFFICIENT_SIZE``.
        """
        name = "mxSmlGetSingleGpuProcess_v3"
        function = self._function(name)
        capacity = INITIAL_ROWS
        for _ in range(LIST_ATTEMPTS):
            buffer = (mxSmlProcessInfo_v3_t * capacity)()
            written = _uint(capacity)
            status = int(function(device, ctypes.pointer(written), buffer))
            full = status == MXSML_SUCCESS and written.value >= capacity
            if status == MXSML_ERROR_INSUFFICIENT_SIZE or full:
                capacity = max(capacity * 2, written.value + 1)
                if capacity > MAX_ROWS:
                    break
                continue
            if status != MXSML_SUCCESS:
                raise MXSMLError(status, name)
            return [mxSmlProcessInfo_v3_t.from_buffer_copy(buffer[i]) for i in range(written.value)]
        raise MXSMLError(MXSML_ERROR_INSUFFICIENT_SIZE, name)


# -- loading --------------------------------------------------------------------------------------

LIBRARY_NAME: Final = "libmxsml.so"
ENV_LIBRARY: Final = "MXSML_LIB"
"""Set to a full path to load that file instead of searching."""
ENV_HOME: Final = "MACA_HOME"


def default_paths() -> tuple[str, ...]:
    """The driver's and MACA's directories (``$MACA_HOME``, default ``/opt/maca``), the linker's."""
    home = os.environ.get(ENV_HOME) or "/opt/maca"
    return (
        "/opt/mxdriver/lib/" + LIBRARY_NAME,
        os.path.join(home, "lib64", LIBRARY_NAME),
        os.path.join(home, "lib", LIBRARY_NAME),
        "/opt/mxn100/lib/" + LIBRARY_NAME,
        LIBRARY_NAME,
    )


_P = ctypes.POINTER
_SIGNATURES: Final[dict[str, tuple[tuple[Any, ...], Any]]] = {
    "mxSmlInit": ((), _uint),
    "mxSmlGetDeviceCount": ((), _uint),
    "mxSmlGetMacaVersion": ((ctypes.c_char_p, _P(_uint)), _uint),
    "mxSmlGetDeviceVersion": ((_uint, _uint, ctypes.c_char_p, _P(_uint)), _uint),
    "mxSmlGetDeviceInfo": ((_uint, _P(mxSmlDeviceInfo_t)), _uint),
    "mxSmlGetMemoryInfo": ((_uint, _P(mxSmlMemoryInfo_t)), _uint),
    "mxSmlGetDeviceIpUsage": ((_uint, _uint, _P(_int)), _uint),
    "mxSmlGetTemperatureInfo": ((_uint, _uint, _P(_int)), _uint),
    "mxSmlGetBoardPowerInfo": ((_uint, _P(_uint), _P(mxSmlBoardWayElectricInfo_t)), _uint),
    "mxSmlGetSingleGpuProcess_v3": ((_uint, _P(_uint), _P(mxSmlProcessInfo_v3_t)), _uint),
}


def load_library(paths: Sequence[str] | None = None) -> Mxsml:
    """Open MXSML from the first path that loads; ``paths`` replaces the default search.

    Without ``paths``: ``$MXSML_LIB`` if set, then :func:`default_paths`. The caller still calls
    :meth:`Mxsml.mxSmlInit`.
    """
    lib = open_first(
        with_override(ENV_LIBRARY, default_paths()) if paths is None else paths,
        library=LIBRARY_NAME,
        not_found=MxsmlLibraryNotFound,
        signatures=_SIGNATURES,
    )
    return Mxsml(lib)
