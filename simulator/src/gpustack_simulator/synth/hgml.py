"""A synthetic T-Head PPU node behind HGML's C ABI, built from a node description.

:class:`HgmlAnswers` is the answer source for
:class:`~gpustack_simulator.replay.hgml_lib.FakeHgmlLib`, so synthesizing a recording runs our
real HGML binding, NVML-style negotiation included, exactly as replaying it does. It answers with
the binding's own structs and ``c_hgmlDevice_t`` handles and raises ``HGMLError`` with NVML's
codes where the driver would: ``NOT_FOUND`` for an empty MIG slot or an idle card's process
utilization, ``NOT_SUPPORTED`` for utilization on a MIG-enabled card and — the T-Head case — for
the versioned process-utilization call, an exported stub.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from gpustack_simulator.synth.nvml import Mig, Proc
from gpustack_simulator.synth.timeline import Steps, VirtualClock
from gpustack_vendors.thead import hgml as h
from gpustack_vendors.thead.hgml import HGMLError

EPOCH_US = 1_764_403_200_000_000
"""Sample timestamps are µs; replay time 0 is this instant."""


@dataclass(frozen=True)
class PpuCard:
    """One PPU as the driver would describe it."""

    uuid: str
    name: str
    bus_id: str
    total_bytes: int
    used_bytes: Steps[int]
    util: Steps[int]
    temperature: Steps[int]
    power_mw: Steps[int]
    cores: int
    procs: tuple[Proc, ...] = ()
    mig: tuple[Mig, ...] | None = ()
    """``None``: MIG not supported; ``()``: supported but disabled; else enabled with slots."""
    max_mig_slots: int = 7


@dataclass(frozen=True)
class PpuNode:
    """The driver, the HGGC version (CUDA's encoding) and the cards."""

    driver: str
    hggc: int
    cards: tuple[PpuCard, ...]
    versioned_utilization: bool = False
    """``False`` (every PPU host measured): the versioned call is a NOT_SUPPORTED stub."""

    def pids(self) -> list[int]:
        """Every PID on the node, for the recording's process context."""
        return [proc.pid for card in self.cards for proc in card.procs]


class HgmlAnswers:
    """HGML's answers for ``node`` in the binding's Python terms, for ``FakeHgmlLib``."""

    def __init__(self, node: PpuNode, clock: VirtualClock) -> None:
        self._functions = _Functions(node, clock)

    def __call__(self, name: str, args: tuple[object, ...]) -> object:
        """One binding method's answer."""
        if name.startswith("_"):
            raise AttributeError(name)
        method = getattr(self._functions, name, None)
        if method is None:
            raise AttributeError(name)
        return method(*args)


class _Functions:
    def __init__(self, node: PpuNode, clock: VirtualClock) -> None:
        self.node = node
        self.clock = clock
        self._structs: list[Any] = []
        self._by_address: dict[int, tuple[PpuCard, Mig | None]] = {}
        self._by_key: dict[tuple[str, int | None], Any] = {}

    # handles -------------------------------------------------------------------------------

    def _handle(self, card: PpuCard, mig: Mig | None) -> Any:
        key = (card.uuid, None if mig is None else mig.slot)
        if key not in self._by_key:
            target = h.struct_c_hgmlDevice_t()
            self._structs.append(target)
            self._by_address[ctypes.addressof(target)] = (card, mig)
            self._by_key[key] = ctypes.pointer(target)
        return self._by_key[key]

    def _resolve(self, handle: object) -> tuple[PpuCard, Mig | None]:
        if not isinstance(handle, h.c_hgmlDevice_t) or not handle:
            raise HGMLError(h.HGML_ERROR_INVALID_ARGUMENT)
        address = ctypes.cast(handle, ctypes.c_void_p).value
        found = self._by_address.get(address or 0)
        if found is None:
            raise HGMLError(h.HGML_ERROR_INVALID_ARGUMENT)
        return found

    # calls ---------------------------------------------------------------------------------

    def hgmlInit(self) -> None:
        return None

    def hgmlShutdown(self) -> None:
        return None

    def hgmlSystemGetDriverVersion(self) -> str:
        return self.node.driver

    def hgmlSystemGetHggcDriverVersion(self) -> int:
        return self.node.hggc

    def hgmlDeviceGetCount(self) -> int:
        return len(self.node.cards)

    def hgmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if not 0 <= index < len(self.node.cards):
            raise HGMLError(h.HGML_ERROR_INVALID_ARGUMENT)
        return self._handle(self.node.cards[index], None)

    def hgmlDeviceGetUUID(self, handle: object) -> str:
        card, mig = self._resolve(handle)
        return card.uuid if mig is None else mig.uuid

    def hgmlDeviceGetName(self, handle: object) -> str:
        card, mig = self._resolve(handle)
        return card.name if mig is None else f"{card.name} MIG {mig.profile}"

    def hgmlDeviceGetPciInfo(self, handle: object) -> h.hgmlPciInfo_t:
        card, _ = self._resolve(handle)
        domain, bus, rest = card.bus_id.split(":")
        device = int(rest.split(".")[0], 16)
        info = h.hgmlPciInfo_t()
        info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), device
        info.busId = f"{info.domain:08X}:{info.bus:02X}:{device:02X}.0".encode()
        info.busIdLegacy = f"{info.domain:04X}:{info.bus:02X}:{device:02X}.0".encode()
        return info

    def hgmlDeviceGetNumGpuCores(self, handle: object) -> int:
        card, mig = self._resolve(handle)
        if mig is not None:
            raise HGMLError(h.HGML_ERROR_NOT_SUPPORTED)
        return card.cores

    def hgmlDeviceGetMemoryInfo(self, handle: object) -> h.c_hgmlMemory_t:
        card, mig = self._resolve(handle)
        t = self.clock()
        total = card.total_bytes if mig is None else mig.total_bytes
        used = card.used_bytes.at(t) if mig is None else mig.used_bytes.at(t)
        return h.c_hgmlMemory_t(total, total - used, used)

    def hgmlDeviceGetUtilizationRates(self, handle: object) -> h.c_hgmlUtilization_t:
        card, mig = self._resolve(handle)
        if mig is not None or card.mig:  # as NVML: not supported on MIG-enabled cards
            raise HGMLError(h.HGML_ERROR_NOT_SUPPORTED)
        gpu = card.util.at(self.clock())
        return h.c_hgmlUtilization_t(gpu, gpu // 3)

    def hgmlDeviceGetTemperature(self, handle: object, sensor: int) -> int:
        card, _ = self._resolve(handle)
        if sensor != h.HGML_TEMPERATURE_GPU:
            raise HGMLError(h.HGML_ERROR_NOT_SUPPORTED)
        return card.temperature.at(self.clock())

    def hgmlDeviceGetPowerUsage(self, handle: object) -> int:
        card, mig = self._resolve(handle)
        if mig is not None:
            raise HGMLError(h.HGML_ERROR_NOT_SUPPORTED)
        return card.power_mw.at(self.clock())

    def hgmlDeviceGetMigMode(self, handle: object) -> list[int]:
        card, mig = self._resolve(handle)
        if card.mig is None or mig is not None:
            raise HGMLError(h.HGML_ERROR_NOT_SUPPORTED)
        mode = h.HGML_DEVICE_MIG_ENABLE if card.mig else h.HGML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def hgmlDeviceGetMaxMigDeviceCount(self, handle: object) -> int:
        card, _ = self._resolve(handle)
        if card.mig is None:
            raise HGMLError(h.HGML_ERROR_NOT_SUPPORTED)
        return card.max_mig_slots

    def hgmlDeviceGetMigDeviceHandleByIndex(self, handle: object, index: int) -> Any:
        card, _ = self._resolve(handle)
        for mig in card.mig or ():
            if mig.slot == index:
                return self._handle(card, mig)
        raise HGMLError(h.HGML_ERROR_NOT_FOUND)

    def hgmlDeviceGetComputeRunningProcesses(self, handle: object) -> list[h.c_hgmlProcessInfo_t]:
        card, mig = self._resolve(handle)
        t = self.clock()
        rows = []
        for proc in card.procs:
            if mig is not None and proc.gpu_instance != mig.slot:
                continue
            memory = proc.memory.at(t)
            used = h.HGML_VALUE_NOT_AVAILABLE_ULONGLONG if memory is None else memory
            rows.append(
                h.c_hgmlProcessInfo_t(proc.pid, used, proc.gpu_instance, proc.compute_instance)
            )
        return rows

    def _samples(self, card: PpuCard, last_seen: int) -> list[tuple[int, int, int]]:
        """(pid, timeStamp, smUtil) of processes with a sample newer than ``last_seen``."""
        t = self.clock()
        stamp = EPOCH_US + int(t * 1_000_000)
        found = []
        for proc in card.procs:
            sm = proc.sm.at(t)
            if sm is not None and stamp > last_seen:
                found.append((proc.pid, stamp, sm))
        return found

    def hgmlDeviceGetProcessUtilization(
        self, handle: object, last_seen: int
    ) -> list[h.c_hgmlProcessUtilizationSample_t]:
        card, mig = self._resolve(handle)
        if mig is not None or card.mig:
            raise HGMLError(h.HGML_ERROR_NOT_SUPPORTED)
        return [
            h.c_hgmlProcessUtilizationSample_t(pid, stamp, sm, sm // 4, 0, 0)
            for pid, stamp, sm in self._samples(card, last_seen)
        ]

    def hgmlDeviceGetProcessesUtilizationInfo(
        self, handle: object, last_seen: int
    ) -> list[h.c_hgmlProcessUtilizationInfo_v1_t]:
        card, mig = self._resolve(handle)
        if not self.node.versioned_utilization or mig is not None or card.mig:
            raise HGMLError(h.HGML_ERROR_NOT_SUPPORTED)  # the exported stub
        return [
            h.c_hgmlProcessUtilizationInfo_v1_t(stamp, pid, sm, sm // 4, 0, 0, 0, 0)
            for pid, stamp, sm in self._samples(card, last_seen)
        ]
