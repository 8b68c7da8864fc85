"""What NVML and the libraries copied from it (T-Head's HGML, Iluvatar's IXML) share.

These libraries answer NVML's calls under their own prefix (``nvmlDeviceGetMemoryInfo``,
``hgmlDeviceGetMemoryInfo``), in NVML's units (memory in bytes, power in mW, converted here once)
and with NVML's return codes. One base reads them all; what a vendor does differently is stated
once, in its :class:`NvmlDialect` or :class:`MigDialect` and in the hooks it overrides, never
tested for in the shared code.

The shared code reaches the library through a table of its bound functions, which each vendor
writes over its own surface, one property per call (:mod:`gpustack_vendors.surfaces.nvml` says
why).

:class:`NvmlShapedBackend` is the card part (handles, whole-card samples, shutdown);
:class:`NvmlMigBackend` adds what NVIDIA and T-Head both serve: MIG partitions read on their
**own** handles, never by folding the parent card's figures, and per-process SM samples.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from gpustack_core.reasons import QueryReason
from gpustack_core.units import bytes_to_mib
from gpustack_vendors import errors
from gpustack_vendors.answers import per_device
from gpustack_vendors.calling import BindingBackend, CallError
from gpustack_vendors.detected import Detected
from gpustack_vendors.model import (
    CardSample,
    Detection,
    DeviceInfo,
    DeviceProcesses,
    PartitionInfo,
    PartitionSample,
    ProcessRow,
)
from gpustack_vendors.nvidia.surface import (
    NvmlMemory,
    NvmlPciInfo,
    NvmlProcessInfo,
    NvmlProcessUtilizationSample,
)
from gpustack_vendors.pci import normalize_bus_id
from gpustack_vendors.surfaces.nvml import NvmlCards, NvmlMig

_H = TypeVar("_H")
"""The library's device handle: opaque (``object``) for NVML and HGML, IXML's ``ixmlDevice_t``."""


class NvmlShapedCallError(CallError):
    """A call failed; its code is NVML's number, so NVML's table maps it (a subclass names it)."""

    reasons = errors.NVML
    fatal_codes = errors.NVML_FATAL


@dataclass(frozen=True, slots=True)
class NvmlDialect:
    """How one NVML-shaped library spells what every one of them answers."""

    temperature_gpu: int
    """The library's ``NVML_TEMPERATURE_GPU``."""


@dataclass(frozen=True, slots=True)
class MigDialect(NvmlDialect):
    """What a library serving MIG partitions and per-process samples adds to its dialect."""

    not_found: int
    """The library's ``NVML_ERROR_NOT_FOUND``: an empty MIG slot, or no new process sample."""
    mig_enabled: int
    """The current MIG mode that means partitions are on."""
    bus_id: Callable[[NvmlPciInfo], str]
    """The bus id text of the library's PCI info answer."""
    process_memory: Callable[[NvmlProcessInfo], int | None]
    """A running process's memory in bytes; ``None`` where the library cannot size it."""


class NvmlShapedBackend(BindingBackend, Generic[_H]):
    """Card handles, whole-card samples and shutdown over an NVML-shaped binding it is handed.

    A subclass hands over its library's :class:`NvmlCards`, calls the library's own init and
    states its :class:`NvmlDialect`; it overrides :meth:`_memory` where the library reads memory
    another way and :meth:`_health_bits` where it states card health beyond NVML's fatal codes.
    """

    manufacturer: str

    def __init__(self, calls: NvmlCards[_H], dialect: NvmlDialect) -> None:
        self._card_calls = calls
        self._dialect = dialect
        self._detected: Detected[_H, tuple[str, _H]] = Detected(self.detect)

    # -- plumbing -----------------------------------------------------------------------------

    def _memory(self, uuid: str, handle: _H) -> NvmlMemory:
        """The card's memory answer (``total``, ``used`` in bytes)."""
        return self._call(self._card_calls.device_get_memory_info, handle)

    def _health_bits(self, handle: _H) -> bool:
        """Whether the library states the card unhealthy beyond a fatal code: NVML does not."""
        return False

    def detect(self) -> Detection:
        """Enumerate the cards and remember their handles (each library its own way)."""
        raise NotImplementedError

    # -- sampling ----------------------------------------------------------------------------

    def sample(self) -> list[CardSample]:
        """Whole-card figures; a figure the card refuses is absent, a lost card is unhealthy."""
        cards, _ = self._detected.both()
        samples: list[CardSample] = []
        for uuid, handle in cards.items():
            unhealthy = False
            total, used = 0, None
            try:
                memory = self._memory(uuid, handle)
                total, used = bytes_to_mib(int(memory.total)), bytes_to_mib(int(memory.used))
            except self.call_error as failure:
                unhealthy = failure.fatal
            samples.append(
                CardSample(
                    id=uuid,
                    memory_total_mib=total,
                    memory_used_mib=used,
                    cores_utilization_percent=self._maybe(
                        lambda u: int(u.gpu), self._card_calls.device_get_utilization_rates, handle
                    ),
                    temperature_celsius=self._maybe(
                        int,
                        self._card_calls.device_get_temperature,
                        handle,
                        self._dialect.temperature_gpu,
                    ),
                    power_watts=self._maybe(
                        lambda mw: int(mw) / 1000, self._card_calls.device_get_power_usage, handle
                    ),
                    unhealthy=unhealthy or self._health_bits(handle),
                )
            )
        return samples

    def close(self) -> None:
        """Shut the library down; errors here change nothing for the caller."""
        with contextlib.suppress(self.call_error):
            self._call(self._card_calls.shutdown)


