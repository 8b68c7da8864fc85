"""Hygon DCU backend: Hygon's ROCm SMI fork for cards and processes, ``libhydmi_mig`` for MIG.

**Identity.** A card's id is ``GPU-<unique id in hex>``, the UUID ``rocminfo`` prints for the
agent and the key the reference operator resolves a card by; ``index`` is ROCm SMI's index,
the ordinal ``hy-smi -d`` uses. A partition's id is ``MIG-<uuid>``, the value a container
selects it with (``DMI_MIG_VISIBLE_DEVICE``), read from the driver's instance registry because
the library has no UUID getter; its ``slot`` is its GPU instance's first slice (the placement
start), unique on its card, since GI ids are driver-assigned and say nothing about placement.

**Units**, converted here once: ROCm SMI memory is bytes (card figures rounded up to MiB,
process rows kept in bytes, see ``model.py``), temperature millidegrees, power microwatts;
``libhydmi_mig`` memory is bytes on a handle, MiB in a profile.

**Compute, two entry points.** A process's compute is ROCm SMI's ``cu_occupancy``: the share of
the card's CUs its waves occupy, which a driver may not measure at all. Then every process on
the card answers the sentinel ``CU_OCCUPANCY_INVALID``; compute is absent for the whole card
with reason ``unsupported`` and memory is unaffected (never a zero, which would read as idle).
A partition's compute is read on **the partition's own handle**
(``nvmlDeviceGetUtilizationRates``) and does not go through ``cu_occupancy`` at all: a
partition running a kernel was measured at 85 % while its idle siblings on the same card read
0. That is why a Hygon partition reports compute where NVIDIA's does not.

**MIG is node-wide.** One ``nvmlGetSystemMigMode`` per detection decides for every card; with
it on, each card's partitions are found by sweeping the node-global MIG index space and
attributed by their GPU instance's parent handle. A node without ``libhydmi_mig`` (older DTK)
is served without partitions, and detection says so in a note.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from ctypes import c_void_p
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

from gpustack_core.reasons import QueryReason
from gpustack_core.units import bytes_to_mib
from gpustack_vendors import errors
from gpustack_vendors.bindings.rocm_smi import (
    pci_address,
)
from gpustack_vendors.detected import Detected
from gpustack_vendors.hygon.hydmi import (
    CONF_NAME,
    DMI_DEVICE_MIG_ENABLE,
    DMI_ERROR_INVALID_ARGUMENT,
    DMI_ERROR_NOT_FOUND,
    DMI_ERROR_NOT_SUPPORTED,
    DMI_GPU_INSTANCE_PROFILE_COUNT,
    MIG_UUID_PREFIX,
    HyDmiError,
)
from gpustack_vendors.hygon.rocm_smi import (
    RSMI_MEM_TYPE_VRAM,
    RSMI_SW_COMP_DRIVER,
    RSMI_TEMP_CURRENT,
    RSMI_TEMP_TYPE_EDGE,
    RSMI_TEMP_TYPE_JUNCTION,
    RSMI_TEMP_TYPE_MEMORY,
)
from gpustack_vendors.hygon.surface import HyDmiSurface, HygonRocmSmiSurface
from gpustack_vendors.model import (
    CardSample,
    Detection,
    DeviceInfo,
    DeviceProcesses,
    PartitionInfo,
    PartitionSample,
)
from gpustack_vendors.pci import normalize_bus_id
from gpustack_vendors.rocm_common import (
    LibraryCallError,
    call_rocm_smi,
    device_rows,
    process_devices,
    quietly,
)

MANUFACTURER = "hygon"

TEMPERATURE_SENSORS = (RSMI_TEMP_TYPE_EDGE, RSMI_TEMP_TYPE_JUNCTION, RSMI_TEMP_TYPE_MEMORY)
"""Tried in order, the first that answers wins, as gpustack's wrapper reads a DCU."""

EMPTY_SLOT = frozenset({DMI_ERROR_NOT_FOUND, DMI_ERROR_NOT_SUPPORTED, DMI_ERROR_INVALID_ARGUMENT})
"""What the library answers for a MIG index that is not this card's, or a profile index a card
does not offer: routine gaps in a sweep, not faults."""

_PROFILE_PREFIX = re.compile(r"^MIG\s+")

_P = ParamSpec("_P")
_R = TypeVar("_R")


class HygonCallError(LibraryCallError):
    """A call into either library failed; carries the numeric code and its reason."""


@dataclass(frozen=True)
class _Card:
    index: int
    bus_id: str


@dataclass(frozen=True)
class _Partition:
    parent_id: str
    handle: c_void_p
    """The MIG device's own handle: its memory and compute are read on it."""


@dataclass(frozen=True)
class _Profile:
    name: str
    cu_count: int
    gi_count_max: int


