# The library's C names, spelled as its header spells them (a binding, not our API):
# ruff: noqa: N801, N802, N815
"""A ctypes binding for Hygon's Multi-Instance library, ``libhydmi_mig.so.1``.

Hygon carves a DCU into GPU instances (GI) and compute instances (CI) the way NVIDIA MIG does,
and ships the management API under **NVML's symbol names** (``nvmlGetSystemMigMode``,
``nvmlDeviceGetMigDeviceHandleByIndex``, …) with NVML's return enum verbatim, but **not** NVML's
struct layouts. So this binding shares nothing with ``pynvml``: its structs follow the vendor's
``dmi_mig.h``, and the library is opened ``RTLD_LOCAL`` so its ``nvml*`` names can never resolve
calls meant for ``libnvidia-ml.so`` in the same process. Measured on a BW C-3000 (gfx936, DTK
25.04.4) by the reference operator:

- **No init or shutdown.** Loading the library is all there is.
- **The mode is node-wide** (``nvmlGetSystemMigMode``, ``hy-smi -mig <0|1>``); every card of a
  host answers alike, and a MIG-enabled node serves partitions only.
- **Partitions have their own ``nvmlDevice_t``**, which answers memory and (through the exported
  but undeclared ``nvmlDeviceGetUtilizationRates``) the partition's **own** compute.
- **The MIG device index is node-global**: ``nvmlDeviceGetMigDeviceHandleByIndex(card, i)``
  answers ``NOT_FOUND`` for an index that belongs to another card, so a card's partitions are
  found by sweeping ``count × max`` indices and attributed by the GI info's parent device.
- **The profile argument is slices minus one** (0 → one slice, 1 → two, 2 → unsupported on BW,
  3 → four); the profile *id* comes back inside the answer and bears no relation to the index.
- **No ``nvmlDeviceGetUUID``**: a partition's UUID is the ``mig_uuid:`` line of its compute
  instance's file ``/etc/dmi_mig_config/ci/dev<N>gi<G>ci<C>.conf``, which
  :meth:`HyDmiMig.dmi_mig_registry` reads. That registry is node state rather than a library
  call, but it is read through this binding so a backend stays handed everything it reads.

Memory is in **bytes** on a device handle and in **MiB** in a profile (``memory_size_MB``
carries MiB despite its name); utilization in whole percent.
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, Protocol

from gpustack_vendors.bindings.calls import StatusError
from gpustack_vendors.bindings.loader import LibraryNotFound, open_first, returning, with_override

# -- nvmlReturn_t, verbatim ----------------------------------------------------------------------

DMI_SUCCESS: Final = 0
DMI_ERROR_UNINITIALIZED: Final = 1
DMI_ERROR_INVALID_ARGUMENT: Final = 2
DMI_ERROR_NOT_SUPPORTED: Final = 3
DMI_ERROR_NO_PERMISSION: Final = 4
DMI_ERROR_ALREADY_INITIALIZED: Final = 5
DMI_ERROR_NOT_FOUND: Final = 6
DMI_ERROR_INSUFFICIENT_SIZE: Final = 7
DMI_ERROR_INSUFFICIENT_POWER: Final = 8
DMI_ERROR_DRIVER_NOT_LOADED: Final = 9
DMI_ERROR_TIMEOUT: Final = 10
DMI_ERROR_IRQ_ISSUE: Final = 11
DMI_ERROR_LIBRARY_NOT_FOUND: Final = 12
DMI_ERROR_FUNCTION_NOT_FOUND: Final = 13
"""Also what this binding raises for a symbol the loaded library lacks (see :class:`HyDmiMig`)."""
DMI_ERROR_CORRUPTED_INFOROM: Final = 14
DMI_ERROR_GPU_IS_LOST: Final = 15
DMI_ERROR_RESET_REQUIRED: Final = 16
DMI_ERROR_OPERATING_SYSTEM: Final = 17
DMI_ERROR_LIB_RM_VERSION_MISMATCH: Final = 18
DMI_ERROR_IN_USE: Final = 19
DMI_ERROR_MEMORY: Final = 20
DMI_ERROR_NO_DATA: Final = 21
DMI_ERROR_VGPU_ECC_NOT_SUPPORTED: Final = 22
DMI_ERROR_INSUFFICIENT_RESOURCES: Final = 23
DMI_ERROR_FREQ_NOT_SUPPORTED: Final = 24
DMI_ERROR_ARGUMENT_VERSION_MISMATCH: Final = 25
DMI_ERROR_DEPRECATED: Final = 26
DMI_ERROR_NOT_READY: Final = 27
DMI_ERROR_UNKNOWN: Final = 999

_STATUS_NAMES: Final[dict[int, str]] = {
    value: name
    for name, value in list(globals().items())
    if name.startswith("DMI_ERROR_") or name == "DMI_SUCCESS"
}

DMI_DEVICE_MIG_DISABLE: Final = 0
DMI_DEVICE_MIG_ENABLE: Final = 1

DMI_GPU_INSTANCE_PROFILE_COUNT: Final = 4
"""Profile indices run ``0 … 3``: one to four slices, the index being slices minus one."""

NAME_BUFFER: Final = 256
"""``NVML_DEVICE_NAME_BUFFER_SIZE`` as ``dmi_mig.h`` sizes the profile name."""

MIG_UUID_PREFIX: Final = "MIG-"
"""What the vendor's tools prefix an instance UUID with (``DMI_MIG_VISIBLE_DEVICE=MIG-<uuid>``)."""