class NvmlMigBackend(NvmlShapedBackend[_H]):
    """NVML's whole surface: cards, MIG partitions on their own handles, process SM samples.

    A subclass overrides :meth:`_utilization` where its library reads process samples another
    way, and :meth:`_mig_identity` where it asks a partition's UUID and name the other way round.
    """

    _dialect: MigDialect

    def __init__(self, nvml: NvmlMig[_H], dialect: MigDialect) -> None:
        super().__init__(nvml, dialect)
        self._nvml = nvml

    # -- detection ---------------------------------------------------------------------------

    def detect(self) -> Detection:
        """Enumerate cards and their MIG partitions; remember their handles for sampling."""
        dialect = self._dialect
        nvml = self._nvml
        driver = self._maybe(str, nvml.system_get_driver_version) or ""
        runtime = self._maybe(cuda_style_version, nvml.system_get_runtime_version) or ""
        devices: list[DeviceInfo] = []
        notes: list[str] = []
        cards: dict[str, _H] = {}
        partitions: dict[str, tuple[str, _H]] = {}
        for index in range(int(self._call(nvml.device_get_count))):
            handle = self._call(nvml.device_get_handle_by_index, index)
            uuid = str(self._call(nvml.device_get_uuid, handle))
            cards[uuid] = handle
            unhealthy = False
            try:
                memory_mib = bytes_to_mib(int(self._memory(uuid, handle).total))
            except self.call_error as failure:
                memory_mib, unhealthy = 0, failure.fatal
                notes.append(f"{uuid}: memory unreadable ({failure})")
            found = self._detect_partitions(uuid, handle, notes)
            partitions.update({p.id: (uuid, mig) for p, mig in found})
            devices.append(
                DeviceInfo(
                    id=uuid,
                    index=index,
                    name=str(self._call(nvml.device_get_name, handle)),
                    memory_mib=memory_mib,
                    cores=self._maybe(int, nvml.device_get_num_gpu_cores, handle),
                    driver_version=driver,
                    runtime_version=runtime,
                    pci_bus_id=normalize_bus_id(
                        self._maybe(dialect.bus_id, nvml.device_get_pci_info, handle) or ""
                    ),
                    unhealthy=unhealthy,
                    partitions=tuple(p for p, _ in found),
                    compute_capability=self._compute_capability(handle),
                )
            )
        self._detected.remember(cards, partitions)
        return Detection(self.manufacturer, tuple(devices), tuple(notes))

    def _compute_capability(self, handle: _H) -> str | None:
        """``8.6`` from the library's ``(8, 6)``; absent where it is not stated or not read."""
        fn = self._nvml.device_get_compute_capability
        if fn is None:
            return None
        return self._maybe(lambda cc: f"{int(cc[0])}.{int(cc[1])}", fn, handle)

    def _detect_partitions(
        self, uuid: str, handle: _H, notes: list[str]
    ) -> list[tuple[PartitionInfo, _H]]:
        nvml = self._nvml
        mode = self._maybe(list, nvml.device_get_mig_mode, handle)
        if not mode or mode[0] != self._dialect.mig_enabled:
            return []
        found: list[tuple[PartitionInfo, _H]] = []
        for slot in range(int(self._call(nvml.device_get_max_mig_device_count, handle))):
            try:
                mig = self._call(nvml.device_get_mig_device_handle_by_index, handle, slot)
            except self.call_error as failure:
                if failure.code != self._dialect.not_found:  # an empty slot is normal
                    notes.append(f"{uuid}: MIG slot {slot} unreadable ({failure})")
                continue
            mig_uuid, name = self._mig_identity(mig)
            found.append(
                (
                    PartitionInfo(
                        id=mig_uuid,
                        parent_id=uuid,
                        slot=slot,
                        profile=mig_profile(name),
                        memory_mib=bytes_to_mib(
                            int(self._call(nvml.device_get_memory_info, mig).total)
                        ),
                    ),
                    mig,
                )
            )
        return found

    def _mig_identity(self, mig: _H) -> tuple[str, str]:
        """A partition's UUID and name, read on its own handle (the name first)."""
        name = str(self._call(self._nvml.device_get_name, mig))
        return str(self._call(self._nvml.device_get_uuid, mig)), name

    # -- processes ---------------------------------------------------------------------------

    def processes(self, device_ids: Sequence[str]) -> dict[str, DeviceProcesses]:
        """Compute processes with their memory, and the newest SM sample per PID.

        An idle card has no utilization sample since ``lastSeenTimeStamp`` and the library
        answers NOT_FOUND: its listed processes then read a measured 0 %, not an absence.
        """
        cards, _ = self._detected.both()
        return per_device(device_ids, cards, self._device_processes)

    def _device_processes(self, device_id: str, handle: _H) -> DeviceProcesses:
        try:
            listed = self._call(self._nvml.device_get_compute_running_processes, handle)
        except self.call_error as failure:
            return DeviceProcesses.unread(device_id, failure.reason)
        cores: dict[int, int] | None
        cores_reason: QueryReason | None = None
        try:
            cores = newest_sm_util(self._utilization(handle))
        except self.call_error as failure:
            if failure.code == self._dialect.not_found:
                cores = {}  # no new sample: every listed process was idle
            else:
                cores, cores_reason = None, failure.reason
        rows = tuple(
            ProcessRow(
                pid=int(proc.pid),
                memory_bytes=self._dialect.process_memory(proc),
                cores_percent=None if cores is None else cores.get(int(proc.pid), 0),
            )
            for proc in listed
        )
        return DeviceProcesses(device_id, rows=rows, cores_reason=cores_reason)

    def _utilization(self, handle: _H) -> Sequence[NvmlProcessUtilizationSample]:
        """The process samples since the last one read (``lastSeenTimeStamp`` 0: all of them)."""
        return self._call(self._nvml.device_get_process_utilization, handle, 0)

    # -- partitions --------------------------------------------------------------------------

    def partitions(self, partition_ids: Sequence[str]) -> dict[str, PartitionSample]:
        """Memory on each partition's own handle; no call measures per-partition compute."""
        _, partitions = self._detected.both()
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
                memory = self._call(self._nvml.device_get_memory_info, handle)
            except self.call_error as failure:
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


