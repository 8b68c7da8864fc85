"""The snapshot a monitor tick publishes, pinned byte for byte at the snapshot's bounds.

Two pins, neither taken from the code under test:

* a **varied** node at the bounds (256 carved devices, 16 process rows each, partitions, every
  way a row can fail to be placed), ticked four times through one context — cold, warm, after
  the process table and the Pod index changed, and with the kubelet cross-check on — against
  digests recorded from the monitor as it stood before the pass was made faster (issue #20):
  the same inputs give the same bytes, gzip and ``ETag``;
* a **uniform** node at the bounds against a document written here from the spec's field names
  and units (``instance-metrics-reference.md``), encoded by the standard library, so the field
  order, the spellings and the omitted defaults are checked independently of msgspec.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpustack_core.allocation import ANNOTATION
from gpustack_core.instance_metrics import API_GROUP
from gpustack_core.modes import AllocationMode
from gpustack_core.pods import PART_OF_LABEL
from gpustack_core.reasons import QueryReason
from gpustack_core.snapshot import MAX_SLICE_DEVICES, MAX_SLICE_RECORDS
from gpustack_devicemanager.holder import Published, SnapshotHolder
from gpustack_devicemanager.monitor import TickContext, tick
from gpustack_devicemanager.podview import NodePod, node_pod
from gpustack_vendors.model import (
    CardSample,
    Detection,
    DeviceProcesses,
    PartitionSample,
    ProcessRow,
)

MFR = "nvidia"
PER_DEVICE = MAX_SLICE_RECORDS // MAX_SLICE_DEVICES
INSTANCE_UID = "7c1e2a4b-0f5d-4a59-9d0e-1b2c3d4e5f60"
STRANGER_UID = "deadbeef-0000-4000-8000-000000000000"
T0 = datetime(2026, 12, 2, 10, 0, 0, 123456, tzinfo=UTC)
MIB = 1 << 20


def device_id(d: int) -> str:
    return f"GPU-{d:04x}"


def pod_uid(d: int, p: int) -> str:
    return f"{d:08x}-0000-4000-8000-{p:012x}"


def container_id(d: int, p: int, container: str, generation: int = 0) -> str:
    return hashlib.sha256(f"{d}/{p}/{container}/{generation}".encode()).hexdigest()


def pid_of(d: int, c: int) -> int:
    return 20_000 + d * 100 + c


def rows_on(d: int) -> int:
    """16 rows a device; eight busier ones push the records past the bound (``bounded``)."""
    return 96 if 240 <= d < 248 else PER_DEVICE


def cgroup(uid: str, cid: str) -> str:
    slug = uid.replace("-", "_")
    return (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{slug}.slice/"
        f"cri-containerd-{cid}.scope"
    )


def write_proc(
    root: Path, pid: int, text: str, *, started: int, comm: str = "python", state: str = "S"
) -> None:
    """One process as the kernel writes it: ``starttime`` is field 22 of ``stat``."""
    base = root / str(pid)
    base.mkdir(parents=True, exist_ok=True)
    rest = ["1", str(pid), str(pid)] + ["0"] * 46
    rest[18 - 4] = "20"
    rest[20 - 4] = "1"
    rest[22 - 4] = str(started)
    (base / "stat").write_bytes(f"{pid} ({comm}) {state} {' '.join(rest)}\n".encode())
    (base / "cgroup").write_text(text + "\n")
    (base / "comm").write_text(comm + "\n")


def pod_object(
    uid: str,
    name: str,
    containers: dict[str, str],
    allocation: dict[str, Any],
    *,
    instance: bool = True,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "team-a",
        "uid": uid,
        "creationTimestamp": "2026-11-29T09:00:00Z",
        "annotations": {ANNOTATION: json.dumps(allocation)},
    }
    if instance:
        metadata["labels"] = {PART_OF_LABEL: INSTANCE_UID}
        metadata["ownerReferences"] = [
            {
                "apiVersion": f"{API_GROUP}/v1",
                "kind": "Instance",
                "name": name,
                "uid": INSTANCE_UID,
                "controller": True,
            }
        ]
    return {
        "metadata": metadata,
        "spec": {"containers": [{"name": n} for n in containers]},
        "status": {
            "containerStatuses": [
                {"name": n, "containerID": f"containerd://{cid}"} for n, cid in containers.items()
            ]
        },
    }


def sliced(device: str) -> dict[str, Any]:
    accelerator = {"id": device, "mode": int(AllocationMode.SLICED), "allocated": 100_000}
    return {"devices": {"groups": [{"manufacturer": MFR, "accelerators": [accelerator]}]}}


def partitioned(device: str, partition: str) -> dict[str, Any]:
    accelerator = {
        "id": device,
        "mode": int(AllocationMode.PARTITIONED),
        "allocated": 400_000,
        "allocatedPhysicalID": partition,
    }
    return {"devices": {"groups": [{"manufacturer": MFR, "accelerators": [accelerator]}]}}


@dataclass
class FakeBackend:
    """What the vendor library answered this tick (the tick's only other input)."""

    cards: list[CardSample]
    rows: dict[str, DeviceProcesses]
    partition_figures: dict[str, PartitionSample] = field(default_factory=dict)

    def detect(self) -> Detection:  # pragma: no cover - the tick never asks
        raise NotImplementedError

    def sample(self) -> list[CardSample]:
        return self.cards

    def processes(self, device_ids: Sequence[str]) -> dict[str, DeviceProcesses]:
        return {d: self.rows[d] for d in device_ids if d in self.rows}

    def partitions(self, partition_ids: Sequence[str]) -> dict[str, PartitionSample]:
        return {p: self.partition_figures[p] for p in partition_ids if p in self.partition_figures}


# -- the varied node --------------------------------------------------------------------------

PARTITION_CARD = device_id(MAX_SLICE_DEVICES)
PARTITIONS = [f"MIG-{i:08x}-0000-4000-8000-000000000000" for i in range(4)]


def _placement(d: int, c: int) -> tuple[int, str]:
    """Which Pod (index on its device) and container row ``c`` of device ``d`` runs in."""
    if d % 5 == 1:
        return c // 2, "main"  # two processes per container: summed
    if d % 7 == 3:
        return c // 2, "main" if c % 2 == 0 else "sidecar"  # two containers per Pod
    return c, "main"


@dataclass
class World:
    root: Path
    pods: dict[str, NodePod]
    """By Pod UID, as the informer's index holds them: one object until the Pod changes."""
    backend: FakeBackend
    started: dict[int, int]


def _rows(d: int, shift: int) -> DeviceProcesses:
    rows = []
    for c in range(rows_on(d)):
        memory: int | None = (c + 1) * 7 * MIB + d * 4099
        cores: int | None = (d + c + shift) % 41
        if d == 249:
            memory = 8 << 30  # 16 × 8 GiB on a 1,000 MiB card: invalid_data
        if d == 255 and c == 4:
            memory = None  # the driver could not size this row: unsupported
        if d == 255:
            cores = None
        rows.append(ProcessRow(pid_of(d, c), memory, cores))
    reason = QueryReason.TRUNCATED if d == 254 else None
    return DeviceProcesses(device_id(d), tuple(rows), memory_reason=reason)


def _cards(shift: int) -> list[CardSample]:
    cards = []
    for d in range(MAX_SLICE_DEVICES + 1):
        total = 1_000 if d == 249 else 81_559
        used = None if d == 17 else 40_000 + d * 13 + shift
        power = None if d == 18 else 250.0 + d / 4
        cards.append(
            CardSample(
                device_id(d), total, used, (d * 3 + shift) % 101, 40 + d % 30, power, d == 19
            )
        )
    return cards


def varied_world(root: Path) -> World:
    pods: dict[str, NodePod] = {}
    started: dict[int, int] = {}
    containers: dict[str, dict[str, str]] = {}
    for d in range(MAX_SLICE_DEVICES):
        for c in range(rows_on(d)):
            p, container = _placement(d, c)
            uid = pod_uid(d, p)
            cid = container_id(d, p, container)
            containers.setdefault(uid, {})[container] = cid
            pid = pid_of(d, c)
            started[pid] = 1_000 + pid
            text = cgroup(uid, cid)
            comm, state = "python", "S"
            if d == 250 and c == 5:
                text = cgroup(STRANGER_UID, "f" * 64)  # a Pod this node's index does not carry
            if d == 252 and c == 7:
                comm = "nvidia-cuda-mps-server"
            if d == 248 and c == 9:
                state = "Z"
            if d == 253 and c == 2:
                continue  # exited before the read
            write_proc(root, pid, text, started=started[pid], comm=comm, state=state)
    for uid, by_name in containers.items():
        d, p = int(uid[:8], 16), int(uid[-12:], 16)
        instance = not (d == 251 and p == 3)
        pods[uid] = node_pod(
            pod_object(
                uid,
                f"pod-{d}-{p}",
                by_name,
                {n: sliced(device_id(d)) for n in by_name},
                instance=instance,
            )
        )
    for i, partition in enumerate(PARTITIONS):
        uid = pod_uid(MAX_SLICE_DEVICES, i)
        pods[uid] = node_pod(
            pod_object(
                uid,
                f"mig-{i}",
                {"main": container_id(999, i, "main")},
                {"main": partitioned(PARTITION_CARD, partition)},
            )
        )
    figures = {
        p: PartitionSample(p, PARTITION_CARD, 19_968, 1_000 * (i + 1))
        for i, p in enumerate(PARTITIONS[:3])
    }
    backend = FakeBackend(_cards(0), {device_id(d): _rows(d, 0) for d in range(256)}, figures)
    return World(root, pods, backend, started)


def change(world: World) -> None:
    """A tick's worth of change: a reused PID, a restarted container, a deleted Pod, new load."""
    # PID 20000 exits; a new process in device 251's non-Instance Pod gets the PID.
    reused = pid_of(0, 0)
    plain = world.pods[pod_uid(251, 3)]
    plain_cid = plain.pod.status.container_statuses[0].container_id.removeprefix("containerd://")
    world.started[reused] += 50_000
    write_proc(
        world.root, reused, cgroup(pod_uid(251, 3), plain_cid), started=world.started[reused]
    )
    # Device 2's Pod 6 restarts its container: new ID, new process under a new PID start time.
    uid = pod_uid(2, 6)
    cid = container_id(2, 6, "main", generation=1)
    world.pods[uid] = node_pod(
        pod_object(uid, "pod-2-6", {"main": cid}, {"main": sliced(device_id(2))})
    )
    pid = pid_of(2, 6)
    world.started[pid] += 70_000
    write_proc(world.root, pid, cgroup(uid, cid), started=world.started[pid])
    # Device 3's Pod 1 is deleted (its processes linger): the index no longer carries it.
    del world.pods[pod_uid(3, 1)]
    world.backend = replace(
        world.backend,
        cards=_cards(7),
        rows={device_id(d): _rows(d, 7) for d in range(256)},
    )


def published(world: World, context: TickContext, now: datetime) -> Published:
    snapshot = tick(world.backend, list(world.pods.values()), context, now)
    return SnapshotHolder(15).publish(snapshot, 0.0)


def digest(published: Published) -> tuple[int, str]:
    """The body's size and SHA-256; the ``ETag`` names it, the gzip form inflates to it.

    The gzip bytes themselves are not pinned: they depend on the zlib build, not on this code.
    """
    encoded = published.encoded
    assert gzip.decompress(encoded.gzipped) == encoded.identity
    assert encoded.gzipped[4:8] == bytes(4)  # mtime 0: the same body, the same gzip bytes
    sha = hashlib.sha256(encoded.identity).hexdigest()
    assert encoded.etag == f'"{sha[:32]}"'
    return len(encoded.identity), sha


def varied_ticks(root: Path) -> list[tuple[int, str]]:
    world = varied_world(root)
    context = TickContext(MFR, 15.0, root)
    answers = [
        digest(published(world, context, T0)),
        digest(published(world, context, T0 + timedelta(seconds=15))),
    ]
    change(world)
    answers.append(digest(published(world, context, T0 + timedelta(seconds=30))))
    context.confirming = True
    answers.append(digest(published(world, context, T0 + timedelta(seconds=45))))
    return answers


GOLDEN = [
    (728647, "8832809460c81d870bdb66e4646abd89f5f624dc7df3f1db5fd2ae36c073c667"),
    (728647, "d28977cf67fcdc3c6e3c507f145899bac1de1cc1a6e901b70d7816cf4b8af2ec"),
    (725963, "386e6bed3b07b0ef503f98b6ac868765e3d233955689c12f0b6841563cd859bb"),
    (1113441, "f043a6c36b622f69ea969d950e091a24ab52126e9d59a0e6c10fd250bb14e2d7"),
]
"""Recorded from the monitor at commit ``1841704`` (before issue #20's monitor-pass work)."""


def test_the_varied_node_publishes_the_recorded_bytes(tmp_path: Path) -> None:
    assert varied_ticks(tmp_path / "proc") == GOLDEN


# -- the uniform node, against a document written from the spec -------------------------------


def uniform_world(root: Path) -> World:
    pods: dict[str, NodePod] = {}
    rows: dict[str, DeviceProcesses] = {}
    for d in range(MAX_SLICE_DEVICES):
        device = device_id(d)
        device_rows = []
        for c in range(PER_DEVICE):
            uid, cid, pid = pod_uid(d, c), container_id(d, c, "main"), pid_of(d, c)
            pods[uid] = node_pod(
                pod_object(uid, f"pod-{d}-{c}", {"main": cid}, {"main": sliced(device)})
            )
            write_proc(root, pid, cgroup(uid, cid), started=pid)
            device_rows.append(ProcessRow(pid, (c + 1) * 300 * MIB + d, (c * 5 + d) % 23))
        rows[device] = DeviceProcesses(device, tuple(device_rows))
    cards = [
        CardSample(device_id(d), 81_559, 40_000 + d, d % 101, 40 + d % 30, 400.0 + d / 8, False)
        for d in range(MAX_SLICE_DEVICES)
    ]
    return World(root, pods, FakeBackend(cards, rows), {})


def stamp(when: datetime) -> str:
    """RFC 3339 in UTC with ``Z``, microseconds kept (the envelope's timestamps)."""
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def expected_document(world: World, now: datetime) -> dict[str, Any]:
    """The snapshot as the contract spells it; absent figures and zero counts are left out."""
    accelerators = [
        {
            "id": card.id,
            "memory": card.memory_total_mib,  # MiB
            "memoryUsage": card.memory_used_mib,  # MiB
            "memoryUtilization": math.ceil(card.memory_used_mib * 100 / card.memory_total_mib),
            "coresUtilization": card.cores_utilization_percent,
            "temperature": card.temperature_celsius,  # °C
            "powerUsage": card.power_watts,  # W
            "unhealthy": card.unhealthy,
        }
        for card in world.backend.cards
        if card.memory_used_mib is not None
    ]
    usages = []
    devices = []
    for device in sorted(world.backend.rows):
        processes = world.backend.rows[device]
        per_pod = sorted(
            (pod_uid(int(device[4:], 16), row.pid - pid_of(int(device[4:], 16), 0)), row)
            for row in processes.rows
        )
        for uid, row in per_pod:
            assert row.memory_bytes is not None
            assert row.cores_percent is not None
            usages.append(
                {
                    "manufacturer": MFR,
                    "podUID": uid,
                    "container": "main",
                    "deviceID": device,
                    "memoryUsedMiB": -(-row.memory_bytes // MIB),  # rounded up, once
                    "coresUtilizationPercent": min(row.cores_percent, 100),
                }
            )
        devices.append(
            {
                "manufacturer": MFR,
                "deviceID": device,
                "rowsReturned": len(processes.rows),
                "rowsAttributed": len(processes.rows),
            }
        )
    return {
        "timestamp": stamp(now),
        "periodSeconds": 15,
        "groups": [{"manufacturer": MFR, "timestamp": stamp(now), "accelerators": accelerators}],
        "slices": {"schemaVersion": 1, "usages": usages, "devices": devices},
    }


def test_the_uniform_node_publishes_the_documented_bytes(tmp_path: Path) -> None:
    """Cold and warm ticks alike: 4,096 usages, 256 devices, in the documented spelling."""
    world = uniform_world(tmp_path / "proc")
    context = TickContext(MFR, 15.0, world.root)
    for n in range(3):
        now = T0 + timedelta(seconds=15 * n)
        body = published(world, context, now).body
        expected = expected_document(world, now)
        assert len(expected["slices"]["usages"]) == MAX_SLICE_RECORDS
        assert body == json.dumps(expected, separators=(",", ":")).encode()
    assert context.attribution.hits == 2 * MAX_SLICE_RECORDS


# -- what a tick keeps of the Pod index -------------------------------------------------------


def test_a_tick_reduces_only_the_pod_entries_that_changed(tmp_path: Path) -> None:
    """The informer's entry for an unchanged Pod is the same object; only new ones are read."""
    uids = [pod_uid(0, p) for p in range(3)]
    entries = {
        uid: node_pod(
            pod_object(
                uid,
                f"pod-{p}",
                {"main": container_id(0, p, "main")},
                {"main": sliced(device_id(0))},
            )
        )
        for p, uid in enumerate(uids)
    }
    for p, uid in enumerate(uids):
        write_proc(tmp_path, pid_of(0, p), cgroup(uid, container_id(0, p, "main")), started=p)
    rows = DeviceProcesses(device_id(0), tuple(ProcessRow(pid_of(0, p), MIB, 1) for p in range(3)))
    backend = FakeBackend(
        [CardSample(device_id(0), 81_559, 1, 1, 40, 1.0, False)], {device_id(0): rows}
    )
    context = TickContext(MFR, 15.0, tmp_path)
    tick(backend, list(entries.values()), context, T0)
    before = {key: view[1] for key, view in context.pod_views.items()}
    # Pod 1 changes (a new entry, as the informer stores on a watch event); Pod 2 is deleted.
    entries[uids[1]] = node_pod(
        pod_object(
            uids[1],
            "pod-1",
            {"main": container_id(0, 1, "main", 1)},
            {"main": sliced(device_id(0))},
        )
    )
    del entries[uids[2]]
    snapshot = tick(backend, list(entries.values()), context, T0)
    views = context.pod_views
    assert {view[0].pod.metadata.uid for view in views.values()} == set(uids[:2])
    assert views[id(entries[uids[0]])][1] is before[id(entries[uids[0]])]  # kept as it was
    assert views[id(entries[uids[1]])][1].containers == {container_id(0, 1, "main", 1): "main"}
    assert snapshot.slices is not None
    assert snapshot.slices.devices[0].memory_reason == "unknown_container"  # pod 1's old ID
