"""Cambricon backend over CNDev (our binding ``gpustack_vendors.cambricon.cndev``, or its replay).

**Identity.** A card's id is ``MLU-`` plus the UUID ``cndevGetUUID`` writes, the spelling
``cnmon``, the device plugin and the operator use. ``index`` is the CNDev index; every per-device
call takes the ``int32`` handle ``cndevGetDeviceHandleByIndex`` returns for it, never the index.

**Units**, converted here once:

- ``cndevGetMemoryUsageV2`` reports "MB" that are MiB (read as MiB by the operator, ``cnmon`` and
  gpustack-runtime), so card memory is taken as is.
- ``cndevGetProcessInfo``'s ``physicalMemoryUsed`` is **KiB**. It is turned into bytes exactly
  (× 1024), the unit the model carries, so the Device Manager sums a container's rows and rounds
  the sum up to MiB once: 8389120 KiB reads 8193 MiB, never 8192.
- Power is W, temperatures °C (``chip``, the chip-top maximum).

**Per-process compute** is ``cndevGetProcessUtilization``'s ``ipuUtil``, a share of the card. The
library emits a row only for a process that was busy in its sampling period, so a process the
memory list names and the utilization list does not is an idle one: a measured 0 (the operator's
reading). Rows come from the memory list; a PID only the utilization list names has exited since
and is dropped. If only the utilization query answers, its PIDs are the rows, memory absent with
its reason. Both queries have been exercised only against recorded payloads, never hardware.

MIM and sMLU instances are not read here: :meth:`CambriconBackend.partitions` answers every id as
unsupported.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence

from gpustack_core.reasons import QueryReason
from gpustack_vendors import errors
from gpustack_vendors.answers import c_text, per_device, unsupported_partitions
from gpustack_vendors.calling import BindingBackend, CallError, same
from gpustack_vendors.cambricon.cndev import (
    CNDEV_ERROR_FUNCTION_NOT_FOUND,
    CNDEV_ERROR_IN_USE,
    CNDEV_ERROR_INSUFFICIENT_SPACE,
    CNDEV_ERROR_LOW_DRIVER_VERSION,
    CNDEV_ERROR_NO_PERMISSION,
    CNDEV_ERROR_NOT_SUPPORTED,
    CNDEV_ERROR_TIMEOUT,
    CNDEV_ERROR_UNSUPPORTED_API_VERSION,
    CNDEV_HEALTH_STATE_DEVICE_IN_PROBLEM,
    CNDEV_VERSION_6,
    CNDevError,
    cndevDevicePowerInfo_t,
    cndevPCIeInfoV2_t,
    cndevVersionInfo_t,
)
from gpustack_vendors.cambricon.surface import CndevSurface
from gpustack_vendors.detected import Detected
from gpustack_vendors.model import (
    CardSample,
    Detection,
    DeviceInfo,
    DeviceProcesses,
    PartitionSample,
    ProcessRow,
)
from gpustack_vendors.pci import normalize_bus_id

MANUFACTURER = "cambricon"
KIB = 1024
UUID_PREFIX = "MLU-"
VERSION = CNDEV_VERSION_6
"""The struct version stamped on every versioned call (recorded as the call's argument)."""

CNDEV: Mapping[int, QueryReason] = {
    CNDEV_ERROR_NOT_SUPPORTED: errors.U,
    CNDEV_ERROR_UNSUPPORTED_API_VERSION: errors.U,
    CNDEV_ERROR_LOW_DRIVER_VERSION: errors.U,
    CNDEV_ERROR_FUNCTION_NOT_FOUND: errors.U,
    CNDEV_ERROR_NO_PERMISSION: errors.P,
    CNDEV_ERROR_TIMEOUT: errors.T,
    CNDEV_ERROR_IN_USE: errors.T,
    CNDEV_ERROR_INSUFFICIENT_SPACE: errors.X,
}
"""``cndevRet_t`` codes → reasons; anything unlisted is transient."""


class CndevCallError(CallError):
    """A CNDev call failed; carries the numeric code and the reason it maps to."""

    library = "CNDev"
    reasons = CNDEV


class CambriconBackend(BindingBackend):
    """Answers the Device Manager's questions through a CNDev binding it is handed."""

    manufacturer = MANUFACTURER
    call_error = CndevCallError
    binding_error = CNDevError

    def __init__(self, cndev: CndevSurface) -> None:
        self._cndev = cndev
        self._detected: Detected[int, object] = Detected(self.detect)
        self._call(self._cndev.cndevInit, 0)

    # -- detection ---------------------------------------------------------------------------

    def detect(self) -> Detection:
        """Enumerate cards by handle; a card whose identity cannot be read is skipped, noted."""
        notes: list[str] = []
        devices: list[DeviceInfo] = []
        cards: dict[str, int] = {}
        for index in range(int(self._call(self._cndev.cndevGetDeviceCount, VERSION))):
            try:
                handle = int(self._call(self._cndev.cndevGetDeviceHandleByIndex, index))
                uuid = UUID_PREFIX + c_text(
                    self._call(self._cndev.cndevGetUUID, handle, VERSION).uuid
                )
            except CndevCallError as failure:
                notes.append(f"MLU {index}: no identity, skipped ({failure})")
                continue
            memory_mib: int | None = 0
            try:
                memory_mib = _figure(
                    self._call(self._cndev.cndevGetMemoryUsageV2, handle).physicalMemoryTotal
                )
            except CndevCallError as failure:
                notes.append(f"{uuid}: memory unreadable ({failure})")
            cards[uuid] = handle
            devices.append(
                DeviceInfo(
                    id=uuid,
                    index=index,
                    name=self._maybe(str, self._cndev.cndevGetCardNameStringByDevId, handle)
                    or "MLU",
                    memory_mib=memory_mib or 0,
                    cores=None,
                    driver_version=self._maybe(
                        _driver_version, self._cndev.cndevGetVersionInfo, handle, VERSION
                    )
                    or "",
                    runtime_version="",
                    pci_bus_id=self._maybe(_bus_id, self._cndev.cndevGetPCIeInfoV2, handle) or "",
                    unhealthy=self._unhealthy(handle),
                )
            )
        self._detected.remember(cards)
        return Detection(MANUFACTURER, tuple(devices), tuple(notes))

    def _unhealthy(self, handle: int) -> bool:
        """Only a health flag the library states as "in problem" marks the card; unread is not."""
        state = self._maybe(same, self._cndev.cndevGetCardHealthState, handle, VERSION)
        return state is not None and int(state.health) == CNDEV_HEALTH_STATE_DEVICE_IN_PROBLEM

    # -- sampling ----------------------------------------------------------------------------

    def sample(self) -> list[CardSample]:
        """Whole-card figures; a figure the card refuses or reports negative is absent."""
        samples: list[CardSample] = []
        for uuid, handle in self._detected.cards().items():
            total, used = 0, None
            memory = self._maybe(same, self._cndev.cndevGetMemoryUsageV2, handle)
            if memory is not None:
                total = _figure(memory.physicalMemoryTotal) or 0
                used = _figure(memory.physicalMemoryUsed)
            samples.append(
                CardSample(
                    id=uuid,
                    memory_total_mib=total,
                    memory_used_mib=used,
                    cores_utilization_percent=self._maybe(
                        lambda u: _figure(u.averageCoreUtilization),
                        self._cndev.cndevGetDeviceUtilizationInfo,
                        handle,
                        VERSION,
                    ),
                    temperature_celsius=self._maybe(
                        lambda t: int(t.chip), self._cndev.cndevGetTemperatureInfo, handle, VERSION
                    ),
                    power_watts=self._maybe(
                        _power_watts, self._cndev.cndevGetDevicePowerInfo, handle
                    ),
                    unhealthy=self._unhealthy(handle),
                )
            )
        return samples

    # -- processes ---------------------------------------------------------------------------

    def processes(self, device_ids: Sequence[str]) -> dict[str, DeviceProcesses]:
        """Memory from ``cndevGetProcessInfo`` (KiB → bytes), compute from ``ipuUtil``."""
        return per_device(device_ids, self._detected.cards(), self._device_processes)

    def _device_processes(self, device_id: str, handle: int) -> DeviceProcesses:
        memory: dict[int, int] | None = None
        memory_reason: QueryReason | None = None
        try:
            memory = {}
            for info in self._call(self._cndev.cndevGetProcessInfo, handle, VERSION):
                memory.setdefault(int(info.pid), int(info.physicalMemoryUsed) * KIB)
        except CndevCallError as failure:
            memory, memory_reason = None, failure.reason
        cores: dict[int, int] | None = None
        cores_reason: QueryReason | None = None
        try:
            cores = {}
            for util in self._call(self._cndev.cndevGetProcessUtilization, handle, VERSION):
                cores.setdefault(int(util.pid), int(util.ipuUtil))
        except CndevCallError as failure:
            cores, cores_reason = None, failure.reason
        pids = list(memory) if memory is not None else list(cores or {})
        rows = tuple(
            ProcessRow(
                pid=pid,
                memory_bytes=None if memory is None else memory[pid],
                # No row for a listed PID: it was idle in the library's sampling period.
                cores_percent=None if cores is None else cores.get(pid, 0),
            )
            for pid in pids
        )
        return DeviceProcesses(
            device_id, rows=rows, memory_reason=memory_reason, cores_reason=cores_reason
        )

    # -- partitions --------------------------------------------------------------------------

    def partitions(self, partition_ids: Sequence[str]) -> dict[str, PartitionSample]:
        """MIM and sMLU instances are not read by this backend: every id is unsupported."""
        return unsupported_partitions(partition_ids)

    def close(self) -> None:
        """Release CNDev; errors here change nothing for the caller."""
        with contextlib.suppress(CndevCallError):
            self._call(self._cndev.cndevRelease)


def _figure(value: int) -> int | None:
    """A count the library reports signed; a negative one is a sentinel, not a measurement."""
    number = int(value)
    return None if number < 0 else number


def _driver_version(info: cndevVersionInfo_t) -> str:
    return f"{info.driverMajorVersion}.{info.driverMinorVersion}.{info.driverBuildVersion}"


def _bus_id(info: cndevPCIeInfoV2_t) -> str:
    return normalize_bus_id(f"{info.domain:04x}:{info.bus:02x}:{info.device:02x}.{info.function:x}")


def _power_watts(info: cndevDevicePowerInfo_t) -> float | None:
    watts = _figure(info.usage)
    return None if watts is None else float(watts)
