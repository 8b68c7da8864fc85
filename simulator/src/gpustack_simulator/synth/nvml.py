"""A synthetic NVML behind pynvml's interface, built from a node description.

It returns pynvml's own struct and friendly-object types and raises pynvml's own ``NVMLError``
codes, exactly where a real driver would — NOT_FOUND for an empty MIG slot or an idle card's
process utilization, NOT_SUPPORTED for per-process calls on a card that refuses them — so the
recorder can drive the unchanged backend over it and write a faithful synthesized recording.
"""

from __future__ import annotations

import ctypes
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

from gpustack_simulator.synth.timeline import Steps, VirtualClock, const

MIB = 1 << 20
NO_INSTANCE = 0xFFFFFFFF
"""gpuInstanceId/computeInstanceId of a process on a card without MIG."""


@dataclass(frozen=True)
class Proc:
    """A compute process: its memory (bytes, or None for NVML_VALUE_NOT_AVAILABLE) and SM %.

    ``sm`` of ``None`` at some time means the process produced no utilization sample then
    (holding memory, running nothing).
    """

    pid: int
    memory: Steps[int | None]
    sm: Steps[int | None] = field(default_factory=lambda: const(None))
    gpu_instance: int = NO_INSTANCE
    compute_instance: int = NO_INSTANCE


@dataclass(frozen=True)
class Mig:
    """A populated MIG slot, with what its own handle answers."""

    slot: int
    uuid: str
    profile: str
    total_bytes: int
    used_bytes: Steps[int] = field(default_factory=lambda: const(0))


@dataclass(frozen=True)
class Card:
    """One GPU as the driver would describe it."""

    uuid: str
    name: str
    bus_id: str
    total_bytes: int
    used_bytes: Steps[int]
    util: Steps[int]
    temperature: Steps[int]
    power_mw: Steps[int]
    cores: int | None = None
    procs: tuple[Proc, ...] = ()
    mig: tuple[Mig, ...] | None = None
    """``None``: MIG not supported; ``()``: supported but disabled; else enabled with slots."""
    max_mig_slots: int = 7
    process_calls: int = pynvml.NVML_SUCCESS
    """An error code both per-process calls answer (NOT_SUPPORTED on Blackwell), or success."""
    compute_capability: tuple[int, int] | None = None
    """CUDA compute capability where the source states it; ``None``: the synthesized library
    answers FUNCTION_NOT_FOUND, so nothing downstream invents the figure."""


@dataclass(frozen=True)
class Node:
    """The driver and its cards."""

    driver: str
    cuda: int
    cards: tuple[Card, ...]


def build(node: Node, clock: VirtualClock) -> types.ModuleType:
    """A module with pynvml's names whose ``nvml*`` functions answer from ``node``."""
    module = types.ModuleType("pynvml", doc="synthetic NVML")
    for name in dir(pynvml):
        if not name.startswith("__"):
            setattr(module, name, getattr(pynvml, name))
    _Functions(node, clock).install(module)
    return module