# -- structs (dmi_mig.h v1.3.1, not pynvml) ------------------------------------------------------


class dmiGpuInstanceProfileInfo_t(ctypes.Structure):
    """The header's ``nvmlGpuInstanceProfileInfo_t`` in Hygon's layout.

    ``memory_size_MB`` carries MiB; ``name`` is the profile's name (``2g.15gb``, possibly
    prefixed ``MIG ``).
    """

    _fields_ = (
        ("id", ctypes.c_uint),
        ("gi_count_max", ctypes.c_uint),
        ("cu_count", ctypes.c_uint),
        ("gpu_slice_count", ctypes.c_uint),
        ("memory_size_MB", ctypes.c_ulonglong),
        ("name", ctypes.c_char * NAME_BUFFER),
    )

    id: int
    gi_count_max: int
    cu_count: int
    gpu_slice_count: int
    memory_size_MB: int
    name: bytes


class dmiGpuInstancePlacement_t(ctypes.Structure):
    """``nvmlGpuInstancePlacement_t``: the first GPU slice an instance occupies, and how many."""

    _fields_ = (("start", ctypes.c_uint), ("size", ctypes.c_uint))

    start: int
    size: int


class dmiGpuInstanceInfo_t(ctypes.Structure):
    """``nvmlGpuInstanceInfo_t``: the parent card's handle, the GI's ids and its placement.

    ``device`` reads back as the handle's address (an ``int``, or ``None`` for NULL): compare it
    with a card handle's ``.value`` to attribute the instance.
    """

    _fields_ = (
        ("device", ctypes.c_void_p),
        ("id", ctypes.c_uint),
        ("profile_id", ctypes.c_uint),
        ("placement", dmiGpuInstancePlacement_t),
    )

    device: int | None
    id: int
    profile_id: int
    placement: dmiGpuInstancePlacement_t


class dmiMemory_t(ctypes.Structure):
    """``nvmlMemory_t``: bytes; on a MIG device handle, the partition's own."""

    _fields_ = (
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    )

    total: int
    free: int
    used: int


class dmiUtilization_t(ctypes.Structure):
    """``nvmlUtilization_t``: whole percent; on a MIG device handle, the partition's own."""

    _fields_ = (("gpu", ctypes.c_uint), ("memory", ctypes.c_uint))

    gpu: int
    memory: int


STRUCTS: Final[dict[str, type[ctypes.Structure]]] = {
    cls.__name__: cls
    for cls in (
        dmiGpuInstanceProfileInfo_t,
        dmiGpuInstancePlacement_t,
        dmiGpuInstanceInfo_t,
        dmiMemory_t,
        dmiUtilization_t,
    )
}


# -- errors --------------------------------------------------------------------------------------


def status_name(value: int) -> str:
    """The enum's name for a status, from a static table (the library has no error string)."""
    return _STATUS_NAMES.get(value, f"DMI_ERROR_{value}")


