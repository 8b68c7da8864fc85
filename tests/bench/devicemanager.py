"""Device Manager benchmarks: a monitor pass at the snapshot bounds, and the snapshot route."""

from __future__ import annotations

import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import trio
from https_bench import serving, time_gets
from quart import Response

from gpustack_core.allocation import AllocatedAccelerator, Grant
from gpustack_core.modes import AllocationMode
from gpustack_core.snapshot import (
    MAX_SLICE_DEVICES,
    MAX_SLICE_RECORDS,
    MonitorSnapshot,
    SnapshotGroup,
    encode_snapshot,
)
from gpustack_devicemanager.attribution import PodRecord, attribute
from gpustack_devicemanager.health import Liveness
from gpustack_devicemanager.holder import SnapshotHolder
from gpustack_devicemanager.monitor import card_figures
from gpustack_devicemanager.server import build_app
from gpustack_devicemanager.slices import PodGrants, build_section, targets
from gpustack_simulator.procfs import write_procfs
from gpustack_simulator.recording import ProcEntry
from gpustack_vendors.model import CardSample, DeviceProcesses, ProcessRow

PERIOD = 15.0
MIB = 1 << 20


def _bound_inputs(
    root: Path,
) -> tuple[list[PodGrants], dict[str, PodRecord], dict[str, DeviceProcesses], list[CardSample]]:
    per_device = MAX_SLICE_RECORDS // MAX_SLICE_DEVICES
    pods: list[PodGrants] = []
    records: dict[str, PodRecord] = {}
    processes: dict[str, DeviceProcesses] = {}
    procs: dict[str, ProcEntry] = {}
    for d in range(MAX_SLICE_DEVICES):
        device = f"GPU-{d:04x}"
        rows = []
        for c in range(per_device):
            pid = 10_000 + d * per_device + c
            uid = f"{d:08x}-0000-4000-8000-{c:012x}"
            container_id = f"{pid:064x}"
            pods.append(
                PodGrants(
                    uid,
                    (
                        Grant(
                            "main",
                            "nvidia",
                            AllocatedAccelerator(
                                id=device, mode=AllocationMode.SLICED, allocated=100_000
                            ),
                        ),
                    ),
                )
            )
            records[uid] = PodRecord(uid, "bench", f"p{pid}", True, {container_id: "main"})
            procs[str(pid)] = ProcEntry(
                cgroup=f"0::/kubepods.slice/kubepods-pod{uid.replace('-', '_')}.slice/"
                f"cri-containerd-{container_id}.scope",
                comm="python",
            )
            rows.append(ProcessRow(pid, 512 * MIB, 3))
        processes[device] = DeviceProcesses(device, rows=tuple(rows))
    write_procfs(root, procs)
    cards = [
        CardSample(f"GPU-{d:04x}", 81_559, 40_000, 50, 60, 400.0, False)
        for d in range(MAX_SLICE_DEVICES)
    ]
    return pods, records, processes, cards


def _bound_pass(
    root: Path,
    inputs: tuple[
        list[PodGrants], dict[str, PodRecord], dict[str, DeviceProcesses], list[CardSample]
    ],
) -> MonitorSnapshot:
    """One tick's work after the library calls: targets, attribution, section, envelope."""
    pods, records, processes, cards = inputs
    plan = targets(pods, "nvidia")
    pids = {row.pid for entry in processes.values() for row in entry.rows}
    outcomes = attribute(pids, root, records)
    section = build_section(
        "nvidia", plan, processes, outcomes, {}, {c.id: c.memory_total_mib for c in cards}
    )
    now = datetime.now(UTC)
    return MonitorSnapshot(
        timestamp=now,
        period_seconds=15,
        groups=(
            SnapshotGroup(
                manufacturer="nvidia",
                timestamp=now,
                accelerators=tuple(card_figures(c) for c in cards),
            ),
        ),
        slices=section,
    )


def bench_monitor_pass(repeat: int) -> None:
    """CPU time of one pass at the bounds, attribution reads included, as a share of 15 s."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "proc"
        inputs = _bound_inputs(root)
        cpu: list[float] = []
        for _ in range(repeat):
            start = time.process_time()
            body = encode_snapshot(_bound_pass(root, inputs))
            cpu.append(time.process_time() - start)
        median = statistics.median(cpu)
        print(
            f"{'monitor pass at the bound (256 devices, 4096 records)':<52} "
            f"median CPU {median * 1e3:8.1f} ms = {median / PERIOD:6.2%} of a 15 s period   "
            f"({len(body):,} B snapshot)"
        )


async def _latency(repeat: int) -> None:
    holder = SnapshotHolder(15)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "proc"
        snapshot = _bound_pass(root, _bound_inputs(root))
    published = holder.publish(snapshot, trio.current_time())
    static = bytes(published.body)
    app = build_app(holder, Liveness(PERIOD, trio.current_time()), trio.current_time, dict)

    @app.route("/static")
    async def static_route() -> Response:
        return Response(static, content_type="application/json")

    async with serving(app) as url, httpx.AsyncClient(verify=False, trust_env=False) as client:
        for path in ("/monitor/snapshot", "/static"):
            samples, body = await time_gets(client, url + path, repeat)
            print(
                f"{'GET ' + path + f' ({len(body):,} B, HTTPS)':<52} "
                f"median {statistics.median(samples) * 1e3:8.2f} ms   "
                f"p95 {sorted(samples)[int(len(samples) * 0.95)] * 1e3:8.2f} ms"
            )


def bench_snapshot_route(repeat: int) -> None:
    """The snapshot route against a route serving the same bytes from a constant."""
    trio.run(_latency, repeat)
