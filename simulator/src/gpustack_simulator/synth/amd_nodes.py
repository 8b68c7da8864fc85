"""The AMD nodes we synthesize, each from public captures (sources in the provenance).

Card facts come from captures of real cards: names, CU counts, GFX versions, VRAM totals, bus
ids, driver and ROCm versions, idle power and temperature. The timelines are the behaviour the
spec describes, laid on top of those facts: a process holding memory idle, then running a
kernel while board power climbs, and an RDNA3 card whose driver does not measure
``cu_occupancy`` while memory reads normally.
"""

from __future__ import annotations

from gpustack_simulator.synth.amdsmi import AmdCard, AmdNode, AmdProc
from gpustack_simulator.synth.timeline import NodeSpec, Steps, const
from gpustack_vendors.bindings.rocm_smi import CU_OCCUPANCY_INVALID

MIB = 1 << 20

RUNTIME = "github.com/gpustack/runtime @88026d62a1c1 (Apache-2.0)"
GPUSTACK = "github.com/gpustack/gpustack @8b48d6daa9a4 (Apache-2.0)"
ROCM_SMI_KFD = (
    "github.com/ROCm/rocm_smi_lib src/rocm_smi_kfd.cc GetProcessInfoForPID: cu_occupancy is "
    "CUs with waves in flight * 100 / the device's CU count (rocm_smi.h: 'Compute Unit usage "
    "in percent'); a missing stats_<gpu>/cu_occupancy file gives CU_OCCUPANCY_INVALID"
)
AMD_SMI_VRAM = (
    "github.com/ROCm/amdsmi src/amd_smi/amd_smi.cc amdsmi_get_gpu_vram_usage: "
    "bytes / (1024 * 1024), so the header's 'MB' is MiB"
)
SPEC_RDNA3 = (
    "shared/spec/instance-metrics-reference.md (Manufacturer capabilities): an RDNA3 GPU "
    "returned the invalidation sentinel for every process while reporting memory normally"
)
KERNEL_GFX11 = (
    "linux drm/kfd 'Add CU occupancy support to GFX11' (2026-08, parent of the GFX12 commit "
    "fb1e65a80dd9): before it, GFX11 kernels publish no cu_occupancy file"
)


WARM_UP = 30.0
"""When the synthesized workload starts its kernel: samples at 0 and 15 s see it idle."""

MI300X = "AMD Instinct MI300X OAM"
MI300X_VRAM_MIB = 196592
"""What gpustack-runtime's MI300X sample reports per card (192 GB HBM3 less reserved)."""
MI300X_IDLE_USED_MIB = 284
# (bus id, ASIC serial, hotspot °C, idle W). Cards 0 and 1 are the captured pair; cards 2-7 are
# synthesized in the same bus spacing with idle figures in the captured range.
MI300X_NODE = (
    ("0000:26:00.0", 0x0CEE36DDC4255115, 34, 132),
    ("0000:46:00.0", 0xCFB3160D6C053160, 44, 141),
    ("0000:66:00.0", 0x1F6E0A7C3B2D4E51, 40, 138),
    ("0000:86:00.0", 0x2A7F1B8D4C3E5F62, 38, 135),
    ("0000:a6:00.0", 0x3B802C9E5D4F6073, 37, 134),
    ("0000:c6:00.0", 0x4C913DAF6E507184, 36, 133),
    ("0000:e6:00.0", 0x5DA24EB07F618295, 39, 137),
    ("0000:f6:00.0", 0x6EB35FC1807293A6, 41, 139),
)
HELD = 61_440 * MIB
"""What the idle-then-busy process on card 2 holds throughout."""