class HyDmiError(StatusError):
    """A non-success ``nvmlReturn_t``; consumers branch on :attr:`value`, never on the text.

    ``args`` is ``(value, function)`` so the exception pickles and copies without losing the code.
    """

    status_name = staticmethod(status_name)


class HyDmiLibraryNotFound(LibraryNotFound):
    """No candidate path could be opened; the message names every path and why each failed."""


# -- the instance registry -----------------------------------------------------------------------

CONFIG_DIR: Final = Path("/etc/dmi_mig_config")
"""The driver's registry of live instances: ``ci/dev<N>gi<G>ci<C>.conf`` per compute instance."""

CONF_NAME: Final = re.compile(r"^dev([0-9]+)gi([0-9]+)ci([0-9]+)\.conf$")
"""A compute instance's file name: the card's DMI index, its GPU and compute instance ids."""

_UUID_LINE: Final = re.compile(r"^\s*mig_uuid\s*:\s*(\S+)\s*$")


class MigRegistry(Protocol):
    """Where :meth:`HyDmiMig.dmi_mig_registry` reads the instance UUIDs from."""

    def read(self) -> dict[str, str]:
        """Conf file name → the ``mig_uuid`` it carries."""
        ...


class DirectoryRegistry:
    """The registry on this host's disk (or a copy of it, for a test)."""

    def __init__(self, root: Path = CONFIG_DIR) -> None:
        self.root = root

    def read(self) -> dict[str, str]:
        """Each ``ci/*.conf`` file's last ``mig_uuid:`` value, by file name.

        A missing directory is an empty registry: it exists only while the node is in MIG mode.
        A file without the line is left out rather than failing the others. A directory that
        cannot be read at all raises :class:`HyDmiError` (``NO_PERMISSION`` or ``UNKNOWN``):
        reporting it as empty would answer every partition with "no such instance".
        """
        directory = self.root / "ci"
        try:
            names = sorted(entry.name for entry in directory.iterdir() if entry.is_file())
        except FileNotFoundError:
            return {}
        except PermissionError as exc:
            raise HyDmiError(DMI_ERROR_NO_PERMISSION, "dmi_mig_registry") from exc
        except OSError as exc:
            raise HyDmiError(DMI_ERROR_UNKNOWN, "dmi_mig_registry") from exc
        found: dict[str, str] = {}
        for name in names:
            try:
                text = (directory / name).read_text(errors="replace")
            except OSError:
                continue
            uuids = [m[1] for m in map(_UUID_LINE.match, text.splitlines()) if m]
            if uuids:
                found[name] = uuids[-1]
        return found


# -- the wrapper ---------------------------------------------------------------------------------

_Status = Any


