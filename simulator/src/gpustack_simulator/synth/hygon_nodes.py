"""The Hygon DCU nodes we synthesize, and how: the recorder over our bindings over C-level fakes.

Card facts come from public sources named in each provenance: the BW C-3000's geometry (80 CUs,
65520 MiB, four slices, the three partition profiles, GI ids 3-6 at placements 0-3) from the
reference operator's hardware measurements; the quarter-card slice's 4236 MiB, its library
compute of 11 % (restated as 44 for a 25 % slice), board power 93 → 223 W, and the partition
reading 85 % while its idle siblings read 0 from the instance-metrics reference; the K100_AI
cards from gpustack-runtime's detection sample. Names, PIDs, bus ids and unique ids of the BW
cards, temperatures, busy percentages and the driver-dependent sentinel on the K100_AI node are
illustrative, laid on top to exercise what the spec describes.
"""

from __future__ import annotations

from gpustack_simulator.synth.amdsmi import AmdProc
from gpustack_simulator.synth.hygon import (
    MIB,
    HygonCard,
    HygonMig,
    HygonNode,
    HygonProfile,
)
from gpustack_simulator.synth.timeline import NodeSpec, Steps, const
from gpustack_vendors.bindings.rocm_smi import CU_OCCUPANCY_INVALID

OPERATOR_MIG = (
    "github.com/gpustack/gpustack-operator specs/2026-08-30-hygon-dcu-mig-partitioning.md "
    "(measured on an 8-card BW C-3000, gfx936, DTK 25.04.4): node-wide mode; profiles 2g.15gb "
    "(1 slice, 20 CU, 16380 MiB, max 4), 4g.31gb (2 slices, 40 CU, 32760 MiB, max 2), 8g.63gb "
    "(4 slices, 80 CU, 65520 MiB, max 1); profile argument = slices - 1 with index 2 "
    "unsupported; four 2g.15gb GIs came back as ids 3, 4, 5, 6 at placements 0-3; no "
    "nvmlDeviceGetUUID (the UUID is the CI conf's mig_uuid line)"
)
OPERATOR_PARTITION_COMPUTE = (
    "github.com/gpustack/gpustack-operator pkg/devicemanager/detector/hygon "
    "MonitorAcceleratorPartitions: memory and compute read on the partition's own handle "
    "(nvmlDeviceGetMemoryInfo, nvmlDeviceGetUtilizationRates); MIG device index node-global"
)
SPEC_HYGON = (
    "shared/spec/instance-metrics-reference.md (Manufacturer capabilities): on a BW card "
    "(gfx936, DTK 25.04) a quarter-card slice's process read 4236 MiB (hy-smi --showpids and "
    "the kernel's vram_<gpuid> agree); its library compute read 11 (44 restated for a 25 % "
    "slice), 0 while it merely held its allocation; board power 93 W -> 223 W; a partition "
    "running a kernel read 85 % while its idle siblings read 0"
)
SPEC_DRIVER_DEPENDENT = (
    "shared/spec/instance-metrics-reference.md (Manufacturer capabilities): AMD and Hygon read "
    "compute from cu_occupancy, which a GFX revision may not measure: the invalidation sentinel "
    "for every process while memory reads normally"
)
RUNTIME_K100 = (
    "github.com/gpustack/runtime @88026d62a1c1 (Apache-2.0): "
    "tests/gpustack_runtime/detector/samples/detect_output_hygon_k100ai.json (K100_AI, gfx928, "
    "65520 MiB, 2 MiB used idle, bus ids 0000:07:00.0 and 0000:0a:00.0, unique ids "
    "7100f95cee823041 and 715322fd7cac4121, 60/62 C, 104/107 W, DTK 24.04.3, driver version "
    "unreadable)"
)
GPUSTACK_HYSMI = (
    "github.com/gpustack/gpustack @8b48d6daa9a4 (Apache-2.0): "
    "tests/detectors/rocm_smi/data/hygon-gpu-24.04.3-rocm-smi.json (hy-smi: 65520 MiB VRAM, "
    "2 MiB used idle, edge/junction/mem sensors, card series masked as 'DCU xxxx')"
)
ROCM_SMI_KFD = (
    "github.com/ROCm/rocm_smi_lib src/rocm_smi_kfd.cc GetProcessInfoForPID: cu_occupancy is "
    "CUs with waves in flight * 100 / the device's CU count; a missing stats_<gpu>/cu_occupancy "
    "file gives CU_OCCUPANCY_INVALID"
)