def mi300x_card(index: int) -> AmdCard:
    """One card of the 8x MI300X node, with its workload if it carries one.

    Card 2 runs the idle-then-kernel process; cards 3 and 4 share a tensor-parallel job (one PID
    on both), and card 3 has a second, idle tenant.
    """
    bus_id, serial, hotspot, idle = MI300X_NODE[index]
    used = const(MI300X_IDLE_USED_MIB)
    activity = const(0)
    temperature = const(hotspot)
    power = const(idle)
    procs: tuple[AmdProc, ...] = ()
    if index == 2:
        procs = (AmdProc(4242, const(HELD), Steps(((0.0, 0), (WARM_UP, 87)))),)
        used = const(MI300X_IDLE_USED_MIB + HELD // MIB)
        activity = Steps(((0.0, 0), (WARM_UP, 98)))
        temperature = Steps(((0.0, hotspot), (WARM_UP, 68)))
        power = Steps(((0.0, idle), (WARM_UP, 612)))
    elif index == 3:
        procs = (
            AmdProc(5150, const(40_960 * MIB), const(41), sdma_us=1_250),
            AmdProc(5151, const(8_192 * MIB), const(0)),
        )
        used = const(MI300X_IDLE_USED_MIB + 40_960 + 8_192)
        activity, temperature, power = const(44), const(55), const(402)
    elif index == 4:
        procs = (AmdProc(5150, const(40_960 * MIB), const(39), sdma_us=1_190),)
        used = const(MI300X_IDLE_USED_MIB + 40_960)
        activity, temperature, power = const(41), const(53), const(389)
    return AmdCard(
        bus_id=bus_id,
        market_name=MI300X,
        device_id=0x74A1,
        rev_id=0x00,
        subsystem_id=0x74A1,
        asic_serial=serial,
        oam_id=index,
        compute_units=304,
        gfx_version=0x942,
        vram_total_mib=MI300X_VRAM_MIB,
        vram_used_mib=used,
        gfx_activity=activity,
        hotspot_celsius=temperature,
        power_w=power,
        power_limit_w=750,
        instinct=True,
        edge_sensor=False,  # MI300X has no edge sensor: hotspot is the one to read
        procs=procs,
    )


RX7800XT_TOTAL_BYTES = 17_163_091_968
"""``VRAM Total Memory (B)`` in the rocm-smi capture: exactly 16368 MiB."""
RX7800XT_USED_BYTES = 11_615_076_352
"""``VRAM Total Used Memory (B)`` in the same capture: exactly 11077 MiB."""


def rx7800xt_card() -> AmdCard:
    """The captured RX 7800 XT (unique id 0x5c88007d760374f3 in both captures) under load.

    Both processes hold memory, and ROCm SMI reports ``CU_OCCUPANCY_INVALID`` for each: the
    GFX11 kernel publishes no ``cu_occupancy`` file.
    """
    return AmdCard(
        bus_id="0000:04:00.0",
        market_name="AMD Radeon RX 7800 XT",
        device_id=0x747E,
        rev_id=0xC8,
        subsystem_id=0x7801,
        asic_serial=0x5C88007D760374F3,
        oam_id=None,
        compute_units=60,
        gfx_version=0x1101,
        vram_total_mib=RX7800XT_TOTAL_BYTES // MIB,
        vram_used_mib=const(RX7800XT_USED_BYTES // MIB),
        gfx_activity=const(100),
        hotspot_celsius=const(51),
        power_w=const(53),
        power_limit_w=236,
        instinct=False,
        procs=(
            AmdProc(7001, const(10_240 * MIB), const(CU_OCCUPANCY_INVALID), sdma_us=830),
            AmdProc(7002, const(512 * MIB), const(CU_OCCUPANCY_INVALID)),
        ),
    )


NODES = (
    NodeSpec[AmdNode](
        "mi300x-8x.yaml",
        "8x AMD Instinct MI300X OAM (gfx942, 304 CUs, 196592 MiB each; driver 6.10.5, ROCm "
        "7.0.2): on card 2 a process holds 60 GiB idle (cu_occupancy 0), then runs a kernel at "
        "87 % of the CUs while power rises 138 -> 612 W; one PID spans cards 3 and 4, with an "
        "idle second tenant on card 3",
        (
            RUNTIME + ": tests/gpustack_runtime/detector/samples/detect_output_amd_mi300x.json "
            "(name, gfx942, 304 CUs, 196592 MiB, bus ids 0000:26:00.0 and 0000:46:00.0, "
            "driver 6.10.5, ROCm 7.0.2, 34/44 C, 132/141 W, 750 W cap, 284 MiB idle)",
            ROCM_SMI_KFD,
            AMD_SMI_VRAM,
        ),
        AmdNode("6.10.5", "7.0.2", tuple(mi300x_card(i) for i in range(8))),
    ),
    NodeSpec[AmdNode](
        "rx7800xt.yaml",
        "AMD Radeon RX 7800 XT (RDNA3, gfx1101, 60 CUs, 16368 MiB; driver 6.16.13, ROCm "
        "7.2.0): cu_occupancy is CU_OCCUPANCY_INVALID for every process while per-process "
        "VRAM and card figures read normally",
        (
            GPUSTACK + ": tests/detectors/rocm_smi/data/amd-gpu-6.2.4-rocm-smi.json (VRAM "
            "17163091968 B total, 11615076352 B used, junction 51 C, 53 W, GPU use 100 %, "
            "device 0x747e rev 0xc8 subsystem 0x7801, unique id 0x5c88007d760374f3)",
            GPUSTACK + ": tests/detectors/rocm_smi/data/amd-gpu-6.2.4-rocminfo.txt (gfx1101, "
            "AMD Radeon RX 7800 XT)",
            RUNTIME + ": tests/gpustack_runtime/detector/samples/detect_output_amd_rx7800xt.json "
            "(60 CUs, bus 0000:04:00.0, driver 6.16.13, ROCm 7.2.0, 236 W cap)",
            SPEC_RDNA3,
            KERNEL_GFX11,
            ROCM_SMI_KFD,
        ),
        AmdNode("6.16.13", "7.2.0", (rx7800xt_card(),)),
    ),
)
