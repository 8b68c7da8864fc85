"""The MetaX nodes we synthesize, behind MXSML's C ABI (sources in the provenance).

:class:`MxsmlAnswers` is the answer source for
:class:`~gpustack_simulator.replay.mxsml_lib.FakeMxsmlLib`, so synthesizing a recording runs our
real MXSML binding (its full-buffer retry, the power probe's ``INSUFFICIENT_SIZE``) exactly as
replaying it does. Units are MXSML's own: device memory KiB, process memory bytes, rail power mW,
hotspot hundredths of a degree.

``mxSmlDeviceInfo_t.gpuId`` is the physical id, here the index plus one (the C500 capture's
``card_id`` counts from 1), while process rows name the device by its index: a backend matching
the wrong one attributes nothing, or card 1's processes to card 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gpustack_simulator.synth.timeline import NodeSpec, Steps, VirtualClock, const
from gpustack_vendors.metax import mxsml
from gpustack_vendors.metax.mxsml import (
    MXSML_ERROR_INVALID_DEVICE_ID,
    MXSML_ERROR_OPERATION_NOT_SUPPORT,
    MXSML_TEMPERATURE_HOTSPOT,
    MXSML_USAGE_XCORE,
    MXSML_VERSION_DRIVER,
    MXSMLError,
)

KIB_PER_MIB: Final = 1024
MIB: Final = 1 << 20
BRAND_C: Final = 2


@dataclass(frozen=True)
class MetaxProc:
    """A process and the bytes it holds on each device index it uses (absent: not running)."""

    pid: int
    name: str
    memory_bytes: dict[int, Steps[int | None]]


@dataclass(frozen=True)
class MetaxCard:
    """One MetaX GPU as MXSML reports it."""

    uuid: str
    name: str
    bus_id: str
    physical_id: int
    vram_total_mib: int
    vram_used_mib: Steps[int]
    xcore_percent: Steps[int]
    hotspot_centi: Steps[int]
    rails_mw: Steps[tuple[tuple[int, int, int], ...]]
    """(mV, mA, mW) per board power rail."""


@dataclass(frozen=True)
class MetaxNode:
    """Driver and MACA versions, the cards in index order, and the node's processes."""

    driver: str
    maca: str
    cards: tuple[MetaxCard, ...]
    procs: tuple[MetaxProc, ...] = ()


class MxsmlAnswers:
    """MXSML's answers for ``node``, in the binding's Python terms, for ``FakeMxsmlLib``."""

    def __init__(self, node: MetaxNode, clock: VirtualClock) -> None:
        self.node = node
        self.clock = clock

    def __call__(self, name: str, args: tuple[object, ...]) -> object:
        """One C call's answer; an index past the devices is ``INVALID_DEVICE_ID``."""
        t = self.clock()
        if name == "mxSmlInit":
            return None
        if name == "mxSmlGetDeviceCount":
            return len(self.node.cards)
        if name == "mxSmlGetMacaVersion":
            return self.node.maca
        index, card = self._card(args[0])
        return self._per_card(name, index, card, args[1:], t)

    def _per_card(
        self, name: str, index: int, card: MetaxCard, rest: tuple[object, ...], t: float
    ) -> object:
        if name == "mxSmlGetDeviceVersion":
            if rest != (MXSML_VERSION_DRIVER,):
                raise MXSMLError(MXSML_ERROR_OPERATION_NOT_SUPPORT)
            return self.node.driver
        if name == "mxSmlGetDeviceInfo":
            return mxsml.mxSmlDeviceInfo_t(
                index,
                0,
                card.bus_id.encode(),
                card.physical_id,
                0,
                card.uuid.encode(),
                BRAND_C,
                mxsml.MXSML_VIRTUALIZATION_MODE_NONE,
                card.name.encode(),
            )
        if name == "mxSmlGetMemoryInfo":
            info = mxsml.mxSmlMemoryInfo_t()
            info.vramTotal = card.vram_total_mib * KIB_PER_MIB
            info.vramUse = card.vram_used_mib.at(t) * KIB_PER_MIB
            return info
        if name == "mxSmlGetDeviceIpUsage":
            if rest != (MXSML_USAGE_XCORE,):
                raise MXSMLError(MXSML_ERROR_OPERATION_NOT_SUPPORT)
            return card.xcore_percent.at(t)
        if name == "mxSmlGetTemperatureInfo":
            if rest != (MXSML_TEMPERATURE_HOTSPOT,):
                raise MXSMLError(MXSML_ERROR_OPERATION_NOT_SUPPORT)
            return card.hotspot_centi.at(t)
        if name == "mxSmlGetBoardPowerInfo":
            return [mxsml.mxSmlBoardWayElectricInfo_t(*rail) for rail in card.rails_mw.at(t)]
        if name == "mxSmlGetSingleGpuProcess_v3":
            return self._processes(index, t)
        raise AttributeError(name)

    def _card(self, index: object) -> tuple[int, MetaxCard]:
        if not isinstance(index, int) or not 0 <= index < len(self.node.cards):
            raise MXSMLError(MXSML_ERROR_INVALID_DEVICE_ID)
        return index, self.node.cards[index]

    def _processes(self, index: int, t: float) -> list[mxsml.mxSmlProcessInfo_v3_t]:
        """Every process using device ``index``, each with an entry for every device it uses."""
        rows = []
        for proc in self.node.procs:
            held = {
                i: used
                for i, steps in sorted(proc.memory_bytes.items())
                if (used := steps.at(t)) is not None
            }
            if index not in held:
                continue
            row = mxsml.mxSmlProcessInfo_v3_t()
            row.processId = proc.pid
            row.processName = proc.name.encode()
            row.gpuNumber = len(held)
            for slot, (device, used) in enumerate(held.items()):
                entry = row.processGpuInfo[slot]
                entry.bdfId = self.node.cards[device].bus_id.encode()
                entry.gpuId = device  # the sequence index, not mxSmlDeviceInfo_t.gpuId
                entry.gpuMemoryUsage = used
                entry.dieId = 0
                entry.sgpuId = mxsml.SGPU_DISABLED
            rows.append(row)
        return rows