WARM_UP = 30.0
"""When each synthesized kernel starts: samples at 0 and 15 s see it idle."""

BW_NAME = "BW C-3000"
BW_BYTES = 65520 * MIB
IDLE_BYTES = 2 * MIB
"""What a DCU reports used with nothing running (hy-smi and the runtime sample: 2 MiB)."""

BW_PROFILES = (
    HygonProfile(0, 3, 1, 20, 16380, 4, "MIG 2g.15gb"),
    HygonProfile(1, 1, 2, 40, 32760, 2, "MIG 4g.31gb"),
    HygonProfile(3, 0, 4, 80, 65520, 1, "MIG 8g.63gb"),
)
"""The profiles the operator measured; index 2 (three slices) is unsupported on BW."""

SLICE_PID = 9101
"""The quarter-card slice's process: 4236 MiB, 0 % while holding, 11 % of the card's CUs once
its kernel runs (a 25 % slice then reads ``ceil(11 × 100 / 25) = 44``)."""
SLICE_MIB = 4236
SLICE_CU = 11
NEIGHBOUR_PID = 9102
NEIGHBOUR_MIB = 8192


def _mw(watts: float) -> int:
    return round(watts * 1_000_000)


def bw_sliced_card() -> HygonCard:
    """A BW card carved into logical slices: the 11 % process and an idle neighbour."""
    held = (SLICE_MIB + NEIGHBOUR_MIB) * MIB
    return HygonCard(
        bus_id="0000:1b:00.0",
        unique_id=0x72A1C4E9B3D05F81,
        name=BW_NAME,
        total_bytes=BW_BYTES,
        used_bytes=const(IDLE_BYTES + held),
        busy=Steps(((0.0, 0), (WARM_UP, 97))),
        edge_millicelsius=Steps(((0.0, 41_000), (WARM_UP, 58_000))),
        power_microwatts=Steps(((0.0, _mw(93)), (WARM_UP, _mw(223)))),
        procs=(
            AmdProc(SLICE_PID, const(SLICE_MIB * MIB), Steps(((0.0, 0), (WARM_UP, SLICE_CU))), 640),
            AmdProc(NEIGHBOUR_PID, const(NEIGHBOUR_MIB * MIB)),
        ),
    )


BUSY_MIG = "5b3c9e1a-7d2f-4c86-9a0e-1f2b3c4d5e60"
IDLE_MIG = "5b3c9e1a-7d2f-4c86-9a0e-1f2b3c4d5e61"
EMPTY_MIGS = ("5b3c9e1a-7d2f-4c86-9a0e-1f2b3c4d5e62", "5b3c9e1a-7d2f-4c86-9a0e-1f2b3c4d5e63")
WIDE_MIG = "6c4d0f2b-8e3a-4d97-8b1f-2a3b4c5d6e70"
BUSY_PID = 9201
IDLE_PID = 9202
BUSY_MIB = 9216
IDLE_MIB = 2048
PARTITION_UTIL = 85
"""What the busy partition's own handle reads once its kernel runs; its siblings read 0."""


