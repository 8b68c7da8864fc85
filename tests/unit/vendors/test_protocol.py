"""The Backend protocol's promises, on every recording of every vendor, unchanged.

Vendor suites (``test_backends.py``, ``test_backends_amd.py``) recompute each figure from the
recording's raw answers; this one holds every backend to what the Device Manager relies on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpustack_core.reasons import QueryReason
from gpustack_simulator.recording import load_recording
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.synth.timeline import VirtualClock

RECORDINGS = sorted(
    p
    for p in (Path(__file__).resolve().parents[3] / "recordings").glob("*/*.yaml")
    if p.parent.name != "scenarios"
)


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_backend_keeps_the_protocol(path: Path) -> None:
    recording = load_recording(path)
    clock = VirtualClock()
    backend = replay_backend(recording, clock=clock)
    detection = backend.detect()
    assert detection.manufacturer == recording.vendor
    ids = [d.id for d in detection.devices]
    assert ids
    assert len(set(ids)) == len(ids)  # identifiers are unique on the node
    assert [d.index for d in detection.devices] == list(range(len(ids)))
    for device in detection.devices:
        assert device.memory_mib > 0
        assert device.name
        for partition in device.partitions:
            assert partition.parent_id == device.id
            assert 0 < partition.memory_mib <= device.memory_mib
    partition_ids = [p.id for d in detection.devices for p in d.partitions]
    for t in (0.0, 15.0, 30.0, 45.0):
        clock.now = t
        samples = backend.sample()
        assert [s.id for s in samples] == ids  # same cards, same order, every pass
        for sample in samples:
            assert sample.memory_total_mib > 0
            if sample.memory_used_mib is not None:
                assert 0 <= sample.memory_used_mib <= sample.memory_total_mib
            if sample.power_watts is not None:
                assert sample.power_watts >= 0
        rows = backend.processes([*ids, "not-a-device"])
        assert set(rows) == {*ids, "not-a-device"}  # one entry per requested device, always
        assert rows["not-a-device"].rows == ()
        assert rows["not-a-device"].memory_reason is not None
        for entry in rows.values():
            pids = [r.pid for r in entry.rows]
            assert len(set(pids)) == len(pids)
            for row in entry.rows:
                assert row.memory_bytes is None or row.memory_bytes >= 0
                assert row.cores_percent is None or 0 <= row.cores_percent <= 100
                if entry.cores_reason is not None:
                    assert row.cores_percent is None  # a reason means no row carries it
            for reason in (entry.memory_reason, entry.cores_reason):
                assert reason is None or isinstance(reason, QueryReason)
        partitions = backend.partitions(partition_ids)
        assert set(partitions) == set(partition_ids)
    backend.close()
