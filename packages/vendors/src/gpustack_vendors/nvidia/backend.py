"""NVIDIA backend over the NVML binding (``pynvml`` from nvidia-ml-py, or its replay).

Units: NVML reports memory in bytes and power in mW; both are converted here, once. MIG
partitions are read on their **own** handles (identity, capacity, usage), never by folding the
parent card's figures. The reading itself is :mod:`gpustack_vendors.nvml_shaped`'s, which the
NVML clones share; this module states how pynvml spells it.
"""

from __future__ import annotations

from gpustack_vendors.nvidia.surface import NvmlPciInfo, NvmlProcessInfo, NvmlSurface
from gpustack_vendors.nvml_shaped import MigDialect, NvmlMigBackend, NvmlShapedCallError

MANUFACTURER = "nvidia"
MIG_ENABLED = 1


class NvmlCallError(NvmlShapedCallError):
    """A call failed; carries the numeric code and the reason it maps to."""

    library = "NVML"


class NvidiaBackend(NvmlMigBackend[NvmlSurface]):
    """Answers the Device Manager's questions through an NVML binding it is handed."""

    manufacturer = MANUFACTURER
    call_error = NvmlCallError

    def __init__(self, nvml: NvmlSurface) -> None:
        super().__init__(
            nvml,
            MigDialect(
                prefix="nvml",
                temperature_gpu=nvml.NVML_TEMPERATURE_GPU,
                not_found=nvml.NVML_ERROR_NOT_FOUND,
                mig_enabled=MIG_ENABLED,
                runtime_version_fn="nvmlSystemGetCudaDriverVersion",
                bus_id=_bus_id,
                process_memory=_process_memory,
                compute_capability_fn="nvmlDeviceGetCudaComputeCapability",
            ),
        )
        self._call("nvmlInit")

    def _failure(self) -> type[Exception]:
        return self._lib.NVMLError


def _bus_id(info: NvmlPciInfo) -> str:
    bus_id = info.busId
    return bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)


def _process_memory(proc: NvmlProcessInfo) -> int | None:
    """The binding (pynvml) turns NVML's not-available value into ``None``."""
    return None if proc.usedGpuMemory is None else int(proc.usedGpuMemory)
