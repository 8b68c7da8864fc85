"""A synthetic AMD node behind amdsmi's interface and behind ROCm SMI's C ABI.

Two halves, as on a real node. :func:`build` returns a module with amdsmi's names whose calls
answer the way amdsmi 7.0.2's Python layer does: dicts with the same keys, sentinels already
turned into ``"N/A"``, ``c_void_p`` handles checked with ``isinstance``, and
``AmdSmiLibraryException`` codes. :class:`RocmAnswers` is the answer source for
:class:`~gpustack_simulator.replay.rocm_smi_lib.FakeRocmSmiLib`, so synthesizing a recording
runs our real ROCm SMI binding, size negotiation included, exactly as replaying it does.

Units are the libraries' own: VRAM in MiB and power in W from amdsmi; process VRAM in bytes and
``cu_occupancy`` in percent of the device's CUs (or ``CU_OCCUPANCY_INVALID``) from ROCm SMI.
"""

from __future__ import annotations

import ctypes
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpustack_simulator.replay import amdsmi_api
from gpustack_simulator.replay.amdsmi_standin import FUNCTIONS, check_arguments
from gpustack_simulator.synth.timeline import Steps, VirtualClock, const
from gpustack_vendors.bindings.rocm_smi import (
    CU_OCCUPANCY_INVALID,
    RSMI_STATUS_INVALID_ARGS,
    RSMI_STATUS_NOT_FOUND,
    ROCMSMIError,
    rsmi_process_info_t,
)

NA = "N/A"
AMD_VENDOR = 0x1002


@dataclass(frozen=True)
class AmdProc:
    """A compute process's figures on one card, as ROCm SMI's by-device call reports them."""

    pid: int
    vram_bytes: Steps[int]
    cu_percent: Steps[int] = field(default_factory=lambda: const(0))
    """Percent of this card's CUs with the process's waves in flight, or CU_OCCUPANCY_INVALID."""
    sdma_us: int = 0


@dataclass(frozen=True)
class AmdCard:
    """One GPU (or one partition: amdsmi enumerates those as ordinary processor handles)."""

    bus_id: str
    market_name: str
    device_id: int
    rev_id: int
    subsystem_id: int
    asic_serial: int
    oam_id: int | None
    compute_units: int
    gfx_version: int
    """``target_graphics_version`` as the struct holds it: 0x942 reads ``gfx942``."""
    vram_total_mib: int
    vram_used_mib: Steps[int]
    gfx_activity: Steps[int]
    hotspot_celsius: Steps[int]
    power_w: Steps[int]
    power_limit_w: int
    instinct: bool
    """MI300-class power reporting (``current_socket_power``) rather than Navi's ``average_…``."""
    edge_sensor: bool = True
    procs: tuple[AmdProc, ...] = ()


@dataclass(frozen=True)
class AmdNode:
    """The driver, the ROCm release and the cards, in processor-handle order."""

    driver: str
    rocm: str
    cards: tuple[AmdCard, ...]


def bdfid(bus_id: str) -> int:
    """Pack ``dddd:bb:dd.f`` the way ``rsmi_dev_pci_id_get`` reports it (no partition bits)."""
    domain, bus, rest = bus_id.split(":")
    device, function = rest.split(".")
    return (int(domain, 16) << 32) | (int(bus, 16) << 8) | (int(device, 16) << 3) | int(function)


def _hex(value: int, width: int) -> str:
    """Hex padded as amdsmi's ``_pad_hex_value(hex(v), width)`` pads it."""
    digits = f"{value:x}"
    return "0x" + digits.zfill(width)


def build(node: AmdNode, clock: VirtualClock) -> types.ModuleType:
    """A module with amdsmi's names whose functions answer from ``node``."""
    module = types.ModuleType("amdsmi", doc="synthetic AMD SMI")
    amdsmi_api.install(module)
    functions = _Functions(node, clock)
    for name in FUNCTIONS:
        implementation = getattr(functions, name, None)
        setattr(module, name, _checked(name, implementation))
    return module


def _checked(name: str, implementation: Callable[..., Any] | None) -> Callable[..., Any]:
    """Argument checks as amdsmi makes them first, then the answer.

    A call nobody synthesized fails loudly instead of answering NOT_SUPPORTED: a recording must
    not claim a card lacks a feature because this file never described it.
    """

    def call(*args: Any) -> Any:
        args = check_arguments(name, args)
        if implementation is None:
            raise NotImplementedError(f"synthetic amdsmi: {name} is not synthesized")
        return implementation(*args)

    call.__name__ = name
    return call


