# The library's C names, spelled as its header spells them (a binding, not our API):
# ruff: noqa: N801, N802, N815, N816
"""A ctypes binding for Iluvatar IXML (``libixml.so`` from CoreX, ``$COREX_HOME``).

IXML is a copy of NVML: the library exports ``nvml*`` symbols with NVML's structs and return
codes, plus ``ixmlDeviceGetHealth``. Only the entry points the Iluvatar backend calls are
declared here, in the forms gpustack-operator's ``binding/ixml`` calls them (``nvmlInit_v2``,
``nvmlDeviceGetCount_v2``, ``nvmlDeviceGetHandleByIndex_v2``, ``nvmlDeviceGetPciInfo_v3``, and the
single unversioned ``nvmlDeviceGetComputeRunningProcesses`` whose rows are
``nvmlProcessInfo_v1_t``). The MIG and process-utilization functions pynvml declares are **not**
bound: they were copied from pynvml and no hardware recording shows IXML answering them.

Units are NVML's: bytes, mW, °C. ``usedGpuMemory`` of ``NVML_VALUE_NOT_AVAILABLE`` (``2**64-1``) is
kept raw for the backend to read as "unmeasured".

**Two hazards.** ``libixml.so`` is also the soname of libupnp's XML parser, so a bare-name load can
open the wrong library: a loaded file without ``nvmlInit_v2`` is skipped with that reason. And the
process list's NULL-buffer probe must be read by its count, not only its status: NVML answers
``INSUFFICIENT_SIZE`` with the count, but a clone that answers ``SUCCESS`` with a non-zero count
(as NVIDIA's own ``nvml-mock`` does) would make a status-only reader report no processes.

Importing this module loads nothing: :func:`load_library` opens the library, and the replay
simulator hands :class:`Ixml` a fake library with the same C ABI instead.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from typing import Final

from gpustack_vendors.bindings.calls import CLibrary, StatusError
from gpustack_vendors.bindings.loader import LibraryNotFound, open_first, returning, with_override

# -- nvmlReturn_t (IXML keeps NVML's numbers) -----------------------------------------------------

NVML_SUCCESS: Final = 0
NVML_ERROR_UNINITIALIZED: Final = 1
NVML_ERROR_INVALID_ARGUMENT: Final = 2
NVML_ERROR_NOT_SUPPORTED: Final = 3
NVML_ERROR_NO_PERMISSION: Final = 4
NVML_ERROR_NOT_FOUND: Final = 6
NVML_ERROR_INSUFFICIENT_SIZE: Final = 7
NVML_ERROR_DRIVER_NOT_LOADED: Final = 9
NVML_ERROR_TIMEOUT: Final = 10
NVML_ERROR_LIBRARY_NOT_FOUND: Final = 12
NVML_ERROR_FUNCTION_NOT_FOUND: Final = 13
"""Also what this binding raises for a symbol the loaded library lacks."""
NVML_ERROR_GPU_IS_LOST: Final = 15
NVML_ERROR_IN_USE: Final = 19
NVML_ERROR_ARGUMENT_VERSION_MISMATCH: Final = 25
NVML_ERROR_UNKNOWN: Final = 999

_STATUS_NAMES: Final[dict[int, str]] = {
    NVML_SUCCESS: "NVML_SUCCESS",
    NVML_ERROR_UNINITIALIZED: "NVML_ERROR_UNINITIALIZED",
    NVML_ERROR_INVALID_ARGUMENT: "NVML_ERROR_INVALID_ARGUMENT",
    NVML_ERROR_NOT_SUPPORTED: "NVML_ERROR_NOT_SUPPORTED",
    NVML_ERROR_NO_PERMISSION: "NVML_ERROR_NO_PERMISSION",
    NVML_ERROR_NOT_FOUND: "NVML_ERROR_NOT_FOUND",
    NVML_ERROR_INSUFFICIENT_SIZE: "NVML_ERROR_INSUFFICIENT_SIZE",
    NVML_ERROR_DRIVER_NOT_LOADED: "NVML_ERROR_DRIVER_NOT_LOADED",
    NVML_ERROR_TIMEOUT: "NVML_ERROR_TIMEOUT",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML_ERROR_LIBRARY_NOT_FOUND",
    NVML_ERROR_FUNCTION_NOT_FOUND: "NVML_ERROR_FUNCTION_NOT_FOUND",
    NVML_ERROR_GPU_IS_LOST: "NVML_ERROR_GPU_IS_LOST",
    NVML_ERROR_IN_USE: "NVML_ERROR_IN_USE",
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH: "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
    NVML_ERROR_UNKNOWN: "NVML_ERROR_UNKNOWN",
}

# -- constants ------------------------------------------------------------------------------------

NVML_TEMPERATURE_GPU: Final = 0
NVML_VALUE_NOT_AVAILABLE_ULL: Final = 0xFFFFFFFFFFFFFFFF
IXML_HEALTH_OK: Final = 0
NVML_DEVICE_UUID_BUFFER_SIZE: Final = 80
NVML_DEVICE_NAME_BUFFER_SIZE: Final = 64
NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE: Final = 80
NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE: Final = 32
NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE: Final = 16

_uint = ctypes.c_uint
_ull = ctypes.c_ulonglong


# -- handles and structs (field order and widths are the ABI) --------------------------------------


class ixmlDevice_t(ctypes.c_void_p):
    """``nvmlDevice_t``: an opaque pointer the library hands out; its address is its identity."""


class c_nvmlMemory_t(ctypes.Structure):
    """``nvmlMemory_t`` (v1), bytes."""

    _fields_ = (("total", _ull), ("free", _ull), ("used", _ull))
    total: int
    free: int
    used: int


class c_nvmlMemory_v2_t(ctypes.Structure):
    """``nvmlMemory_v2_t``, bytes; the caller stamps ``version``."""

    _fields_ = (
        ("version", _uint),
        ("total", _ull),
        ("reserved", _ull),
        ("free", _ull),
        ("used", _ull),
    )
    version: int
    total: int
    reserved: int
    free: int
    used: int


nvmlMemory_v2: Final = ctypes.sizeof(c_nvmlMemory_v2_t) | (2 << 24)
"""The packed struct version NVML checks (``0x02000028``), not the literal 2."""


class c_nvmlUtilization_t(ctypes.Structure):
    """Percent busy of the GPU and of its memory."""

    _fields_ = (("gpu", _uint), ("memory", _uint))
    gpu: int
    memory: int


class c_nvmlPciInfo_t(ctypes.Structure):
    """``nvmlPciInfo_t`` as ``nvmlDeviceGetPciInfo_v3`` fills it."""

    _fields_ = (
        ("busIdLegacy", ctypes.c_char * NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE),
        ("domain", _uint),
        ("bus", _uint),
        ("device", _uint),
        ("pciDeviceId", _uint),
        ("pciSubSystemId", _uint),
        ("busId", ctypes.c_char * NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE),
    )
    busIdLegacy: bytes
    domain: int
    bus: int
    device: int
    pciDeviceId: int
    pciSubSystemId: int
    busId: bytes


class c_nvmlProcessInfo_v1_t(ctypes.Structure):
    """One compute process: host PID and device memory in bytes (or the not-available value)."""

    _fields_ = (("pid", _uint), ("usedGpuMemory", _ull))
    pid: int
    usedGpuMemory: int


# -- errors ---------------------------------------------------------------------------------------


def status_name(value: int) -> str:
    """NVML's name for a status, from a static table (never from the library)."""
    return _STATUS_NAMES.get(value, f"NVML_STATUS_{value}")


