"""MetaX backend over MXSML (our binding ``gpustack_vendors.metax.mxsml``, or its replay).

**Identity.** A card's id is the UUID ``mxSmlGetDeviceInfo`` reports; ``index`` is the MXSML
device index, which every call takes. VFs (virtualization mode VF) belong to guests and are not
reported.

**Units**, converted here once:

- ``mxSmlGetMemoryInfo`` is KiB: ``vramTotal`` and ``vramUse`` become MiB rounded up.
- Process ``gpuMemoryUsage`` is bytes (``MxSml.h``; a C600-A process holding an allocation read
  16 MiB here and in ``mx-smi --show-process``) and stays bytes.
- Board power is the sum of every rail's mW, in W.
- The hotspot temperature is hundredths of a degree: divided by 100 and floored, as
  gpustack-runtime does. (The operator publishes it raw; a C500 capture reading 36 °C through the
  runtime is what settles the scale.)

**Per-process memory** is ``mxSmlGetSingleGpuProcess_v3`` for the device, and of each process's
device entries only the one whose ``gpuId`` is this device's **index**; ``mxSmlDeviceInfo_t``'s
``gpuId`` is the physical id and never matches a row (the operator's first hardware run matched
it and read every card as idle). **Per-process compute** does not exist in MXSML: it is
``unsupported`` on every device, a capability rather than a fault.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpustack_core.reasons import QueryReason
from gpustack_core.units import ceil_div
from gpustack_vendors import errors
from gpustack_vendors.answers import (
    c_text,
    memory_only,
    per_device,
    unknown_memory_only,
    unsupported_partitions,
)
from gpustack_vendors.calling import BindingBackend, CallError, same
from gpustack_vendors.detected import Detected
from gpustack_vendors.metax.mxsml import (
    MAX_GPU_NUM_USED_BY_PROCESS,
    MXSML_ERROR_BUSY_DEVICE,
    MXSML_ERROR_FLR_NOT_READY,
    MXSML_ERROR_FUNCTION_NOT_FOUND,
    MXSML_ERROR_INSUFFICIENT_SIZE,
    MXSML_ERROR_OPERATION_NOT_SUPPORT,
    MXSML_ERROR_PERMISSION_DENIED,
    MXSML_TEMPERATURE_HOTSPOT,
    MXSML_USAGE_XCORE,
    MXSML_VERSION_DRIVER,
    MXSML_VIRTUALIZATION_MODE_VF,
    MXSMLError,
    mxSmlBoardWayElectricInfo_t,
    mxSmlProcessInfo_v3_t,
)
from gpustack_vendors.metax.surface import MxsmlSurface
from gpustack_vendors.model import (
    CardSample,
    Detection,
    DeviceInfo,
    DeviceProcesses,
    PartitionSample,
    ProcessRow,
)
from gpustack_vendors.pci import normalize_bus_id

MANUFACTURER = "metax"
KIB_PER_MIB = 1024
HOTSPOT_SCALE = 100
"""``mxSmlGetTemperatureInfo(…, MXSML_TEMPERATURE_HOTSPOT)`` answers hundredths of a degree."""

MXSML: Mapping[int, QueryReason] = {
    MXSML_ERROR_OPERATION_NOT_SUPPORT: errors.U,
    MXSML_ERROR_FUNCTION_NOT_FOUND: errors.U,
    MXSML_ERROR_PERMISSION_DENIED: errors.P,
    MXSML_ERROR_BUSY_DEVICE: errors.T,
    MXSML_ERROR_FLR_NOT_READY: errors.T,
    MXSML_ERROR_INSUFFICIENT_SIZE: errors.X,
}
"""``mxSmlReturn_t`` codes → reasons; anything unlisted is transient."""


class MxsmlCallError(CallError):
    """An MXSML call failed; carries the numeric code and the reason it maps to."""

    library = "MXSML"
    reasons = MXSML


class MetaxBackend(BindingBackend):
    """Answers the Device Manager's questions through an MXSML binding it is handed."""

    manufacturer = MANUFACTURER
    call_error = MxsmlCallError
    binding_error = MXSMLError

    def __init__(self, mxsml: MxsmlSurface) -> None:
        self._mxsml = mxsml
        self._detected: Detected[int, object] = Detected(self.detect)
        self._call(self._mxsml.mxSmlInit)

    # -- detection ---------------------------------------------------------------------------

    def detect(self) -> Detection:
        """Enumerate physical devices by index; a device whose identity fails is skipped, noted."""
        notes: list[str] = []
        devices: list[DeviceInfo] = []
        cards: dict[str, int] = {}
        count = int(self._call(self._mxsml.mxSmlGetDeviceCount))
        driver = ""
        if count:
            driver = (
                self._maybe(str, self._mxsml.mxSmlGetDeviceVersion, 0, MXSML_VERSION_DRIVER) or ""
            )
        maca = self._maybe(str, self._mxsml.mxSmlGetMacaVersion) or ""
        for index in range(count):
            try:
                info = self._call(self._mxsml.mxSmlGetDeviceInfo, index)
            except MxsmlCallError as failure:
                notes.append(f"device {index}: no identity, skipped ({failure})")
                continue
            if int(info.mode) == MXSML_VIRTUALIZATION_MODE_VF:
                continue
            uuid = c_text(info.uuid)
            memory_mib = 0
            try:
                memory_mib = _mib(self._call(self._mxsml.mxSmlGetMemoryInfo, index).vramTotal) or 0
            except MxsmlCallError as failure:
                notes.append(f"{uuid}: memory unreadable ({failure})")
            cards[uuid] = index
            devices.append(
                DeviceInfo(
                    id=uuid,
                    index=index,
                    name=c_text(info.deviceName) or "MetaX GPU",
                    memory_mib=memory_mib,
                    cores=None,
                    driver_version=driver,
                    runtime_version=maca,
                    pci_bus_id=normalize_bus_id(c_text(info.bdfId)),
                    unhealthy=False,
                )
            )
        self._detected.remember(cards)
        return Detection(MANUFACTURER, tuple(devices), tuple(notes))

    # -- sampling ----------------------------------------------------------------------------

    def sample(self) -> list[CardSample]:
        """Whole-card figures in MiB, %, °C and W; a refused figure is absent."""
        samples: list[CardSample] = []
        for uuid, index in self._detected.cards().items():
            total, used = 0, None
            memory = self._maybe(same, self._mxsml.mxSmlGetMemoryInfo, index)
            if memory is not None:
                total = _mib(memory.vramTotal) or 0
                used = _mib(memory.vramUse)
            samples.append(
                CardSample(
                    id=uuid,
                    memory_total_mib=total,
                    memory_used_mib=used,
                    cores_utilization_percent=self._maybe(
                        _percent, self._mxsml.mxSmlGetDeviceIpUsage, index, MXSML_USAGE_XCORE
                    ),
                    temperature_celsius=self._maybe(
                        lambda raw: int(raw) // HOTSPOT_SCALE,
                        self._mxsml.mxSmlGetTemperatureInfo,
                        index,
                        MXSML_TEMPERATURE_HOTSPOT,
                    ),
                    power_watts=self._maybe(
                        _power_watts, self._mxsml.mxSmlGetBoardPowerInfo, index
                    ),
                    unhealthy=False,
                )
            )
        return samples

    # -- processes ---------------------------------------------------------------------------

    def processes(self, device_ids: Sequence[str]) -> dict[str, DeviceProcesses]:
        """Per-process memory of each requested device; compute is always ``unsupported``."""
        return per_device(
            device_ids, self._detected.cards(), self._device_processes, unknown_memory_only
        )

    def _device_processes(self, device_id: str, index: int) -> DeviceProcesses:
        try:
            listed = self._call(self._mxsml.mxSmlGetSingleGpuProcess_v3, index)
        except MxsmlCallError as failure:
            return memory_only(device_id, memory_reason=failure.reason)
        return memory_only(device_id, _rows_for(index, listed))

    # -- partitions --------------------------------------------------------------------------

    def partitions(self, partition_ids: Sequence[str]) -> dict[str, PartitionSample]:
        """MetaX has no partition handle (sGPUs are sysfs slices): every id is unsupported."""
        return unsupported_partitions(partition_ids)

    def close(self) -> None:
        """Nothing to release: MXSML's header declares no shutdown (``pymxsml``'s touches no C)."""


def _rows_for(index: int, listed: Sequence[mxSmlProcessInfo_v3_t]) -> tuple[ProcessRow, ...]:
    """Each process's entry for the device at ``index``; a process without one is not listed."""
    rows: dict[int, ProcessRow] = {}
    for process in listed:
        entries = min(int(process.gpuNumber), MAX_GPU_NUM_USED_BY_PROCESS)
        for entry in list(process.processGpuInfo)[:entries]:
            if int(entry.gpuId) != index:
                continue
            pid = int(process.processId)
            rows.setdefault(pid, ProcessRow(pid, int(entry.gpuMemoryUsage), None))
            break
    return tuple(rows.values())


def _mib(kib: int) -> int | None:
    """KiB → MiB rounded up; a negative ``long`` is no measurement."""
    number = int(kib)
    return None if number < 0 else ceil_div(number, KIB_PER_MIB)


def _percent(value: int) -> int | None:
    number = int(value)
    return None if number < 0 else number


def _power_watts(rails: Sequence[mxSmlBoardWayElectricInfo_t]) -> float | None:
    """The sum of every rail, mW → W; a board reporting no rails has no figure."""
    if not rails:
        return None
    return sum(int(rail.power) for rail in rails) / 1000
