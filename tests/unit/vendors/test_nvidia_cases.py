"""The NVIDIA cases the spec names, each on the recording that carries it."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from gpustack_core.reasons import QueryReason
from gpustack_simulator.recording import Fault, Raises, load_recording
from gpustack_simulator.replay import pynvml_standin
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.synth.timeline import VirtualClock
from gpustack_vendors.nvidia.backend import NvidiaBackend

NVIDIA = Path(__file__).resolve().parents[3] / "recordings" / "nvidia"


def test_mig_partitions_carry_their_own_ids_and_capacity() -> None:
    backend = replay_backend(load_recording(NVIDIA / "h100-mig.yaml"), clock=VirtualClock())
    [card] = backend.detect().devices
    profiles = [(p.slot, p.profile, p.memory_mib) for p in card.partitions]
    assert profiles == [(0, "3g.40gb", 40448), (1, "1g.10gb", 9856), (2, "1g.10gb", 9856)]
    assert all(p.id.startswith("MIG-") and p.id != card.id for p in card.partitions)
    assert len({p.id for p in card.partitions}) == 3  # empty slots 3-6 are not partitions


def test_idle_mig_partition_reads_a_measured_zero() -> None:
    recording = load_recording(NVIDIA / "h100-mig.yaml")
    backend = replay_backend(recording, clock=VirtualClock())
    [card] = backend.detect().devices
    one_g = [p.id for p in card.partitions if p.profile == "1g.10gb"]
    samples = backend.partitions(one_g)
    assert [samples[i].memory_used_mib for i in one_g] == [0, 512]
    assert all(samples[i].memory_reason is None for i in one_g)


def test_idle_card_reads_zero_then_the_kernel_shows() -> None:
    clock = VirtualClock()
    backend = replay_backend(load_recording(NVIDIA / "h100-8x.yaml"), clock=clock)
    gpu2 = backend.detect().devices[2].id
    idle = backend.processes([gpu2])[gpu2]
    # NOT_FOUND from process utilization (no sample since lastSeen): listed PIDs read 0.
    assert [(r.pid, r.memory_bytes, r.cores_percent) for r in idle.rows] == [(4242, 9212 << 20, 0)]
    assert idle.cores_reason is None
    clock.now = 30.0
    busy = backend.processes([gpu2])[gpu2]
    assert [r.cores_percent for r in busy.rows] == [63]
    powers = []
    for t in (0.0, 30.0):
        clock.now = t
        powers.append(next(c.power_watts for c in backend.sample() if c.id == gpu2))
    assert powers == [118.01, 396.5]


def test_memory_not_available_is_absent_not_zero() -> None:
    backend = replay_backend(load_recording(NVIDIA / "h100-8x.yaml"), clock=VirtualClock())
    gpu3 = backend.detect().devices[3].id
    rows = {r.pid: r for r in backend.processes([gpu3])[gpu3].rows}
    assert rows[5152].memory_bytes is None  # NVML_VALUE_NOT_AVAILABLE
    assert rows[5151].memory_bytes == 10_240 << 20
    assert rows[5151].cores_percent == 0  # listed, no sample: idle
    assert rows[5150].cores_percent == 41


def test_blackwell_per_process_calls_are_unsupported() -> None:
    backend = replay_backend(
        load_recording(NVIDIA / "rtx-pro-6000-blackwell.yaml"), clock=VirtualClock()
    )
    [card] = backend.detect().devices
    entry = backend.processes([card.id])[card.id]
    assert entry.rows == ()
    assert entry.memory_reason is QueryReason.UNSUPPORTED
    assert entry.cores_reason is QueryReason.UNSUPPORTED
    [sample] = backend.sample()
    assert sample.memory_used_mib is not None  # card figures still read


def test_a_call_missing_from_the_recording_is_function_not_found() -> None:
    module = pynvml_standin.build_module(load_recording(NVIDIA / "t4.yaml"), clock=VirtualClock())
    module.nvmlInit()
    handle = module.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        module.nvmlDeviceGetSerial(handle)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        module.nvmlDeviceGetHandleByIndex(5)  # recorded only for index 0


def test_stand_in_returns_the_bindings_own_types() -> None:
    module = pynvml_standin.build_module(load_recording(NVIDIA / "t4.yaml"), clock=VirtualClock())
    module.nvmlInit()
    handle = module.nvmlDeviceGetHandleByIndex(0)
    assert isinstance(handle, pynvml.c_nvmlDevice_t)
    assert module.nvmlDeviceGetHandleByIndex(0) is handle  # the same device, the same handle
    assert isinstance(module.nvmlDeviceGetMemoryInfo(handle), pynvml.c_nvmlMemory_t)
    assert isinstance(module.nvmlDeviceGetPciInfo(handle), pynvml.nvmlPciInfo_t)
    procs = module.nvmlDeviceGetComputeRunningProcesses(handle)
    assert isinstance(procs[0], pynvml.nvmlFriendlyObject)  # configured processes are visible
    assert module.NVML_TEMPERATURE_GPU == pynvml.NVML_TEMPERATURE_GPU


def test_process_utilization_filters_on_last_seen() -> None:
    clock = VirtualClock()
    module = pynvml_standin.build_module(load_recording(NVIDIA / "t4.yaml"), clock=clock)
    module.nvmlInit()
    handle = module.nvmlDeviceGetHandleByIndex(0)
    clock.now = 30.0
    [sample] = module.nvmlDeviceGetProcessUtilization(handle, 0)
    assert isinstance(sample, pynvml.c_nvmlProcessUtilizationSample_t)
    with pytest.raises(pynvml.NVMLError_NotFound):  # nothing newer than the newest stamp
        module.nvmlDeviceGetProcessUtilization(handle, sample.timeStamp)


def test_scripted_fault_raises_the_bindings_error_in_its_window() -> None:
    recording = load_recording(NVIDIA / "t4.yaml")
    faulty = type(recording)(
        **{
            **{f: getattr(recording, f) for f in recording.__struct_fields__},
            "faults": (
                Fault(
                    fn="nvmlDeviceGetTemperature",
                    start=10.0,
                    end=20.0,
                    raises=Raises(type="NVMLError_GpuIsLost", code=15),
                ),
            ),
        }
    )
    clock = VirtualClock()
    backend = NvidiaBackend(pynvml_standin.build_module(faulty, clock=clock))
    backend.detect()
    clock.now = 12.0
    assert backend.sample()[0].temperature_celsius is None
    clock.now = 20.0
    assert backend.sample()[0].temperature_celsius == 40


def test_loop_wraps_replay_time() -> None:
    recording = load_recording(NVIDIA / "t4.yaml")
    assert recording.loop_seconds == 60.0
    clock = VirtualClock()
    backend = replay_backend(recording, clock=clock)
    card = backend.detect().devices[0].id
    clock.now = 60.0 + 1.0  # wraps to 1 s: idle again
    assert backend.processes([card])[card].rows[0].cores_percent == 0
    clock.now = 60.0 + 31.0
    assert backend.processes([card])[card].rows[0].cores_percent == 88
