"""The NVIDIA nodes we synthesize, each from public captures (sources in the provenance).

Card facts (names, 81559 MiB per H100 80GB, bus ids, UUIDs, idle power and temperature, the
one python process holding 9212 MiB) are taken from `nvidia-smi -q` captures; the timelines
(a process that holds memory idle, then runs a kernel while board power climbs) are the
behaviour the spec describes, laid on top of those facts.
"""

from __future__ import annotations

import pynvml

from gpustack_simulator.synth.nvml import MIB, Card, Mig, Node, Proc
from gpustack_simulator.synth.timeline import NodeSpec, Steps, const

GPUD = "github.com/leptonai/gpud (nvidia-smi captures, Apache-2.0)"
TELEGRAF = "github.com/influxdata/telegraf plugins/inputs/nvidia_smi testdata (MIT)"
NVGPUEXP = "github.com/utkuozdemir/nvidia_gpu_exporter internal/captures (MIT)"
SPEC = "shared/spec/instance-metrics-reference.md (H100 1g.10gb reads 9856 MiB on its handle)"
BLACKWELL_OP = (
    "shared/reference/vendors.md: on Blackwell, driver 580.159.03, both process "
    "calls returned NOT_SUPPORTED"
)


H100_BYTES = 81559 * MIB
H100 = "NVIDIA H100 80GB HBM3"
# (uuid, bus id, temperature °C, idle power W) of an 8x H100 SXM node, driver 535.183.01.
H100_NODE = (
    ("GPU-566e6f65-c38e-b12f-4824-6944218668b9", "00000000:53:00.0", 36, 71.97),
    ("GPU-9930d717-21dd-7692-054e-3d0a2bae76b5", "00000000:64:00.0", 37, 68.88),
    ("GPU-973565ff-45cf-12ea-4e91-33386720f7bb", "00000000:75:00.0", 39, 118.01),
    ("GPU-6b932a61-abfd-5ea1-b26a-7dea7f2fa601", "00000000:86:00.0", 39, 72.91),
    ("GPU-726d356b-f548-bbfd-c81e-b9c68f2f1587", "00000000:97:00.0", 38, 71.68),
    ("GPU-06db64f6-6181-5a90-cf95-5ce52a58c4e5", "00000000:A8:00.0", 36, 71.69),
    ("GPU-a5271aa6-4cdb-28c7-0ef5-5da271d0caae", "00000000:B9:00.0", 37, 69.44),
    ("GPU-7e78e6c8-c71c-66c7-9ded-f8836cecab32", "00000000:CA:00.0", 35, 74.76),
)
WARM_UP = 30.0
"""When the synthesized workload starts its kernel: samples at 0 and 15 s see it idle."""


def _mw(watts: float) -> int:
    return round(watts * 1000)


def _whole_h100(
    uuid: str,
    bus_id: str,
    used: Steps[int],
    util: Steps[int],
    temperature: Steps[int],
    power: Steps[int],
    procs: tuple[Proc, ...],
) -> Card:
    """An H100 80GB HBM3 with MIG supported but disabled, serving whole-card processes."""
    return Card(
        uuid=uuid,
        name=H100,
        bus_id=bus_id,
        total_bytes=H100_BYTES,
        used_bytes=used,
        util=util,
        temperature=temperature,
        power_mw=power,
        cores=16896,
        procs=procs,
        mig=(),
    )


def h100_card(index: int) -> Card:
    """One card of the 8x H100 node; cards 2 and 3 carry the workloads."""
    uuid, bus_id, temperature, idle = H100_NODE[index]
    procs: tuple[Proc, ...] = ()
    used = const(0)
    util = const(0)
    power = const(_mw(idle))
    temp = const(temperature)
    if index == 2:
        # The captured process: 9212 MiB held; idle, then a kernel at 63 % SM.
        held = 9212 * MIB
        procs = (Proc(4242, const(held), Steps(((0.0, None), (WARM_UP, 63)))),)
        used = const(held + 9 * MIB)
        util = Steps(((0.0, 0), (WARM_UP, 63)))
        power = Steps(((0.0, _mw(idle)), (WARM_UP, _mw(396.5))))
        temp = Steps(((0.0, temperature), (WARM_UP, 58)))
    elif index == 3:
        # Two tenants of one card (a sliced card): one busy, one idle, one NVML can't size.
        procs = (
            Proc(5150, const(20_480 * MIB), const(41)),
            Proc(5151, const(10_240 * MIB), const(None)),
            Proc(5152, const(None), const(7)),
        )
        used = const(30_720 * MIB + 512 * MIB)
        util = const(48)
        power = const(_mw(287.25))
        temp = const(51)
    return _whole_h100(uuid, bus_id, used, util, temp, power, procs)


