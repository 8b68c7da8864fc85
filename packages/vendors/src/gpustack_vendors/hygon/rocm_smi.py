"""Hygon's ROCm SMI fork (``librocm_smi64.so`` under ``/opt/hyhal``): our binding, extended.

Hygon ships ROCm SMI as its only management library for a DCU's card figures and per-process
rows, forked from an older ``rocm_smi_lib`` (the ``.so.2`` soname). The process calls, their
list convention and ``rsmi_process_info_t`` are AMD's, so :class:`HygonRocmSmi` *is* our
:class:`~gpustack_vendors.bindings.rocm_smi.RocmSmi`, with the card-level calls the AMD backend
reads from AMD SMI instead (Hygon has no AMD SMI) added on top. Signatures are ``rocm_smi.h``'s:

- ``rsmi_dev_unique_id_get(uint32_t dv_ind, uint64_t *id)``: the id ``rocminfo`` shows as
  ``GPU-<hex>``;
- ``rsmi_dev_name_get(uint32_t dv_ind, char *name, size_t len)``;
- ``rsmi_dev_memory_total_get`` / ``rsmi_dev_memory_usage_get(uint32_t dv_ind,
  rsmi_memory_type_t type, uint64_t *bytes)``: **bytes**;
- ``rsmi_dev_busy_percent_get(uint32_t dv_ind, uint32_t *percent)``;
- ``rsmi_dev_temp_metric_get(uint32_t dv_ind, uint32_t sensor, rsmi_temperature_metric_t
  metric, int64_t *value)``: **millidegrees** Celsius;
- ``rsmi_dev_power_ave_get(uint32_t dv_ind, uint32_t sensor, uint64_t *power)``: **microwatts**;
- ``rsmi_version_str_get(rsmi_sw_component_t component, char *buf, uint32_t len)``.

Values stay in the library's units here; the backend converts them once. Loading is lazy, as for
the base binding: nothing is opened until :func:`load_library`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Final

from gpustack_vendors.bindings import rocm_smi
from gpustack_vendors.bindings.loader import declare, returning, with_override
from gpustack_vendors.bindings.rocm_smi import RocmSmi

RSMI_MEM_TYPE_VRAM: Final = 0
"""``rsmi_memory_type_t``: the card's own memory (GTT and visible VRAM follow)."""

RSMI_TEMP_TYPE_EDGE: Final = 0
RSMI_TEMP_TYPE_JUNCTION: Final = 1
RSMI_TEMP_TYPE_MEMORY: Final = 2
"""``rsmi_temperature_type_t``: the sensors a DCU reports (``hy-smi`` shows all three)."""

RSMI_TEMP_CURRENT: Final = 0
"""``rsmi_temperature_metric_t``: the current reading."""

RSMI_SW_COMP_DRIVER: Final = 0
"""``rsmi_sw_component_t``: the kernel driver, the one component the header names."""

NAME_BUFFER: Final = 256
"""Room for a device name or a version string; the library truncates to what it is given."""


class HygonRocmSmi(RocmSmi):
    """ROCm SMI as Hygon ships it: the process calls of :class:`RocmSmi` plus card figures.

    Every method answers in the library's own units and raises
    :class:`~gpustack_vendors.bindings.rocm_smi.ROCMSMIError` for a non-success status, or with
    ``RSMI_STATUS_FAIL_LOAD_SYMBOL`` for a symbol this fork lacks.
    """

    def rsmi_dev_unique_id_get(self, dv_ind: int) -> int:
        """The 64-bit unique id (``rocminfo`` and ``hy-smi`` print it in hex)."""
        value = ctypes.c_uint64(0)
        self._call("rsmi_dev_unique_id_get", dv_ind, ctypes.pointer(value))
        return value.value

    def rsmi_dev_name_get(self, dv_ind: int) -> str:
        """The device name as the driver reports it."""
        buffer = ctypes.create_string_buffer(NAME_BUFFER)
        self._call("rsmi_dev_name_get", dv_ind, buffer, NAME_BUFFER)
        return buffer.value.decode("utf-8", errors="replace")

    def rsmi_dev_memory_total_get(self, dv_ind: int, mem_type: int) -> int:
        """Total memory of ``mem_type`` in bytes."""
        value = ctypes.c_uint64(0)
        self._call("rsmi_dev_memory_total_get", dv_ind, mem_type, ctypes.pointer(value))
        return value.value

    def rsmi_dev_memory_usage_get(self, dv_ind: int, mem_type: int) -> int:
        """Memory of ``mem_type`` in use, in bytes."""
        value = ctypes.c_uint64(0)
        self._call("rsmi_dev_memory_usage_get", dv_ind, mem_type, ctypes.pointer(value))
        return value.value

    def rsmi_dev_busy_percent_get(self, dv_ind: int) -> int:
        """Percent of time the device was busy (``hy-smi``'s "DCU use (%)")."""
        value = ctypes.c_uint32(0)
        self._call("rsmi_dev_busy_percent_get", dv_ind, ctypes.pointer(value))
        return value.value

    def rsmi_dev_temp_metric_get(self, dv_ind: int, sensor_type: int, metric: int) -> int:
        """A temperature in millidegrees Celsius."""
        value = ctypes.c_int64(0)
        self._call("rsmi_dev_temp_metric_get", dv_ind, sensor_type, metric, ctypes.pointer(value))
        return value.value

    def rsmi_dev_power_ave_get(self, dv_ind: int, sensor_ind: int) -> int:
        """Average package power in microwatts."""
        value = ctypes.c_uint64(0)
        self._call("rsmi_dev_power_ave_get", dv_ind, sensor_ind, ctypes.pointer(value))
        return value.value

    def rsmi_version_str_get(self, component: int) -> str:
        """A software component's version string (``RSMI_SW_COMP_DRIVER``: the driver's)."""
        buffer = ctypes.create_string_buffer(NAME_BUFFER)
        self._call("rsmi_version_str_get", component, buffer, NAME_BUFFER)
        return buffer.value.decode("utf-8", errors="replace")


