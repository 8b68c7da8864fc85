"""NVIDIA backend over the NVML binding (``pynvml`` from nvidia-ml-py, or its replay).

Units: NVML reports memory in bytes and power in mW; both are converted here, once. MIG
partitions are read on their **own** handles (identity, capacity, usage), never by folding the
parent card's figures.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from typing import Any

from gpustack_core.reasons import QueryReason
from gpustack_core.units import bytes_to_mib
from gpustack_vendors import errors
from gpustack_vendors.calling import BindingBackend, CallError
from gpustack_vendors.model import (
    CardSample,
    Detection,
    DeviceInfo,
    DeviceProcesses,
    PartitionInfo,
    PartitionSample,
    ProcessRow,
)
from gpustack_vendors.pci import normalize_bus_id

MANUFACTURER = "nvidia"
MIG_ENABLED = 1


class NvmlCallError(CallError):
    """A call failed; carries the numeric code and the reason it maps to."""

    library = "NVML"
    reasons = errors.NVML
    fatal_codes = errors.NVML_FATAL


class NvidiaBackend(BindingBackend):
    """Answers the Device Manager's questions through an NVML binding it is handed."""

    manufacturer = MANUFACTURER
    call_error = NvmlCallError

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._lock = threading.Lock()
        self._cards: dict[str, Any] = {}
        self._partitions: dict[str, tuple[str, Any]] = {}
        self._call("nvmlInit")

    # -- plumbing -----------------------------------------------------------------------------

    def _binding(self) -> Any:
        return self._nvml

    def _failure(self) -> type[Exception]:
        failure: type[Exception] = self._nvml.NVMLError
        return failure

    # -- detection ---------------------------------------------------------------------------

    def detect(self) -> Detection:
        """Enumerate cards and their MIG partitions; remember their handles for sampling."""
        driver = self._maybe("nvmlSystemGetDriverVersion", convert=str) or ""
        cuda = self._maybe("nvmlSystemGetCudaDriverVersion", convert=_cuda_version) or ""
        devices: list[DeviceInfo] = []
        notes: list[str] = []
        cards: dict[str, Any] = {}
        partitions: dict[str, tuple[str, Any]] = {}
        for index in range(int(self._call("nvmlDeviceGetCount"))):
            handle = self._call("nvmlDeviceGetHandleByIndex", index)
            uuid = str(self._call("nvmlDeviceGetUUID", handle))
            cards[uuid] = handle
            unhealthy = False
            try:
                memory_mib = bytes_to_mib(int(self._call("nvmlDeviceGetMemoryInfo", handle).total))
            except NvmlCallError as failure:
                memory_mib, unhealthy = 0, failure.fatal
                notes.append(f"{uuid}: memory unreadable ({failure})")
            found = self._detect_partitions(uuid, handle, notes)
            partitions.update({p.id: (uuid, h) for p, h in found})
            devices.append(
                DeviceInfo(
                    id=uuid,
                    index=index,
                    name=str(self._call("nvmlDeviceGetName", handle)),
                    memory_mib=memory_mib,
                    cores=self._maybe("nvmlDeviceGetNumGpuCores", handle, convert=int),
                    driver_version=driver,
                    runtime_version=cuda,
                    pci_bus_id=normalize_bus_id(
                        self._maybe("nvmlDeviceGetPciInfo", handle, convert=_bus_id) or ""
                    ),
                    unhealthy=unhealthy,
                    partitions=tuple(p for p, _ in found),
                )
            )
        with self._lock:
            self._cards, self._partitions = cards, partitions
        return Detection(MANUFACTURER, tuple(devices), tuple(notes))

    def _detect_partitions(
        self, uuid: str, handle: Any, notes: list[str]
    ) -> list[tuple[PartitionInfo, Any]]:
        mode = self._maybe("nvmlDeviceGetMigMode", handle, convert=list)
        if not mode or mode[0] != MIG_ENABLED:
            return []
        found: list[tuple[PartitionInfo, Any]] = []
        for slot in range(int(self._call("nvmlDeviceGetMaxMigDeviceCount", handle))):
            try:
                mig = self._call("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
            except NvmlCallError as failure:
                if failure.code != self._nvml.NVML_ERROR_NOT_FOUND:  # an empty slot is normal
                    notes.append(f"{uuid}: MIG slot {slot} unreadable ({failure})")
                continue
            name = str(self._call("nvmlDeviceGetName", mig))
            found.append(
                (
                    PartitionInfo(
                        id=str(self._call("nvmlDeviceGetUUID", mig)),
                        parent_id=uuid,
                        slot=slot,
                        profile=_mig_profile(name),
                        memory_mib=bytes_to_mib(
                            int(self._call("nvmlDeviceGetMemoryInfo", mig).total)
                        ),
                    ),
                    mig,
                )
            )
        return found

    def _handles(self) -> tuple[dict[str, Any], dict[str, tuple[str, Any]]]:
        with self._lock:
            if self._cards:
                return self._cards, self._partitions
        self.detect()
        with self._lock:
            return self._cards, self._partitions

    # -- sampling ----------------------------------------------------------------------------

    def sample(self) -> list[CardSample]:
        """Whole-card figures; a figure the card refuses is absent, a lost card is unhealthy."""
        cards, _ = self._handles()
        samples: list[CardSample] = []
        for uuid, handle in cards.items():
            unhealthy = False
            total, used = 0, None
            try:
                memory = self._call("nvmlDeviceGetMemoryInfo", handle)
                total, used = bytes_to_mib(int(memory.total)), bytes_to_mib(int(memory.used))
            except NvmlCallError as failure:
                unhealthy = failure.fatal
            samples.append(
                CardSample(
                    id=uuid,
                    memory_total_mib=total,
                    memory_used_mib=used,
                    cores_utilization_percent=self._maybe(
                        "nvmlDeviceGetUtilizationRates", handle, convert=lambda u: int(u.gpu)
                    ),
                    temperature_celsius=self._maybe(
                        "nvmlDeviceGetTemperature",
                        handle,
                        self._nvml.NVML_TEMPERATURE_GPU,
                        convert=int,
                    ),
                    power_watts=self._maybe(
                        "nvmlDeviceGetPowerUsage", handle, convert=lambda mw: int(mw) / 1000
                    ),
                    unhealthy=unhealthy,
                )
            )
        return samples

    def processes(self, device_ids: Sequence[str]) -> dict[str, DeviceProcesses]:
        """Compute processes with their memory, and the newest SM sample per PID.

        An idle card has no utilization sample since ``lastSeenTimeStamp`` and NVML answers
        NOT_FOUND: its listed processes then read a measured 0 %, not an absence.
        """
        cards, _ = self._handles()
        result: dict[str, DeviceProcesses] = {}
        for device_id in device_ids:
            handle = cards.get(device_id)
            if handle is None:
                result[device_id] = DeviceProcesses.unread(
                    device_id, QueryReason.TRANSIENT_DRIVER_ERROR
                )
                continue
            result[device_id] = self._device_processes(device_id, handle)
        return result

    def _device_processes(self, device_id: str, handle: Any) -> DeviceProcesses:
        try:
            listed = self._call("nvmlDeviceGetComputeRunningProcesses", handle)
        except NvmlCallError as failure:
            return DeviceProcesses.unread(device_id, failure.reason)
        cores: dict[int, int] | None
        cores_reason: QueryReason | None = None
        try:
            cores = _newest_sm_util(self._call("nvmlDeviceGetProcessUtilization", handle, 0))
        except NvmlCallError as failure:
            if failure.code == self._nvml.NVML_ERROR_NOT_FOUND:
                cores = {}  # no new sample: every listed process was idle
            else:
                cores, cores_reason = None, failure.reason
        rows = tuple(
            ProcessRow(
                pid=int(proc.pid),
                memory_bytes=None if proc.usedGpuMemory is None else int(proc.usedGpuMemory),
                cores_percent=None if cores is None else cores.get(int(proc.pid), 0),
            )
            for proc in listed
        )
        return DeviceProcesses(device_id, rows=rows, cores_reason=cores_reason)

    def partitions(self, partition_ids: Sequence[str]) -> dict[str, PartitionSample]:
        """Memory on each partition's own handle; NVML measures no per-partition compute."""
        _, partitions = self._handles()
        result: dict[str, PartitionSample] = {}
        for partition_id in partition_ids:
            found = partitions.get(partition_id)
            if found is None:
                result[partition_id] = PartitionSample.unread(
                    partition_id, QueryReason.TRANSIENT_DRIVER_ERROR, QueryReason.UNSUPPORTED
                )
                continue
            parent, handle = found
            try:
                memory = self._call("nvmlDeviceGetMemoryInfo", handle)
            except NvmlCallError as failure:
                result[partition_id] = PartitionSample.unread(
                    partition_id, failure.reason, QueryReason.UNSUPPORTED, parent
                )
                continue
            result[partition_id] = PartitionSample(
                partition_id,
                parent,
                memory_total_mib=bytes_to_mib(int(memory.total)),
                memory_used_mib=bytes_to_mib(int(memory.used)),
                cores_reason=QueryReason.UNSUPPORTED,
            )
        return result

    def close(self) -> None:
        """Shut NVML down; errors here change nothing for the caller."""
        with contextlib.suppress(NvmlCallError):
            self._call("nvmlShutdown")


def _cuda_version(value: Any) -> str:
    """NVML encodes CUDA 12.4 as 12040."""
    number = int(value)
    return f"{number // 1000}.{number % 1000 // 10}"


def _bus_id(info: Any) -> str:
    bus_id = info.busId
    return bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)


def _mig_profile(name: str) -> str:
    """``NVIDIA H100 80GB HBM3 MIG 1g.10gb`` → ``1g.10gb``."""
    _, marker, profile = name.rpartition("MIG ")
    return profile.strip() if marker else ""


def _newest_sm_util(samples: Sequence[Any]) -> dict[int, int]:
    """NVML may return several samples per PID; only the newest is current."""
    newest: dict[int, tuple[int, int]] = {}
    for sample in samples:
        pid, stamp = int(sample.pid), int(sample.timeStamp)
        if pid not in newest or stamp > newest[pid][0]:
            newest[pid] = (stamp, int(sample.smUtil))
    return {pid: util for pid, (_, util) in newest.items()}
