"""The T-Head backend over every T-Head recording, then the cases the spec names.

The suite half runs unchanged against each ``recordings/thead/*.yaml``, recomputing each figure
from the recording's raw HGML answers (bytes → MiB up, mW → W, the not-available sentinel,
the newest SM sample per PID). The named half pins the versioned process-utilization fallback
both ways: a stub that refuses sends the backend to the plain call; a call that answers is used.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from recorded import ret_at

from gpustack_core.reasons import QueryReason
from gpustack_devicemanager.monitor import TickContext, tick
from gpustack_simulator.procfs import write_procfs
from gpustack_simulator.recorder import RecordingProxy, exercise
from gpustack_simulator.recording import Call, Fault, Raises, Recording, call_key, load_recording
from gpustack_simulator.replay import hgml_standin
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.replay.hgml_lib import FakeHgmlLib
from gpustack_simulator.replay.hgml_standin import HgmlCodec, as_module
from gpustack_simulator.scenario import expand, load_scenario
from gpustack_simulator.synth.hgml import HgmlAnswers, PpuNode
from gpustack_simulator.synth.thead_nodes import NODES, ppu_card
from gpustack_simulator.synth.timeline import VirtualClock
from gpustack_simulator.synth.write import synthesize
from gpustack_vendors.thead import hgml as h
from gpustack_vendors.thead.backend import TheadBackend
from gpustack_vendors.thead.hgml import Hgml, HGMLError

ROOT = Path(__file__).resolve().parents[3] / "recordings"
RECORDINGS = ROOT / "thead"
THEAD = sorted(RECORDINGS.glob("*.yaml"))
MIB = 1 << 20
NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF


# -- reading the recording independently -------------------------------------------------------


def calls(recording: Recording, fn: str) -> list[Call]:
    return [c for c in recording.library("hgml").calls if c.fn == fn]


def find(recording: Recording, fn: str, ref: str, t: float = 0.0) -> Call | None:
    for call in calls(recording, fn):
        if call.args and call.args[0] == {"_handle": ref}:
            return call
    return None


def ret(recording: Recording, fn: str, ref: str, t: float = 0.0) -> Any:
    call = find(recording, fn, ref)
    return None if call is None else ret_at(call, t)


def raised(recording: Recording, fn: str, ref: str, t: float = 0.0) -> int | None:
    """The code a call raised at ``t``, ``None`` if it answered."""
    call = find(recording, fn, ref)
    assert call is not None, (fn, ref)
    if call.series:
        step = [s for s in call.series if s.t <= t][-1]
        return None if step.raises is None else step.raises.code
    return None if call.raises is None else call.raises.code


def ref_of(recording: Recording, uuid: str) -> str:
    for call in calls(recording, "hgmlDeviceGetUUID"):
        if call.ret == uuid:
            return str(call.args[0]["_handle"])
    raise AssertionError(uuid)


def cores(recording: Recording, ref: str, t: float) -> dict[int, int] | None:
    """Newest SM % per PID from whichever call answered: versioned first, else the plain one."""
    for fn in ("hgmlDeviceGetProcessesUtilizationInfo", "hgmlDeviceGetProcessUtilization"):
        code = raised(recording, fn, ref, t)
        if code in {h.HGML_ERROR_NOT_SUPPORTED, h.HGML_ERROR_FUNCTION_NOT_FOUND}:
            if fn == "hgmlDeviceGetProcessUtilization":
                return None
            continue
        if code == h.HGML_ERROR_NOT_FOUND:
            return {}
        newest: dict[int, tuple[int, int]] = {}
        for row in ret(recording, fn, ref, t):
            if row["pid"] not in newest or row["timeStamp"] > newest[row["pid"]][0]:
                newest[row["pid"]] = (row["timeStamp"], row["smUtil"])
        return {pid: sm for pid, (_, sm) in newest.items()}
    raise AssertionError(ref)


@pytest.fixture(params=THEAD, ids=lambda p: p.name)
def thead(request: pytest.FixtureRequest) -> Iterator[tuple[Recording, Any, VirtualClock]]:
    recording = load_recording(request.param)
    clock = VirtualClock()
    backend = replay_backend(recording, clock=clock)
    yield recording, backend, clock
    backend.close()


# -- the suite, over every T-Head recording ----------------------------------------------------


def test_recordings_exist() -> None:
    assert {p.name for p in THEAD} >= {"ppu-zw810e-4x.yaml"}


def test_detect_reports_cards_and_mig_partitions_with_converted_memory(thead: Any) -> None:
    recording, backend, _ = thead
    detection = backend.detect()
    assert detection.manufacturer == "thead"
    count = calls(recording, "hgmlDeviceGetCount")[0].ret
    assert len(detection.devices) == count
    hggc = calls(recording, "hgmlSystemGetHggcDriverVersion")[0].ret
    for index, device in enumerate(detection.devices):
        ref = ref_of(recording, device.id)
        assert ref == f"gpu{index}"
        assert device.index == index
        total = ret(recording, "hgmlDeviceGetMemoryInfo", ref)["total"]
        assert device.memory_mib == math.ceil(total / MIB)
        assert device.name == ret(recording, "hgmlDeviceGetName", ref)
        assert device.cores == ret(recording, "hgmlDeviceGetNumGpuCores", ref)
        assert device.runtime_version == f"{hggc // 1000}.{hggc % 1000 // 10}"
        bus = ret(recording, "hgmlDeviceGetPciInfo", ref)["busId"]  # 00000000:05:00.0
        assert device.pci_bus_id == f"{int(bus[:8], 16):04x}{bus[8:].lower()}"
        for partition in device.partitions:
            mig_ref = ref_of(recording, partition.id)
            assert mig_ref == f"{ref}/mig{partition.slot}"
            mig_total = ret(recording, "hgmlDeviceGetMemoryInfo", mig_ref)["total"]
            assert partition.memory_mib == math.ceil(mig_total / MIB)
            name = ret(recording, "hgmlDeviceGetName", mig_ref)
            assert partition.profile == name.split("MIG ")[1]
            assert partition.parent_id == device.id


@pytest.mark.parametrize("t", [0.0, 15.0, 30.0, 45.0])
def test_samples_convert_bytes_and_milliwatts(thead: Any, t: float) -> None:
    recording, backend, clock = thead
    devices = backend.detect().devices
    clock.now = t
    for sample, device in zip(backend.sample(), devices, strict=True):
        ref = ref_of(recording, device.id)
        memory = ret(recording, "hgmlDeviceGetMemoryInfo", ref, t)
        assert sample.memory_total_mib == math.ceil(memory["total"] / MIB)
        assert sample.memory_used_mib == math.ceil(memory["used"] / MIB)
        util = ret(recording, "hgmlDeviceGetUtilizationRates", ref, t)
        assert sample.cores_utilization_percent == (None if util is None else util["gpu"])
        assert sample.temperature_celsius == ret(recording, "hgmlDeviceGetTemperature", ref, t)
        assert sample.power_watts == ret(recording, "hgmlDeviceGetPowerUsage", ref, t) / 1000


@pytest.mark.parametrize("t", [0.0, 30.0])
def test_process_rows_carry_memory_and_the_newest_sample(thead: Any, t: float) -> None:
    recording, backend, clock = thead
    devices = backend.detect().devices
    clock.now = t
    result = backend.processes([d.id for d in devices])
    for device in devices:
        ref = ref_of(recording, device.id)
        listed = ret(recording, "hgmlDeviceGetComputeRunningProcesses", ref, t)
        expected_cores = cores(recording, ref, t)
        entry = result[device.id]
        assert [(r.pid, r.memory_bytes) for r in entry.rows] == [
            (p["pid"], None if p["usedGpuMemory"] == NOT_AVAILABLE else p["usedGpuMemory"])
            for p in listed
        ]
        if expected_cores is None:
            assert [r.cores_percent for r in entry.rows] == [None] * len(listed)
            assert entry.cores_reason is QueryReason.UNSUPPORTED
        else:
            assert [r.cores_percent for r in entry.rows] == [
                expected_cores.get(p["pid"], 0) for p in listed
            ]
            assert entry.cores_reason is None
        assert entry.memory_reason is None


@pytest.mark.parametrize("t", [0.0, 30.0])
def test_partitions_read_memory_on_their_own_handle_and_no_compute(thead: Any, t: float) -> None:
    recording, backend, clock = thead
    detection = backend.detect()
    clock.now = t
    ids = [p.id for d in detection.devices for p in d.partitions]
    result = backend.partitions([*ids, "MIG-none"])
    for partition_id in ids:
        memory = ret(recording, "hgmlDeviceGetMemoryInfo", ref_of(recording, partition_id), t)
        sample = result[partition_id]
        assert (sample.memory_total_mib, sample.memory_used_mib) == (
            math.ceil(memory["total"] / MIB),
            math.ceil(memory["used"] / MIB),
        )
        assert sample.cores_utilization_percent is None
        assert sample.cores_reason is QueryReason.UNSUPPORTED
    assert result["MIG-none"].memory_reason is QueryReason.TRANSIENT_DRIVER_ERROR


@pytest.mark.parametrize("path", THEAD, ids=lambda p: p.name)
def test_record_of_replay_round_trips(path: Path) -> None:
    """record(replay(R)) == R on every call made, handles and series included."""
    original = load_recording(path)
    clock = VirtualClock()
    binding = hgml_standin.build_binding(original, clock=clock)
    proxy = RecordingProxy(as_module(binding), HgmlCodec(), clock=clock)
    assert original.loop_seconds is not None
    exercise(
        TheadBackend(proxy),
        samples=round(original.loop_seconds / 15),
        interval=15.0,
        sleep=clock.sleep,
    )
    before = original.library("hgml")
    again = proxy.library("hgml", before.binding)
    assert {call_key(c): c for c in again.calls} == {call_key(c): c for c in before.calls}
    assert again.handles == before.handles


@pytest.mark.parametrize("spec", NODES, ids=lambda s: s.file)
def test_committed_recordings_are_what_the_synthesizer_writes(spec: Any) -> None:
    assert synthesize("thead", spec) == (RECORDINGS / spec.file).read_text()


# -- the versioned process-utilization call, both ways -------------------------------------------


def _backend(node: PpuNode, *, missing: tuple[str, ...] = ()) -> tuple[TheadBackend, Any, Any]:
    clock = VirtualClock()
    lib = FakeHgmlLib(HgmlAnswers(node, clock), missing=missing)
    return TheadBackend(Hgml(lib)), lib, clock


def _read_cores(node: PpuNode, *, missing: tuple[str, ...] = ()) -> tuple[list[Any], list[str]]:
    backend, lib, clock = _backend(node, missing=missing)
    [card] = backend.detect().devices
    clock.now = 30.0
    lib.calls.clear()
    entry = backend.processes([card.id])[card.id]
    return [(r.pid, r.cores_percent) for r in entry.rows], list(lib.calls)


ONE_CARD = PpuNode("1.4.1-816bc0", 12030, (ppu_card(1),))


def test_the_stub_sends_the_backend_to_the_plain_call() -> None:
    rows, made = _read_cores(ONE_CARD)
    assert rows == [(5150, 33), (5151, 18)]
    assert "hgmlDeviceGetProcessesUtilizationInfo" in made  # asked, refused
    assert "hgmlDeviceGetProcessUtilization" in made  # and the plain one answered


def test_a_versioned_call_that_answers_is_used_and_the_plain_one_never_asked() -> None:
    node = dataclasses.replace(ONE_CARD, versioned_utilization=True)
    rows, made = _read_cores(node)
    assert rows == [(5150, 33), (5151, 18)]
    assert "hgmlDeviceGetProcessesUtilizationInfo" in made
    assert "hgmlDeviceGetProcessUtilization" not in made


def test_a_library_without_the_versioned_symbol_falls_back_too() -> None:
    node = dataclasses.replace(ONE_CARD, versioned_utilization=True)
    rows, made = _read_cores(node, missing=("hgmlDeviceGetProcessesUtilizationInfo",))
    assert rows == [(5150, 33), (5151, 18)]
    assert made.count("hgmlDeviceGetProcessUtilization") == 2  # probe and fill


def test_a_versioned_answer_other_than_a_refusal_is_the_answer() -> None:
    """Permission denied is about the caller, not the entry point: no fallback, no figure."""
    recording = load_recording(RECORDINGS / "ppu-zw810e-4x.yaml")
    recording = msgspec.structs.replace(
        recording,
        faults=(
            Fault(
                fn="hgmlDeviceGetProcessesUtilizationInfo",
                start=0.0,
                end=60.0,
                raises=Raises(type="HGMLError", code=h.HGML_ERROR_NO_PERMISSION),
            ),
        ),
    )
    backend = replay_backend(recording, clock=VirtualClock())
    card = backend.detect().devices[1].id
    entry = backend.processes([card])[card]
    assert [(r.pid, r.cores_percent) for r in entry.rows] == [(5150, None), (5151, None)]
    assert entry.cores_reason is QueryReason.PERMISSION
    assert entry.memory_reason is None


def test_when_both_calls_refuse_compute_is_unsupported() -> None:
    backend = replay_backend(
        load_recording(RECORDINGS / "ppu-zw810e-4x.yaml"), clock=VirtualClock()
    )
    mig_card = backend.detect().devices[3]
    assert mig_card.partitions
    entry = backend.processes([mig_card.id])[mig_card.id]
    assert [(r.pid, r.cores_percent) for r in entry.rows] == [(6001, None)]
    assert entry.cores_reason is QueryReason.UNSUPPORTED


# -- named cases --------------------------------------------------------------------------------


def test_a_process_idle_then_busy_reads_a_measured_zero_then_its_share() -> None:
    clock = VirtualClock()
    backend = replay_backend(load_recording(RECORDINGS / "ppu-zw810e-4x.yaml"), clock=clock)
    card = backend.detect().devices[0]
    assert (card.name, card.memory_mib, card.cores) == ("PPU-ZW810E", 97_920, 32_768)
    readings = []
    for t in (0.0, 30.0):
        clock.now = t
        entry = backend.processes([card.id])[card.id]
        sample = next(s for s in backend.sample() if s.id == card.id)
        readings.append(
            ([(r.pid, r.memory_bytes, r.cores_percent) for r in entry.rows], sample.power_watts)
        )
    assert readings == [
        ([(4242, 40_960 * MIB, 0)], 58.0),  # NOT_FOUND: no sample, a measured idle
        ([(4242, 40_960 * MIB, 71)], 302.5),
    ]


def test_memory_the_driver_cannot_size_is_absent_not_zero() -> None:
    backend = replay_backend(
        load_recording(RECORDINGS / "ppu-zw810e-4x.yaml"), clock=VirtualClock()
    )
    card = backend.detect().devices[2].id
    entry = backend.processes([card])[card]
    assert [(r.pid, r.memory_bytes, r.cores_percent) for r in entry.rows] == [
        (5250, None, 12),
        (5251, 8_192 * MIB, 0),
    ]


def test_a_mig_card_lists_its_partitions_and_skips_empty_slots() -> None:
    clock = VirtualClock()
    backend = replay_backend(load_recording(RECORDINGS / "ppu-zw810e-4x.yaml"), clock=clock)
    card = backend.detect().devices[3]
    assert [(p.slot, p.profile, p.memory_mib) for p in card.partitions] == [
        (0, "2g.48gb", 48_896),
        (1, "1g.24gb", 24_448),
    ]
    sample = next(s for s in backend.sample() if s.id == card.id)
    assert sample.cores_utilization_percent is None  # NOT_SUPPORTED on a MIG-enabled card
    busy, idle = (p.id for p in card.partitions)
    clock.now = 30.0
    result = backend.partitions([busy, idle])
    assert (result[busy].memory_used_mib, result[idle].memory_used_mib) == (28_672, 0)


def test_a_call_missing_from_the_recording_is_function_not_found() -> None:
    binding = hgml_standin.build_binding(load_recording(RECORDINGS / "ppu-zw810e-4x.yaml"))
    binding.hgmlInit()
    dev = binding.hgmlDeviceGetHandleByIndex(0)
    with pytest.raises(HGMLError) as raised_:
        binding.hgmlDeviceGetMigDeviceHandleByIndex(dev, 0)  # card 0 is not in MIG mode
    assert raised_.value.value == h.HGML_ERROR_FUNCTION_NOT_FOUND


# -- through the Device Manager's tick, over the committed scenario ------------------------------


def test_the_scenarios_slices_read_memory_and_compute_and_the_mig_memory(tmp_path: Path) -> None:
    expanded = expand(load_scenario(ROOT / "scenarios" / "thead.yaml"), base=ROOT)
    [dm] = expanded.device_managers
    write_procfs(tmp_path, dict(expanded.procs(dm.node)))
    clock = VirtualClock()
    backend = replay_backend(load_recording(dm.recording), clock=clock)
    backend.detect()
    clock.now = 30.0
    pods = [p for p in expanded.pods if p["spec"].get("nodeName") == dm.node]
    snapshot = tick(backend, pods, TickContext("thead", 15.0, tmp_path), datetime.now(UTC))
    section = snapshot.slices
    assert section is not None
    uid = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
    [device] = section.devices
    assert (device.memory_reason, device.cores_reason) == ("", "")
    usages = {(u.pod_uid, u.container): u for u in section.usages}
    half = usages[(uid["chat-half"], "main")]
    quarter = usages[(uid["embed-quarter"], "main")]
    assert (half.memory_used_mib, half.cores_utilization_percent) == (30_720, 33)
    assert (quarter.memory_used_mib, quarter.cores_utilization_percent) == (12_288, 18)
    [mig] = section.partitions
    assert (mig.pod_uid, mig.id) == (uid["mig-2g"], "MIG-011ef111-8503-5426-8000-0000d4e20000")
    assert (mig.memory_total_mib, mig.memory_used_mib) == (48_896, 28_672)
    assert mig.cores_utilization_percent is None
