"""Ascend backend over our DCMI binding (``gpustack_vendors.ascend.dcmi``, or its replay).

**Devices** are ``(card_id, device_id)`` pairs: an Atlas 300I Duo is one card holding two chips,
both at the card's one PCI address, so the bus id cannot name a device. A device's id is its die
id (``dcmi_get_device_die_v2``, VDIE, falling back to ``dcmi_get_device_die``): five words,
written ``%08X`` and joined by ``-``. ``index`` is the position in logic-id order, the ordinal
``npu-smi`` and ``ASCEND_VISIBLE_DEVICES`` use.

**Units**, converted here once:

- ``dcmi_get_device_hbm_info`` and ``dcmi_get_device_memory_info_v3`` are in MB, which DCMI uses
  as MiB (a 64 GB 910B2 reports 65536): taken as is. DDR parts (310P) answer ``NOT_SUPPORT`` to
  the HBM call and are read through ``_v3`` (used = size - available).
- ``dcmi_get_device_power_info`` is in 0.1 W; temperature is °C; utilization (AI core) is %.
- Per-process memory (``dcmi_get_device_resource_info``) is in **bytes** and stays bytes.

**What DCMI cannot tell.** No entry point reports a process's compute, so every process row's
``cores_percent`` is absent with reason ``unsupported`` — a capability, permanent. A vNPU is
``(card, device, vdev_id)`` with no handle of its own; its memory comes from the vNPU resource
query, and its compute is likewise ``unsupported``: the per-vNPU utilization field of that struct
is not a query anyone has found to answer (spec, "Manufacturer capabilities").
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpustack_core.reasons import QueryReason
from gpustack_vendors.ascend import dcmi as d
from gpustack_vendors.ascend.dcmi import DCMIError
from gpustack_vendors.ascend.surface import DcmiSurface
from gpustack_vendors.calling import BindingBackend, CallError, same
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

MANUFACTURER = "ascend"

U = QueryReason.UNSUPPORTED
P = QueryReason.PERMISSION
T = QueryReason.TRANSIENT_DRIVER_ERROR
X = QueryReason.TRUNCATED

DCMI_REASONS: Mapping[int, QueryReason] = {
    # Checked against the codes in ``gpustack_vendors.ascend.dcmi`` (dcmi_interface_api.h).
    d.DCMI_ERROR_NOT_SUPPORT: U,
    d.DCMI_ERROR_NOT_SUPPORT_IN_CONTAINER: U,
    d.DCMI_ERROR_FUNCTION_NOT_FOUND: U,  # this library lacks the entry point
    d.DCMI_ERROR_OPER_NOT_PERMITTED: P,
    d.DCMI_ERROR_TIME_OUT: T,
    d.DCMI_ERROR_NOT_REDAY: T,
    d.DCMI_ERROR_IS_UPGRADING: T,
    d.DCMI_ERROR_RESOURCE_OCCUPIED: T,
    d.DCMI_ERROR_LIST_TRUNCATED: X,  # more processes than the documented maximum
}

_FALL_BACK = frozenset(
    {
        d.DCMI_ERROR_NOT_SUPPORT,
        d.DCMI_ERROR_NOT_SUPPORT_IN_CONTAINER,
        d.DCMI_ERROR_FUNCTION_NOT_FOUND,
    }
)
"""Codes meaning "this entry point does not answer here": the next one in line is tried."""

_UNHEALTHY_FROM = 2
"""``dcmi_get_device_health``: 2 (major) and 3 (critical) alarms, or a device gone (0xFFFFFFFF)."""


class DcmiCallError(CallError):
    """A DCMI call failed; carries the numeric code and the reason it maps to."""

    library = "DCMI"
    reasons = DCMI_REASONS

    @staticmethod
    def detail(code: int) -> str:
        """The binding's name for the code."""
        return f" ({d.status_name(code)})"


@dataclass(frozen=True)
class _Device:
    card: int
    device: int


@dataclass(frozen=True)
class _Vnpu:
    parent: str
    card: int
    device: int
    vdev_id: int


