"""NVIDIA backend over the NVML binding (``pynvml`` from nvidia-ml-py, or its replay).

Units: NVML reports memory in bytes and power in mW; both are converted here, once. MIG
partitions are read on their **own** handles (identity, capacity, usage), never by folding the
parent card's figures. The reading itself is :mod:`gpustack_vendors.nvml_shaped`'s, which the
NVML clones share; this module states how pynvml spells it (:class:`_Pynvml`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpustack_vendors.nvidia.surface import (
    NvmlMemory,
    NvmlPciInfo,
    NvmlProcessInfo,
    NvmlProcessUtilizationSample,
    NvmlSurface,
    NvmlUtilization,
)
from gpustack_vendors.nvml_shaped import MigDialect, NvmlMigBackend, NvmlShapedCallError
from gpustack_vendors.surfaces.nvml import NvmlMig

MANUFACTURER = "nvidia"
MIG_ENABLED = 1


class NvmlCallError(NvmlShapedCallError):
    """A call failed; carries the numeric code and the reason it maps to."""

    library = "NVML"


class NvidiaBackend(NvmlMigBackend[object]):
    """Answers the Device Manager's questions through an NVML binding it is handed."""

    manufacturer = MANUFACTURER
    call_error = NvmlCallError

    def __init__(self, nvml: NvmlSurface) -> None:
        self._lib = nvml
        super().__init__(
            _Pynvml(nvml),
            MigDialect(
                temperature_gpu=nvml.NVML_TEMPERATURE_GPU,
                not_found=nvml.NVML_ERROR_NOT_FOUND,
                mig_enabled=MIG_ENABLED,
                bus_id=_bus_id,
                process_memory=_process_memory,
            ),
        )
        self._call(nvml.nvmlInit)

    def _failure(self) -> type[Exception]:
        return self._lib.NVMLError


class _Pynvml(NvmlMig[object]):
    """NVML's calls as pynvml names them: each the binding's function, looked up when called."""

    def __init__(self, lib: NvmlSurface) -> None:
        self._lib = lib

    @property
    def device_get_memory_info(self) -> Callable[[object], NvmlMemory]:
        return self._lib.nvmlDeviceGetMemoryInfo

    @property
    def device_get_utilization_rates(self) -> Callable[[object], NvmlUtilization]:
        return self._lib.nvmlDeviceGetUtilizationRates

    @property
    def device_get_temperature(self) -> Callable[[object, int], int]:
        return self._lib.nvmlDeviceGetTemperature

    @property
    def device_get_power_usage(self) -> Callable[[object], int]:
        return self._lib.nvmlDeviceGetPowerUsage

    @property
    def shutdown(self) -> Callable[[], None]:
        return self._lib.nvmlShutdown

    @property
    def system_get_driver_version(self) -> Callable[[], str]:
        return self._lib.nvmlSystemGetDriverVersion

    @property
    def system_get_runtime_version(self) -> Callable[[], int]:
        return self._lib.nvmlSystemGetCudaDriverVersion

    @property
    def device_get_count(self) -> Callable[[], int]:
        return self._lib.nvmlDeviceGetCount

    @property
    def device_get_handle_by_index(self) -> Callable[[int], object]:
        return self._lib.nvmlDeviceGetHandleByIndex

    @property
    def device_get_uuid(self) -> Callable[[object], str]:
        return self._lib.nvmlDeviceGetUUID

    @property
    def device_get_name(self) -> Callable[[object], str]:
        return self._lib.nvmlDeviceGetName

    @property
    def device_get_num_gpu_cores(self) -> Callable[[object], int]:
        return self._lib.nvmlDeviceGetNumGpuCores

    @property
    def device_get_pci_info(self) -> Callable[[object], NvmlPciInfo]:
        return self._lib.nvmlDeviceGetPciInfo

    @property
    def device_get_compute_capability(self) -> Callable[[object], tuple[int, int]]:
        return self._lib.nvmlDeviceGetCudaComputeCapability

    @property
    def device_get_mig_mode(self) -> Callable[[object], Sequence[int]]:
        return self._lib.nvmlDeviceGetMigMode

    @property
    def device_get_max_mig_device_count(self) -> Callable[[object], int]:
        return self._lib.nvmlDeviceGetMaxMigDeviceCount

    @property
    def device_get_mig_device_handle_by_index(self) -> Callable[[object, int], object]:
        return self._lib.nvmlDeviceGetMigDeviceHandleByIndex

    @property
    def device_get_compute_running_processes(
        self,
    ) -> Callable[[object], Sequence[NvmlProcessInfo]]:
        return self._lib.nvmlDeviceGetComputeRunningProcesses

    @property
    def device_get_process_utilization(
        self,
    ) -> Callable[[object, int], Sequence[NvmlProcessUtilizationSample]]:
        return self._lib.nvmlDeviceGetProcessUtilization


def _bus_id(info: NvmlPciInfo) -> str:
    bus_id = info.busId
    return bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)


def _process_memory(proc: NvmlProcessInfo) -> int | None:
    """The binding (pynvml) turns NVML's not-available value into ``None``."""
    return None if proc.usedGpuMemory is None else int(proc.usedGpuMemory)