class _Functions:
    def __init__(self, node: AmdNode, clock: VirtualClock) -> None:
        self.node = node
        self.clock = clock
        self._targets = [ctypes.create_string_buffer(1) for _ in node.cards]
        self._by_address = {
            ctypes.addressof(target): card
            for target, card in zip(self._targets, node.cards, strict=True)
        }

    @property
    def t(self) -> float:
        return self.clock()

    def _card(self, handle: Any) -> AmdCard:
        card = self._by_address.get(handle.value or 0)
        if card is None:
            raise amdsmi_api.AmdSmiLibraryException(amdsmi_api.AMDSMI_STATUS_INVAL)
        return card

    def amdsmi_init(self, flag: int) -> None:
        return None

    def amdsmi_shut_down(self) -> None:
        return None

    def amdsmi_get_processor_handles(self) -> list[Any]:
        # A fresh c_void_p per call, as amdsmi does; the address is what stays the same.
        return [
            amdsmi_api.amdsmi_processor_handle(ctypes.addressof(target)) for target in self._targets
        ]

    def amdsmi_get_gpu_device_bdf(self, handle: Any) -> str:
        return self._card(handle).bus_id

    def amdsmi_get_gpu_asic_info(self, handle: Any) -> dict[str, Any]:
        card = self._card(handle)
        return {
            "market_name": card.market_name,
            "vendor_id": hex(AMD_VENDOR),
            "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
            "subvendor_id": _hex(AMD_VENDOR, 4),
            "device_id": hex(card.device_id),
            "rev_id": _hex(card.rev_id, 2),
            "asic_serial": f"0x{card.asic_serial:016X}",
            "oam_id": NA if card.oam_id is None else card.oam_id,
            "num_compute_units": card.compute_units,
            "target_graphics_version": f"gfx{card.gfx_version:x}",
            "subsystem_id": _hex(card.subsystem_id, 4),
        }

    def amdsmi_get_gpu_driver_info(self, handle: Any) -> dict[str, Any]:
        self._card(handle)
        return {"driver_name": "amdgpu", "driver_version": self.node.driver, "driver_date": NA}

    def amdsmi_get_rocm_version(self) -> tuple[bool, str]:
        return True, self.node.rocm

    def amdsmi_get_gpu_vram_usage(self, handle: Any) -> dict[str, Any]:
        card = self._card(handle)
        return {"vram_total": card.vram_total_mib, "vram_used": card.vram_used_mib.at(self.t)}

    def amdsmi_get_gpu_activity(self, handle: Any) -> dict[str, Any]:
        card = self._card(handle)
        gfx = card.gfx_activity.at(self.t)
        return {
            "gfx_activity": gfx,
            "umc_activity": gfx // 3,
            "mm_activity": NA if card.instinct else 0,
        }

    def amdsmi_get_temp_metric(self, handle: Any, sensor: int, metric: int) -> int:
        card = self._card(handle)
        if metric != amdsmi_api.AmdSmiTemperatureMetric.CURRENT or (
            sensor == amdsmi_api.AmdSmiTemperatureType.EDGE and not card.edge_sensor
        ):
            raise amdsmi_api.AmdSmiLibraryException(amdsmi_api.AMDSMI_STATUS_NOT_SUPPORTED)
        return card.hotspot_celsius.at(self.t)

    def amdsmi_get_power_info(self, handle: Any) -> dict[str, Any]:
        card = self._card(handle)
        watts = card.power_w.at(self.t)
        return {
            "socket_power": watts,
            "current_socket_power": watts if card.instinct else NA,
            "average_socket_power": NA if card.instinct else watts,
            "gfx_voltage": NA,
            "soc_voltage": NA,
            "mem_voltage": NA,
            "power_limit": card.power_limit_w,
        }


class RocmAnswers:
    """ROCm SMI's answers for ``node``, in the binding's Python terms, for ``FakeRocmSmiLib``.

    Device indices follow the processor-handle order. The node-wide list aggregates a process
    over its devices the way ``GetProcessInfoForPID`` does: VRAM summed, occupancy as CUs in use
    over CUs available, invalid as soon as one device has no ``cu_occupancy`` file.
    """

    def __init__(self, node: AmdNode, clock: VirtualClock) -> None:
        self.node = node
        self.clock = clock

    def __call__(self, name: str, args: tuple[object, ...]) -> object:
        """One C call's answer; a PID on no device is NOT_FOUND, as for an exited process."""
        t = self.clock()
        if name in {"rsmi_init", "rsmi_shut_down"}:
            return None
        if name == "rsmi_num_monitor_devices":
            return len(self.node.cards)
        if name == "rsmi_dev_pci_id_get":
            return bdfid(self._device(args[0]).bus_id)
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
        raise AttributeError(name)

    def _device(self, index: object) -> AmdCard:
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
        vram = sdma = used_cus = total_cus = 0
        invalid = False
        for card in self.node.cards:
            proc = _proc(card, pid)
            if proc is None:
                continue
            vram += proc.vram_bytes.at(t)
            sdma += proc.sdma_us
            percent = proc.cu_percent.at(t)
            if percent == CU_OCCUPANCY_INVALID:
                invalid = True
                continue
            used_cus += percent * card.compute_units // 100
            total_cus += card.compute_units
        occupancy = CU_OCCUPANCY_INVALID if invalid else used_cus * 100 // max(total_cus, 1)
        return _info(pid, vram, sdma, occupancy)


def _proc(card: AmdCard, pid: object) -> AmdProc | None:
    return next((proc for proc in card.procs if proc.pid == pid), None)


def _info(pid: int, vram: int, sdma: int, occupancy: int) -> rsmi_process_info_t:
    # The PASID is the kernel's address-space id; any stable per-process value will do here.
    return rsmi_process_info_t(pid, 0x8000 + pid % 0x1000, vram, sdma, occupancy)
