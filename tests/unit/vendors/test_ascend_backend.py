"""The Ascend backend over every Ascend recording, then the cases the spec names.

The suite half runs unchanged against each ``recordings/ascend/*.yaml``; its expected values are
recomputed here from the recording's raw DCMI answers (MB, 0.1 W, bytes per process, die words),
never from the backend's helpers, so a backend that mis-converts, mis-keys or drops a figure
fails. Per-process compute and vNPU compute have no DCMI entry point: ``unsupported`` always.
"""

from __future__ import annotations

import dataclasses
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
from gpustack_simulator.replay import dcmi_standin
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.replay.dcmi_lib import FakeDcmiLib
from gpustack_simulator.replay.dcmi_standin import DcmiCodec, as_module
from gpustack_simulator.scenario import expand, load_scenario
from gpustack_simulator.synth.ascend_nodes import NODES, b2_chip, duo_chip
from gpustack_simulator.synth.dcmi import AscendNode, DcmiAnswers, Vnpu
from gpustack_simulator.synth.timeline import VirtualClock
from gpustack_simulator.synth.write import synthesize
from gpustack_vendors.ascend import dcmi as d
from gpustack_vendors.ascend.backend import AscendBackend
from gpustack_vendors.ascend.dcmi import Dcmi

ROOT = Path(__file__).resolve().parents[3] / "recordings"
RECORDINGS = ROOT / "ascend"
ASCEND = sorted(RECORDINGS.glob("*.yaml"))
MIB = 1 << 20
TIMES = (0.0, 15.0, 30.0, 45.0)


# -- reading the recording independently -------------------------------------------------------


def calls(recording: Recording, fn: str) -> list[Call]:
    return [c for c in recording.library("dcmi").calls if c.fn == fn]


def answer(recording: Recording, fn: str, args: list[Any], t: float = 0.0) -> Any:
    """The recorded return value, ``None`` where the call raised."""
    for call in calls(recording, fn):
        if list(call.args) == args:
            return ret_at(call, t)
    raise AssertionError(f"{fn}{args} not recorded")


def keys(recording: Recording) -> list[tuple[int, int]]:
    """(card, device) pairs in logic-id order, as ``npu-smi`` numbers them."""
    found = [
        (card, device)
        for card in answer(recording, "dcmi_get_card_list", [])
        for device in range(answer(recording, "dcmi_get_device_num_in_card", [card]))
    ]
    return sorted(found, key=lambda k: answer(recording, "dcmi_get_device_logic_id", list(k)))


def device_id(recording: Recording, key: tuple[int, int]) -> str:
    die = answer(recording, "dcmi_get_device_die_v2", [*key, 1])["soc_die"]
    return "-".join(f"{word:08X}" for word in die)


def memory(recording: Recording, key: tuple[int, int], t: float) -> tuple[int, int]:
    """(total, used) MiB: HBM where it answers, else memory_info_v3 (size - available)."""
    hbm = answer(recording, "dcmi_get_device_hbm_info", list(key), t)
    if hbm is not None and hbm["memory_size"] > 0:
        return hbm["memory_size"], hbm["memory_usage"]
    info = answer(recording, "dcmi_get_device_memory_info_v3", list(key), t)
    return info["memory_size"], info["memory_size"] - info["memory_available"]


def vdevs(recording: Recording, key: tuple[int, int]) -> list[int]:
    total = answer(recording, "dcmi_get_vdev_total_resource", list(key))
    return [] if total is None else total["vdev_id"][: total["vdev_num"]]


@pytest.fixture(params=ASCEND, ids=lambda p: p.name)
def ascend(request: pytest.FixtureRequest) -> Iterator[tuple[Recording, Any, VirtualClock]]:
    recording = load_recording(request.param)
    clock = VirtualClock()
    backend = replay_backend(recording, clock=clock)
    yield recording, backend, clock
    backend.close()


# -- the suite, over every Ascend recording ----------------------------------------------------


def test_recordings_exist() -> None:
    assert {p.name for p in ASCEND} >= {"910b2-8x.yaml", "310p3-duo.yaml"}