RUNTIME_C500 = (
    "github.com/gpustack/runtime @88026d62a1c1 (Apache-2.0): "
    "tests/gpustack_runtime/detector/samples/detect_output_metax_c500.json (driver 3.6.11, MACA "
    "3.5.3.18, 65536 MiB, 826 MiB used idle, 36/37 C, 71/57 W, bus 0000:0e:00.0 and "
    "0000:0f:00.0, card_id counting from 1)"
)
SPEC_C600 = (
    "shared/spec/instance-metrics-reference.md (Manufacturer capabilities): a MACA sample "
    "process holding an allocation on a C600-A read memoryUsedMiB 16, as mx-smi --show-process; "
    "MXSML serves no per-process utilization query"
)
MXSML_HEADER = (
    "github.com/gpustack/gpustack-operator binding/mxsml/MxSml.h: mxSmlMemoryInfo_t 'unit: KB'; "
    "mxSmlProcessGpuInfo_v3_t gpuMemoryUsage 'in bytes', gpuId 'sequence label', sgpuId -1 "
    "when sGPU mode is disabled"
)
OPERATOR_METAX = (
    "github.com/gpustack/gpustack-operator pkg/devicemanager/detector/metax/process.go: rows "
    "match the device index, not mxSmlDeviceInfo_t.gpuId (the physical id); compute unsupported"
)
PYMXSML = (
    "github.com/gpustack/runtime gpustack_runtime/detector/pymxsml: mxSmlGetBoardPowerInfo "
    "expects INSUFFICIENT_SIZE on its size-0 probe; rail power in mW, summed"
)

WARM_UP = 30.0
"""When the second workload starts on card 1: samples at 0 and 15 s see it idle."""

IDLE_USED_MIB = 826
HELD_BYTES = 16 * MIB
"""The C600-A sample process's allocation: 16 MiB."""
JOB_BYTES = 4096 * MIB


def c600_node() -> MetaxNode:
    """Two C600-class cards: a MACA sample holds 16 MiB on card 0; a job starts on card 1 at 30 s.

    The C600's own capacity is not in the sources; the cards report the C500 capture's 65536 MiB.
    """
    card0 = MetaxCard(
        uuid="GPU-6e1f9a42-3b7c-4d85-a0e9-52c8f1d7b364",
        name="MXC600",
        bus_id="0000:0e:00.0",
        physical_id=1,
        vram_total_mib=65536,
        vram_used_mib=const(IDLE_USED_MIB + HELD_BYTES // MIB),
        xcore_percent=const(0),
        hotspot_centi=const(3600),
        rails_mw=const(((12000, 4916, 59000), (3300, 3636, 12000))),
    )
    card1 = MetaxCard(
        uuid="GPU-b70d25c8-91e4-4f3a-86d2-0c5e7a4f19b8",
        name="MXC600",
        bus_id="0000:0f:00.0",
        physical_id=2,
        vram_total_mib=65536,
        vram_used_mib=Steps(((0.0, IDLE_USED_MIB), (WARM_UP, IDLE_USED_MIB + JOB_BYTES // MIB))),
        xcore_percent=Steps(((0.0, 0), (WARM_UP, 93))),
        hotspot_centi=Steps(((0.0, 3700), (WARM_UP, 6450))),
        rails_mw=Steps(
            (
                (0.0, ((12000, 3833, 46000), (3300, 3333, 11000))),
                (WARM_UP, ((12000, 22417, 269000), (3300, 3333, 11000))),
            )
        ),
    )
    return MetaxNode(
        driver="3.6.11",
        maca="3.5.3.18",
        cards=(card0, card1),
        procs=(
            MetaxProc(8101, "mxvectoradd", {0: const(HELD_BYTES)}),
            MetaxProc(8102, "python3", {1: Steps(((0.0, None), (WARM_UP, JOB_BYTES)))}),
        ),
    )


NODES = (
    NodeSpec[MetaxNode](
        "c600.yaml",
        "2x MetaX C600-class (MXC600; driver 3.6.11, MACA 3.5.3.18; 65536 MiB as the C500 capture "
        "reports, the C600's own capacity not being in the sources): a MACA sample process holds "
        "16 MiB on card 0 (mxSmlDeviceInfo gpuId 1, row gpuId 0); on card 1 a job holding 4096 "
        "MiB starts at 30 s with XCORE 0 -> 93 % and board power 57 -> 280 W; per-process "
        "compute is not served by MXSML",
        (RUNTIME_C500, SPEC_C600, MXSML_HEADER, OPERATOR_METAX, PYMXSML),
        c600_node(),
    ),
)
