"""A synthetic Hygon DCU node behind the C ABIs of ROCm SMI (Hygon's fork) and ``libhydmi_mig``.

Both halves are answer sources for the C-level fakes
(:class:`~gpustack_simulator.replay.hygon_rocm_smi_lib.FakeHygonRocmSmiLib`,
:class:`~gpustack_simulator.replay.hydmi_lib.FakeHyDmiLib`), so synthesizing a recording runs our
real bindings exactly as replaying it does. Answers are in the libraries' own units: ROCm SMI
bytes, millidegrees and microwatts, ``cu_occupancy`` in percent of the card's CUs (or the
invalid sentinel); ``libhydmi_mig`` bytes on a handle and MiB in a profile.

The MIG half follows what the reference operator measured on a BW card: the mode is node-wide,
the MIG device index is node-global (an index that is another card's answers NOT_FOUND), the
profile argument is slices minus one with index 2 unsupported, GI ids are driver-assigned and
unrelated to placement, and a partition's own handle answers its memory and its compute.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

from gpustack_simulator.synth.amdsmi import AmdProc, bdfid
from gpustack_simulator.synth.timeline import Steps, VirtualClock, const
from gpustack_vendors.bindings.rocm_smi import (
    CU_OCCUPANCY_INVALID,
    RSMI_STATUS_INVALID_ARGS,
    RSMI_STATUS_NOT_FOUND,
    RSMI_STATUS_NOT_SUPPORTED,
    ROCMSMIError,
    rsmi_process_info_t,
)
from gpustack_vendors.hygon.hydmi import (
    DMI_DEVICE_MIG_DISABLE,
    DMI_DEVICE_MIG_ENABLE,
    DMI_ERROR_INVALID_ARGUMENT,
    DMI_ERROR_NOT_FOUND,
    DMI_ERROR_NOT_SUPPORTED,
    HyDmiError,
    dmiGpuInstanceInfo_t,
    dmiGpuInstancePlacement_t,
    dmiGpuInstanceProfileInfo_t,
    dmiMemory_t,
    dmiUtilization_t,
)
from gpustack_vendors.hygon.rocm_smi import RSMI_MEM_TYPE_VRAM, RSMI_TEMP_TYPE_EDGE

MIB = 1 << 20


@dataclass(frozen=True)
class HygonProfile:
    """A GPU-instance profile as ``nvmlDeviceGetGpuInstanceProfileInfo`` answers it."""

    index: int
    """The call's ``profile`` argument: slices minus one."""
    id: int
    """The driver's profile id, unrelated to the index."""
    slices: int
    cu_count: int
    memory_mib: int
    gi_count_max: int
    name: str


@dataclass(frozen=True)
class HygonMig:
    """A live GI+CI: its ids, profile, placement, registry UUID and what its handle answers."""

    gpu_instance: int
    compute_instance: int
    profile_id: int
    placement: int
    uuid: str
    used_bytes: Steps[int] = field(default_factory=lambda: const(0))
    util: Steps[int] = field(default_factory=lambda: const(0))


@dataclass(frozen=True)
class HygonCard:
    """One DCU as its driver would describe it."""

    bus_id: str
    unique_id: int
    name: str
    total_bytes: int
    used_bytes: Steps[int]
    busy: Steps[int]
    edge_millicelsius: Steps[int]
    power_microwatts: Steps[int]
    procs: tuple[AmdProc, ...] = ()
    migs: tuple[HygonMig, ...] = ()


@dataclass(frozen=True)
class HygonNode:
    """The cards in ROCm SMI order, the driver string, the MIG library and its mode.

    ``mig`` ``None`` means the node has no ``libhydmi_mig`` at all; ``driver`` ``None`` means
    ``rsmi_version_str_get`` answers NOT_SUPPORTED.
    """

    cards: tuple[HygonCard, ...]
    driver: str | None
    mig: bool | None
    profiles: tuple[HygonProfile, ...] = ()
    dtk: str = ""
    """The DTK release, kept as a node fact (ROCm SMI has no call that reports it)."""