def test_detect_keys_devices_by_die_id_in_logic_order(ascend: Any) -> None:
    recording, backend, _ = ascend
    detection = backend.detect()
    assert detection.manufacturer == "ascend"
    driver = answer(recording, "dcmi_get_driver_version", [])
    assert len(detection.devices) == len(keys(recording))
    for index, (device, key) in enumerate(zip(detection.devices, keys(recording), strict=True)):
        chip = answer(recording, "dcmi_get_device_chip_info_v2", list(key))
        pcie = answer(recording, "dcmi_get_device_pcie_info_v2", list(key))
        assert device.id == device_id(recording, key)
        assert device.index == index
        assert (device.name, device.cores) == (chip["chip_name"], chip["aicore_cnt"])
        assert device.memory_mib == memory(recording, key, 0.0)[0]  # MB is MiB: no conversion
        assert device.pci_bus_id == (
            f"{pcie['domain']:04x}:{pcie['bdf_busid']:02x}:"
            f"{pcie['bdf_deviceid']:02x}.{pcie['bdf_funcid']}"
        )
        assert device.driver_version == driver
        health = answer(recording, "dcmi_get_device_health", list(key))
        assert device.unhealthy is (health >= 2)
        expected = []
        for vdev in vdevs(recording, key):
            query = answer(recording, "dcmi_get_vdev_resource", [*key, vdev])["query_info"]
            expected.append(
                (
                    f"{device.id}-vnpu{vdev}",
                    vdev,
                    query["name"],
                    query["computing"]["memory_size"],
                    int(query["computing"]["aic"]),
                )
            )
        assert [
            (p.id, p.slot, p.profile, p.memory_mib, p.cores) for p in device.partitions
        ] == expected
        assert all(p.parent_id == device.id for p in device.partitions)


@pytest.mark.parametrize("t", TIMES)
def test_samples_follow_the_timeline_in_the_contracts_units(ascend: Any, t: float) -> None:
    recording, backend, clock = ascend
    backend.detect()
    clock.now = t
    samples = backend.sample()
    assert len(samples) == len(keys(recording))
    for sample, key in zip(samples, keys(recording), strict=True):
        assert sample.id == device_id(recording, key)
        assert (sample.memory_total_mib, sample.memory_used_mib) == memory(recording, key, t)
        rate = answer(recording, "dcmi_get_device_utilization_rate", [*key, 2], t)
        assert sample.cores_utilization_percent == rate
        temperature = answer(recording, "dcmi_get_device_temperature", list(key), t)
        assert sample.temperature_celsius == temperature
        tenths = answer(recording, "dcmi_get_device_power_info", list(key), t)
        assert sample.power_watts == (None if tenths is None else tenths / 10)


@pytest.mark.parametrize("t", [0.0, 30.0])
def test_processes_carry_memory_in_bytes_and_no_compute(ascend: Any, t: float) -> None:
    recording, backend, clock = ascend
    detection = backend.detect()
    clock.now = t
    ids = [dev.id for dev in detection.devices]
    result = backend.processes(ids)
    assert list(result) == ids
    for key, device in zip(keys(recording), detection.devices, strict=True):
        raw = answer(recording, "dcmi_get_device_resource_info", list(key), t)
        entry = result[device.id]
        assert [(r.pid, r.memory_bytes) for r in entry.rows] == [
            (row["proc_id"], row["proc_mem_usage"]) for row in raw
        ]
        assert [r.cores_percent for r in entry.rows] == [None] * len(raw)  # never 0
        assert entry.cores_reason is QueryReason.UNSUPPORTED
        assert entry.memory_reason is None