MIG_PARENT = "GPU-4f1b2c3d-0e9a-4b8c-9d7e-6a5b4c3d2e1f"
MIG_1G = "MIG-2a3b4c5d-6e7f-5a8b-9c0d-1e2f3a4b5c6d"
MIG_1G_B = "MIG-3b4c5d6e-7f8a-4b9c-8d1e-2f3a4b5c6d7e"
MIG_3G = "MIG-1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"


def _mig_h100(
    uuid: str,
    bus_id: str,
    three_g: str,
    one_g: tuple[tuple[str, Steps[int]], ...],
    procs: tuple[Proc, ...],
) -> Card:
    """An H100 in MIG mode with a busy 3g.40gb in slot 0 and 1g.10gb instances after it.

    The 3g.40gb's memory rises when its kernel starts, and board power with it (93 → 223 W).
    """
    return Card(
        uuid=uuid,
        name=H100,
        bus_id=bus_id,
        total_bytes=H100_BYTES,
        used_bytes=Steps(((0.0, 14_848 * MIB), (WARM_UP, 18_944 * MIB))),
        util=const(0),
        temperature=const(41),
        power_mw=Steps(((0.0, _mw(93.0)), (WARM_UP, _mw(223.0)))),
        cores=16896,
        max_mig_slots=7,
        mig=(
            Mig(0, three_g, "3g.40gb", 40_448 * MIB, THREE_G_USED),
            *(
                Mig(slot, mig_uuid, "1g.10gb", 9_856 * MIB, used)
                for slot, (mig_uuid, used) in enumerate(one_g, start=1)
            ),
        ),
        procs=procs,
    )


THREE_G_USED = Steps(((0.0, 14_336 * MIB), (WARM_UP, 18_432 * MIB)))


def _three_g_proc(pid: int) -> Proc:
    held: Steps[int | None] = Steps(THREE_G_USED.points)
    return Proc(pid, held, gpu_instance=0, compute_instance=0)


def mig_card() -> Card:
    """An H100 in MIG mode: a 3g.40gb and two 1g.10gb instances, slots 3–6 empty."""
    return _mig_h100(
        MIG_PARENT,
        "00000000:1B:00.0",
        MIG_3G,
        ((MIG_1G, const(0)), (MIG_1G_B, const(512 * MIB))),
        (_three_g_proc(6001), Proc(6002, const(512 * MIB), gpu_instance=2, compute_instance=0)),
    )