class HyDmiMig:
    """Pythonic calls over a ``libhydmi_mig`` object: a ``ctypes.CDLL`` or a fake with its ABI.

    Method names are the library's C symbols, so a recording of this binding names the calls the
    vendor's header names. Handles are ``ctypes.c_void_p``; passing one back hands the library
    the same pointer it gave out. Symbols are looked up per call: one the loaded library lacks
    raises ``HyDmiError(DMI_ERROR_FUNCTION_NOT_FOUND)``, as pynvml does, so an older library
    still serves the calls it has.
    """

    def __init__(self, lib: object, registry: MigRegistry | None = None) -> None:
        self.lib = lib
        self.registry: MigRegistry = registry if registry is not None else DirectoryRegistry()

    def _call(self, name: str, *args: object) -> None:
        try:
            function: _Status = getattr(self.lib, name)
        except AttributeError:
            raise HyDmiError(DMI_ERROR_FUNCTION_NOT_FOUND, name) from None
        status = int(function(*args))
        if status != DMI_SUCCESS:
            raise HyDmiError(status, name)

    @staticmethod
    def _handle(handle: object) -> ctypes.c_void_p:
        """A handle argument as a pointer; an ``int`` address is accepted too."""
        if isinstance(handle, ctypes.c_void_p):
            return handle
        if isinstance(handle, int):
            return ctypes.c_void_p(handle)
        raise TypeError(f"expected a device or instance handle, got {handle!r}")

    # -- system ----------------------------------------------------------------------------------

    def nvmlGetSystemMigMode(self) -> tuple[int, int]:
        """The node's MIG mode, ``(current, pending)``; there is no per-card mode."""
        current, pending = ctypes.c_uint(0), ctypes.c_uint(0)
        self._call("nvmlGetSystemMigMode", ctypes.byref(current), ctypes.byref(pending))
        return current.value, pending.value

    def nvmlDeviceGetCount(self) -> int:
        """Number of physical cards the library sees."""
        count = ctypes.c_uint(0)
        self._call("nvmlDeviceGetCount", ctypes.byref(count))
        return count.value

    # -- cards -----------------------------------------------------------------------------------

    def nvmlDeviceGetHandleByPciBusId(self, pci_bus_id: str) -> ctypes.c_void_p:
        """The card at a domain-qualified address (``0000:09:00.0``); NOT_FOUND if none."""
        device = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByPciBusId", pci_bus_id.encode(), ctypes.byref(device))
        return device

    def nvmlDeviceGetIndex(self, device: object) -> int:
        """The card's DMI index: the ``<N>`` of ``dev<N>gi<G>ci<C>.conf``."""
        index = ctypes.c_uint(0)
        self._call("nvmlDeviceGetIndex", self._handle(device), ctypes.byref(index))
        return index.value

    def nvmlDeviceGetMaxMigDeviceCount(self, device: object) -> int:
        """How many MIG devices the card can hold at once."""
        count = ctypes.c_uint(0)
        self._call("nvmlDeviceGetMaxMigDeviceCount", self._handle(device), ctypes.byref(count))
        return count.value

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, device: object, profile: int
    ) -> dmiGpuInstanceProfileInfo_t:
        """The GPU-instance profile at ``profile`` = slices − 1 (not a profile id)."""
        info = dmiGpuInstanceProfileInfo_t()
        self._call(
            "nvmlDeviceGetGpuInstanceProfileInfo",
            self._handle(device),
            ctypes.c_uint(profile),
            ctypes.byref(info),
        )
        return info

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: object, index: int) -> ctypes.c_void_p:
        """The MIG device at a **node-global** index, if it is this card's; else NOT_FOUND."""
        mig = ctypes.c_void_p()
        self._call(
            "nvmlDeviceGetMigDeviceHandleByIndex",
            self._handle(device),
            ctypes.c_uint(index),
            ctypes.byref(mig),
        )
        return mig

    def nvmlDeviceGetGpuInstanceById(self, device: object, gpu_instance_id: int) -> ctypes.c_void_p:
        """A GPU instance of the card, by its driver-assigned id."""
        instance = ctypes.c_void_p()
        self._call(
            "nvmlDeviceGetGpuInstanceById",
            self._handle(device),
            ctypes.c_uint(gpu_instance_id),
            ctypes.byref(instance),
        )
        return instance

    def nvmlGpuInstanceGetInfo(self, gpu_instance: object) -> dmiGpuInstanceInfo_t:
        """The GI's parent card, id, profile id and placement."""
        info = dmiGpuInstanceInfo_t()
        self._call("nvmlGpuInstanceGetInfo", self._handle(gpu_instance), ctypes.byref(info))
        return info

    # -- MIG devices (also answered by card handles) ---------------------------------------------

    def nvmlDeviceGetGpuInstanceId(self, device: object) -> int:
        """Which GPU instance a MIG device belongs to."""
        value = ctypes.c_uint(0)
        self._call("nvmlDeviceGetGpuInstanceId", self._handle(device), ctypes.byref(value))
        return value.value

    def nvmlDeviceGetComputeInstanceId(self, device: object) -> int:
        """Which compute instance a MIG device is."""
        value = ctypes.c_uint(0)
        self._call("nvmlDeviceGetComputeInstanceId", self._handle(device), ctypes.byref(value))
        return value.value

    def nvmlDeviceGetMemoryInfo(self, device: object) -> dmiMemory_t:
        """Total, free and used bytes; a MIG device handle answers for the partition alone."""
        memory = dmiMemory_t()
        self._call("nvmlDeviceGetMemoryInfo", self._handle(device), ctypes.byref(memory))
        return memory

    def nvmlDeviceGetUtilizationRates(self, device: object) -> dmiUtilization_t:
        """Compute and memory utilization; a MIG device handle answers for the partition alone.

        Exported by the library though ``dmi_mig.h`` does not declare it; NVML's signature.
        """
        rates = dmiUtilization_t()
        self._call("nvmlDeviceGetUtilizationRates", self._handle(device), ctypes.byref(rates))
        return rates

    # -- node state ------------------------------------------------------------------------------

    def dmi_mig_registry(self) -> dict[str, str]:
        """``/etc/dmi_mig_config/ci``: conf file name → the instance's UUID (without ``MIG-``)."""
        return self.registry.read()


