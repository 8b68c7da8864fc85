"""Iluvatar backend over IXML (our binding ``gpustack_vendors.iluvatar.ixml``, or its replay).

IXML is an NVML copy, so its cards are sampled and shut down by the NVIDIA backend's code
(:mod:`gpustack_vendors.nvml_shaped`), with IXML's own choices:

- **Identity** is ``nvmlDeviceGetUUID``; ``index`` the enumeration index.
- **Memory** from ``nvmlDeviceGetMemoryInfo_v2`` with the v1 layout as fallback where the library
  lacks or refuses v2 (gpustack-runtime's order); bytes → MiB rounded up. A card answering v2
  with an "unsupported" code is remembered and read through v1 from then on.
- **Power** mW → W; temperature °C; utilization ``gpu`` %.
- **Health** is ``ixmlDeviceGetHealth``: any bit set is unhealthy, as is a fatal NVML code.
- **Per-process memory** is ``nvmlDeviceGetComputeRunningProcesses`` (bytes, kept as bytes;
  ``NVML_VALUE_NOT_AVAILABLE`` is absent). ``NOT_FOUND`` on that call is an idle card: no rows,
  no reason (the operator reads it so).
- **Per-process compute**: IXML's process-utilization functions exist only because pynvml was
  copied; no recording shows them answering, so none is called and compute is ``unsupported`` on
  every device: a capability, not a fault.
- No partitions: every id asked about is ``unsupported``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpustack_core.units import bytes_to_mib
from gpustack_vendors.answers import (
    memory_only,
    per_device,
    unknown_memory_only,
    unsupported_partitions,
)
from gpustack_vendors.iluvatar.ixml import (
    IXML_HEALTH_OK,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_TEMPERATURE_GPU,
    NVML_VALUE_NOT_AVAILABLE_ULL,
    IXMLError,
    c_nvmlPciInfo_t,
    ixmlDevice_t,
)
from gpustack_vendors.iluvatar.surface import IxmlSurface
from gpustack_vendors.model import (
    Detection,
    DeviceInfo,
    DeviceProcesses,
    PartitionSample,
    ProcessRow,
)
from gpustack_vendors.nvidia.surface import NvmlMemory, NvmlUtilization
from gpustack_vendors.nvml_shaped import (
    NvmlDialect,
    NvmlShapedBackend,
    NvmlShapedCallError,
    cuda_style_version,
    sized_or_none,
)
from gpustack_vendors.pci import normalize_bus_id
from gpustack_vendors.surfaces.nvml import NvmlCards

MANUFACTURER = "iluvatar"

_V1_FALLBACK = frozenset(
    {NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_ARGUMENT_VERSION_MISMATCH}
)
"""v2 answers that mean "this library has no v2": read the v1 layout instead."""


class IxmlCallError(NvmlShapedCallError):
    """An IXML call failed; carries the numeric code and the reason it maps to (NVML's table)."""

    library = "IXML"


class IluvatarBackend(NvmlShapedBackend[ixmlDevice_t]):
    """Answers the Device Manager's questions through an IXML binding it is handed."""

    manufacturer = MANUFACTURER
    call_error = IxmlCallError
    binding_error = IXMLError

    def __init__(self, ixml: IxmlSurface) -> None:
        self._lib = ixml
        super().__init__(_IxmlCards(ixml), NvmlDialect(temperature_gpu=NVML_TEMPERATURE_GPU))
        self._v1_only: set[str] = set()
        self._call(ixml.nvmlInit_v2)

    # -- plumbing -----------------------------------------------------------------------------

    def _memory(self, uuid: str, handle: ixmlDevice_t) -> NvmlMemory:
        """The v2 answer, or v1's where this library has no v2 (remembered per card)."""
        if uuid not in self._v1_only:
            try:
                return self._call(self._lib.nvmlDeviceGetMemoryInfo_v2, handle)
            except IxmlCallError as failure:
                if failure.code not in _V1_FALLBACK:
                    raise
                self._v1_only.add(uuid)
        return self._call(self._lib.nvmlDeviceGetMemoryInfo, handle)

    # -- detection ---------------------------------------------------------------------------

    def detect(self) -> Detection:
        """Enumerate cards; a card whose handle or UUID fails is skipped, noted."""
        ixml = self._lib
        driver = self._maybe(str, ixml.nvmlSystemGetDriverVersion) or ""
        cuda = self._maybe(cuda_style_version, ixml.nvmlSystemGetCudaDriverVersion) or ""
        notes: list[str] = []
        devices: list[DeviceInfo] = []
        cards: dict[str, ixmlDevice_t] = {}
        for index in range(int(self._call(ixml.nvmlDeviceGetCount_v2))):
            try:
                handle = self._call(ixml.nvmlDeviceGetHandleByIndex_v2, index)
                uuid = str(self._call(ixml.nvmlDeviceGetUUID, handle))
            except IxmlCallError as failure:
                notes.append(f"GPU {index}: no identity, skipped ({failure})")
                continue
            unhealthy = False
            memory_mib = 0
            try:
                memory_mib = bytes_to_mib(int(self._memory(uuid, handle).total))
            except IxmlCallError as failure:
                unhealthy = failure.fatal
                notes.append(f"{uuid}: memory unreadable ({failure})")
            cards[uuid] = handle
            devices.append(
                DeviceInfo(
                    id=uuid,
                    index=index,
                    name=self._maybe(str, ixml.nvmlDeviceGetName, handle) or "Iluvatar GPU",
                    memory_mib=memory_mib,
                    cores=None,
                    driver_version=driver,
                    runtime_version=cuda,
                    pci_bus_id=self._maybe(_bus_id, ixml.nvmlDeviceGetPciInfo_v3, handle) or "",
                    unhealthy=unhealthy or self._health_bits(handle),
                )
            )
        self._detected.remember(cards)
        return Detection(MANUFACTURER, tuple(devices), tuple(notes))

    def _health_bits(self, handle: ixmlDevice_t) -> bool:
        """Any ``IXML_HEALTH_*`` bit set; an unreadable mask marks nothing."""
        mask = self._maybe(int, self._lib.ixmlDeviceGetHealth, handle)
        return mask is not None and mask != IXML_HEALTH_OK

    # -- processes ---------------------------------------------------------------------------

    def processes(self, device_ids: Sequence[str]) -> dict[str, DeviceProcesses]:
        """Compute processes with their memory; compute is always ``unsupported``."""
        cards, _ = self._detected.both()
        return per_device(device_ids, cards, self._device_processes, unknown_memory_only)

    def _device_processes(self, device_id: str, handle: ixmlDevice_t) -> DeviceProcesses:
        try:
            listed = self._call(self._lib.nvmlDeviceGetComputeRunningProcesses, handle)
        except IxmlCallError as failure:
            if failure.code != NVML_ERROR_NOT_FOUND:
                return memory_only(device_id, memory_reason=failure.reason)
            listed = []  # NOT_FOUND: no process holds the card
        rows: dict[int, ProcessRow] = {}
        for proc in listed:
            used = sized_or_none(proc.usedGpuMemory, NVML_VALUE_NOT_AVAILABLE_ULL)
            rows.setdefault(int(proc.pid), ProcessRow(int(proc.pid), used, None))
        return memory_only(device_id, rows.values())

    # -- partitions --------------------------------------------------------------------------

    def partitions(self, partition_ids: Sequence[str]) -> dict[str, PartitionSample]:
        """IXML's MIG functions are treated as absent: every id is unsupported."""
        return unsupported_partitions(partition_ids)


class _IxmlCards(NvmlCards[ixmlDevice_t]):
    """NVML's card calls as IXML names them: each the binding's function, looked up when called.

    ``device_get_memory_info`` is the v1 call; :meth:`IluvatarBackend._memory` asks ``_v2``
    first and falls back to it.
    """

    def __init__(self, lib: IxmlSurface) -> None:
        self._lib = lib

    @property
    def device_get_memory_info(self) -> Callable[[ixmlDevice_t], NvmlMemory]:
        return self._lib.nvmlDeviceGetMemoryInfo

    @property
    def device_get_utilization_rates(self) -> Callable[[ixmlDevice_t], NvmlUtilization]:
        return self._lib.nvmlDeviceGetUtilizationRates

    @property
    def device_get_temperature(self) -> Callable[[ixmlDevice_t, int], int]:
        return self._lib.nvmlDeviceGetTemperature

    @property
    def device_get_power_usage(self) -> Callable[[ixmlDevice_t], int]:
        return self._lib.nvmlDeviceGetPowerUsage

    @property
    def shutdown(self) -> Callable[[], None]:
        return self._lib.nvmlShutdown


def _bus_id(info: c_nvmlPciInfo_t) -> str:
    return normalize_bus_id(info.busId.split(b"\0", 1)[0].decode())
