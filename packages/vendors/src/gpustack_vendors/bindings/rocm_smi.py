"""A ctypes binding for ROCm SMI (``librocm_smi64.so``), the per-process source on AMD and Hygon.

AMD SMI's per-device process list ignores its handle (every compute process comes back for every
card), so the AMD backend reads processes through ROCm SMI instead; Hygon ships only ROCm SMI (a
fork under ``/opt/hyhal``). ROCm SMI has no binding on PyPI, hence this one.

Facts taken from ``rocm_smi.h`` and ``src/rocm_smi.cc`` of ROCm/rocm_smi_lib:

- ``rsmi_status_t`` counts up from ``SUCCESS = 0`` to ``FAIL_LOAD_SYMBOL = 22``, plus
  ``UNKNOWN_ERROR = 0xFFFFFFFF``; that last value makes the C enum 32-bit unsigned, so every
  function's return type is declared ``c_uint32``.
- The two list calls share a convention: a NULL buffer makes the library write the full count and
  return ``SUCCESS``; a buffer smaller than the list is filled to capacity, the count is left at
  what was written, and ``INSUFFICIENT_SIZE`` is returned. Nothing in the answer says how long
  the list has become, so a retry has to probe again.

Importing this module loads nothing: the library is opened only by :func:`load_library`, so
hosts without ROCm can import the backend, and the replay simulator can hand :class:`RocmSmi` a
fake library instead.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any, Final

from gpustack_vendors.bindings.calls import CLibrary, StatusError, grow_and_retry
from gpustack_vendors.bindings.loader import LibraryNotFound, open_first, returning, with_override

# -- rsmi_status_t --------------------------------------------------------------------------------

RSMI_STATUS_SUCCESS: Final = 0
RSMI_STATUS_INVALID_ARGS: Final = 1
RSMI_STATUS_NOT_SUPPORTED: Final = 2
RSMI_STATUS_FILE_ERROR: Final = 3
RSMI_STATUS_PERMISSION: Final = 4
RSMI_STATUS_OUT_OF_RESOURCES: Final = 5
RSMI_STATUS_INTERNAL_EXCEPTION: Final = 6
RSMI_STATUS_INPUT_OUT_OF_BOUNDS: Final = 7
RSMI_STATUS_INIT_ERROR: Final = 8
RSMI_INITIALIZATION_ERROR: Final = RSMI_STATUS_INIT_ERROR
"""The header's alias for ``INIT_ERROR``; kept so code ported from C reads the same."""
RSMI_STATUS_NOT_YET_IMPLEMENTED: Final = 9
RSMI_STATUS_NOT_FOUND: Final = 10
RSMI_STATUS_INSUFFICIENT_SIZE: Final = 11
RSMI_STATUS_INTERRUPT: Final = 12
RSMI_STATUS_UNEXPECTED_SIZE: Final = 13
RSMI_STATUS_NO_DATA: Final = 14
RSMI_STATUS_UNEXPECTED_DATA: Final = 15
RSMI_STATUS_BUSY: Final = 16
RSMI_STATUS_REFCOUNT_OVERFLOW: Final = 17
RSMI_STATUS_SETTING_UNAVAILABLE: Final = 18
RSMI_STATUS_AMDGPU_RESTART_ERR: Final = 19
RSMI_STATUS_DRM_ERROR: Final = 20
RSMI_STATUS_FAIL_LOAD_MODULE: Final = 21
RSMI_STATUS_FAIL_LOAD_SYMBOL: Final = 22
"""Also what this binding raises for a symbol the loaded library lacks (see :class:`RocmSmi`)."""
RSMI_STATUS_UNKNOWN_ERROR: Final = 0xFFFFFFFF

