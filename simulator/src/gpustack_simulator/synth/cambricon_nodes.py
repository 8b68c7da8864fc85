"""The Cambricon nodes we synthesize, behind CNDev's C ABI (sources in the provenance).

:class:`CndevAnswers` is the answer source for
:class:`~gpustack_simulator.replay.cndev_lib.FakeCndevLib`, so synthesizing a recording runs our
real CNDev binding, version stamping and ``INSUFFICIENT_SPACE`` loop included, exactly as
replaying it does. Units are CNDev's own: card memory in MiB, per-process memory in **KiB**, power
in W, temperatures in °C.

No Cambricon host was available: the card facts come from public sources (listed in each
recording's provenance) and the behaviour is the one ``cndev.h`` and the operator's adapter
describe. A utilization row exists only for a process that was busy in the sampling period.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gpustack_simulator.synth.timeline import NodeSpec, Steps, VirtualClock, const
from gpustack_vendors.cambricon import cndev
from gpustack_vendors.cambricon.cndev import (
    CNDEV_ERROR_INVALID_DEVICE_ID,
    CNDEV_HEALTH_STATE_DEVICE_GOOD,
    CNDevError,
)

MIB_IN_KIB: Final = 1024


@dataclass(frozen=True)
class CambriconProc:
    """A process on one MLU: memory in KiB, and its MLU share (``None``: no utilization row)."""

    pid: int
    physical_kib: Steps[int]
    ipu_util: Steps[int | None]
    virtual_kib: int = 0


@dataclass(frozen=True)
class CambriconCard:
    """One MLU as CNDev reports it."""

    uuid: str
    """The bare UUID ``cndevGetUUID`` writes (tools print it with an ``MLU-`` prefix)."""
    name: str
    bus_id: str
    memory_total_mib: int
    reserved_mib: int
    memory_used_mib: Steps[int]
    utilization: Steps[int]
    chip_celsius: Steps[int]
    board_celsius: Steps[int]
    power_w: Steps[int]
    power_cap_w: int
    tdp_w: int
    pci_device_id: int
    procs: tuple[CambriconProc, ...] = ()


@dataclass(frozen=True)
class CambriconNode:
    """The MLU driver version and the cards, in CNDev index order."""

    driver: tuple[int, int, int]
    mcu: tuple[int, int, int]
    cards: tuple[CambriconCard, ...]


class CndevAnswers:
    """CNDev's answers for ``node``, in the binding's Python terms, for ``FakeCndevLib``.

    The handle of the device at index *i* is *i*, as Cambricon's own mock library hands out.
    """

    def __init__(self, node: CambriconNode, clock: VirtualClock) -> None:
        self.node = node
        self.clock = clock

    def __call__(self, name: str, args: tuple[object, ...]) -> object:
        """One C call's answer; an unknown handle is ``CNDEV_ERROR_INVALID_DEVICE_ID``."""
        t = self.clock()
        if name in {"cndevInit", "cndevRelease"}:
            return None
        if name == "cndevGetDeviceCount":
            return len(self.node.cards)
        if name == "cndevGetDeviceHandleByIndex":
            self._card(args[0])
            return args[0]
        card = self._card(args[0])
        version = int(args[1]) if len(args) > 1 and isinstance(args[1], int) else 0
        answer = self._per_card(name, card, version, t)
        if answer is None:
            raise AttributeError(name)
        return answer

    def _card(self, handle: object) -> CambriconCard:
        if not isinstance(handle, int) or not 0 <= handle < len(self.node.cards):
            raise CNDevError(CNDEV_ERROR_INVALID_DEVICE_ID)
        return self.node.cards[handle]

    def _per_card(self, name: str, card: CambriconCard, version: int, t: float) -> object:
        if name == "cndevGetUUID":
            return cndev.cndevUUID_t(version, card.uuid.encode(), 0)
        if name == "cndevGetCardNameStringByDevId":
            return card.name
        if name == "cndevGetPCIeInfoV2":
            return _pcie(card)
        if name == "cndevGetMemoryUsageV2":
            info = cndev.cndevMemoryInfoV2_t()
            info.physicalMemoryTotal = card.memory_total_mib
            info.physicalMemoryUsed = card.memory_used_mib.at(t)
            info.reservedMemory = card.reserved_mib
            info.virtualMemoryTotal = card.memory_total_mib
            info.virtualMemoryUsed = card.memory_used_mib.at(t)
            return info
        if name == "cndevGetVersionInfo":
            return cndev.cndevVersionInfo_t(version, *self.node.mcu, *self.node.driver)
        if name == "cndevGetCardHealthState":
            good = CNDEV_HEALTH_STATE_DEVICE_GOOD
            return cndev.cndevCardHealthState_t(version, good, good, 4)  # driver RUNNING
        if name == "cndevGetDeviceUtilizationInfo":
            util = cndev.cndevUtilizationInfo_t()
            util.version = version
            util.averageCoreUtilization = card.utilization.at(t)
            return util
        if name == "cndevGetTemperatureInfo":
            temperature = cndev.cndevTemperatureInfo_t()
            temperature.version = version
            temperature.board = card.board_celsius.at(t)
            temperature.chip = card.chip_celsius.at(t)
            temperature.cluster[0] = card.chip_celsius.at(t)
            return temperature
        if name == "cndevGetDevicePowerInfo":
            power = cndev.cndevDevicePowerInfo_t()
            power.usage = card.power_w.at(t)
            power.cap = card.power_cap_w
            power.tdp = card.tdp_w
            power.maxPower = card.tdp_w
            return power
        return _process_rows(name, card, version, t)