@pytest.mark.parametrize("t", [0.0, 30.0])
def test_vnpus_report_memory_from_their_query_and_no_compute(ascend: Any, t: float) -> None:
    recording, backend, clock = ascend
    detection = backend.detect()
    clock.now = t
    wanted = {p.id: (d_.id, p.slot) for d_ in detection.devices for p in d_.partitions}
    result = backend.partitions([*wanted, "not-a-vnpu"])
    assert set(result) == {*wanted, "not-a-vnpu"}
    by_id = {device_id(recording, key): key for key in keys(recording)}
    for partition_id, (parent, vdev) in wanted.items():
        computing = answer(recording, "dcmi_get_vdev_resource", [*by_id[parent], vdev], t)[
            "query_info"
        ]["computing"]
        sample = result[partition_id]
        total = computing["vdev_memory_total"]
        assert (sample.parent_id, sample.memory_total_mib, sample.memory_used_mib) == (
            parent,
            total,
            total - computing["vdev_memory_free"],
        )
        assert sample.cores_utilization_percent is None
        assert sample.cores_reason is QueryReason.UNSUPPORTED
        assert sample.memory_reason is None
    missing = result["not-a-vnpu"]
    assert (missing.memory_reason, missing.cores_reason) == (
        QueryReason.TRANSIENT_DRIVER_ERROR,
        QueryReason.UNSUPPORTED,
    )


def test_unknown_device_gets_an_entry_with_a_reason(ascend: Any) -> None:
    _, backend, _ = ascend
    known = backend.detect().devices[0].id
    result = backend.processes(["no-such-npu", known])
    assert list(result) == ["no-such-npu", known]
    assert result["no-such-npu"].rows == ()
    assert result["no-such-npu"].memory_reason is QueryReason.TRANSIENT_DRIVER_ERROR


@pytest.mark.parametrize("path", ASCEND, ids=lambda p: p.name)
def test_record_of_replay_round_trips(path: Path) -> None:
    """record(replay(R)) == R on every call made, series included."""
    original = load_recording(path)
    clock = VirtualClock()
    binding = dcmi_standin.build_binding(original, clock=clock)
    proxy = RecordingProxy(as_module(binding), DcmiCodec(), clock=clock)
    assert original.loop_seconds is not None
    exercise(
        AscendBackend(proxy),
        samples=round(original.loop_seconds / 15),
        interval=15.0,
        sleep=clock.sleep,
    )
    before = original.library("dcmi")
    again = proxy.library("dcmi", before.binding)
    assert {call_key(c): c for c in again.calls} == {call_key(c): c for c in before.calls}


@pytest.mark.parametrize("spec", NODES, ids=lambda s: s.file)
def test_committed_recordings_are_what_the_synthesizer_writes(spec: Any) -> None:
    """``just recordings`` regenerates each file byte for byte."""
    assert synthesize("ascend", spec) == (RECORDINGS / spec.file).read_text()


# -- named cases --------------------------------------------------------------------------------


def test_vllm_worker_holds_its_memory_idle_then_its_chip_runs() -> None:
    clock = VirtualClock()
    backend = replay_backend(load_recording(RECORDINGS / "910b2-8x.yaml"), clock=clock)
    devices = backend.detect().devices
    assert {(d_.name, d_.cores, d_.memory_mib) for d_ in devices} == {("910B2", 24, 65536)}
    chip0 = devices[0].id
    assert chip0 == "7281A664-00C0C977-2879FD72-B9D00485-104301E3"
    figures = []
    for t in (0.0, 30.0):
        clock.now = t
        [entry] = [backend.processes([chip0])[chip0]]
        card = next(s for s in backend.sample() if s.id == chip0)
        figures.append(
            (
                [(r.pid, r.memory_bytes, r.cores_percent) for r in entry.rows],
                card.cores_utilization_percent,
                card.power_watts,
                card.memory_used_mib,
            )
        )
    held = [(4242, 57_280 * MIB, None)]
    assert figures == [(held, 0, 99.9, 3421 + 57_280), (held, 92, 312.4, 3421 + 57_280)]