_STATUS_TEXT: Final[dict[int, tuple[str, str]]] = {
    RSMI_STATUS_SUCCESS: ("RSMI_STATUS_SUCCESS", "success"),
    RSMI_STATUS_INVALID_ARGS: ("RSMI_STATUS_INVALID_ARGS", "invalid arguments"),
    RSMI_STATUS_NOT_SUPPORTED: ("RSMI_STATUS_NOT_SUPPORTED", "not supported on this device"),
    RSMI_STATUS_FILE_ERROR: ("RSMI_STATUS_FILE_ERROR", "could not access a driver file"),
    RSMI_STATUS_PERMISSION: ("RSMI_STATUS_PERMISSION", "permission denied"),
    RSMI_STATUS_OUT_OF_RESOURCES: ("RSMI_STATUS_OUT_OF_RESOURCES", "out of memory or resources"),
    RSMI_STATUS_INTERNAL_EXCEPTION: ("RSMI_STATUS_INTERNAL_EXCEPTION", "internal exception"),
    RSMI_STATUS_INPUT_OUT_OF_BOUNDS: ("RSMI_STATUS_INPUT_OUT_OF_BOUNDS", "input out of bounds"),
    RSMI_STATUS_INIT_ERROR: ("RSMI_STATUS_INIT_ERROR", "initialization failed"),
    RSMI_STATUS_NOT_YET_IMPLEMENTED: ("RSMI_STATUS_NOT_YET_IMPLEMENTED", "not yet implemented"),
    RSMI_STATUS_NOT_FOUND: ("RSMI_STATUS_NOT_FOUND", "not found"),
    RSMI_STATUS_INSUFFICIENT_SIZE: ("RSMI_STATUS_INSUFFICIENT_SIZE", "buffer too small"),
    RSMI_STATUS_INTERRUPT: ("RSMI_STATUS_INTERRUPT", "interrupted"),
    RSMI_STATUS_UNEXPECTED_SIZE: ("RSMI_STATUS_UNEXPECTED_SIZE", "unexpected amount of data"),
    RSMI_STATUS_NO_DATA: ("RSMI_STATUS_NO_DATA", "no data"),
    RSMI_STATUS_UNEXPECTED_DATA: ("RSMI_STATUS_UNEXPECTED_DATA", "unexpected data"),
    RSMI_STATUS_BUSY: ("RSMI_STATUS_BUSY", "resource busy"),
    RSMI_STATUS_REFCOUNT_OVERFLOW: ("RSMI_STATUS_REFCOUNT_OVERFLOW", "reference count overflow"),
    RSMI_STATUS_SETTING_UNAVAILABLE: ("RSMI_STATUS_SETTING_UNAVAILABLE", "setting unavailable"),
    RSMI_STATUS_AMDGPU_RESTART_ERR: ("RSMI_STATUS_AMDGPU_RESTART_ERR", "amdgpu restart failed"),
    RSMI_STATUS_DRM_ERROR: ("RSMI_STATUS_DRM_ERROR", "libdrm call failed"),
    RSMI_STATUS_FAIL_LOAD_MODULE: ("RSMI_STATUS_FAIL_LOAD_MODULE", "failed to load a library"),
    RSMI_STATUS_FAIL_LOAD_SYMBOL: ("RSMI_STATUS_FAIL_LOAD_SYMBOL", "symbol not in the library"),
    RSMI_STATUS_UNKNOWN_ERROR: ("RSMI_STATUS_UNKNOWN_ERROR", "unknown error"),
}

CU_OCCUPANCY_INVALID: Final = 0xFFFFFFFF
"""``cu_occupancy`` on GFX revisions without the debugfs source: "not measured", never 100 %+."""


class rsmi_process_info_t(ctypes.Structure):
    """One compute process as ROCm SMI reports it; field order and widths are the ABI.

    ``vram_usage`` is bytes and ``sdma_usage`` microseconds; ``cu_occupancy`` is a percentage or
    :data:`CU_OCCUPANCY_INVALID`, kept raw so the backend, not the binding, decides what
    "unmeasured" means.
    """

    _fields_ = (
        ("process_id", ctypes.c_uint32),
        ("pasid", ctypes.c_uint32),
        ("vram_usage", ctypes.c_uint64),
        ("sdma_usage", ctypes.c_uint64),
        ("cu_occupancy", ctypes.c_uint32),
    )

    # Bare annotations create no class attributes, so they type the fields for mypy without
    # shadowing the descriptors ctypes builds from ``_fields_``.
    process_id: int
    pasid: int
    vram_usage: int
    sdma_usage: int
    cu_occupancy: int


# -- errors --------------------------------------------------------------------------------------


def status_name(value: int) -> str:
    """The header's name for a status, from a static table.

    Never from ``rsmi_status_string``: an error must stay describable when the library is
    missing, half-loaded or a replay fake, and vendor forks (Hygon) word their strings differently.
    """
    entry = _STATUS_TEXT.get(value)
    return entry[0] if entry else f"RSMI_STATUS_{value}"


