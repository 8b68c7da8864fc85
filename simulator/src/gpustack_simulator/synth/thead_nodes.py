"""The T-Head PPU nodes we synthesize, from public captures (sources in the provenance).

Card facts (PPU-ZW810E, 97920 MiB, 32768 cores, driver 1.4.1-816bc0, HGGC 12.3, idle power and
temperature, two cards' UUIDs and bus ids) come from gpustack-runtime's sample of a real PPU
host; two more cards are laid out in the same pattern. The behaviour comes from the reference
notes: HGML is an NVML clone (so MIG works as NVIDIA's, handle per instance), and the versioned
process-utilization call is an exported stub answering NOT_SUPPORTED. The MIG profile names and
sizes are synthesized by analogy with NVML's naming; no PPU MIG capture exists to copy.
"""

from __future__ import annotations

from gpustack_simulator.synth.hgml import PpuCard, PpuNode
from gpustack_simulator.synth.nvml import Mig, Proc
from gpustack_simulator.synth.timeline import NodeSpec, Steps, const

MIB = 1 << 20

RUNTIME = "github.com/gpustack/runtime @88026d62a1c1 (Apache-2.0)"
VENDORS_THEAD = (
    "shared/reference/vendors.md (T-Head PPU): HGML is an NVML clone with NVML's codes; MIG uses "
    "the same calls and handle model as NVIDIA; the versioned process-utilization symbol is an "
    "exported stub answering NOT_SUPPORTED, hgmlDeviceGetProcessUtilization answers"
)
SPEC_CAPABILITIES = (
    "shared/spec/instance-metrics-reference.md (Manufacturer capabilities): T-Head measures "
    "per-process memory and compute on logical slices; a MIG partition reports memory only"
)
MIG_BY_ANALOGY = (
    "MIG profile names (2g.48gb, 1g.24gb) and sizes synthesized by analogy with NVML's MIG "
    "naming: no PPU MIG capture is public"
)

WARM_UP = 30.0
"""When the synthesized workload starts its kernels: samples at 0 and 15 s see it idle."""

ZW810E = "PPU-ZW810E"
ZW810E_BYTES = 97_920 * MIB
ZW810E_CORES = 32_768
IDLE_MIB = 2
"""What the sampled idle cards report used."""

# (uuid, bus id, °C, W): cards 0 and 1 are the sampled pair; 2 and 3 follow their pattern.
PPU_NODE = (
    ("GPU-011ef111-8330-0426-0000-00006093bb5b", "0000:05:00.0", 29, 58),
    ("GPU-011ef111-8251-0426-0000-00006035ca38", "0000:0b:00.0", 32, 59),
    ("GPU-011ef111-8412-0426-0000-0000612a7c91", "0000:85:00.0", 30, 57),
    ("GPU-011ef111-8503-0426-0000-000061b3d4e2", "0000:8b:00.0", 31, 60),
)
MIG_2G = "MIG-011ef111-8503-5426-8000-0000d4e20000"
MIG_1G = "MIG-011ef111-8503-5426-8000-0000d4e20001"
MIG_2G_BYTES = 48_896 * MIB
MIG_1G_BYTES = 24_448 * MIB
MIG_2G_USED = Steps(((0.0, 20_480 * MIB), (WARM_UP, 28_672 * MIB)))


def _mw(watts: float) -> int:
    return round(watts * 1000)


def _used(*procs: Proc, t: float) -> int:
    return IDLE_MIB * MIB + sum(proc.memory.at(t) or 0 for proc in procs)


def ppu_card(index: int) -> PpuCard:
    """One card of the 4x PPU node, with its workload.

    Card 0: a process holding 40 GiB with no utilization sample, then at 71 % SM. Card 1: two
    slice tenants, one idle then busy. Card 2: a process whose memory HGML cannot size
    (``usedGpuMemory`` not available) beside an idle one. Card 3: MIG mode, a busy 2g.48gb in
    slot 0, an idle 1g.24gb in slot 1, slots 2-6 empty.
    """
    uuid, bus_id, temperature, idle_w = PPU_NODE[index]
    util: Steps[int] = const(0)
    temp: Steps[int] = const(temperature)
    power = const(_mw(idle_w))
    procs: tuple[Proc, ...] = ()
    mig: tuple[Mig, ...] = ()
    if index == 0:
        procs = (Proc(4242, const(40_960 * MIB), Steps(((0.0, None), (WARM_UP, 71)))),)
        util = Steps(((0.0, 0), (WARM_UP, 71)))
        temp = Steps(((0.0, temperature), (WARM_UP, 57)))
        power = Steps(((0.0, _mw(idle_w)), (WARM_UP, _mw(302.5))))
    elif index == 1:
        procs = (
            Proc(5150, const(30_720 * MIB), const(33)),
            Proc(5151, const(12_288 * MIB), Steps(((0.0, None), (WARM_UP, 18)))),
        )
        util = Steps(((0.0, 33), (WARM_UP, 51)))
        power = Steps(((0.0, _mw(188.0)), (WARM_UP, _mw(241.5))))
        temp = const(46)
    elif index == 2:
        procs = (
            Proc(5250, const(None), const(12)),
            Proc(5251, const(8_192 * MIB)),
        )
        util, power, temp = const(12), const(_mw(96.5)), const(38)
    else:
        procs = (Proc(6001, Steps(MIG_2G_USED.points), gpu_instance=0, compute_instance=0),)
        mig = (
            Mig(0, MIG_2G, "2g.48gb", MIG_2G_BYTES, MIG_2G_USED),
            Mig(1, MIG_1G, "1g.24gb", MIG_1G_BYTES),
        )
        power = Steps(((0.0, _mw(idle_w)), (WARM_UP, _mw(214.0))))
    used = Steps(tuple((t, _used(*procs, t=t)) for t in (0.0, WARM_UP)))
    return PpuCard(
        uuid=uuid,
        name=ZW810E,
        bus_id=bus_id,
        total_bytes=ZW810E_BYTES,
        used_bytes=used,
        util=util,
        temperature=temp,
        power_mw=power,
        cores=ZW810E_CORES,
        procs=procs,
        mig=mig,
    )


NODES = (
    NodeSpec[PpuNode](
        "ppu-zw810e-4x.yaml",
        "4x T-Head PPU-ZW810E (97920 MiB, 32768 cores; driver 1.4.1-816bc0, HGGC 12.3): a "
        "process holding 40 GiB idle, then at 71 % SM (read through the plain process-"
        "utilization call: the versioned one is a NOT_SUPPORTED stub); two slice tenants on card "
        "1; a process HGML cannot size on card 2; card 3 in MIG mode with a busy 2g.48gb and an "
        "idle 1g.24gb, slots 2-6 empty",
        (
            RUNTIME + ": tests/gpustack_runtime/detector/samples/detect_output_thead_ppu.json "
            "(PPU-ZW810E, 97920 MiB, 32768 cores, driver 1.4.1-816bc0, runtime 12.3.0, "
            "UUIDs and bus ids of two cards, 29/32 C, 58/59 W, 2 MiB used idle)",
            VENDORS_THEAD,
            SPEC_CAPABILITIES,
            MIG_BY_ANALOGY,
        ),
        PpuNode("1.4.1-816bc0", 12030, tuple(ppu_card(i) for i in range(len(PPU_NODE)))),
    ),
)