def test_a_vnpu_tenant_growing_is_read_on_the_vnpu_not_the_chip() -> None:
    clock = VirtualClock()
    backend = replay_backend(load_recording(RECORDINGS / "910b2-8x.yaml"), clock=clock)
    chip6 = backend.detect().devices[6]
    assert [(p.profile, p.slot, p.memory_mib, p.cores) for p in chip6.partitions] == [
        ("vir12_3c_32g", 100, 32_768, 12),
        ("vir06_1c_16g", 101, 16_384, 6),
    ]
    big, small = (p.id for p in chip6.partitions)
    readings = []
    for t in (0.0, 30.0):
        clock.now = t
        result = backend.partitions([big, small])
        readings.append(
            [(result[p].memory_total_mib, result[p].memory_used_mib) for p in (big, small)]
        )
    assert readings == [[(32_768, 16_384), (16_384, 0)], [(32_768, 24_576), (16_384, 0)]]


def test_a_ddr_part_falls_back_to_memory_info_v3_and_lacks_power() -> None:
    recording = load_recording(RECORDINGS / "310p3-duo.yaml")
    raised = next(c for c in calls(recording, "dcmi_get_device_hbm_info"))
    assert raised.raises == Raises(type="DCMIError", code=d.DCMI_ERROR_NOT_SUPPORT)
    backend = replay_backend(recording, clock=VirtualClock())
    devices = backend.detect().devices
    # One card, two chips, one PCI address: the die id is what tells them apart.
    assert [(d_.index, d_.pci_bus_id, d_.memory_mib) for d_ in devices] == [
        (0, "0000:81:00.0", 44_280),
        (1, "0000:81:00.0", 43_693),
    ]
    assert len({d_.id for d_ in devices}) == 2
    samples = backend.sample()
    assert [(s.memory_used_mib, s.power_watts) for s in samples] == [(41_731, None), (1_507, None)]
    assert [d_.partitions for d_ in devices] == [(), ()]  # not in vNPU mode: NOT_SUPPORT


def _backend(node: AscendNode, *, missing: tuple[str, ...] = ()) -> tuple[AscendBackend, Any]:
    clock = VirtualClock()
    lib = FakeDcmiLib(DcmiAnswers(node, clock), missing=missing)
    return AscendBackend(Dcmi(lib)), lib


def test_a_driver_without_die_v2_is_named_by_the_v1_die() -> None:
    node = AscendNode("25.2.0", (b2_chip(0),))
    [v2] = _backend(node)[0].detect().devices
    backend, lib = _backend(node, missing=("dcmi_get_device_die_v2",))
    [v1] = backend.detect().devices
    assert v1.id == v2.id == "7281A664-00C0C977-2879FD72-B9D00485-104301E3"
    assert "dcmi_get_device_die" in lib.calls


def test_a_device_without_any_die_id_gets_its_card_and_device_as_id() -> None:
    node = AscendNode("25.2.0", (duo_chip(0), duo_chip(1)))
    backend, _ = _backend(node, missing=("dcmi_get_device_die_v2", "dcmi_get_device_die"))
    assert [dev.id for dev in backend.detect().devices] == [
        "npu-card4-device0",
        "npu-card4-device1",
    ]


def test_health_alarms_mark_the_device_unhealthy() -> None:
    node = AscendNode("25.2.0", (dataclasses.replace(b2_chip(3), health=3),))
    backend, _ = _backend(node)
    [device] = backend.detect().devices
    [sample] = backend.sample()
    assert device.unhealthy
    assert sample.unhealthy