class AscendBackend(BindingBackend):
    """Answers the Device Manager's questions through a DCMI binding it is handed."""

    manufacturer = MANUFACTURER
    call_error = DcmiCallError
    binding_error = DCMIError

    def __init__(self, dcmi: DcmiSurface) -> None:
        self._dcmi = dcmi
        self._lock = threading.Lock()
        self._devices: dict[str, _Device] = {}
        self._vnpus: dict[str, _Vnpu] = {}
        self._call(self._dcmi.dcmi_init)

    # -- detection ---------------------------------------------------------------------------

    def detect(self) -> Detection:
        """Enumerate NPUs card by card, with their vNPUs; remember their keys for sampling."""
        driver = self._maybe(str, self._dcmi.dcmi_get_driver_version) or ""
        notes: list[str] = []
        found: list[tuple[int, DeviceInfo, _Device, list[_Vnpu]]] = []
        for card in self._call(self._dcmi.dcmi_get_card_list):
            for device in range(int(self._call(self._dcmi.dcmi_get_device_num_in_card, card))):
                unit = self._maybe(int, self._dcmi.dcmi_get_device_type, card, device)
                if unit is not None and unit != d.DCMI_UNIT_TYPE_NPU:
                    continue
                found.append(self._detect_device(int(card), device, driver, notes))
        found.sort(key=lambda item: item[0])
        devices: list[DeviceInfo] = []
        keys: dict[str, _Device] = {}
        vnpus: dict[str, _Vnpu] = {}
        for position, (_, info, key, partitions) in enumerate(found):
            devices.append(dataclasses.replace(info, index=position))
            keys[info.id] = key
            vnpus.update({_vnpu_id(v): v for v in partitions})
        with self._lock:
            self._devices, self._vnpus = keys, vnpus
        return Detection(MANUFACTURER, tuple(devices), tuple(notes))

    def _detect_device(
        self, card: int, device: int, driver: str, notes: list[str]
    ) -> tuple[int, DeviceInfo, _Device, list[_Vnpu]]:
        logic = self._maybe(int, self._dcmi.dcmi_get_device_logic_id, card, device)
        device_id = self._die_id(card, device) or f"npu-card{card}-device{device}"
        chip = self._maybe(same, self._dcmi.dcmi_get_device_chip_info_v2, card, device)
        memory_mib = 0
        try:
            memory_mib, _ = self._memory(card, device)
        except DcmiCallError as failure:
            notes.append(f"{device_id}: memory unreadable ({failure})")
        bus_id = self._maybe(d.pci_address, self._dcmi.dcmi_get_device_pcie_info_v2, card, device)
        health = self._maybe(int, self._dcmi.dcmi_get_device_health, card, device)
        partitions, vnpus = self._detect_vnpus(device_id, card, device, notes)
        info = DeviceInfo(
            id=device_id,
            index=0,
            name=_text(chip.chip_name) if chip is not None else "",
            memory_mib=memory_mib,
            cores=int(chip.aicore_cnt) if chip is not None else None,
            driver_version=driver,
            runtime_version="",
            pci_bus_id=normalize_bus_id(bus_id or ""),
            unhealthy=health is not None and health >= _UNHEALTHY_FROM,
            partitions=tuple(partitions),
        )
        order = logic if logic is not None else (card << 8) | device
        return order, info, _Device(card, device), vnpus

    def _die_id(self, card: int, device: int) -> str | None:
        """The VDIE id, else the v1 die id; ``None`` when neither answers or both are zero."""
        die: d.dcmi_die_id | None
        try:
            die = self._call(self._dcmi.dcmi_get_device_die_v2, card, device, d.DCMI_DIE_TYPE_VDIE)
        except DcmiCallError as failure:
            if failure.code not in _FALL_BACK:
                return None
            die = self._maybe(same, self._dcmi.dcmi_get_device_die, card, device)
            if die is None:
                return None
        words = d.die_words(die)
        return "-".join(f"{word:08X}" for word in words) if any(words) else None

    def _detect_vnpus(
        self, parent: str, card: int, device: int, notes: list[str]
    ) -> tuple[list[PartitionInfo], list[_Vnpu]]:
        """The chip's vNPUs; a chip not in vNPU mode answers ``NOT_SUPPORT`` or zero vNPUs."""
        try:
            total = self._call(self._dcmi.dcmi_get_vdev_total_resource, card, device)
        except DcmiCallError as failure:
            if failure.reason is not QueryReason.UNSUPPORTED:
                notes.append(f"{parent}: vNPUs unreadable ({failure})")
            return [], []
        partitions: list[PartitionInfo] = []
        vnpus: list[_Vnpu] = []
        for vdev_id in list(total.vdev_id)[: int(total.vdev_num)]:
            vnpu = _Vnpu(parent, card, device, int(vdev_id))
            try:
                query = self._call(self._dcmi.dcmi_get_vdev_resource, card, device, vnpu.vdev_id)
            except DcmiCallError as failure:
                notes.append(f"{parent}: vNPU {vnpu.vdev_id} unreadable ({failure})")
                continue
            computing = query.query_info.computing
            partitions.append(
                PartitionInfo(
                    id=_vnpu_id(vnpu),
                    parent_id=parent,
                    slot=vnpu.vdev_id,
                    profile=_text(query.query_info.name),
                    memory_mib=int(computing.memory_size),
                    cores=int(computing.aic),
                )
            )
            vnpus.append(vnpu)
        return partitions, vnpus

    def _memory(self, card: int, device: int) -> tuple[int, int]:
        """(total, used) MiB from HBM, or from ``_v3`` where the HBM call does not answer."""
        try:
            hbm = self._call(self._dcmi.dcmi_get_device_hbm_info, card, device)
        except DcmiCallError as failure:
            if failure.code not in _FALL_BACK:
                raise
        else:
            if int(hbm.memory_size) > 0:
                return int(hbm.memory_size), int(hbm.memory_usage)
        info = self._call(self._dcmi.dcmi_get_device_memory_info_v3, card, device)
        size = int(info.memory_size)
        return size, max(size - int(info.memory_available), 0)

    def _known(self) -> tuple[dict[str, _Device], dict[str, _Vnpu]]:
        with self._lock:
            if self._devices:
                return self._devices, self._vnpus
        self.detect()
        with self._lock:
            return self._devices, self._vnpus

    # -- sampling ----------------------------------------------------------------------------

    def sample(self) -> list[CardSample]:
        """Whole-device figures; a figure the device refuses is absent."""
        devices, _ = self._known()
        samples: list[CardSample] = []
        for device_id, key in devices.items():
            total, used = 0, None
            with contextlib.suppress(DcmiCallError):
                total, used = self._memory(key.card, key.device)
            health = self._maybe(int, self._dcmi.dcmi_get_device_health, key.card, key.device)
            samples.append(
                CardSample(
                    id=device_id,
                    memory_total_mib=total,
                    memory_used_mib=used,
                    cores_utilization_percent=self._maybe(
                        int,
                        self._dcmi.dcmi_get_device_utilization_rate,
                        key.card,
                        key.device,
                        d.DCMI_INPUT_TYPE_AICORE,
                    ),
                    temperature_celsius=self._maybe(
                        int, self._dcmi.dcmi_get_device_temperature, key.card, key.device
                    ),
                    power_watts=self._maybe(
                        lambda tenths: int(tenths) / 10,
                        self._dcmi.dcmi_get_device_power_info,
                        key.card,
                        key.device,
                    ),
                    unhealthy=health is not None and health >= _UNHEALTHY_FROM,
                )
            )
        return samples

    def processes(self, device_ids: Sequence[str]) -> dict[str, DeviceProcesses]:
        """Every process with its memory in bytes; compute is ``unsupported`` on every row.

        A list longer than DCMI's documented maximum comes back as ``truncated`` for the whole
        device: its sum would be short, and a short sum reads as free memory.
        """
        devices, _ = self._known()
        result: dict[str, DeviceProcesses] = {}
        for device_id in device_ids:
            key = devices.get(device_id)
            if key is None:
                result[device_id] = DeviceProcesses.unread(
                    device_id, QueryReason.TRANSIENT_DRIVER_ERROR
                )
                continue
            try:
                listed = self._call(self._dcmi.dcmi_get_device_resource_info, key.card, key.device)
            except DcmiCallError as failure:
                result[device_id] = DeviceProcesses.unread(device_id, failure.reason)
                continue
            rows = tuple(
                ProcessRow(
                    pid=int(proc.proc_id), memory_bytes=int(proc.proc_mem_usage), cores_percent=None
                )
                for proc in listed
            )
            result[device_id] = DeviceProcesses(
                device_id, rows=rows, cores_reason=QueryReason.UNSUPPORTED
            )
        return result

    def partitions(self, partition_ids: Sequence[str]) -> dict[str, PartitionSample]:
        """Each vNPU's memory from its resource query; its compute is ``unsupported``."""
        _, vnpus = self._known()
        result: dict[str, PartitionSample] = {}
        for partition_id in partition_ids:
            vnpu = vnpus.get(partition_id)
            if vnpu is None:
                result[partition_id] = PartitionSample.unread(
                    partition_id, QueryReason.TRANSIENT_DRIVER_ERROR, QueryReason.UNSUPPORTED
                )
                continue
            try:
                query = self._call(
                    self._dcmi.dcmi_get_vdev_resource, vnpu.card, vnpu.device, vnpu.vdev_id
                )
            except DcmiCallError as failure:
                result[partition_id] = PartitionSample.unread(
                    partition_id, failure.reason, QueryReason.UNSUPPORTED, vnpu.parent
                )
                continue
            computing = query.query_info.computing
            total = int(computing.vdev_memory_total)
            if total <= 0:
                # The driver left the per-vNPU figures empty: the capacity is still known.
                result[partition_id] = PartitionSample(
                    partition_id,
                    vnpu.parent,
                    memory_total_mib=int(computing.memory_size),
                    memory_used_mib=None,
                    memory_reason=QueryReason.UNSUPPORTED,
                    cores_reason=QueryReason.UNSUPPORTED,
                )
                continue
            free = min(int(computing.vdev_memory_free), total)
            result[partition_id] = PartitionSample(
                partition_id,
                vnpu.parent,
                memory_total_mib=total,
                memory_used_mib=total - free,
                cores_reason=QueryReason.UNSUPPORTED,
            )
        return result

    def close(self) -> None:
        """DCMI has no shutdown call; the library stays loaded for the process's life."""


def _text(value: bytes) -> str:
    """A ``char[]`` field (the binding's ``bytes``) as text, padding stripped."""
    return value.decode("utf-8", errors="replace").strip("\x00 ")


def _vnpu_id(vnpu: _Vnpu) -> str:
    """``<parent die id>-vnpu<vdev_id>``: vdev ids are the driver's, unique on the node."""
    return f"{vnpu.parent}-vnpu{vnpu.vdev_id}"
