"""The Ascend nodes we synthesize, each from public captures (sources in the provenance).

Card facts (chip names, AI core counts, memory sizes, die ids, bus ids, card/device layout,
driver version, idle memory, power and temperature) come from gpustack-runtime's samples of real
910B2 and 310P3 hosts; the process memory figure comes from the operator's measurement on a 910B
host; vNPU templates and sizes from HAMi's device configuration. The timelines (a process holding
memory idle, then its chip busy; a vNPU tenant growing) are the behaviour the spec describes,
laid on top of those facts.
"""

from __future__ import annotations

from gpustack_simulator.synth.dcmi import (
    AscendChip,
    AscendNode,
    AscendProc,
    Vnpu,
    const_mib,
)
from gpustack_simulator.synth.timeline import NodeSpec, Steps, const

MIB = 1 << 20

RUNTIME = "github.com/gpustack/runtime @88026d62a1c1 (Apache-2.0)"
DCMI_REFERENCE = (
    "Huawei DCMI API reference, dcmi_get_device_resource_info: proc_info holds the host PID and "
    "the memory in bytes; proc_num is an output, 'Number of processes, up to 32'"
)
OPERATOR_F6 = (
    "gpustack-operator spec 2026-08-13-enhance-instance-metrics.md F6 (via shared/reference/"
    "vendors.md): npu-smi on a 910B host (driver 25.5.1) showed a VLLMWorker_TP process at 57280 "
    "MB; the resource call's count is output-only; no per-vNPU query answers"
)
HAMI_TEMPLATES = (
    "github.com/Project-HAMi/HAMi charts/hami/templates/scheduler/device-configmap.yaml "
    "(Apache-2.0): 910B2 has 24 AI cores and 65536 MB; vNPU templates vir06_1c_16g "
    "(16384 MB, 6 AI cores) and vir12_3c_32g (32768 MB, 12 AI cores)"
)

WARM_UP = 30.0
"""When the synthesized workload starts its kernels: samples at 0 and 15 s see it idle."""

DRIVER = "25.2.0"
B2_MIB = 65536
B2_CORES = 24


def _die(text: str) -> tuple[int, int, int, int, int]:
    """The runtime prints the five die words as unpadded hex joined by spaces."""
    words = tuple(int(word, 16) for word in text.split())
    if len(words) != 5:
        raise ValueError(text)
    return words[0], words[1], words[2], words[3], words[4]


def _tenths(watts: float) -> int:
    return round(watts * 10)


# (die id as the runtime printed it, bus id, idle MiB used, °C, W) of the 8x 910B2 sample; card i
# holds one chip, device 0, logic id i.
B2_NODE = (
    ("7281A664 C0C977 2879FD72 B9D00485 104301E3", "0000:c1:00.0", 3421, 49, 99.9),
    ("C0DBA664 C107DB 2A9F372 DFD00485 104301E3", "0000:01:00.0", 3412, 51, 100.0),
    ("6EC1A664 100D35B 6BB27372 DFD00485 104301E3", "0000:c2:00.0", 3413, 49, 100.2),
    ("6281A66C 80F7B1 11DAB172 99D00485 104301E3", "0000:02:00.0", 3412, 51, 100.3),
    ("6281A66C 120F0F3 1BD3EB72 86D28485 104301E3", "0000:81:00.0", 3410, 49, 102.2),
    ("1E82A664 100D179 346CBD72 B9D00485 104301E3", "0000:41:00.0", 3408, 51, 104.5),
    ("3EC1A664 60C27A 1902B172 99D00485 104301E3", "0000:82:00.0", 3408, 51, 116.6),
    ("7281A664 E0C977 690ABD72 B9D00485 104301E3", "0000:42:00.0", 3409, 51, 102.2),
)

VLLM_MIB = 57280
"""The VLLMWorker_TP process the operator measured on a 910B host."""
CARD1_HELD_MIB = 12458 - 3412
"""Card 1 of the sample reads 12458 MiB used against the others' ~3412 idle floor."""

VNPU_BIG = 100
VNPU_SMALL = 101