FUNCTIONS: Final = (
    "rsmi_init",
    "rsmi_shut_down",
    "rsmi_num_monitor_devices",
    "rsmi_dev_pci_id_get",
    "rsmi_compute_process_info_get",
    "rsmi_compute_process_gpus_get",
    "rsmi_compute_process_info_by_device_get",
    "rsmi_dev_unique_id_get",
    "rsmi_dev_name_get",
    "rsmi_dev_memory_total_get",
    "rsmi_dev_memory_usage_get",
    "rsmi_dev_busy_percent_get",
    "rsmi_dev_temp_metric_get",
    "rsmi_dev_power_ave_get",
    "rsmi_version_str_get",
)
"""Every method the Hygon backend calls; each is also the C symbol of the same name."""

# -- loading -------------------------------------------------------------------------------------

DEFAULT_PATHS: Final[tuple[str, ...]] = (
    "/opt/hyhal/lib/librocm_smi64.so.2",
    "/opt/hyhal/lib/librocm_smi64.so",
    "/opt/dtk/lib/librocm_smi64.so.2",
    "/opt/dtk/lib/librocm_smi64.so",
    "librocm_smi64.so.2",
    rocm_smi.LIBRARY_NAME,
)
"""Hygon's driver tree first (``hyhal``, where ``hy-smi`` finds it), then the DTK, then the
dynamic linker's search path; tried after ``$ROCM_SMI_LIB``. Never ``/opt/rocm`` first: a host
carrying AMD's ROCm beside the DCU driver would open the wrong library."""

_u32 = ctypes.c_uint32
_u64 = ctypes.c_uint64
_P = ctypes.POINTER

_SIGNATURES: Final = returning(
    _u32,
    {
        "rsmi_dev_unique_id_get": (_u32, _P(_u64)),
        "rsmi_dev_name_get": (_u32, ctypes.c_char_p, ctypes.c_size_t),
        "rsmi_dev_memory_total_get": (_u32, _u32, _P(_u64)),
        "rsmi_dev_memory_usage_get": (_u32, _u32, _P(_u64)),
        "rsmi_dev_busy_percent_get": (_u32, _P(_u32)),
        "rsmi_dev_temp_metric_get": (_u32, _u32, _u32, _P(ctypes.c_int64)),
        "rsmi_dev_power_ave_get": (_u32, _u32, _P(_u64)),
        "rsmi_version_str_get": (_u32, ctypes.c_char_p, _u32),
    },
)
"""C signatures for the card-level symbols; the base binding declares its own."""


def load_library(paths: Sequence[str] | None = None) -> HygonRocmSmi:
    """Open Hygon's ROCm SMI from the first path that loads; ``paths`` replaces the search.

    Without ``paths``: ``$ROCM_SMI_LIB`` if set, then :data:`DEFAULT_PATHS`. Raises
    :class:`~gpustack_vendors.bindings.rocm_smi.RocmSmiLibraryNotFound` naming every path tried
    and why each failed. The caller still calls :meth:`HygonRocmSmi.rsmi_init`.
    """
    base = rocm_smi.load_library(
        with_override("ROCM_SMI_LIB", DEFAULT_PATHS) if paths is None else paths
    )
    declare(base.lib, _SIGNATURES)
    return HygonRocmSmi(base.lib)