class ROCMSMIError(StatusError):
    """A non-success ``rsmi_status_t``; consumers branch on :attr:`value`, never on the text.

    One class for every status, because gpustack's ``pyrocmsmi`` raises one class and backends
    already map by value. ``args`` is ``(value, function)`` so the exception pickles and copies
    (the runtime clones a cached init failure) without losing the code.
    """

    status_name = staticmethod(status_name)

    def describe(self) -> str:
        """The header's name, the value and what it means (or that the code is unknown)."""
        entry = _STATUS_TEXT.get(self.value)
        if entry is None:
            return f"unknown ROCm SMI status {self.value}"
        return f"{entry[0]} ({self.value}): {entry[1]}"


class RocmSmiLibraryNotFound(LibraryNotFound):
    """No candidate path could be opened; the message names every path and why each failed."""


# -- the wrapper ---------------------------------------------------------------------------------

_NEGOTIATION_ATTEMPTS: Final = 3
"""Probe-and-fill rounds before a list that keeps growing is reported as ``INSUFFICIENT_SIZE``."""

_SLACK: Final = 8
"""Spare rows allocated past the probed count, so a process starting mid-call costs no retry."""

_Status = Callable[..., int]


class RocmSmi(CLibrary):
    """Pythonic calls over a ``librocm_smi64`` object: a ``ctypes.CDLL`` or a fake with its ABI.

    Symbols are looked up per call, not at construction, so a library that lacks one function
    (older ROCm, Hygon's fork) still serves the others. A missing symbol raises
    ``ROCMSMIError(RSMI_STATUS_FAIL_LOAD_SYMBOL)``: the header's own code for exactly this, rather
    than ``NOT_SUPPORTED``, which would claim the *device* lacks the feature and hide a library
    mismatch from whoever reads the log.
    """

    error = ROCMSMIError
    missing_symbol = RSMI_STATUS_FAIL_LOAD_SYMBOL

    def rsmi_init(self, flags: int = 0) -> None:
        """Initialise the library; ``flags`` are ``rsmi_init_flags_t`` bits (0: AMD GPUs only)."""
        self._call("rsmi_init", flags)

    def rsmi_shut_down(self) -> None:
        """Release what :meth:`rsmi_init` acquired."""
        self._call("rsmi_shut_down")

    def rsmi_num_monitor_devices(self) -> int:
        """Number of devices; valid indices are ``0 … n-1``."""
        count = ctypes.c_uint32(0)
        self._call("rsmi_num_monitor_devices", ctypes.pointer(count))
        return count.value

    def rsmi_dev_pci_id_get(self, dv_ind: int) -> int:
        """The packed BDFID of a device; :func:`pci_address` turns it into ``dddd:bb:dd.f``."""
        bdfid = ctypes.c_uint64(0)
        self._call("rsmi_dev_pci_id_get", dv_ind, ctypes.pointer(bdfid))
        return bdfid.value

    def rsmi_compute_process_info_get(self) -> list[rsmi_process_info_t]:
        """Every compute process on the node (ROCm SMI's list is node-wide, not per device)."""
        buffer, written = self._negotiate("rsmi_compute_process_info_get", (), rsmi_process_info_t)
        # Copied out so the rows do not keep the oversized buffer alive.
        return [rsmi_process_info_t.from_buffer_copy(buffer[i]) for i in range(written)]

    def rsmi_compute_process_gpus_get(self, pid: int) -> list[int]:
        """Indices of the devices a process is using."""
        buffer, written = self._negotiate("rsmi_compute_process_gpus_get", (pid,), ctypes.c_uint32)
        return [int(buffer[i]) for i in range(written)]

    def rsmi_compute_process_info_by_device_get(self, pid: int, dv_ind: int) -> rsmi_process_info_t:
        """One process's figures on one device."""
        info = rsmi_process_info_t()
        self._call("rsmi_compute_process_info_by_device_get", pid, dv_ind, ctypes.pointer(info))
        return info

    def _negotiate(
        self, name: str, leading: tuple[object, ...], row_type: Any
    ) -> tuple[ctypes.Array[Any], int]:
        """Probe with NULL for the count, then fill a buffer; re-probe if the list outgrew it.

        Returns the buffer and how many rows the library says it wrote; the rest is padding. A
        full buffer with ``INSUFFICIENT_SIZE`` is a truncated list: returning it would drop
        processes silently (their memory would read as free), so after the bounded retries the
        status is raised instead. The re-probe matters because the library leaves the count at
        the capacity on that status, so the fill call never says how long the list has become.
        """
        function = self._function(name)

        def probe() -> int | None:
            count = ctypes.c_uint32(0)
            status = int(function(*leading, None, ctypes.pointer(count)))
            if status != RSMI_STATUS_SUCCESS:
                raise ROCMSMIError(status, name)
            return count.value or None

        def fill(capacity: int) -> tuple[ctypes.Array[Any], int] | None:
            buffer = (row_type * capacity)()
            written = ctypes.c_uint32(capacity)
            status = int(function(*leading, buffer, ctypes.pointer(written)))
            if status == RSMI_STATUS_INSUFFICIENT_SIZE:
                return None
            if status != RSMI_STATUS_SUCCESS:
                raise ROCMSMIError(status, name)
            if written.value > capacity:
                # The library claims rows it had no room for: memory past the buffer is garbage.
                raise ROCMSMIError(RSMI_STATUS_UNEXPECTED_SIZE, name)
            return buffer, written.value

        return grow_and_retry(
            probe,
            fill,
            attempts=_NEGOTIATION_ATTEMPTS,
            slack=_SLACK,
            empty=((row_type * 0)(), 0),
            exhausted=lambda: ROCMSMIError(RSMI_STATUS_INSUFFICIENT_SIZE, name),
        )