class _Functions:
    def __init__(self, node: Node, clock: VirtualClock) -> None:
        self.node = node
        self.clock = clock
        self._structs: list[Any] = []
        self._handles: dict[int, tuple[Card, Mig | None]] = {}
        self._by_key: dict[tuple[str, int | None], Any] = {}

    def install(self, module: types.ModuleType) -> None:
        for name in dir(self):
            if name.startswith("nvml"):
                setattr(module, name, getattr(self, name))

    # handles -------------------------------------------------------------------------------

    def _handle(self, card: Card, mig: Mig | None) -> Any:
        key = (card.uuid, None if mig is None else mig.slot)
        if key not in self._by_key:
            target = pynvml.struct_c_nvmlDevice_t()
            self._structs.append(target)
            pointer = ctypes.pointer(target)
            self._handles[ctypes.addressof(target)] = (card, mig)
            self._by_key[key] = pointer
        return self._by_key[key]

    def _resolve(self, handle: Any) -> tuple[Card, Mig | None]:
        found = self._handles.get(ctypes.cast(handle, ctypes.c_void_p).value or 0)
        if found is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return found

    @property
    def t(self) -> float:
        return self.clock()

    # functions -----------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        return None

    def nvmlShutdown(self) -> None:
        return None

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.node.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.node.cuda

    def nvmlDeviceGetCount(self) -> int:
        return len(self.node.cards)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if not 0 <= index < len(self.node.cards):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._handle(self.node.cards[index], None)

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        card, mig = self._resolve(handle)
        return card.uuid if mig is None else mig.uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        card, mig = self._resolve(handle)
        return card.name if mig is None else f"{card.name} MIG {mig.profile}"

    def nvmlDeviceGetNumGpuCores(self, handle: Any) -> int:
        card, mig = self._resolve(handle)
        if card.cores is None or mig is not None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return card.cores

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        card, _ = self._resolve(handle)
        if card.compute_capability is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return card.compute_capability

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        card, _ = self._resolve(handle)
        info = pynvml.nvmlPciInfo_t()
        info.busId = card.bus_id.encode()
        info.busIdLegacy = card.bus_id[-12:].encode()
        domain, bus, rest = card.bus_id.split(":")
        info.domain, info.bus = int(domain, 16), int(bus, 16)
        info.device = int(rest.split(".")[0], 16)
        info.pciDeviceId = 0x233010DE
        return info

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        card, mig = self._resolve(handle)
        total = card.total_bytes if mig is None else mig.total_bytes
        used = card.used_bytes.at(self.t) if mig is None else mig.used_bytes.at(self.t)
        memory = pynvml.c_nvmlMemory_t()
        memory.total, memory.used, memory.free = total, used, total - used
        return memory

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        card, mig = self._resolve(handle)
        if mig is not None or card.mig:  # NVML: not supported on MIG-enabled GPUs
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        util = pynvml.c_nvmlUtilization_t()
        util.gpu = card.util.at(self.t)
        util.memory = card.util.at(self.t) // 3
        return util

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        card, _ = self._resolve(handle)
        return card.temperature.at(self.t)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        card, mig = self._resolve(handle)
        if mig is not None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return card.power_mw.at(self.t)

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        card, mig = self._resolve(handle)
        if card.mig is None or mig is not None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        enabled = pynvml.NVML_DEVICE_MIG_ENABLE if card.mig else pynvml.NVML_DEVICE_MIG_DISABLE
        return [enabled, enabled]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        card, _ = self._resolve(handle)
        if card.mig is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return card.max_mig_slots

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any:
        card, _ = self._resolve(handle)
        for mig in card.mig or ():
            if mig.slot == index:
                return self._handle(card, mig)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        card, mig = self._resolve(handle)
        if card.process_calls != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(card.process_calls)
        procs = []
        for proc in card.procs:
            if mig is not None and proc.gpu_instance != mig.slot:
                continue
            memory = proc.memory.at(self.t)
            procs.append(
                pynvml.nvmlFriendlyObject(
                    {
                        "pid": proc.pid,
                        "usedGpuMemory": memory,
                        "gpuInstanceId": proc.gpu_instance,
                        "computeInstanceId": proc.compute_instance,
                    }
                )
            )
        return procs

    def nvmlDeviceGetProcessUtilization(self, handle: Any, last_seen: int) -> list[Any]:
        card, mig = self._resolve(handle)
        if card.process_calls != pynvml.NVML_SUCCESS or mig is not None or card.mig:
            raise pynvml.NVMLError(card.process_calls or pynvml.NVML_ERROR_NOT_SUPPORTED)
        stamp = 1_764_403_200_000_000 + int(self.t * 1_000_000)
        samples = []
        for proc in card.procs:
            sm = proc.sm.at(self.t)
            if sm is None:
                continue
            sample = pynvml.c_nvmlProcessUtilizationSample_t()
            sample.pid, sample.timeStamp, sample.smUtil = proc.pid, stamp, sm
            sample.memUtil = sm // 4
            samples.append(sample)
        samples = [s for s in samples if s.timeStamp > last_seen]
        if not samples:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return samples


Synthesizer = Callable[[VirtualClock], types.ModuleType]