def cuda_style_version(value: int) -> str:
    """A version encoded as CUDA's: 12.4 is 12040."""
    number = int(value)
    return f"{number // 1000}.{number % 1000 // 10}"


def mig_profile(name: str) -> str:
    """``NVIDIA H100 80GB HBM3 MIG 1g.10gb`` → ``1g.10gb``; no ``MIG`` marker, no profile."""
    _, marker, profile = name.rpartition("MIG ")
    return profile.strip() if marker else ""


def newest_sm_util(samples: Sequence[NvmlProcessUtilizationSample]) -> dict[int, int]:
    """Several samples per PID are possible; only the newest is current."""
    newest: dict[int, tuple[int, int]] = {}
    for sample in samples:
        pid, stamp = int(sample.pid), int(sample.timeStamp)
        if pid not in newest or stamp > newest[pid][0]:
            newest[pid] = (stamp, int(sample.smUtil))
    return {pid: util for pid, (_, util) in newest.items()}


def sized_or_none(used: int | None, not_available: int) -> int | None:
    """A process's memory in bytes, ``None`` where the library answers its not-available value.

    ``used`` is typed as :class:`~gpustack_vendors.nvidia.surface.NvmlProcessInfo` states it
    (pynvml already answers ``None``); the clones' raw structs always hold a number.
    """
    return None if used is None or int(used) == not_available else int(used)