def test_a_vnpu_the_driver_leaves_unfilled_reports_capacity_without_usage() -> None:
    chip = dataclasses.replace(b2_chip(6), vnpus=(Vnpu(100, "vir12_3c_32g", 12.0, 32_768),))
    clock = VirtualClock()
    answers = DcmiAnswers(AscendNode("25.2.0", (chip,)), clock)

    def unfilled(name: str, args: tuple[object, ...]) -> object:
        value = answers(name, args)
        if name == "dcmi_get_vdev_resource":
            assert isinstance(value, d.dcmi_vdev_query_stru)
            value.query_info.computing.vdev_memory_total = 0
            value.query_info.computing.vdev_memory_free = 0
        return value

    backend = AscendBackend(Dcmi(FakeDcmiLib(unfilled)))
    [device] = backend.detect().devices
    [vnpu] = device.partitions
    sample = backend.partitions([vnpu.id])[vnpu.id]
    assert (sample.memory_total_mib, sample.memory_used_mib) == (32_768, None)
    assert (sample.memory_reason, sample.cores_reason) == (QueryReason.UNSUPPORTED,) * 2


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (d.DCMI_ERROR_OPER_NOT_PERMITTED, QueryReason.PERMISSION),
        (d.DCMI_ERROR_NOT_REDAY, QueryReason.TRANSIENT_DRIVER_ERROR),
        (d.DCMI_ERROR_NOT_SUPPORT_IN_CONTAINER, QueryReason.UNSUPPORTED),
        (d.DCMI_ERROR_INNER_ERR, QueryReason.TRANSIENT_DRIVER_ERROR),
    ],
)
def test_a_failed_process_read_gives_that_device_its_reason(code: int, reason: QueryReason) -> None:
    recording = load_recording(RECORDINGS / "910b2-8x.yaml")
    recording = msgspec.structs.replace(
        recording,
        faults=(
            Fault(
                fn="dcmi_get_device_resource_info",
                args=(2, 0),
                start=0.0,
                end=10.0,
                raises=Raises(type="DCMIError", code=code),
            ),
        ),
    )
    clock = VirtualClock()
    backend = replay_backend(recording, clock=clock)
    devices = backend.detect().devices
    result = backend.processes([devices[2].id, devices[0].id])
    assert (result[devices[2].id].rows, result[devices[2].id].memory_reason) == ((), reason)
    assert result[devices[2].id].cores_reason is reason
    assert [r.pid for r in result[devices[0].id].rows] == [4242]
    clock.now = 10.0
    assert [r.pid for r in backend.processes([devices[2].id])[devices[2].id].rows] == [5150, 5151]


def test_a_call_missing_from_the_recording_is_function_not_found() -> None:
    binding = dcmi_standin.build_binding(load_recording(RECORDINGS / "310p3-duo.yaml"))
    binding.dcmi_init()
    with pytest.raises(d.DCMIError) as raised:
        binding.dcmi_get_device_temperature(9, 9)  # never asked
    assert raised.value.value == d.DCMI_ERROR_FUNCTION_NOT_FOUND


# -- through the Device Manager's tick, over the committed scenario ------------------------------


def test_the_scenarios_ascend_slices_read_memory_and_no_compute(tmp_path: Path) -> None:
    """An Ascend slice with memory and no compute; a vNPU with its own memory and no compute."""
    expanded = expand(load_scenario(ROOT / "scenarios" / "ascend.yaml"), base=ROOT)
    [dm] = expanded.device_managers
    write_procfs(tmp_path, dict(expanded.procs(dm.node)))
    clock = VirtualClock()
    backend = replay_backend(load_recording(dm.recording), clock=clock)
    backend.detect()
    clock.now = 30.0  # replay time counts from the backend's init
    pods = [p for p in expanded.pods if p["spec"].get("nodeName") == dm.node]
    snapshot = tick(backend, pods, TickContext("ascend", 15.0, tmp_path), datetime.now(UTC))
    section = snapshot.slices
    assert section is not None
    uid = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
    chip2 = "6EC1A664-0100D35B-6BB27372-DFD00485-104301E3"
    [device] = [dev for dev in section.devices if dev.device_id == chip2]
    assert (device.memory_reason, device.cores_reason) == ("", "unsupported")
    usages = {(u.pod_uid, u.container): u for u in section.usages}
    assert usages[(uid["embed-half"], "main")].memory_used_mib == 20_480
    assert usages[(uid["rerank-quarter"], "main")].memory_used_mib == 12_288
    assert {u.cores_utilization_percent for u in usages.values()} == {None}
    [vnpu] = section.partitions
    assert (vnpu.pod_uid, vnpu.id) == (uid["vnpu-32g"], f"{_chip6()}-vnpu100")
    assert (vnpu.memory_total_mib, vnpu.memory_used_mib) == (32_768, 24_576)
    assert vnpu.cores_utilization_percent is None


def _chip6() -> str:
    return "3EC1A664-0060C27A-1902B172-99D00485-104301E3"