class HygonBackend:
    """Answers the Device Manager's questions through the two bindings it is handed.

    ``dmi`` is ``None`` where ``libhydmi_mig`` could not be loaded; ``dmi_missing`` then says
    why, and detection repeats it as a note.
    """

    manufacturer = MANUFACTURER

    def __init__(
        self, rocm_smi: HygonRocmSmiSurface, dmi: HyDmiSurface | None, *, dmi_missing: str = ""
    ) -> None:
        self._rocm_smi = rocm_smi
        self._dmi = dmi
        self._dmi_missing = dmi_missing
        self._detected: Detected[_Card, _Partition] = Detected(self.detect)
        self._rocm(rocm_smi.rsmi_init, 0)

    # -- plumbing -----------------------------------------------------------------------------

    def _rocm(self, fn: Callable[_P, _R], /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """``fn(*args)`` on ROCm SMI; its failure becomes :class:`HygonCallError`."""
        return call_rocm_smi(HygonCallError, fn, *args, **kwargs)

    def _mig(self, fn: Callable[_P, _R], /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """``fn(*args)`` on ``libhydmi_mig``; its failure becomes :class:`HygonCallError`.

        Only reached with the library loaded (:meth:`_mig_state` stops a pass without it), so
        ``fn`` is always a bound function of ``self._dmi``.
        """
        try:
            return fn(*args, **kwargs)
        except HyDmiError as exc:
            # The library speaks NVML's return enum verbatim, so NVML's table reads it.
            raise HygonCallError("libhydmi_mig", fn.__name__, int(exc.value), errors.NVML) from exc

    # -- detection ---------------------------------------------------------------------------

    def detect(self) -> Detection:
        """Enumerate ROCm SMI's cards; with the node in MIG mode, each card's partitions."""
        notes: list[str] = []
        rocm_smi = self._rocm_smi
        driver = quietly(self._rocm, rocm_smi.rsmi_version_str_get, RSMI_SW_COMP_DRIVER)
        mig = self._mig_state(notes)
        devices: list[DeviceInfo] = []
        cards: dict[str, _Card] = {}
        partitions: dict[str, _Partition] = {}
        for index in range(int(self._rocm(rocm_smi.rsmi_num_monitor_devices))):
            try:
                card_id = f"GPU-{int(self._rocm(rocm_smi.rsmi_dev_unique_id_get, index)):x}"
                bus_id = normalize_bus_id(
                    pci_address(int(self._rocm(rocm_smi.rsmi_dev_pci_id_get, index)))
                )
            except HygonCallError as failure:
                notes.append(f"device {index}: no unique id or PCI address, so no id ({failure})")
                continue
            memory_mib = 0
            try:
                total = self._rocm(rocm_smi.rsmi_dev_memory_total_get, index, RSMI_MEM_TYPE_VRAM)
                memory_mib = bytes_to_mib(int(total))
            except HygonCallError as failure:
                notes.append(f"{card_id}: memory unreadable ({failure})")
            cores: int | None = None
            found: list[tuple[PartitionInfo, c_void_p]] = []
            if mig is not None:
                cores, found = self._detect_partitions(mig.dmi, card_id, bus_id, mig, notes)
            partitions.update({p.id: _Partition(card_id, handle) for p, handle in found})
            cards[card_id] = _Card(index, bus_id)
            devices.append(
                DeviceInfo(
                    id=card_id,
                    index=index,
                    name=str(quietly(self._rocm, rocm_smi.rsmi_dev_name_get, index) or ""),
                    memory_mib=memory_mib,
                    cores=cores,
                    driver_version=str(driver or ""),
                    runtime_version="",
                    pci_bus_id=bus_id,
                    unhealthy=False,
                    partitions=tuple(p for p, _ in found),
                )
            )
        self._detected.remember(cards, partitions)
        return Detection(MANUFACTURER, tuple(devices), tuple(notes))

    def _mig_state(self, notes: list[str]) -> _MigState | None:
        """The node's MIG mode, once per pass; ``None`` when off or unreadable."""
        dmi = self._dmi
        if dmi is None:
            notes.append(f"no partitions: libhydmi_mig not loaded ({self._dmi_missing})")
            return None
        try:
            current, _ = self._mig(dmi.nvmlGetSystemMigMode)
            if int(current) != DMI_DEVICE_MIG_ENABLE:
                return None
            count = int(self._mig(dmi.nvmlDeviceGetCount))
            registry = _parse_registry(self._mig(dmi.dmi_mig_registry))
        except HygonCallError as failure:
            notes.append(f"no partitions: MIG state unreadable ({failure})")
            return None
        return _MigState(dmi, count, registry)

    def _detect_partitions(
        self, dmi: HyDmiSurface, card_id: str, bus_id: str, mig: _MigState, notes: list[str]
    ) -> tuple[int | None, list[tuple[PartitionInfo, c_void_p]]]:
        """The card's CU count (from its profiles) and its partitions with their own handles."""
        try:
            card = self._mig(dmi.nvmlDeviceGetHandleByPciBusId, bus_id)
            dmi_index = int(self._mig(dmi.nvmlDeviceGetIndex, card))
            slots = int(self._mig(dmi.nvmlDeviceGetMaxMigDeviceCount, card))
        except HygonCallError as failure:
            notes.append(f"{card_id}: not reachable through libhydmi_mig ({failure})")
            return None, []
        profiles = self._profiles(dmi, card)
        cores = max((p.cu_count * p.gi_count_max for p in profiles.values()), default=None)
        found: list[tuple[PartitionInfo, c_void_p]] = []
        for index in range(slots * mig.cards):
            if len(found) >= slots:
                break
            try:
                handle = self._mig(dmi.nvmlDeviceGetMigDeviceHandleByIndex, card, index)
            except HygonCallError as failure:
                if failure.code not in EMPTY_SLOT:
                    notes.append(f"{card_id}: MIG index {index} unreadable ({failure})")
                continue
            partition = self._partition(dmi, card_id, card, dmi_index, handle, profiles, mig, notes)
            if partition is not None:
                found.append((partition, handle))
        return cores, found

    def _profiles(self, dmi: HyDmiSurface, card: c_void_p) -> dict[int, _Profile]:
        """The card's GPU-instance profiles by profile id; unsupported indices are gaps."""
        profiles: dict[int, _Profile] = {}
        for index in range(DMI_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = self._mig(dmi.nvmlDeviceGetGpuInstanceProfileInfo, card, index)
            except HygonCallError:
                continue
            name = info.name.decode(errors="replace") if isinstance(info.name, bytes) else ""
            profiles[int(info.id)] = _Profile(
                _PROFILE_PREFIX.sub("", name.strip()), int(info.cu_count), int(info.gi_count_max)
            )
        return profiles

    def _partition(
        self,
        dmi: HyDmiSurface,
        card_id: str,
        card: c_void_p,
        dmi_index: int,
        handle: c_void_p,
        profiles: Mapping[int, _Profile],
        mig: _MigState,
        notes: list[str],
    ) -> PartitionInfo | None:
        """One MIG device, named and sized on its own handle; ``None`` when it cannot be."""
        try:
            gpu_instance = int(self._mig(dmi.nvmlDeviceGetGpuInstanceId, handle))
            compute_instance = int(self._mig(dmi.nvmlDeviceGetComputeInstanceId, handle))
            info = self._mig(
                dmi.nvmlGpuInstanceGetInfo,
                self._mig(dmi.nvmlDeviceGetGpuInstanceById, card, gpu_instance),
            )
            if info.device != card.value:
                return None  # another card's instance: the index space is node-global
            total = int(self._mig(dmi.nvmlDeviceGetMemoryInfo, handle).total)
        except HygonCallError as failure:
            notes.append(f"{card_id}: a MIG device is unreadable ({failure})")
            return None
        uuid = mig.registry.get((dmi_index, gpu_instance, compute_instance))
        if uuid is None:
            notes.append(
                f"{card_id}: GI {gpu_instance} CI {compute_instance} has no "
                f"dev{dmi_index}gi{gpu_instance}ci{compute_instance}.conf, so no id"
            )
            return None
        profile = profiles.get(int(info.profile_id))
        return PartitionInfo(
            id=MIG_UUID_PREFIX + uuid,
            parent_id=card_id,
            slot=int(info.placement.start),
            profile=profile.name if profile else "",
            memory_mib=bytes_to_mib(total),
            cores=profile.cu_count if profile else None,
        )

    # -- sampling ----------------------------------------------------------------------------

    def sample(self) -> list[CardSample]:
        """Whole-card figures from ROCm SMI; a figure the card refuses is absent."""
        rocm_smi = self._rocm_smi
        cards, _ = self._detected.both()
        samples: list[CardSample] = []
        for card_id, card in cards.items():
            total = quietly(
                self._rocm, rocm_smi.rsmi_dev_memory_total_get, card.index, RSMI_MEM_TYPE_VRAM
            )
            used = quietly(
                self._rocm, rocm_smi.rsmi_dev_memory_usage_get, card.index, RSMI_MEM_TYPE_VRAM
            )
            busy = quietly(self._rocm, rocm_smi.rsmi_dev_busy_percent_get, card.index)
            power = quietly(self._rocm, rocm_smi.rsmi_dev_power_ave_get, card.index, 0)
            samples.append(
                CardSample(
                    id=card_id,
                    memory_total_mib=0 if total is None else bytes_to_mib(int(total)),
                    memory_used_mib=None if used is None else bytes_to_mib(int(used)),
                    cores_utilization_percent=None if busy is None else int(busy),
                    temperature_celsius=self._temperature(card.index),
                    power_watts=None if power is None else int(power) / 1_000_000,
                    unhealthy=False,
                )
            )
        return samples

    def _temperature(self, index: int) -> int | None:
        """The first sensor that answers, millidegrees to whole degrees."""
        for sensor in TEMPERATURE_SENSORS:
            value = quietly(
                self._rocm,
                self._rocm_smi.rsmi_dev_temp_metric_get,
                index,
                sensor,
                RSMI_TEMP_CURRENT,
            )
            if value is not None:
                return round(int(value) / 1000)
        return None

    # -- processes ---------------------------------------------------------------------------

    def processes(self, device_ids: Sequence[str]) -> dict[str, DeviceProcesses]:
        """ROCm SMI's rows for the requested cards, one node-wide process list per call.

        A card whose driver does not measure ``cu_occupancy`` answers the sentinel: compute is
        then absent for the whole card with reason ``unsupported``, memory unaffected.
        """
        cards, _ = self._detected.both()
        result: dict[str, DeviceProcesses] = {}
        wanted = [(d, cards.get(d)) for d in device_ids]
        listed: dict[int, tuple[int, ...]] | LibraryCallError | None = None
        for device_id, card in wanted:
            if card is None:
                result[device_id] = DeviceProcesses.unread(
                    device_id, QueryReason.TRANSIENT_DRIVER_ERROR
                )
                continue
            if listed is None:
                listed = process_devices(self._rocm, self._rocm_smi)
            if isinstance(listed, LibraryCallError):
                result[device_id] = DeviceProcesses.unread(device_id, listed.reason)
                continue
            rows = device_rows(self._rocm, self._rocm_smi, listed, card.index)
            result[device_id] = DeviceProcesses(
                device_id,
                rows=rows.rows,
                memory_reason=rows.memory_reason,
                cores_reason=rows.cores_reason,
            )
        return result

    # -- partitions --------------------------------------------------------------------------

    def partitions(self, partition_ids: Sequence[str]) -> dict[str, PartitionSample]:
        """Memory and compute of each partition, both read on the partition's own handle."""
        _, partitions = self._detected.both()
        dmi = self._dmi
        result: dict[str, PartitionSample] = {}
        for partition_id in partition_ids:
            found = partitions.get(partition_id)
            if found is None or dmi is None:
                # This library does serve partition compute, so its absence here is the same
                # transient gap as memory's, not a capability.
                result[partition_id] = PartitionSample.unread(
                    partition_id,
                    QueryReason.TRANSIENT_DRIVER_ERROR,
                    QueryReason.TRANSIENT_DRIVER_ERROR,
                )
                continue
            total = used = cores = None
            memory_reason = cores_reason = None
            try:
                memory = self._mig(dmi.nvmlDeviceGetMemoryInfo, found.handle)
                total, used = bytes_to_mib(int(memory.total)), bytes_to_mib(int(memory.used))
            except HygonCallError as failure:
                memory_reason = failure.reason
            try:
                cores = int(self._mig(dmi.nvmlDeviceGetUtilizationRates, found.handle).gpu)
            except HygonCallError as failure:
                cores_reason = failure.reason
            result[partition_id] = PartitionSample(
                partition_id,
                found.parent_id,
                memory_total_mib=total,
                memory_used_mib=used,
                cores_utilization_percent=cores,
                memory_reason=memory_reason,
                cores_reason=cores_reason,
            )
        return result

    def close(self) -> None:
        """Shut ROCm SMI down (``libhydmi_mig`` has no shutdown); errors change nothing."""
        quietly(self._rocm, self._rocm_smi.rsmi_shut_down)


@dataclass(frozen=True)
class _MigState:
    dmi: HyDmiSurface
    """The loaded library: a pass with MIG state has one, so its calls need no ``None`` check."""
    cards: int
    """``nvmlDeviceGetCount``: with each card's maximum, bounds the node-global index sweep."""
    registry: Mapping[tuple[int, int, int], str]
    """``(DMI index, GI id, CI id)`` → instance UUID, from ``/etc/dmi_mig_config/ci``."""


def _parse_registry(files: Mapping[str, str]) -> dict[tuple[int, int, int], str]:
    """Conf file names → the three numbers they encode; other names are not instances."""
    registry: dict[tuple[int, int, int], str] = {}
    for name, uuid in files.items():
        match = CONF_NAME.match(str(name))
        if match is None or not uuid:
            continue
        key = (int(match[1]), int(match[2]), int(match[3]))
        registry[key] = str(uuid).removeprefix(MIG_UUID_PREFIX)
    return registry
