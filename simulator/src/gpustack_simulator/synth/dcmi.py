"""A synthetic Ascend node behind DCMI's C ABI, built from a node description.

:class:`DcmiAnswers` is the answer source for
:class:`~gpustack_simulator.replay.dcmi_lib.FakeDcmiLib`, so synthesizing a recording runs our
real DCMI binding — the output-only process count and its guard tail included — exactly as
replaying it does. It answers in the binding's Python terms and DCMI's own units (MB read as MiB,
0.1 W, °C, per-process bytes) and raises ``DCMIError`` with DCMI's codes where a real driver
would: ``NOT_SUPPORT`` for the HBM call on a DDR part (310P), for power where the card has no
sensor, and for the vNPU query on a chip that is not split.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from dataclasses import dataclass

from gpustack_simulator.synth.timeline import Steps, VirtualClock, const
from gpustack_vendors.ascend import dcmi as d
from gpustack_vendors.ascend.dcmi import DCMIError

MIB = 1 << 20
HUAWEI = 0x19E5


@dataclass(frozen=True)
class AscendProc:
    """A process on a chip: its host PID and the device memory it holds, in bytes."""

    pid: int
    memory_bytes: Steps[int]


@dataclass(frozen=True)
class Vnpu:
    """A vNPU carved from a chip by a template (``vir12_3c_32g``), with its own processes."""

    vdev_id: int
    template: str
    aicore: float
    memory_mib: int
    procs: tuple[AscendProc, ...] = ()

    def used_mib(self, t: float) -> int:
        """Memory its processes hold, rounded up to MiB as the driver accounts it."""
        held = sum(proc.memory_bytes.at(t) for proc in self.procs)
        return -(-held // MIB)


@dataclass(frozen=True)
class AscendChip:
    """One NPU, ``(card, device)``, as the driver would describe it."""

    card: int
    device: int
    logic_id: int
    die: tuple[int, int, int, int, int]
    chip_name: str
    aicore: int
    bus_id: str
    memory_mib: int
    idle_used_mib: int
    util: Steps[int]
    temperature: Steps[int]
    power_tenths: Steps[int] | None
    """Board power in 0.1 W; ``None``: the call answers ``NOT_SUPPORT``."""
    hbm: bool = True
    """``False``: a DDR part whose HBM call answers ``NOT_SUPPORT`` (read through ``_v3``)."""
    pci_device_id: int = 0xD802
    """``d802`` is the 910B's PCI device id; the 310P's is ``d500``."""
    chip_type: str = "Ascend"
    chip_ver: str = "V1"
    health: int = d.DCMI_HEALTH_OK
    procs: tuple[AscendProc, ...] = ()
    vnpus: tuple[Vnpu, ...] | None = ()
    """``None``: not in vNPU mode (the query answers ``NOT_SUPPORT``); ``()``: none carved."""

    def all_procs(self) -> Iterator[AscendProc]:
        """The chip's own processes, then those of its vNPUs: the host sees them all."""
        yield from self.procs
        for vnpu in self.vnpus or ():
            yield from vnpu.procs

    def used_mib(self, t: float) -> int:
        """What the chip's memory query reports used: the idle floor plus every process."""
        held = sum(proc.memory_bytes.at(t) for proc in self.all_procs())
        return self.idle_used_mib + -(-held // MIB)


@dataclass(frozen=True)
class AscendNode:
    """The driver and its NPUs, in ``dcmi_get_card_list`` then device order."""

    driver: str
    chips: tuple[AscendChip, ...]

    def pids(self) -> list[int]:
        """Every PID on the node, for the recording's process context."""
        return [proc.pid for chip in self.chips for proc in chip.all_procs()]


class DcmiAnswers:
    """DCMI's answers for ``node`` in the binding's Python terms, for ``FakeDcmiLib``.

    Node-wide calls take no arguments; every other call's first two are ``(card, device)``, and
    an unknown pair is ``INVALID_DEVICE_ID``.
    """

    def __init__(self, node: AscendNode, clock: VirtualClock) -> None:
        self.node = node
        self._chip_calls = _ChipCalls(clock)
        self._chips = {(chip.card, chip.device): chip for chip in node.chips}

    def __call__(self, name: str, args: tuple[object, ...]) -> object:
        """One binding method's answer."""
        if name == "dcmi_init":
            return None
        if name == "dcmi_get_driver_version":
            return self.node.driver
        if name == "dcmi_get_card_list":
            return list(dict.fromkeys(chip.card for chip in self.node.chips))
        if name == "dcmi_get_device_num_in_card":
            return sum(1 for chip in self.node.chips if chip.card == args[0])
        method = getattr(self._chip_calls, name, None) if name.startswith("dcmi_") else None
        if method is None:
            raise AttributeError(name)
        card, device, *rest = args
        chip = None
        if isinstance(card, int) and isinstance(device, int):
            chip = self._chips.get((card, device))
        if chip is None:
            raise DCMIError(d.DCMI_ERROR_INVALID_DEVICE_ID, name)
        return method(chip, *rest)


class _ChipCalls:
    """One method per per-chip binding call, answering at the clock's current time."""

    def __init__(self, clock: VirtualClock, freq_mhz: int = 1600) -> None:
        self.clock = clock
        self.freq_mhz = freq_mhz

    def dcmi_get_device_type(self, chip: AscendChip) -> int:
        return d.DCMI_UNIT_TYPE_NPU

    def dcmi_get_device_logic_id(self, chip: AscendChip) -> int:
        return chip.logic_id

    def dcmi_get_device_die_v2(self, chip: AscendChip, die_type: int) -> d.dcmi_die_id:
        return d.dcmi_die_id((ctypes.c_uint * d.DIE_ID_COUNT)(*chip.die))

    def dcmi_get_device_die(self, chip: AscendChip) -> d.dcmi_die_id:
        return d.dcmi_die_id((ctypes.c_uint * d.DIE_ID_COUNT)(*chip.die))

    def dcmi_get_device_chip_info_v2(self, chip: AscendChip) -> d.dcmi_chip_info_v2:
        return d.dcmi_chip_info_v2(
            chip.chip_type.encode(), chip.chip_name.encode(), chip.chip_ver.encode(), chip.aicore
        )

    def dcmi_get_device_pcie_info_v2(self, chip: AscendChip) -> d.dcmi_pcie_info_all:
        return _pcie(chip.bus_id, chip.pci_device_id)

    def dcmi_get_device_health(self, chip: AscendChip) -> int:
        return chip.health

    def dcmi_get_device_hbm_info(self, chip: AscendChip) -> d.dcmi_hbm_info:
        if not chip.hbm:
            raise DCMIError(d.DCMI_ERROR_NOT_SUPPORT, "dcmi_get_device_hbm_info")
        t = self.clock()
        used, temperature = chip.used_mib(t), chip.temperature.at(t)
        return d.dcmi_hbm_info(chip.memory_mib, self.freq_mhz, used, temperature, 0)

    def dcmi_get_device_memory_info_v3(self, chip: AscendChip) -> d.dcmi_get_memory_info_stru:
        used = chip.used_mib(self.clock())
        info = d.dcmi_get_memory_info_stru()
        info.memory_size, info.memory_available = chip.memory_mib, chip.memory_mib - used
        info.freq, info.hugepagesize = self.freq_mhz, 2048
        info.utiliza = used * 100 // chip.memory_mib
        return info

    def dcmi_get_device_utilization_rate(self, chip: AscendChip, input_type: int) -> int:
        if input_type != d.DCMI_INPUT_TYPE_AICORE:
            raise DCMIError(d.DCMI_ERROR_NOT_SUPPORT, "dcmi_get_device_utilization_rate")
        return chip.util.at(self.clock())

    def dcmi_get_device_temperature(self, chip: AscendChip) -> int:
        return chip.temperature.at(self.clock())

    def dcmi_get_device_power_info(self, chip: AscendChip) -> int:
        if chip.power_tenths is None:
            raise DCMIError(d.DCMI_ERROR_NOT_SUPPORT, "dcmi_get_device_power_info")
        return chip.power_tenths.at(self.clock())

    def dcmi_get_device_resource_info(self, chip: AscendChip) -> list[d.dcmi_proc_mem_info]:
        t = self.clock()
        return [d.dcmi_proc_mem_info(p.pid, p.memory_bytes.at(t)) for p in chip.all_procs()]

    def dcmi_get_vdev_total_resource(self, chip: AscendChip) -> d.dcmi_soc_total_resource:
        if chip.vnpus is None:
            raise DCMIError(d.DCMI_ERROR_NOT_SUPPORT, "dcmi_get_vdev_total_resource")
        total = d.dcmi_soc_total_resource()
        total.vdev_num = len(chip.vnpus)
        for i, vnpu in enumerate(chip.vnpus):
            total.vdev_id[i] = vnpu.vdev_id
        total.computing.aic = float(chip.aicore - sum(v.aicore for v in chip.vnpus))
        total.computing.memory_size = chip.memory_mib
        return total

    def dcmi_get_vdev_resource(self, chip: AscendChip, vdev_id: int) -> d.dcmi_vdev_query_stru:
        name = "dcmi_get_vdev_resource"
        if chip.vnpus is None:
            raise DCMIError(d.DCMI_ERROR_NOT_SUPPORT, name)
        vnpu = next((v for v in chip.vnpus if v.vdev_id == vdev_id), None)
        if vnpu is None:
            raise DCMIError(d.DCMI_ERROR_INVALID_PARAMETER, name)
        query = d.dcmi_vdev_query_stru()
        query.vdev_id = vnpu.vdev_id
        info = query.query_info
        info.name = vnpu.template.encode()
        info.status = 1
        info.is_container_used = 1 if vnpu.procs else 0
        info.computing.aic = vnpu.aicore
        info.computing.memory_size = vnpu.memory_mib
        info.computing.vdev_memory_total = vnpu.memory_mib
        info.computing.vdev_memory_free = vnpu.memory_mib - vnpu.used_mib(self.clock())
        return query


def _pcie(bus_id: str, device_id: int) -> d.dcmi_pcie_info_all:
    domain, bus, rest = bus_id.split(":")
    device, function = rest.split(".")
    info = d.dcmi_pcie_info_all()
    info.venderid, info.deviceid = HUAWEI, device_id
    info.domain, info.bdf_busid = int(domain, 16), int(bus, 16)
    info.bdf_deviceid, info.bdf_funcid = int(device, 16), int(function, 16)
    return info


def const_mib(mib: int) -> Steps[int]:
    """A process holding ``mib`` MiB throughout, in bytes."""
    return const(mib * MIB)