def b2_chip(index: int) -> AscendChip:
    """One chip of the 8x 910B2 node, with its workload if it carries one.

    Chip 0: a vLLM worker holding 57280 MiB idle, then its chip at 92 % AI core. Chip 1: one
    process (what the capture's used memory implies). Chip 2: two slice tenants, one growing.
    Chip 6: split into a vir12_3c_32g vNPU (a tenant growing 16 → 24 GiB) and an idle
    vir06_1c_16g. The rest are idle, vNPU-capable with none carved.
    """
    die, bus_id, idle, temperature, watts = B2_NODE[index]
    util: Steps[int] = const(0)
    temp: Steps[int] = const(temperature)
    power = const(_tenths(watts))
    procs: tuple[AscendProc, ...] = ()
    vnpus: tuple[Vnpu, ...] = ()
    if index == 0:
        procs = (AscendProc(4242, const_mib(VLLM_MIB)),)
        util = Steps(((0.0, 0), (WARM_UP, 92)))
        temp = Steps(((0.0, temperature), (WARM_UP, 62)))
        power = Steps(((0.0, _tenths(watts)), (WARM_UP, _tenths(312.4))))
    elif index == 1:
        procs = (AscendProc(4343, const_mib(CARD1_HELD_MIB)),)
    elif index == 2:
        procs = (
            AscendProc(5150, const_mib(20_480)),
            AscendProc(5151, Steps(((0.0, 8_192 * MIB), (WARM_UP, 12_288 * MIB)))),
        )
        util = Steps(((0.0, 35), (WARM_UP, 58)))
        power = Steps(((0.0, _tenths(181.3)), (WARM_UP, _tenths(246.8))))
        temp = const(55)
    elif index == 6:
        vnpus = (
            Vnpu(
                VNPU_BIG,
                "vir12_3c_32g",
                12.0,
                32_768,
                (AscendProc(6001, Steps(((0.0, 16_384 * MIB), (WARM_UP, 24_576 * MIB)))),),
            ),
            Vnpu(VNPU_SMALL, "vir06_1c_16g", 6.0, 16_384),
        )
        util = Steps(((0.0, 0), (WARM_UP, 40)))
        power = Steps(((0.0, _tenths(watts)), (WARM_UP, _tenths(201.9))))
    return AscendChip(
        card=index,
        device=0,
        logic_id=index,
        die=_die(die),
        chip_name="910B2",
        aicore=B2_CORES,
        bus_id=bus_id,
        memory_mib=B2_MIB,
        idle_used_mib=idle,
        util=util,
        temperature=temp,
        power_tenths=power,
        procs=procs,
        vnpus=vnpus,
    )


def duo_chip(device: int) -> AscendChip:
    """One of the two 310P3 chips of the sampled Atlas 300I Duo (card 4, one PCI address).

    DDR, not HBM: the HBM call answers NOT_SUPPORT and memory is read through ``_v3`` (which the
    sample's totals, 44280 and 43693 MiB, are not round HBM sizes, suggest). Power reads null
    in the sample: the call answers NOT_SUPPORT here. Not in vNPU mode.
    """
    if device == 0:
        die, total, idle, temperature = (
            "16E96E64 2101968D 5EB7E8E4 AED8030A 61003039",
            44280,
            1507,
            47,
        )
        procs: tuple[AscendProc, ...] = (AscendProc(7001, const_mib(41731 - 1507)),)
        util: Steps[int] = Steps(((0.0, 0), (WARM_UP, 78)))
    else:
        die, total, idle, temperature = (
            "16E96E64 2100AA8D 4B2A68E4 AED8030A 54003039",
            43693,
            1507,
            45,
        )
        procs, util = (), const(0)
    return AscendChip(
        card=4,
        device=device,
        logic_id=device,
        die=_die(die),
        chip_name="310P3",
        aicore=8,
        bus_id="0000:81:00.0",
        memory_mib=total,
        idle_used_mib=idle,
        util=util,
        temperature=const(temperature),
        power_tenths=None,
        hbm=False,
        pci_device_id=0xD500,
        procs=procs,
        vnpus=None,
    )


NODES = (
    NodeSpec[AscendNode](
        "910b2-8x.yaml",
        "8x Ascend 910B2 (24 AI cores, 65536 MiB HBM each; driver 25.2.0): a vLLM worker holding "
        "57280 MiB idle, then its chip at 92 % AI core; two slice tenants on chip 2; chip 6 split "
        "into vNPUs vir12_3c_32g (vdev 100, a tenant growing 16 -> 24 GiB) and vir06_1c_16g "
        "(vdev 101, idle). Per-process compute has no DCMI entry point: absent, unsupported",
        (
            RUNTIME + ": tests/gpustack_runtime/detector/samples/detect_output_ascend_910b2.json "
            "(910B2, 24 cores, 65536 MiB, die ids, bus ids, cards 0-7 device 0, driver 25.2.0, "
            "idle 3408-3421 MiB used / 49-51 C / 99.9-116.6 W; 12458 MiB used on card 1)",
            OPERATOR_F6,
            DCMI_REFERENCE,
            HAMI_TEMPLATES,
        ),
        AscendNode(DRIVER, tuple(b2_chip(i) for i in range(len(B2_NODE)))),
    ),
    NodeSpec[AscendNode](
        "310p3-duo.yaml",
        "Atlas 300I Duo: one card (card 4) holding two 310P3 chips at one PCI address "
        "(0000:81:00.0; 8 AI cores; DDR: the HBM call answers NOT_SUPPORT and memory is read "
        "through memory_info_v3; power answers NOT_SUPPORT; not in vNPU mode). Chip 0 runs one "
        "process holding 40224 MiB; chip 1 is idle",
        (
            RUNTIME + ": tests/gpustack_runtime/detector/samples/detect_output_ascend_310p3.json "
            "(310P3, 8 cores, card 4 devices 0 and 1 at 0000:81:00.0, 44280 / 43693 MiB, "
            "41731 / 1507 MiB used, 47 / 45 C, power null, driver 25.2.0)",
            DCMI_REFERENCE,
        ),
        AscendNode(DRIVER, (duo_chip(0), duo_chip(1))),
    ),
)
