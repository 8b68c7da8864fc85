"""T-Head PPU backend over our HGML binding (``gpustack_vendors.bindings.hgml``, or its replay).

HGML is an NVML clone, so this reads as the NVIDIA backend does: memory in bytes and power in
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

import contextlib
import threading
from collections.abc import Sequence
from typing import Any

from gpustack_core.reasons import QueryReason
from gpustack_core.units import bytes_to_mib
from gpustack_vendors import errors
from gpustack_vendors.bindings import hgml as h
from gpustack_vendors.bindings.hgml import HGMLError
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

MANUFACTURER = "thead"

HGML_REASONS = errors.NVML
"""HGML's return codes are NVML's numbers, so NVML's table maps them."""

_VERSIONED_REFUSED = frozenset({h.HGML_ERROR_NOT_SUPPORTED, h.HGML_ERROR_FUNCTION_NOT_FOUND})
"""Answers of the versioned process-utilization call that mean "ask the plain one"."""


class HgmlCallError(CallError):
    """A call failed; carries the numeric code and the reason it maps to."""

    library = "HGML"
    reasons = HGML_REASONS
    fatal_codes = errors.NVML_FATAL

    @staticmethod
    def detail(code: int) -> str:
        """The binding's name for the code."""
        return f" ({h.status_name(code)})"