class RocmAnswers:
    """ROCm SMI's answers for ``node``, in the binding's Python terms, for the C-level fake.

    The node-wide list aggregates a process over its devices as ``GetProcessInfoForPID`` does
    (VRAM summed; occupancy invalid as soon as one device has no ``cu_occupancy``).
    """

    def __init__(self, node: HygonNode, clock: VirtualClock) -> None:
        self.node = node
        self.clock = clock

    def __call__(self, name: str, args: tuple[object, ...]) -> object:
        """One C call's answer; a PID on no device is NOT_FOUND, as for an exited process."""
        t = self.clock()
        if name in {"rsmi_init", "rsmi_shut_down"}:
            return None
        if name == "rsmi_num_monitor_devices":
            return len(self.node.cards)
        if name == "rsmi_version_str_get":
            if self.node.driver is None:
                raise ROCMSMIError(RSMI_STATUS_NOT_SUPPORTED, name)
            return self.node.driver
        if name == "rsmi_compute_process_info_get":
            return [self._aggregate(pid, t) for pid in self._pids()]
        if name == "rsmi_compute_process_gpus_get":
            found = [i for i, card in enumerate(self.node.cards) if _proc(card, args[0])]
            if not found:
                raise ROCMSMIError(RSMI_STATUS_NOT_FOUND, name)
            return found
        if name == "rsmi_compute_process_info_by_device_get":
            proc = _proc(self._device(args[1]), args[0])
            if proc is None:
                raise ROCMSMIError(RSMI_STATUS_NOT_FOUND, name)
            return _info(proc.pid, proc.vram_bytes.at(t), proc.sdma_us, proc.cu_percent.at(t))
        card = self._device(args[0])
        return self._card_answer(name, card, args[1:], t)

    def _card_answer(self, name: str, card: HygonCard, rest: tuple[object, ...], t: float) -> Any:
        if name == "rsmi_dev_pci_id_get":
            return bdfid(card.bus_id)
        if name == "rsmi_dev_unique_id_get":
            return card.unique_id
        if name == "rsmi_dev_name_get":
            return card.name
        if name in {"rsmi_dev_memory_total_get", "rsmi_dev_memory_usage_get"}:
            if rest[0] != RSMI_MEM_TYPE_VRAM:
                raise ROCMSMIError(RSMI_STATUS_NOT_SUPPORTED, name)
            return card.total_bytes if name.endswith("total_get") else card.used_bytes.at(t)
        if name == "rsmi_dev_busy_percent_get":
            return card.busy.at(t)
        if name == "rsmi_dev_temp_metric_get":
            if rest[0] != RSMI_TEMP_TYPE_EDGE:
                raise ROCMSMIError(RSMI_STATUS_NOT_SUPPORTED, name)
            return card.edge_millicelsius.at(t)
        if name == "rsmi_dev_power_ave_get":
            return card.power_microwatts.at(t)
        raise NotImplementedError(f"synthetic Hygon ROCm SMI: {name} is not synthesized")

    def _device(self, index: object) -> HygonCard:
        if not isinstance(index, int) or not 0 <= index < len(self.node.cards):
            raise ROCMSMIError(RSMI_STATUS_INVALID_ARGS)
        return self.node.cards[index]

    def _pids(self) -> list[int]:
        seen: dict[int, None] = {}
        for card in self.node.cards:
            for proc in card.procs:
                seen.setdefault(proc.pid, None)
        return list(seen)

    def _aggregate(self, pid: int, t: float) -> rsmi_process_info_t:
        vram = sdma = 0
        occupancy: list[int] = []
        for card in self.node.cards:
            proc = _proc(card, pid)
            if proc is not None:
                vram += proc.vram_bytes.at(t)
                sdma += proc.sdma_us
                occupancy.append(proc.cu_percent.at(t))
        invalid = CU_OCCUPANCY_INVALID in occupancy
        mean = sum(occupancy) // max(len(occupancy), 1)
        return _info(pid, vram, sdma, CU_OCCUPANCY_INVALID if invalid else mean)


def _proc(card: HygonCard, pid: object) -> AmdProc | None:
    return next((proc for proc in card.procs if proc.pid == pid), None)


def _info(pid: int, vram: int, sdma: int, occupancy: int) -> rsmi_process_info_t:
    return rsmi_process_info_t(pid, 0x8000 + pid % 0x1000, vram, sdma, occupancy)


@dataclass(frozen=True)
class _Target:
    """What a synthetic handle points at: a card, or one of its MIG devices or GPU instances."""

    card: int
    mig: HygonMig | None = None
    kind: str = "card"