FUNCTIONS: Final = (
    "nvmlGetSystemMigMode",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByPciBusId",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetGpuInstanceProfileInfo",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetGpuInstanceById",
    "nvmlGpuInstanceGetInfo",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetUtilizationRates",
    "dmi_mig_registry",
)
"""The binding's methods. All but the last are C symbols; the last reads the registry."""


# -- loading -------------------------------------------------------------------------------------

LIBRARY_NAME: Final = "libhydmi_mig.so.1"

DEFAULT_PATHS: Final[tuple[str, ...]] = (
    "/opt/hyhal/lib/libhydmi_mig.so.1",
    "/opt/hyhal/lib/libhydmi_mig.so",
    "/opt/dtk/lib/libhydmi_mig.so.1",
    "/opt/dtk/lib/libhydmi_mig.so",
    LIBRARY_NAME,
    "libhydmi_mig.so",
)
"""Tried in order after ``$HYDMI_MIG_LIB``. The driver installs under ``/opt/hyhal/lib``, which
is not on the dynamic linker's path; the versioned soname comes before the bare one because a
host can carry the former without the latter."""

_uint = ctypes.c_uint
_P = ctypes.POINTER
_h = ctypes.c_void_p

_SIGNATURES: Final = returning(
    ctypes.c_int,
    {
        "nvmlGetSystemMigMode": (_P(_uint), _P(_uint)),
        "nvmlDeviceGetCount": (_P(_uint),),
        "nvmlDeviceGetHandleByPciBusId": (ctypes.c_char_p, _P(_h)),
        "nvmlDeviceGetIndex": (_h, _P(_uint)),
        "nvmlDeviceGetMaxMigDeviceCount": (_h, _P(_uint)),
        "nvmlDeviceGetGpuInstanceProfileInfo": (_h, _uint, _P(dmiGpuInstanceProfileInfo_t)),
        "nvmlDeviceGetMigDeviceHandleByIndex": (_h, _uint, _P(_h)),
        "nvmlDeviceGetGpuInstanceById": (_h, _uint, _P(_h)),
        "nvmlGpuInstanceGetInfo": (_h, _P(dmiGpuInstanceInfo_t)),
        "nvmlDeviceGetGpuInstanceId": (_h, _P(_uint)),
        "nvmlDeviceGetComputeInstanceId": (_h, _P(_uint)),
        "nvmlDeviceGetMemoryInfo": (_h, _P(dmiMemory_t)),
        "nvmlDeviceGetUtilizationRates": (_h, _P(dmiUtilization_t)),
    },
)


def load_library(
    paths: Sequence[str] | None = None, *, registry: MigRegistry | None = None
) -> HyDmiMig:
    """Open ``libhydmi_mig`` from the first path that loads; ``paths`` replaces the search.

    Without ``paths``: ``$HYDMI_MIG_LIB`` if set, then :data:`DEFAULT_PATHS`. Opened
    ``RTLD_LOCAL`` so its ``nvml*`` symbols stay out of the global namespace. Raises
    :class:`HyDmiLibraryNotFound` naming every path tried and why each failed.
    """
    lib = open_first(
        with_override("HYDMI_MIG_LIB", DEFAULT_PATHS) if paths is None else paths,
        library=LIBRARY_NAME,
        not_found=HyDmiLibraryNotFound,
        signatures=_SIGNATURES,
        mode=os.RTLD_LOCAL,
    )
    return HyDmiMig(lib, registry)
