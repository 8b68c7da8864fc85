"""One backend suite over every committed recording: converted figures, not mere success.

Every test runs unchanged against every recording of a vendor. Expected values are recomputed
independently from the recording's raw answers (bytes → MiB up, mW → W), so a backend that
mis-converts, mis-attributes or drops a figure fails here.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from recorded import ret_at

from gpustack_core.reasons import QueryReason
from gpustack_simulator.recording import Call, Recording, load_recording
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.synth.timeline import VirtualClock
from gpustack_vendors.protocol import Backend

RECORDINGS = Path(__file__).resolve().parents[3] / "recordings"
NVIDIA = sorted((RECORDINGS / "nvidia").glob("*.yaml"))
MIB = 1 << 20


def answers(recording: Recording, fn: str) -> list[Call]:
    return [c for lib in recording.libraries for c in lib.calls if c.fn == fn]


def handle_of(recording: Recording, uuid: str) -> str:
    for call in answers(recording, "nvmlDeviceGetUUID"):
        if call.ret == uuid:
            return str(call.args[0]["_handle"])
    raise AssertionError(uuid)


def nvml_ret(recording: Recording, fn: str, ref: str, t: float = 0.0) -> Any:
    for call in answers(recording, fn):
        if call.args and call.args[0] == {"_handle": ref}:
            return ret_at(call, t)
    return None


@pytest.fixture(params=NVIDIA, ids=lambda p: p.name)
def nvidia(request: pytest.FixtureRequest) -> tuple[Recording, Backend, VirtualClock]:
    recording = load_recording(request.param)
    clock = VirtualClock()
    backend = replay_backend(recording, clock=clock)
    yield recording, backend, clock
    backend.close()


def test_recordings_exist() -> None:
    assert len(NVIDIA) >= 5


def test_detect_reports_every_card_with_converted_memory(nvidia: Any) -> None:
    recording, backend, _ = nvidia
    detection = backend.detect()
    count = answers(recording, "nvmlDeviceGetCount")[0].ret
    assert len(detection.devices) == count
    for index, device in enumerate(detection.devices):
        ref = handle_of(recording, device.id)
        total = nvml_ret(recording, "nvmlDeviceGetMemoryInfo", ref)["total"]
        assert device.index == index
        assert device.memory_mib == math.ceil(total / MIB)
        assert device.name == nvml_ret(recording, "nvmlDeviceGetName", ref)
        assert device.id.startswith("GPU-")
        assert device.driver_version == answers(recording, "nvmlSystemGetDriverVersion")[0].ret
        assert device.pci_bus_id == device.pci_bus_id.lower()
        assert len(device.pci_bus_id) == len("0000:00:00.0")
        for partition in device.partitions:
            mig_ref = handle_of(recording, partition.id)
            mig_total = nvml_ret(recording, "nvmlDeviceGetMemoryInfo", mig_ref)["total"]
            assert partition.memory_mib == math.ceil(mig_total / MIB)
            assert partition.parent_id == device.id
            assert partition.id.startswith("MIG-")


@pytest.mark.parametrize("t", [0.0, 15.0, 30.0, 45.0])
def test_card_samples_follow_the_timeline(nvidia: Any, t: float) -> None:
    recording, backend, clock = nvidia
    backend.detect()
    clock.now = t
    for card in backend.sample():
        ref = handle_of(recording, card.id)
        memory = nvml_ret(recording, "nvmlDeviceGetMemoryInfo", ref, t)
        assert card.memory_total_mib == math.ceil(memory["total"] / MIB)
        assert card.memory_used_mib == math.ceil(memory["used"] / MIB)
        power = nvml_ret(recording, "nvmlDeviceGetPowerUsage", ref, t)
        assert card.power_watts == (None if power is None else power / 1000)
        assert card.temperature_celsius == nvml_ret(recording, "nvmlDeviceGetTemperature", ref, t)
        util = nvml_ret(recording, "nvmlDeviceGetUtilizationRates", ref, t)
        assert card.cores_utilization_percent == (None if util is None else util["gpu"])
        assert card.unhealthy is False


@pytest.mark.parametrize("t", [0.0, 45.0])
def test_process_rows_match_the_recorded_lists(nvidia: Any, t: float) -> None:
    recording, backend, clock = nvidia
    detection = backend.detect()
    clock.now = t
    ids = [d.id for d in detection.devices]
    result = backend.processes(ids)
    assert set(result) == set(ids)  # one entry per requested device, always
    for device_id, entry in result.items():
        ref = handle_of(recording, device_id)
        listed = next(
            c
            for c in answers(recording, "nvmlDeviceGetComputeRunningProcesses")
            if c.args[0] == {"_handle": ref}
        )
        if listed.raises is not None:
            assert entry.rows == ()
            assert entry.memory_reason is QueryReason.UNSUPPORTED
            assert entry.cores_reason is QueryReason.UNSUPPORTED
            continue
        rows = ret_at(listed, t)
        assert [r.pid for r in entry.rows] == [p["pid"] for p in rows]
        for row, raw in zip(entry.rows, rows, strict=True):
            assert row.memory_bytes == raw["usedGpuMemory"]  # bytes; None stays None


def test_unknown_device_gets_an_entry_with_a_reason(nvidia: Any) -> None:
    _, backend, _ = nvidia
    backend.detect()
    entry = backend.processes(["GPU-not-on-this-node"])["GPU-not-on-this-node"]
    assert entry.memory_reason is QueryReason.TRANSIENT_DRIVER_ERROR
    assert entry.rows == ()


def test_partitions_are_read_on_their_own_handles(nvidia: Any) -> None:
    recording, backend, clock = nvidia
    detection = backend.detect()
    clock.now = 45.0
    ids = [p.id for d in detection.devices for p in d.partitions]
    result = backend.partitions(ids)
    assert set(result) == set(ids)
    for partition_id, sample in result.items():
        memory = nvml_ret(
            recording, "nvmlDeviceGetMemoryInfo", handle_of(recording, partition_id), 45.0
        )
        assert sample.memory_total_mib == math.ceil(memory["total"] / MIB)
        assert sample.memory_used_mib == math.ceil(memory["used"] / MIB)
        assert sample.cores_utilization_percent is None
        assert sample.cores_reason is QueryReason.UNSUPPORTED
