"""Device Manager benchmarks: a monitor pass at the snapshot bounds, and the snapshot route.

The monitor pass is measured the way the daemon runs it: :func:`~gpustack_devicemanager.monitor.
tick` over the informer's decoded Pods and a backend that answers at once (the library calls are
the vendor's time, not ours), then :meth:`SnapshotHolder.publish` (the JSON, its gzip form and
its ``ETag``), with one :class:`TickContext` kept across ticks as the daemon keeps it. The first
tick of a context reads every PID in full; the steady figure is the median of the ticks after it.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import trio
from https_bench import serving, time_gets
from quart import Response

from gpustack_core.allocation import ANNOTATION, AllocatedAccelerator, Grant
from gpustack_core.instance_metrics import API_GROUP
from gpustack_core.modes import AllocationMode
from gpustack_core.pods import PART_OF_LABEL
from gpustack_core.snapshot import (
    MAX_SLICE_DEVICES,
    MAX_SLICE_RECORDS,
    MonitorSnapshot,
    SnapshotGroup,
)
from gpustack_devicemanager.attribution import PodRecord, attribute
from gpustack_devicemanager.health import Liveness
from gpustack_devicemanager.holder import SnapshotHolder
from gpustack_devicemanager.monitor import TickContext, card_figures, tick
from gpustack_devicemanager.podview import NodePod, node_pod
from gpustack_devicemanager.server import build_app
from gpustack_devicemanager.slices import PodGrants, build_section, targets
from gpustack_simulator.procfs import write_procfs
from gpustack_simulator.recording import ProcEntry
from gpustack_vendors.model import (
    CardSample,
    Detection,
    DeviceProcesses,
    PartitionSample,
    ProcessRow,
)

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


INSTANCE_UID = "7c1e2a4b-0f5d-4a59-9d0e-1b2c3d4e5f60"


def _node_pod(uid: str, name: str, container_id: str, device: str) -> NodePod:
    """One Instance Pod holding a slice of ``device``, decoded as the informer decodes it."""
    accelerator = {"id": device, "mode": int(AllocationMode.SLICED), "allocated": 100_000}
    group = {"manufacturer": "nvidia", "accelerators": [accelerator]}
    allocation = {"main": {"devices": {"groups": [group]}}}
    obj: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": uid,
            "creationTimestamp": "2026-11-29T09:00:00Z",
            "annotations": {ANNOTATION: json.dumps(allocation)},
            "labels": {PART_OF_LABEL: INSTANCE_UID},
            "ownerReferences": [
                {
                    "apiVersion": f"{API_GROUP}/v1",
                    "kind": "Instance",
                    "name": name,
                    "uid": INSTANCE_UID,
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "main"}]},
        "status": {
            "containerStatuses": [{"name": "main", "containerID": f"containerd://{container_id}"}]
        },
    }
    return node_pod(obj)


class _AnsweredBackend:
    """A backend whose library answers at once with the bound node's figures."""

    def __init__(self, processes: dict[str, DeviceProcesses], cards: list[CardSample]) -> None:
        self._processes, self._cards = processes, cards

    def detect(self) -> Detection:  # pragma: no cover - the tick never asks
        raise NotImplementedError

    def sample(self) -> list[CardSample]:
        return self._cards

    def processes(self, device_ids: Sequence[str]) -> dict[str, DeviceProcesses]:
        return {d: self._processes[d] for d in device_ids}

    def partitions(self, partition_ids: Sequence[str]) -> dict[str, PartitionSample]:
        return {}


def bench_monitor_pass(repeat: int) -> None:
    """CPU time of one tick and its publication at the bounds, as a share of the 15 s period."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "proc"
        pods, records, processes, cards = _bound_inputs(root)
        entries = []
        for held in pods:
            record = records[held.pod_uid]
            (container_id,) = record.containers
            device = held.grants[0].accelerator.id
            entries.append(_node_pod(held.pod_uid, record.name, container_id, device))
        backend = _AnsweredBackend(processes, cards)
        context = TickContext("nvidia", PERIOD, root)
        holder = SnapshotHolder(int(PERIOD))
        now = datetime(2026, 12, 2, tzinfo=UTC)
        cpu: list[float] = []
        for n in range(repeat + 1):
            start = time.process_time()
            snapshot = tick(backend, entries, context, now + timedelta(seconds=PERIOD * n))
            published = holder.publish(snapshot, float(n))
            cpu.append(time.process_time() - start)
        assert snapshot.slices is not None
        assert len(snapshot.slices.usages) == MAX_SLICE_RECORDS
        first, steady = cpu[0], statistics.median(cpu[1:])
        print(
            f"{'monitor pass at the bound (256 devices, 4096 records)':<52} "
            f"median CPU {steady * 1e3:8.1f} ms = {steady / PERIOD:6.2%} of a 15 s period   "
            f"({len(published.body):,} B snapshot, gzip {len(published.encoded.gzipped):,} B)"
        )
        print(
            f"{'  its first tick (every PID read in full)':<52} "
            f"     CPU {first * 1e3:8.1f} ms = {first / PERIOD:6.2%} of a 15 s period"
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