def pci_address(bdfid: int) -> str:
    """Format a BDFID as the ``domain:bus:device.function`` address the kernel shows.

    The header packs domain in bits 63-32, a partition id in 31-28, bus in 15-8, device in 7-3
    and function in 2-0. The partition bits are dropped because partitions share their card's
    address. On MI-series parts the function bits may carry the partition instead; those values
    are kept, since only the caller knows whether it asked about a partition.
    """
    domain = (bdfid >> 32) & 0xFFFFFFFF
    bus = (bdfid >> 8) & 0xFF
    device = (bdfid >> 3) & 0x1F
    function = bdfid & 0x7
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


# -- loading -------------------------------------------------------------------------------------

LIBRARY_NAME: Final = "librocm_smi64.so"

DEFAULT_PATHS: Final[tuple[str, ...]] = (
    "/opt/rocm/lib/librocm_smi64.so.7",
    "/opt/rocm/lib/librocm_smi64.so",
    "/opt/rocm/lib64/librocm_smi64.so.7",
    "/opt/rocm/lib64/librocm_smi64.so",
    "/opt/hyhal/lib/librocm_smi64.so",  # Hygon DCU
    LIBRARY_NAME,  # whatever the dynamic linker's search path finds
)
"""Tried in order after ``$ROCM_SMI_LIB``; absolute paths first so a stray copy on
``LD_LIBRARY_PATH`` never shadows the installed ROCm."""

_u32 = ctypes.c_uint32
_u64 = ctypes.c_uint64
_P = ctypes.POINTER

_SIGNATURES: Final = returning(
    _u32,
    {
        "rsmi_init": (_u64,),
        "rsmi_shut_down": (),
        "rsmi_num_monitor_devices": (_P(_u32),),
        "rsmi_dev_pci_id_get": (_u32, _P(_u64)),
        "rsmi_compute_process_info_get": (_P(rsmi_process_info_t), _P(_u32)),
        "rsmi_compute_process_gpus_get": (_u32, _P(_u32), _P(_u32)),
        "rsmi_compute_process_info_by_device_get": (_u32, _u32, _P(rsmi_process_info_t)),
    },
)
"""Each symbol's C signature (every one returns the 32-bit ``rsmi_status_t``)."""


def load_library(paths: Sequence[str] | None = None) -> RocmSmi:
    """Open ROCm SMI from the first path that loads; ``paths`` replaces the default search.

    Without ``paths``: ``$ROCM_SMI_LIB`` if set, then :data:`DEFAULT_PATHS`. The caller still
    calls :meth:`RocmSmi.rsmi_init`. The library is opened ``RTLD_LOCAL`` (ctypes' default) so its
    symbols cannot collide with AMD SMI's; load ROCm SMI first, as loading it after AMD SMI has
    been measured to abort with SIGBUS.
    """
    candidates = with_override("ROCM_SMI_LIB", DEFAULT_PATHS) if paths is None else paths
    return RocmSmi(
        open_first(
            candidates,
            library=LIBRARY_NAME,
            not_found=RocmSmiLibraryNotFound,
            signatures=_SIGNATURES,
        )
    )
