"""Hygon figures through the whole path: replayed libraries → Device Manager tick → the core.

The scenario ``recordings/scenarios/hygon.yaml`` supplies the Pods (allocation annotations,
``hygon.com/dcu.sliced.cores-percentage`` requests) and the process table attribution reads;
the Device Manager's monitor tick builds the snapshot from the replayed backend; the core's
``instance_sample`` turns it into what ``instances/<name>/metrics`` answers. Nothing here is
computed by the test itself except the expected numbers the spec states.
"""

from __future__ import annotations

import functools
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpustack_core.instance_metrics import AcceleratorMetrics
from gpustack_core.pods import Pod, pod_from_object
from gpustack_core.sample import instance_sample
from gpustack_core.snapshot import MonitorSnapshot
from gpustack_core.units import restate_against_cap
from gpustack_core.usage import DeclaredTotals
from gpustack_devicemanager.monitor import TickContext, tick
from gpustack_simulator.procfs import write_procfs
from gpustack_simulator.recording import load_recording
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.scenario import (
    RECORDINGS_DIR,
    Expanded,
    expand,
    find_scenario,
    load_scenario,
)
from gpustack_simulator.synth.timeline import VirtualClock

NOW = datetime(2026, 11, 29, 8, 1, 0, tzinfo=UTC)


@functools.cache
def scenario() -> Expanded:
    return expand(load_scenario(find_scenario("hygon")), base=RECORDINGS_DIR)


def snapshot_at(node: str, t: float, tmp_path: Path) -> MonitorSnapshot:
    """One monitor tick on ``node`` at replay time ``t``, as the Device Manager runs it."""
    ex = scenario()
    [dm] = [d for d in ex.device_managers if d.node == node]
    root = tmp_path / node
    write_procfs(root, ex.procs(node))
    clock = VirtualClock()
    backend = replay_backend(load_recording(dm.recording), clock=clock)
    backend.detect()
    clock.now = t
    pods = [p for p in ex.pods if p["spec"].get("nodeName") == node]
    try:
        return tick(backend, pods, TickContext("hygon", 15, root), NOW)
    finally:
        backend.close()


def pod(name: str) -> Pod:
    obj = next(p for p in scenario().pods if p["metadata"]["name"] == name)
    return pod_from_object(obj)


def entry(name: str, snapshot: MonitorSnapshot) -> AcceleratorMetrics:
    result = instance_sample(
        pod=pod(name),
        fallback=DeclaredTotals(0, 0, 0),
        usage=None,
        snapshots={"hygon": snapshot},
        now=NOW,
    )
    [accelerator] = result.accelerators
    assert result.sample.accelerators == [accelerator.metrics]
    return accelerator.metrics


def test_a_quarter_slice_at_11_percent_of_the_card_reads_44(tmp_path: Path) -> None:
    slice_ = entry("qwen-quarter", snapshot_at("hygon-bw-1", 30.0, tmp_path))
    assert (slice_.id, slice_.mode) == ("GPU-72a1c4e9b3d05f81", "Sliced")
    assert slice_.memory_used_mib == 4236  # hy-smi --showpids and vram_<gpuid> agree
    assert slice_.memory_total_mib == 65520 // 4  # the quota: a quarter of the card
    assert slice_.cores_utilization_percent == 44 == math.ceil(11 * 100 / 25)
    assert restate_against_cap(11, 25) == 44
    assert (slice_.power_usage_watts, slice_.temperature_celsius) == (223.0, 58)  # the card's


def test_the_same_slice_holding_its_allocation_reads_a_measured_0(tmp_path: Path) -> None:
    snapshot = snapshot_at("hygon-bw-1", 0.0, tmp_path)
    holding = entry("qwen-quarter", snapshot)
    assert (holding.memory_used_mib, holding.cores_utilization_percent) == (4236, 0)
    neighbour = entry("embed-quarter", snapshot)
    assert (neighbour.memory_used_mib, neighbour.cores_utilization_percent) == (8192, 0)
    assert holding.power_usage_watts == 93.0


@pytest.mark.parametrize(("t", "busy"), [(0.0, 0), (30.0, 85)])
def test_a_partition_reports_its_own_compute_and_its_idle_sibling_0(
    t: float, busy: int, tmp_path: Path
) -> None:
    snapshot = snapshot_at("hygon-bw-mig-1", t, tmp_path)
    running = entry("mig-busy", snapshot)
    assert (running.id, running.mode) == ("MIG-5b3c9e1a-7d2f-4c86-9a0e-1f2b3c4d5e60", "Partitioned")
    assert (running.memory_total_mib, running.memory_used_mib) == (16380, 9216)
    # Read on the partition's own handle and never restated: a partition has no cap.
    assert running.cores_utilization_percent == busy
    idle = entry("mig-idle", snapshot)
    assert idle.id == "MIG-5b3c9e1a-7d2f-4c86-9a0e-1f2b3c4d5e61"
    assert (idle.memory_used_mib, idle.cores_utilization_percent) == (2048, 0)
    assert snapshot.slices is not None
    assert {p.id: p.cores_utilization_percent for p in snapshot.slices.partitions} == {
        running.id: busy,
        idle.id: 0,
    }


def test_an_unmeasured_cu_occupancy_leaves_memory_and_no_compute(tmp_path: Path) -> None:
    snapshot = snapshot_at("hygon-k100-1", 0.0, tmp_path)
    assert snapshot.slices is not None
    [device] = snapshot.slices.devices
    assert (device.memory_reason, device.cores_reason) == ("", "unsupported")
    for name, memory in (("llm-k100", 6144), ("tts-k100", 1024)):
        slice_ = entry(name, snapshot)
        assert slice_.memory_used_mib == memory
        assert slice_.cores_utilization_percent is None  # absent with its reason, never 0