class HydmiAnswers:
    """``libhydmi_mig``'s answers for ``node``, handles included, for the C-level fake.

    Every card, MIG device and GPU instance gets one stable address. MIG devices are numbered
    across the node in card order, which is what makes the index space node-global.
    """

    def __init__(self, node: HygonNode, clock: VirtualClock) -> None:
        self.node = node
        self.clock = clock
        self._buffers: list[ctypes.Array[ctypes.c_char]] = []
        self._targets: dict[int, _Target] = {}
        self._addresses: dict[tuple[int, str, int], int] = {}
        self._global: list[tuple[int, HygonMig]] = [
            (i, mig) for i, card in enumerate(node.cards) for mig in card.migs
        ]
        for i, card in enumerate(node.cards):
            self._mint(_Target(i), (i, "card", 0))
            for mig in card.migs:
                self._mint(_Target(i, mig, "mig"), (i, "mig", mig.gpu_instance))
                self._mint(_Target(i, mig, "gi"), (i, "gi", mig.gpu_instance))

    def _mint(self, target: _Target, key: tuple[int, str, int]) -> None:
        buffer = ctypes.create_string_buffer(1)
        self._buffers.append(buffer)
        address = ctypes.addressof(buffer)
        self._targets[address] = target
        self._addresses[key] = address

    def _resolve(self, handle: object) -> _Target:
        target = self._targets.get(getattr(handle, "value", None) or 0)
        if target is None:
            raise HyDmiError(DMI_ERROR_INVALID_ARGUMENT)
        return target

    def _profile(self, profile_id: int) -> HygonProfile:
        return next(p for p in self.node.profiles if p.id == profile_id)

    def read(self) -> dict[str, str]:
        """The registry: one ``dev<N>gi<G>ci<C>.conf`` per live compute instance."""
        if not self.node.mig:
            return {}
        return {
            f"dev{i}gi{mig.gpu_instance}ci{mig.compute_instance}.conf": mig.uuid
            for i, card in enumerate(self.node.cards)
            for mig in card.migs
        }

    def __call__(self, name: str, args: tuple[object, ...]) -> object:
        """One C call's answer, as the binding's Python result."""
        t = self.clock()
        if name == "nvmlGetSystemMigMode":
            mode = DMI_DEVICE_MIG_ENABLE if self.node.mig else DMI_DEVICE_MIG_DISABLE
            return (mode, mode)
        if name == "nvmlDeviceGetCount":
            return len(self.node.cards)
        if name == "nvmlDeviceGetHandleByPciBusId":
            for i, card in enumerate(self.node.cards):
                if card.bus_id == args[0]:
                    return ctypes.c_void_p(self._addresses[(i, "card", 0)])
            raise HyDmiError(DMI_ERROR_NOT_FOUND)
        target = self._resolve(args[0])
        if target.kind == "gi":
            return self._gpu_instance(name, target)
        if target.kind == "mig":
            return self._mig_device(name, target, t)
        return self._card(name, target.card, args[1:], t)

    def _card(self, name: str, index: int, rest: tuple[object, ...], t: float) -> object:
        card = self.node.cards[index]
        if name == "nvmlDeviceGetIndex":
            return index
        if name == "nvmlDeviceGetMaxMigDeviceCount":
            return max((p.gi_count_max for p in self.node.profiles), default=0)
        if name == "nvmlDeviceGetGpuInstanceProfileInfo":
            return self._profile_info(rest[0])
        if name == "nvmlDeviceGetMigDeviceHandleByIndex":
            return self._mig_handle(index, rest[0])
        if name == "nvmlDeviceGetGpuInstanceById":
            for mig in card.migs:
                if mig.gpu_instance == rest[0]:
                    return ctypes.c_void_p(self._addresses[(index, "gi", mig.gpu_instance)])
            raise HyDmiError(DMI_ERROR_NOT_FOUND)
        if name == "nvmlDeviceGetMemoryInfo":
            used = card.used_bytes.at(t)
            return dmiMemory_t(card.total_bytes, card.total_bytes - used, used)
        if name == "nvmlDeviceGetUtilizationRates":
            return dmiUtilization_t(card.busy.at(t), 0)
        if name in {"nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId"}:
            raise HyDmiError(DMI_ERROR_INVALID_ARGUMENT)  # a card is not a MIG device
        raise NotImplementedError(f"synthetic libhydmi_mig: {name} is not synthesized")

    def _profile_info(self, index: object) -> dmiGpuInstanceProfileInfo_t:
        profile = next((p for p in self.node.profiles if p.index == index), None)
        if profile is None:
            raise HyDmiError(DMI_ERROR_NOT_SUPPORTED)
        return dmiGpuInstanceProfileInfo_t(
            profile.id,
            profile.gi_count_max,
            profile.cu_count,
            profile.slices,
            profile.memory_mib,
            profile.name.encode(),
        )

    def _mig_handle(self, card: int, position: object) -> ctypes.c_void_p:
        if not isinstance(position, int) or not 0 <= position < len(self._global):
            raise HyDmiError(DMI_ERROR_NOT_FOUND)
        owner, mig = self._global[position]
        if owner != card:
            raise HyDmiError(DMI_ERROR_NOT_FOUND)  # another card's: the index space is node-wide
        return ctypes.c_void_p(self._addresses[(card, "mig", mig.gpu_instance)])

    def _mig_device(self, name: str, target: _Target, t: float) -> object:
        mig = target.mig
        assert mig is not None
        if name == "nvmlDeviceGetGpuInstanceId":
            return mig.gpu_instance
        if name == "nvmlDeviceGetComputeInstanceId":
            return mig.compute_instance
        if name == "nvmlDeviceGetMemoryInfo":
            total = self._profile(mig.profile_id).memory_mib * MIB
            used = mig.used_bytes.at(t)
            return dmiMemory_t(total, total - used, used)
        if name == "nvmlDeviceGetUtilizationRates":
            util = mig.util.at(t)
            return dmiUtilization_t(util, util // 3)
        raise HyDmiError(DMI_ERROR_NOT_SUPPORTED)

    def _gpu_instance(self, name: str, target: _Target) -> object:
        mig = target.mig
        assert mig is not None
        if name != "nvmlGpuInstanceGetInfo":
            raise HyDmiError(DMI_ERROR_INVALID_ARGUMENT)
        profile = self._profile(mig.profile_id)
        return dmiGpuInstanceInfo_t(
            self._addresses[(target.card, "card", 0)],
            mig.gpu_instance,
            mig.profile_id,
            dmiGpuInstancePlacement_t(mig.placement, profile.slices),
        )