def single(
    name: str,
    uuid: str,
    bus_id: str,
    mib: int,
    cores: int,
    idle_w: float,
    busy_w: float,
    temperature: int,
    **extra: object,
) -> Card:
    """A single-GPU cloud node with one inference process warming up."""
    procs = (Proc(7001, const(min(mib // 2, 10_000) * MIB), Steps(((0.0, None), (WARM_UP, 88)))),)
    return Card(
        uuid=uuid,
        name=name,
        bus_id=bus_id,
        total_bytes=mib * MIB,
        used_bytes=const((min(mib // 2, 10_000) + 300) * MIB),
        util=Steps(((0.0, 0), (WARM_UP, 88))),
        temperature=const(temperature),
        power_mw=Steps(((0.0, _mw(idle_w)), (WARM_UP, _mw(busy_w)))),
        cores=cores,
        procs=procs,
        **extra,  # type: ignore[arg-type]
    )


WALKTHROUGH = (
    "shared/spec/instancetype-walkthrough.md (node-a10g: NVIDIA A10G, UUID "
    "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575, driver 580.159.03, CUDA 13.0, 10240 cores, "
    "compute capability 8.6, 24Gi; Tesla T4: 2560 cores, 16Gi)"
)
WALKTHROUGH_MIB = (
    "memory: the product's whole frame buffer (A10G 24 GiB, T4 16 GiB) in MiB, which the "
    "walkthrough's .memory labels (24Gi, 16Gi) round from; the walkthrough prints no MiB figure"
)
WALKTHROUGH_T4_DRIVER = (
    "T4 nodes: driver and CUDA version taken to be node-a10g's (580.159.03, 13.0); the "
    "walkthrough prints neither for them, and the T4 UUIDs and bus ids are synthetic"
)
WALKTHROUGH_DRIVER, WALKTHROUGH_CUDA = "580.159.03", 13000


def idle(
    name: str,
    uuid: str,
    bus_id: str,
    mib: int,
    cores: int,
    watts: float,
    temperature: int,
    capability: tuple[int, int],
) -> Card:
    """A card no process uses: the walkthrough's initial state, nothing allocated."""
    return Card(
        uuid=uuid,
        name=name,
        bus_id=bus_id,
        total_bytes=mib * MIB,
        used_bytes=const(0),
        util=const(0),
        temperature=const(temperature),
        power_mw=const(_mw(watts)),
        cores=cores,
        compute_capability=capability,
    )


def walkthrough_t4(uuid: str, bus_id: str) -> Card:
    """A Tesla T4 of the walkthrough's T4 nodes (compute capability 7.5, 16 GiB)."""
    return idle("Tesla T4", uuid, bus_id, 16_384, 2560, 26.78, 40, (7, 5))


# A four-card H100 node laid out for the cluster scenario ``nvidia-mixed``: one card per
# allocation mode, so one recording can back an Exclusive, a Shared, a Sliced and a Partitioned
# Instance side by side. Card figures are the 8x node's captured ones (same product, driver and
# idle range); the identities are new, so a cluster holding both nodes never sees one card twice.
MIXED_NODE = (
    ("GPU-8d2f4a61-3c7e-4b19-a5d0-6e1f2b3c4d01", "00000000:18:00.0", 34, 70.12),
    ("GPU-8d2f4a61-3c7e-4b19-a5d0-6e1f2b3c4d02", "00000000:2A:00.0", 35, 69.51),
    ("GPU-8d2f4a61-3c7e-4b19-a5d0-6e1f2b3c4d03", "00000000:3A:00.0", 36, 72.30),
)
MIXED_MIG_PARENT = "GPU-8d2f4a61-3c7e-4b19-a5d0-6e1f2b3c4d04"
MIXED_MIG_3G = "MIG-8d2f4a61-3c7e-5b19-a5d0-6e1f2b3c4d40"
MIXED_MIG_1G = "MIG-8d2f4a61-3c7e-5b19-a5d0-6e1f2b3c4d41"


def mixed_card(index: int) -> Card:
    """Cards 0-2 of the mixed node; which mode each serves decides its tenants.

    Card 0 (Exclusive): one process idle, then a kernel at 92 % SM. Card 1 (Shared): two
    tenants, plus a process whose Pod is gone (its cgroup names no Pod of the node). Card 2
    (Sliced): two tenants, one idle then busy, one busy throughout.
    """
    uuid, bus_id, temperature, idle = MIXED_NODE[index]
    if index == 0:
        held = 61_440 * MIB
        procs: tuple[Proc, ...] = (Proc(8101, const(held), Steps(((0.0, None), (WARM_UP, 92)))),)
        used: Steps[int] = const(held + 9 * MIB)
        util = Steps(((0.0, 0), (WARM_UP, 92)))
        power = Steps(((0.0, _mw(idle)), (WARM_UP, _mw(612.4))))
        temp = Steps(((0.0, temperature), (WARM_UP, 66)))
    elif index == 1:
        procs = (
            Proc(8201, const(6_144 * MIB), const(12)),
            Proc(8202, const(4_096 * MIB), const(9)),
            Proc(8203, const(2_048 * MIB), const(None)),
        )
        used = const(12_288 * MIB + 9 * MIB)
        util, power, temp = const(21), const(_mw(180.5)), const(45)
    else:
        procs = (
            Proc(8301, const(30_720 * MIB), Steps(((0.0, None), (WARM_UP, 38)))),
            Proc(8302, const(12_288 * MIB), const(6)),
        )
        used = const(43_008 * MIB + 9 * MIB)
        util = Steps(((0.0, 6), (WARM_UP, 44)))
        power = Steps(((0.0, _mw(idle + 40)), (WARM_UP, _mw(341.75))))
        temp = Steps(((0.0, 40), (WARM_UP, 55)))
    return _whole_h100(uuid, bus_id, used, util, temp, power, procs)


def mixed_mig_card() -> Card:
    """Card 3 of the mixed node, in MIG mode: a busy 3g.40gb in slot 0, an idle 1g.10gb in 1."""
    return _mig_h100(
        MIXED_MIG_PARENT,
        "00000000:5D:00.0",
        MIXED_MIG_3G,
        ((MIXED_MIG_1G, const(0)),),
        (_three_g_proc(8401),),
    )


NODES = (
    NodeSpec[Node](
        "h100-8x.yaml",
        "8x NVIDIA H100 80GB HBM3 (driver 535.183.01): one process idle then running a kernel "
        "on GPU 2; three tenants on GPU 3, one whose memory NVML reports as not available",
        (GPUD + ": gpud-nvidia-smi-q-8xH100-535.183.01-1proc.txt",),
        Node("535.183.01", 12020, tuple(h100_card(i) for i in range(8))),
    ),
    NodeSpec[Node](
        "h100-mig.yaml",
        "NVIDIA H100 80GB HBM3 in MIG mode: 3g.40gb in slot 0, 1g.10gb (9856 MiB on its own "
        "handle) in slots 1 and 2, slots 3-6 empty; board power 93 W -> 223 W as a kernel starts",
        (
            SPEC,
            NVGPUEXP + ": nvgpuexp-linux-x86_64_nvidia-h100-mig_590.48.01.txt (3g.40gb 40448 MiB)",
        ),
        Node("535.183.01", 12020, (mig_card(),)),
    ),
    NodeSpec[Node](
        "a10g.yaml",
        "NVIDIA A10G (driver 515.105.01), one process idle then busy",
        (TELEGRAF + ": telegraf-a10g.xml",),
        Node(
            "515.105.01",
            11070,
            (
                single(
                    "NVIDIA A10G",
                    "GPU-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
                    "00000000:00:1E.0",
                    23_028,
                    9216,
                    25.58,
                    148.0,
                    17,
                ),
            ),
        ),
    ),
    NodeSpec[Node](
        "t4.yaml",
        "Tesla T4 (driver 515.105.01), one process idle then busy",
        (TELEGRAF + ": telegraf-tesla-t4.xml",),
        Node(
            "515.105.01",
            11070,
            (
                single(
                    "Tesla T4",
                    "GPU-2b3c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d6e",
                    "00000000:00:1E.0",
                    15_360,
                    2560,
                    26.78,
                    69.0,
                    40,
                ),
            ),
        ),
    ),
    NodeSpec[Node](
        "rtx-pro-6000-blackwell.yaml",
        "NVIDIA RTX PRO 6000 Blackwell Max-Q (driver 590.44.01): both per-process calls answer "
        "NOT_SUPPORTED, card figures read normally",
        (TELEGRAF + ": telegraf-pro-6000-maxq-blackwell-v13.xml", BLACKWELL_OP),
        Node(
            "590.44.01",
            13010,
            (
                single(
                    "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
                    "GPU-3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f",
                    "00000000:01:00.0",
                    97_887,
                    24064,
                    24.0,
                    300.0,
                    24,
                    process_calls=pynvml.NVML_ERROR_NOT_SUPPORTED,
                ),
            ),
        ),
    ),
    NodeSpec[Node](
        "a10g-walkthrough.yaml",
        "NVIDIA A10G of the InstanceType walkthrough's node-a10g (driver 580.159.03, CUDA "
        "13.0), idle",
        (WALKTHROUGH, WALKTHROUGH_MIB),
        Node(
            WALKTHROUGH_DRIVER,
            WALKTHROUGH_CUDA,
            (
                idle(
                    "NVIDIA A10G",
                    "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575",
                    "00000000:00:1E.0",
                    24_576,
                    10240,
                    25.58,
                    17,
                    (8, 6),
                ),
            ),
        ),
    ),
    NodeSpec[Node](
        "t4-walkthrough.yaml",
        "One Tesla T4 of the InstanceType walkthrough's node-t4-a, idle",
        (WALKTHROUGH, WALKTHROUGH_MIB, WALKTHROUGH_T4_DRIVER),
        Node(
            WALKTHROUGH_DRIVER,
            WALKTHROUGH_CUDA,
            (walkthrough_t4("GPU-7d1c4e2a-5b3f-4a6e-9c8d-0f1e2d3c4b01", "00000000:00:1E.0"),),
        ),
    ),
    NodeSpec[Node](
        "t4-4x-walkthrough.yaml",
        "Four Tesla T4 of the InstanceType walkthrough's node-t4-b, idle",
        (WALKTHROUGH, WALKTHROUGH_MIB, WALKTHROUGH_T4_DRIVER),
        Node(
            WALKTHROUGH_DRIVER,
            WALKTHROUGH_CUDA,
            tuple(
                walkthrough_t4(f"GPU-7d1c4e2a-5b3f-4a6e-9c8d-0f1e2d3c4b{10 + i}", bus)
                for i, bus in enumerate(
                    ("00000000:00:1B.0", "00000000:00:1C.0", "00000000:00:1D.0", "00000000:00:1E.0")
                )
            ),
        ),
    ),
    NodeSpec[Node](
        "h100-mixed.yaml",
        "4x NVIDIA H100 80GB HBM3 (driver 535.183.01), one card per allocation mode: card 0 "
        "one process idle then at 92 % SM; card 1 three processes (one of a Pod that is gone); "
        "card 2 two slice tenants; card 3 in MIG mode with a busy 3g.40gb and an idle 1g.10gb",
        (
            GPUD + ": gpud-nvidia-smi-q-8xH100-535.183.01-1proc.txt (product, driver, memory, "
            "idle power and temperature range)",
            SPEC,
            NVGPUEXP + ": nvgpuexp-linux-x86_64_nvidia-h100-mig_590.48.01.txt (3g.40gb 40448 MiB)",
        ),
        Node(
            "535.183.01",
            12020,
            (*(mixed_card(i) for i in range(3)), mixed_mig_card()),
        ),
    ),
)