def _process_rows(name: str, card: CambriconCard, version: int, t: float) -> object:
    """The two process lists; a utilization row only for a process busy at ``t``."""
    if name == "cndevGetProcessInfo":
        return [
            cndev.cndevProcessInfo_t(version, p.pid, p.physical_kib.at(t), p.virtual_kib)
            for p in card.procs
        ]
    if name == "cndevGetProcessUtilization":
        rows = []
        for p in card.procs:
            util = p.ipu_util.at(t)
            if util is not None:
                rows.append(cndev.cndevProcessUtilization_t(version, p.pid, util, 0, 0, 0, 0))
        return rows
    return None


def _pcie(card: CambriconCard) -> cndev.cndevPCIeInfoV2_t:
    domain, bus, rest = card.bus_id.split(":")
    device, function = rest.split(".")
    info = cndev.cndevPCIeInfoV2_t()
    info.vendor = 0xCABC
    info.subsystemVendor = 0xCABC
    info.deviceId = card.pci_device_id
    info.subsystemId = card.pci_device_id
    info.domain = int(domain, 16)
    info.bus = int(bus, 16)
    info.device = int(device, 16)
    info.function = int(function, 16)
    info.slotId = 0xFFFF  # the header's "invalid slot ID": a PCIe card, not OAM
    return info


RUNTIME_TEST = (
    "github.com/gpustack/runtime @88026d62a1c1 (Apache-2.0): "
    "tests/gpustack_runtime/detector/test_cambricon.py (MLU- prefixed UUIDs, driver 5.10.22, "
    "49152 MiB read as MiB unconverted, bus 0000:1f:00.0, chip temperature, power usage in W)"
)
CNDEV_HEADER = (
    "github.com/gpustack/gpustack-operator binding/cndev/cndev.h: cndevProcessInfo_t "
    "physicalMemoryUsed 'unit: KiB'; cndevProcessUtilization_t ipuUtil; "
    "CNDEV_ERROR_INSUFFICIENT_SPACE sets the count to the rows held; version is an input"
)
OPERATOR_ADAPTER = (
    "github.com/gpustack/gpustack-operator pkg/devicemanager/detector/cambricon/process.go: "
    "KiB << 10 into bytes; a listed PID without a utilization row is an idle process (0)"
)
CAMBRICON_MOCK = (
    "github.com/Cambricon/cambricon-k8s-device-plugin pkg/cndev/mock/cndev.c: "
    "cndevGetDeviceHandleByIndex writes handle = index"
)
MLU370_X8 = (
    "Cambricon MLU370-X8 public specification (48 GB LPDDR5, read as 49152 MiB; 250 W board "
    "power), not checked against a captured card; PCIe vendor 0xcabc from "
    "shared/reference/operator.md §6"
)

WARM_UP = 30.0
"""When the synthesized workload starts running: samples at 0 and 15 s see it idle."""

HELD_KIB = 8_389_120
"""8192.5 MiB: not a whole MiB, so the Device Manager's round-up shows (8193 MiB)."""
SMALL_KIB = 1_536
"""1.5 MiB of a second, idle tenant: 2 MiB rounded up."""
BASE_USED_MIB = 512


def mlu370_node() -> CambriconNode:
    """Two MLU370-X8 cards: card 0 carries a job that warms up at 30 s and an idle tenant."""
    busy = CambriconCard(
        uuid="5a3c1f0e-7b2d-4c9a-8e61-0d4f2b7a9c13",
        name="MLU370-X8",
        bus_id="0000:1f:00.0",
        memory_total_mib=49152,
        reserved_mib=256,
        memory_used_mib=const(BASE_USED_MIB + 8193 + 2),
        utilization=Steps(((0.0, 0), (WARM_UP, 68))),
        chip_celsius=Steps(((0.0, 38), (WARM_UP, 61))),
        board_celsius=Steps(((0.0, 33), (WARM_UP, 47))),
        power_w=Steps(((0.0, 32), (WARM_UP, 187))),
        power_cap_w=250,
        tdp_w=250,
        pci_device_id=0x0370,
        procs=(
            CambriconProc(6101, const(HELD_KIB), Steps(((0.0, None), (WARM_UP, 71)))),
            CambriconProc(6102, const(SMALL_KIB), const(None)),
        ),
    )
    idle = CambriconCard(
        uuid="c8e2904b-13f5-4a6d-b27e-9f60d1c4e385",
        name="MLU370-X8",
        bus_id="0000:20:00.0",
        memory_total_mib=49152,
        reserved_mib=256,
        memory_used_mib=const(BASE_USED_MIB),
        utilization=const(0),
        chip_celsius=const(36),
        board_celsius=const(32),
        power_w=const(30),
        power_cap_w=250,
        tdp_w=250,
        pci_device_id=0x0370,
    )
    return CambriconNode(driver=(5, 10, 22), mcu=(1, 1, 4), cards=(busy, idle))


NODES = (
    NodeSpec[CambriconNode](
        "mlu370-x8.yaml",
        "2x Cambricon MLU370-X8 (49152 MiB each; MLU driver 5.10.22): on card 0 a process holds "
        "8389120 KiB (8192.5 MiB) idle with no utilization row, then runs at 71 % of the MLU "
        "while power rises 32 -> 187 W; an idle second tenant holds 1536 KiB; card 1 is idle",
        (RUNTIME_TEST, MLU370_X8, CNDEV_HEADER, OPERATOR_ADAPTER, CAMBRICON_MOCK),
        mlu370_node(),
    ),
)
