"""T-Head PPU backend over our HGML binding (``gpustack_vendors.thead.hgml``, or its replay).

HGML is an NVML clone, so this reads as the NVIDIA backend does, through the same
:mod:`gpustack_vendors.nvml_shaped` code: memory in bytes and power in
mW, converted here once; MIG partitions read on their **own** handles, never by folding the
parent card's figures; ``index`` is the enumeration index (``hgmlDeviceGetMinorNumber`` is not:
on a sampled 16-card host it ran one ahead).

**Per-process compute.** The versioned ``hgmlDeviceGetProcessesUtilizationInfo`` is exported but
is a stub answering ``NOT_SUPPORTED`` on the PPU hosts measured; the plain
``hgmlDeviceGetProcessUtilization`` answers. So the versioned call is asked first and, only when
the entry point itself refuses (``NOT_SUPPORTED``, or the symbol is missing), the plain one is —
a driver that implements the versioned call is read through it unchanged. Either one answering
``NOT_FOUND`` means no sample since ``lastSeenTimeStamp``: every listed process is idle, a
measured 0 %, not an absence.

**Partitions** report memory only: no HGML call measures a MIG instance's compute (spec,
"Manufacturer capabilities": T-Head "— MIG partition").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpustack_vendors.nvidia.surface import (
    NvmlMemory,
    NvmlPciInfo,
    NvmlProcessInfo,
    NvmlProcessUtilizationSample,
    NvmlUtilization,
)
from gpustack_vendors.nvml_shaped import (
    MigDialect,
    NvmlMigBackend,
    NvmlShapedCallError,
    sized_or_none,
)
from gpustack_vendors.surfaces.nvml import NvmlMig
from gpustack_vendors.thead import hgml as h
from gpustack_vendors.thead.hgml import HGMLError
from gpustack_vendors.thead.surface import HgmlSurface

MANUFACTURER = "thead"

_VERSIONED_REFUSED = frozenset({h.HGML_ERROR_NOT_SUPPORTED, h.HGML_ERROR_FUNCTION_NOT_FOUND})
"""Answers of the versioned process-utilization call that mean "ask the plain one"."""


def _bus_id(info: NvmlPciInfo) -> str:
    """The bus id text HGML reports (``00000000:05:00.0``; ``hgmlPciInfo_t.busId`` is bytes)."""
    bus_id = info.busId
    return bus_id.decode("ascii", errors="replace") if isinstance(bus_id, bytes) else bus_id


HGML = MigDialect(
    temperature_gpu=h.HGML_TEMPERATURE_GPU,
    not_found=h.HGML_ERROR_NOT_FOUND,
    mig_enabled=h.HGML_DEVICE_MIG_ENABLE,
    bus_id=_bus_id,
    process_memory=lambda proc: sized_or_none(
        proc.usedGpuMemory, h.HGML_VALUE_NOT_AVAILABLE_ULONGLONG
    ),
)
"""How HGML's answers read: its own constants and its raw not-available sentinel."""


class HgmlCallError(NvmlShapedCallError):
    """A call failed; HGML's return codes are NVML's numbers, so NVML's table maps them."""

    library = "HGML"

    @staticmethod
    def detail(code: int) -> str:
        """The binding's name for the code."""
        return f" ({h.status_name(code)})"


class TheadBackend(NvmlMigBackend[object]):
    """Answers the Device Manager's questions through an HGML binding it is handed."""

    manufacturer = MANUFACTURER
    call_error = HgmlCallError
    binding_error = HGMLError

    def __init__(self, hgml: HgmlSurface) -> None:
        self._lib = hgml
        super().__init__(_Hgml(hgml), HGML)
        self._call(hgml.hgmlInit)

    def _mig_identity(self, mig: object) -> tuple[str, str]:
        """A partition's UUID and name, read on its own handle (the UUID first)."""
        uuid = str(self._call(self._lib.hgmlDeviceGetUUID, mig))
        return uuid, str(self._call(self._lib.hgmlDeviceGetName, mig))

    def _utilization(self, handle: object) -> Sequence[NvmlProcessUtilizationSample]:
        """The versioned call, or the plain one when the versioned entry point refuses."""
        try:
            return list(self._call(self._lib.hgmlDeviceGetProcessesUtilizationInfo, handle, 0))
        except HgmlCallError as failure:
            if failure.code not in _VERSIONED_REFUSED:
                raise
        return list(self._call(self._lib.hgmlDeviceGetProcessUtilization, handle, 0))


class _Hgml(NvmlMig[object]):
    """NVML's calls as HGML names them: each the binding's function, looked up when called.

    The runtime version is HGGC's (``hgmlSystemGetHggcDriverVersion``, encoded as CUDA's); HGML
    has no compute capability.
    """

    def __init__(self, lib: HgmlSurface) -> None:
        self._lib = lib

    @property
    def device_get_memory_info(self) -> Callable[[object], NvmlMemory]:
        return self._lib.hgmlDeviceGetMemoryInfo

    @property
    def device_get_utilization_rates(self) -> Callable[[object], NvmlUtilization]:
        return self._lib.hgmlDeviceGetUtilizationRates

    @property
    def device_get_temperature(self) -> Callable[[object, int], int]:
        return self._lib.hgmlDeviceGetTemperature

    @property
    def device_get_power_usage(self) -> Callable[[object], int]:
        return self._lib.hgmlDeviceGetPowerUsage

    @property
    def shutdown(self) -> Callable[[], None]:
        return self._lib.hgmlShutdown

    @property
    def system_get_driver_version(self) -> Callable[[], str]:
        return self._lib.hgmlSystemGetDriverVersion

    @property
    def system_get_runtime_version(self) -> Callable[[], int]:
        return self._lib.hgmlSystemGetHggcDriverVersion

    @property
    def device_get_count(self) -> Callable[[], int]:
        return self._lib.hgmlDeviceGetCount

    @property
    def device_get_handle_by_index(self) -> Callable[[int], object]:
        return self._lib.hgmlDeviceGetHandleByIndex

    @property
    def device_get_uuid(self) -> Callable[[object], str]:
        return self._lib.hgmlDeviceGetUUID

    @property
    def device_get_name(self) -> Callable[[object], str]:
        return self._lib.hgmlDeviceGetName

    @property
    def device_get_num_gpu_cores(self) -> Callable[[object], int]:
        return self._lib.hgmlDeviceGetNumGpuCores

    @property
    def device_get_pci_info(self) -> Callable[[object], NvmlPciInfo]:
        return self._lib.hgmlDeviceGetPciInfo

    @property
    def device_get_compute_capability(self) -> None:
        return None

    @property
    def device_get_mig_mode(self) -> Callable[[object], Sequence[int]]:
        return self._lib.hgmlDeviceGetMigMode

    @property
    def device_get_max_mig_device_count(self) -> Callable[[object], int]:
        return self._lib.hgmlDeviceGetMaxMigDeviceCount

    @property
    def device_get_mig_device_handle_by_index(self) -> Callable[[object, int], object]:
        return self._lib.hgmlDeviceGetMigDeviceHandleByIndex

    @property
    def device_get_compute_running_processes(
        self,
    ) -> Callable[[object], Sequence[NvmlProcessInfo]]:
        return self._lib.hgmlDeviceGetComputeRunningProcesses

    @property
    def device_get_process_utilization(
        self,
    ) -> Callable[[object, int], Sequence[NvmlProcessUtilizationSample]]:
        return self._lib.hgmlDeviceGetProcessUtilization