class IXMLError(StatusError):
    """A non-success ``nvmlReturn_t`` from IXML; consumers branch on :attr:`value`."""

    status_name = staticmethod(status_name)


class IxmlLibraryNotFound(LibraryNotFound):
    """No candidate path opened as IXML; the message names every path and why each failed."""


# -- the wrapper ----------------------------------------------------------------------------------

LIST_ATTEMPTS: Final = 3
"""Fills before a list that keeps outgrowing its buffer is reported as ``INSUFFICIENT_SIZE``."""

MAX_ROWS: Final = 4096
"""A count past this is no process list: refused rather than allocated (as the operator does)."""

_Status = Callable[..., int]


class Ixml(CLibrary):
    """Pythonic calls over a ``libixml`` object: a ``ctypes.CDLL`` or a fake with its ABI.

    Symbols are looked up per call; a missing one raises
    ``IXMLError(NVML_ERROR_FUNCTION_NOT_FOUND)``.
    """

    error = IXMLError
    missing_symbol = NVML_ERROR_FUNCTION_NOT_FOUND

    def _text(self, name: str, size: int, *leading: object) -> str:
        buffer = ctypes.create_string_buffer(size)
        self._call(name, *leading, buffer, _uint(size))
        return buffer.value.decode("utf-8", errors="replace")

    @staticmethod
    def _handle(handle: ixmlDevice_t) -> ixmlDevice_t:
        if not isinstance(handle, ixmlDevice_t):
            raise IXMLError(NVML_ERROR_INVALID_ARGUMENT, "not an IXML device handle")
        return handle

    # -- library ---------------------------------------------------------------------------------

    def nvmlInit_v2(self) -> None:
        """Initialise the library."""
        self._call("nvmlInit_v2")

    def nvmlShutdown(self) -> None:
        """Release what :meth:`nvmlInit_v2` acquired."""
        self._call("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        """The CoreX driver version."""
        return self._text("nvmlSystemGetDriverVersion", NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        """The CUDA API level CoreX is compatible with, NVML-encoded (10.2 is 10020)."""
        version = ctypes.c_int(0)
        self._call("nvmlSystemGetCudaDriverVersion", ctypes.pointer(version))
        return int(version.value)

    def nvmlDeviceGetCount_v2(self) -> int:
        """Number of devices."""
        count = _uint(0)
        self._call("nvmlDeviceGetCount_v2", ctypes.pointer(count))
        return int(count.value)

    def nvmlDeviceGetHandleByIndex_v2(self, index: int) -> ixmlDevice_t:
        """The device's handle; the same device gives the same address every time."""
        handle = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByIndex_v2", _uint(index), ctypes.pointer(handle))
        return ixmlDevice_t(handle.value)

    # -- per device ------------------------------------------------------------------------------

    def nvmlDeviceGetUUID(self, device: ixmlDevice_t) -> str:
        """The device UUID (``GPU-…``)."""
        return self._text("nvmlDeviceGetUUID", NVML_DEVICE_UUID_BUFFER_SIZE, self._handle(device))

    def nvmlDeviceGetName(self, device: ixmlDevice_t) -> str:
        """The product name."""
        return self._text("nvmlDeviceGetName", NVML_DEVICE_NAME_BUFFER_SIZE, self._handle(device))

    def nvmlDeviceGetPciInfo_v3(self, device: ixmlDevice_t) -> c_nvmlPciInfo_t:
        """PCI identity."""
        info = c_nvmlPciInfo_t()
        self._call("nvmlDeviceGetPciInfo_v3", self._handle(device), ctypes.pointer(info))
        return info

    def nvmlDeviceGetMemoryInfo_v2(self, device: ixmlDevice_t) -> c_nvmlMemory_v2_t:
        """Memory in bytes, ``reserved`` separated out (version stamped :data:`nvmlMemory_v2`)."""
        info = c_nvmlMemory_v2_t()
        info.version = nvmlMemory_v2
        self._call("nvmlDeviceGetMemoryInfo_v2", self._handle(device), ctypes.pointer(info))
        return info

    def nvmlDeviceGetMemoryInfo(self, device: ixmlDevice_t) -> c_nvmlMemory_t:
        """Memory in bytes, the v1 layout."""
        info = c_nvmlMemory_t()
        self._call("nvmlDeviceGetMemoryInfo", self._handle(device), ctypes.pointer(info))
        return info

    def nvmlDeviceGetUtilizationRates(self, device: ixmlDevice_t) -> c_nvmlUtilization_t:
        """Percent busy of the GPU and its memory."""
        info = c_nvmlUtilization_t()
        self._call("nvmlDeviceGetUtilizationRates", self._handle(device), ctypes.pointer(info))
        return info

    def nvmlDeviceGetTemperature(self, device: ixmlDevice_t, sensor: int) -> int:
        """°C of one sensor (``NVML_TEMPERATURE_GPU``)."""
        value = _uint(0)
        self._call(
            "nvmlDeviceGetTemperature", self._handle(device), _uint(sensor), ctypes.pointer(value)
        )
        return int(value.value)

    def nvmlDeviceGetPowerUsage(self, device: ixmlDevice_t) -> int:
        """Board power in mW."""
        value = _uint(0)
        self._call("nvmlDeviceGetPowerUsage", self._handle(device), ctypes.pointer(value))
        return int(value.value)

    def ixmlDeviceGetHealth(self, device: ixmlDevice_t) -> int:
        """The ``IXML_HEALTH_*`` bitmask; :data:`IXML_HEALTH_OK` (0) is healthy."""
        value = _ull(0)
        self._call("ixmlDeviceGetHealth", self._handle(device), ctypes.pointer(value))
        return int(value.value)

    def nvmlDeviceGetComputeRunningProcesses(
        self, device: ixmlDevice_t
    ) -> list[c_nvmlProcessInfo_v1_t]:
        """Every compute process on the device; never a partial list.

        Probe with a NULL buffer for the count (``INSUFFICIENT_SIZE`` is the probe working; a
        ``SUCCESS`` with a non-zero count is read by its count), then fill; a list that grew
        between the two answers ``INSUFFICIENT_SIZE`` with the size it needs now, and is filled
        again at that size, within :data:`LIST_ATTEMPTS`.
        """
        name = "nvmlDeviceGetComputeRunningProcesses"
        function = self._function(name)
        handle = self._handle(device)
        count = _uint(0)
        status = int(function(handle, ctypes.pointer(count), None))
        if status not in (NVML_SUCCESS, NVML_ERROR_INSUFFICIENT_SIZE):
            raise IXMLError(status, name)
        wanted = count.value
        if status == NVML_ERROR_INSUFFICIENT_SIZE and wanted == 0:
            wanted = 1  # "there is more" with no count: find out, never read it as "none"
        for _ in range(LIST_ATTEMPTS):
            if wanted == 0:
                return []
            if wanted > MAX_ROWS:
                break
            buffer = (c_nvmlProcessInfo_v1_t * wanted)()
            written = _uint(wanted)
            status = int(function(handle, ctypes.pointer(written), buffer))
            if status == NVML_ERROR_INSUFFICIENT_SIZE:
                wanted = written.value if written.value > wanted else wanted + 1
                continue
            if status != NVML_SUCCESS:
                raise IXMLError(status, name)
            rows = min(written.value, wanted)
            return [c_nvmlProcessInfo_v1_t.from_buffer_copy(buffer[i]) for i in range(rows)]
        raise IXMLError(NVML_ERROR_INSUFFICIENT_SIZE, name)


# -- loading --------------------------------------------------------------------------------------

LIBRARY_NAME: Final = "libixml.so"
ENV_LIBRARY: Final = "IXML_LIB"
"""Set to a full path to load that file instead of searching."""
ENV_HOME: Final = "COREX_HOME"
IDENTIFYING_SYMBOL: Final = "nvmlInit_v2"
"""What tells IXML from libupnp's XML parser, which ships under the same soname."""


def default_paths() -> tuple[str, ...]:
    """``$COREX_HOME`` (default ``/usr/local/corex``) ``lib64`` and ``lib``, then the linker's."""
    home = os.environ.get(ENV_HOME) or "/usr/local/corex"
    return (
        os.path.join(home, "lib64", LIBRARY_NAME),
        os.path.join(home, "lib", LIBRARY_NAME),
        LIBRARY_NAME,
    )


_P = ctypes.POINTER
_SIGNATURES: Final = returning(
    _uint,
    {
        "nvmlInit_v2": (),
        "nvmlShutdown": (),
        "nvmlSystemGetDriverVersion": (ctypes.c_char_p, _uint),
        "nvmlSystemGetCudaDriverVersion": (_P(ctypes.c_int),),
        "nvmlDeviceGetCount_v2": (_P(_uint),),
        "nvmlDeviceGetHandleByIndex_v2": (_uint, _P(ctypes.c_void_p)),
        "nvmlDeviceGetUUID": (ctypes.c_void_p, ctypes.c_char_p, _uint),
        "nvmlDeviceGetName": (ctypes.c_void_p, ctypes.c_char_p, _uint),
        "nvmlDeviceGetPciInfo_v3": (ctypes.c_void_p, _P(c_nvmlPciInfo_t)),
        "nvmlDeviceGetMemoryInfo_v2": (ctypes.c_void_p, _P(c_nvmlMemory_v2_t)),
        "nvmlDeviceGetMemoryInfo": (ctypes.c_void_p, _P(c_nvmlMemory_t)),
        "nvmlDeviceGetUtilizationRates": (ctypes.c_void_p, _P(c_nvmlUtilization_t)),
        "nvmlDeviceGetTemperature": (ctypes.c_void_p, _uint, _P(_uint)),
        "nvmlDeviceGetPowerUsage": (ctypes.c_void_p, _P(_uint)),
        "ixmlDeviceGetHealth": (ctypes.c_void_p, _P(_ull)),
        "nvmlDeviceGetComputeRunningProcesses": (
            ctypes.c_void_p,
            _P(_uint),
            _P(c_nvmlProcessInfo_v1_t),
        ),
    },
)


def load_library(paths: Sequence[str] | None = None) -> Ixml:
    """Open IXML from the first path that loads **and** exports ``nvmlInit_v2``.

    Without ``paths``: ``$IXML_LIB`` if set, then :func:`default_paths`. The caller still calls
    :meth:`Ixml.nvmlInit_v2`.
    """
    lib = open_first(
        with_override(ENV_LIBRARY, default_paths()) if paths is None else paths,
        library=LIBRARY_NAME,
        not_found=IxmlLibraryNotFound,
        signatures=_SIGNATURES,
        reject=_not_ixml,
    )
    return Ixml(lib)


def _not_ixml(lib: ctypes.CDLL) -> str | None:
    """Why a library that opened is not IXML (libupnp's parser shares the soname), or None."""
    if hasattr(lib, IDENTIFYING_SYMBOL):
        return None
    return f"no {IDENTIFYING_SYMBOL}: not Iluvatar's IXML"