def bw_mig_cards() -> tuple[HygonCard, HygonCard]:
    """Two BW cards on a node in MIG mode.

    Card 0 holds four ``2g.15gb`` (GI 3-6 at placements 0-3): GI 3 runs a kernel (85 % on its
    own handle), GI 4 holds memory idle, GI 5 and 6 are empty. Card 1 holds one ``4g.31gb``.
    The kernel's process occupies 85 % of the partition's 20 CUs, 21 % of the card's 80.
    """
    busy = HygonMig(
        3,
        0,
        3,
        0,
        BUSY_MIG,
        const(BUSY_MIB * MIB),
        Steps(((0.0, 0), (WARM_UP, PARTITION_UTIL))),
    )
    idle = HygonMig(4, 0, 3, 1, IDLE_MIG, const(IDLE_MIB * MIB))
    empty = tuple(HygonMig(5 + i, 0, 3, 2 + i, uuid) for i, uuid in enumerate(EMPTY_MIGS))
    card0 = HygonCard(
        bus_id="0000:1b:00.0",
        unique_id=0x72A1C4E9B3D07B23,
        name=BW_NAME,
        total_bytes=BW_BYTES,
        used_bytes=const(IDLE_BYTES + (BUSY_MIB + IDLE_MIB) * MIB),
        busy=Steps(((0.0, 0), (WARM_UP, 25))),
        edge_millicelsius=Steps(((0.0, 42_000), (WARM_UP, 51_000))),
        power_microwatts=Steps(((0.0, _mw(93)), (WARM_UP, _mw(171)))),
        procs=(
            AmdProc(
                BUSY_PID,
                const(BUSY_MIB * MIB),
                Steps(((0.0, 0), (WARM_UP, PARTITION_UTIL * 20 // 80))),
                520,
            ),
            AmdProc(IDLE_PID, const(IDLE_MIB * MIB)),
        ),
        migs=(busy, idle, *empty),
    )
    card1 = HygonCard(
        bus_id="0000:3d:00.0",
        unique_id=0x72A1C4E9B3D08C34,
        name=BW_NAME,
        total_bytes=BW_BYTES,
        used_bytes=const(IDLE_BYTES),
        busy=const(0),
        edge_millicelsius=const(40_000),
        power_microwatts=const(_mw(91)),
        migs=(HygonMig(1, 0, 1, 0, WIDE_MIG),),
    )
    return card0, card1


K100_NAME = "K100_AI"
K100_PIDS = (9301, 9302)


def k100_cards() -> tuple[HygonCard, HygonCard]:
    """Two K100_AI cards from the runtime's sample, card 0 running two processes.

    This driver does not measure their ``cu_occupancy`` (the sentinel); their memory reads.
    """
    card0 = HygonCard(
        bus_id="0000:07:00.0",
        unique_id=0x7100F95CEE823041,
        name=K100_NAME,
        total_bytes=65520 * MIB,
        used_bytes=const(IDLE_BYTES + (6144 + 1024) * MIB),
        busy=const(88),
        edge_millicelsius=const(60_000),
        power_microwatts=const(_mw(104)),
        procs=(
            AmdProc(K100_PIDS[0], const(6144 * MIB), const(CU_OCCUPANCY_INVALID), 410),
            AmdProc(K100_PIDS[1], const(1024 * MIB), const(CU_OCCUPANCY_INVALID)),
        ),
    )
    card1 = HygonCard(
        bus_id="0000:0a:00.0",
        unique_id=0x715322FD7CAC4121,
        name=K100_NAME,
        total_bytes=65520 * MIB,
        used_bytes=const(IDLE_BYTES),
        busy=const(0),
        edge_millicelsius=const(62_000),
        power_microwatts=const(_mw(107)),
    )
    return card0, card1


NODES = (
    NodeSpec[HygonNode](
        "bw-c3000.yaml",
        "Hygon BW C-3000 (gfx936, 80 CUs, 65520 MiB; DTK 25.04, MIG off) carved into logical "
        "slices: a quarter-card slice's process holds 4236 MiB idle (cu_occupancy 0), then runs "
        "a kernel at 11 % of the card's CUs while board power rises 93 -> 223 W; a second "
        "slice's process holds 8192 MiB idle",
        (SPEC_HYGON, OPERATOR_MIG, ROCM_SMI_KFD, GPUSTACK_HYSMI),
        HygonNode((bw_sliced_card(),), None, mig=False, profiles=BW_PROFILES, dtk="25.04"),
    ),
    NodeSpec[HygonNode](
        "bw-c3000-mig.yaml",
        "2x Hygon BW C-3000 on a node in MIG mode: card 0 holds four 2g.15gb (GI 3-6 at "
        "placements 0-3, 16380 MiB and 20 CUs each) of which GI 3 runs a kernel read at 85 % "
        "on its own handle while its siblings read 0 (GI 4 holding 2048 MiB idle); card 1 holds "
        "one 4g.31gb; the MIG device index is node-global",
        (OPERATOR_MIG, OPERATOR_PARTITION_COMPUTE, SPEC_HYGON, GPUSTACK_HYSMI),
        HygonNode(bw_mig_cards(), None, mig=True, profiles=BW_PROFILES, dtk="25.04.4"),
    ),
    NodeSpec[HygonNode](
        "k100-ai.yaml",
        "2x Hygon K100_AI (gfx928, 65520 MiB; DTK 24.04.3, no libhydmi_mig): the driver-"
        "dependent case the other way: ROCm SMI answers CU_OCCUPANCY_INVALID for both processes "
        "on card 0 while their VRAM reads normally (illustrative: no Hygon host has been "
        "recorded answering the sentinel)",
        (RUNTIME_K100, GPUSTACK_HYSMI, SPEC_DRIVER_DEPENDENT, ROCM_SMI_KFD),
        HygonNode(k100_cards(), None, mig=None, dtk="24.04.3"),
    ),
)