class TheadBackend(BindingBackend):
    """Answers the Device Manager's questions through an HGML binding it is handed."""

    manufacturer = MANUFACTURER
    call_error = HgmlCallError
    binding_error = HGMLError

    def __init__(self, hgml: Any) -> None:
        self._hgml = hgml
        self._lock = threading.Lock()
        self._cards: dict[str, Any] = {}
        self._partitions: dict[str, tuple[str, Any]] = {}
        self._call("hgmlInit")

    # -- plumbing -----------------------------------------------------------------------------

    def _binding(self) -> Any:
        return self._hgml

    # -- detection ---------------------------------------------------------------------------

    def detect(self) -> Detection:
        """Enumerate cards and their MIG partitions; remember their handles for sampling."""
        driver = self._maybe("hgmlSystemGetDriverVersion", convert=str) or ""
        hggc = self._maybe("hgmlSystemGetHggcDriverVersion", convert=_hggc_version) or ""
        devices: list[DeviceInfo] = []
        notes: list[str] = []
        cards: dict[str, Any] = {}
        partitions: dict[str, tuple[str, Any]] = {}
        for index in range(int(self._call("hgmlDeviceGetCount"))):
            handle = self._call("hgmlDeviceGetHandleByIndex", index)
            uuid = str(self._call("hgmlDeviceGetUUID", handle))
            cards[uuid] = handle
            unhealthy = False
            try:
                memory_mib = bytes_to_mib(int(self._call("hgmlDeviceGetMemoryInfo", handle).total))
            except HgmlCallError as failure:
                memory_mib, unhealthy = 0, failure.fatal
                notes.append(f"{uuid}: memory unreadable ({failure})")
            found = self._detect_partitions(uuid, handle, notes)
            partitions.update({p.id: (uuid, mig) for p, mig in found})
            devices.append(
                DeviceInfo(
                    id=uuid,
                    index=index,
                    name=str(self._call("hgmlDeviceGetName", handle)),
                    memory_mib=memory_mib,
                    cores=self._maybe("hgmlDeviceGetNumGpuCores", handle, convert=int),
                    driver_version=driver,
                    runtime_version=hggc,
                    pci_bus_id=normalize_bus_id(
                        self._maybe("hgmlDeviceGetPciInfo", handle, convert=h.bus_id) or ""
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
        mode = self._maybe("hgmlDeviceGetMigMode", handle, convert=list)
        if not mode or mode[0] != h.HGML_DEVICE_MIG_ENABLE:
            return []
        found: list[tuple[PartitionInfo, Any]] = []
        for slot in range(int(self._call("hgmlDeviceGetMaxMigDeviceCount", handle))):
            try:
                mig = self._call("hgmlDeviceGetMigDeviceHandleByIndex", handle, slot)
            except HgmlCallError as failure:
                if failure.code != h.HGML_ERROR_NOT_FOUND:  # an empty slot is normal
                    notes.append(f"{uuid}: MIG slot {slot} unreadable ({failure})")
                continue
            found.append(
                (
                    PartitionInfo(
                        id=str(self._call("hgmlDeviceGetUUID", mig)),
                        parent_id=uuid,
                        slot=slot,
                        profile=_mig_profile(str(self._call("hgmlDeviceGetName", mig))),
                        memory_mib=bytes_to_mib(
                            int(self._call("hgmlDeviceGetMemoryInfo", mig).total)
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
                memory = self._call("hgmlDeviceGetMemoryInfo", handle)
                total, used = bytes_to_mib(int(memory.total)), bytes_to_mib(int(memory.used))
            except HgmlCallError as failure:
                unhealthy = failure.fatal
            samples.append(
                CardSample(
                    id=uuid,
                    memory_total_mib=total,
                    memory_used_mib=used,
                    cores_utilization_percent=self._maybe(
                        "hgmlDeviceGetUtilizationRates", handle, convert=lambda u: int(u.gpu)
                    ),
                    temperature_celsius=self._maybe(
                        "hgmlDeviceGetTemperature", handle, h.HGML_TEMPERATURE_GPU, convert=int
                    ),
                    power_watts=self._maybe(
                        "hgmlDeviceGetPowerUsage", handle, convert=lambda mw: int(mw) / 1000
                    ),
                    unhealthy=unhealthy,
                )
            )
        return samples

    def processes(self, device_ids: Sequence[str]) -> dict[str, DeviceProcesses]:
        """Compute processes with their memory, and the newest SM sample per PID."""
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
            listed = self._call("hgmlDeviceGetComputeRunningProcesses", handle)
        except HgmlCallError as failure:
            return DeviceProcesses.unread(device_id, failure.reason)
        cores: dict[int, int] | None
        cores_reason: QueryReason | None = None
        try:
            cores = _newest_sm_util(self._utilization(handle))
        except HgmlCallError as failure:
            if failure.code == h.HGML_ERROR_NOT_FOUND:
                cores = {}  # no new sample: every listed process was idle
            else:
                cores, cores_reason = None, failure.reason
        rows = tuple(
            ProcessRow(
                pid=int(proc.pid),
                memory_bytes=(
                    None
                    if int(proc.usedGpuMemory) == h.HGML_VALUE_NOT_AVAILABLE_ULONGLONG
                    else int(proc.usedGpuMemory)
                ),
                cores_percent=None if cores is None else cores.get(int(proc.pid), 0),
            )
            for proc in listed
        )
        return DeviceProcesses(device_id, rows=rows, cores_reason=cores_reason)

    def _utilization(self, handle: Any) -> Sequence[Any]:
        """The versioned call, or the plain one when the versioned entry point refuses."""
        try:
            return list(self._call("hgmlDeviceGetProcessesUtilizationInfo", handle, 0))
        except HgmlCallError as failure:
            if failure.code not in _VERSIONED_REFUSED:
                raise
        return list(self._call("hgmlDeviceGetProcessUtilization", handle, 0))

    def partitions(self, partition_ids: Sequence[str]) -> dict[str, PartitionSample]:
        """Memory on each partition's own handle; HGML measures no per-partition compute."""
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
                memory = self._call("hgmlDeviceGetMemoryInfo", handle)
            except HgmlCallError as failure:
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
        """Shut HGML down; errors here change nothing for the caller."""
        with contextlib.suppress(HgmlCallError):
            self._call("hgmlShutdown")


def _hggc_version(value: Any) -> str:
    """HGGC's version is encoded as CUDA's: 12.3 is 12030."""
    number = int(value)
    return f"{number // 1000}.{number % 1000 // 10}"


def _mig_profile(name: str) -> str:
    """``PPU-ZW810E MIG 2g.48gb`` → ``2g.48gb``, as NVML names MIG devices."""
    _, marker, profile = name.rpartition("MIG ")
    return profile.strip() if marker else ""


def _newest_sm_util(samples: Sequence[Any]) -> dict[int, int]:
    """Several samples per PID are possible; only the newest is current."""
    newest: dict[int, tuple[int, int]] = {}
    for sample in samples:
        pid, stamp = int(sample.pid), int(sample.timeStamp)
        if pid not in newest or stamp > newest[pid][0]:
            newest[pid] = (stamp, int(sample.smUtil))
    return {pid: util for pid, (_, util) in newest.items()}


class TheadUnavailableError(RuntimeError):
    """HGML cannot be loaded or initialised on this machine."""


def open_thead_backend() -> TheadBackend:
    """Load HGML now (``$HGML_LIB``, then the PPU SDK's paths) and hand it to the backend.

    A missing library is one line naming ``libhgml.so`` and every path tried.
    """
    try:
        library = h.load_library()
    except OSError as exc:
        raise TheadUnavailableError(str(exc)) from exc
    try:
        return TheadBackend(library)
    except HgmlCallError as exc:
        raise TheadUnavailableError(f"HGML did not initialise: {exc}") from exc
