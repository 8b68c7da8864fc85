"""Binding replayed process rows to live PIDs of the holding containers, over fake proc trees.

Each binding is checked the way the Device Manager uses it: the bound PIDs go through the real
attribution module (and, end to end, the monitor tick) against the same fake ``/proc``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from typer.testing import CliRunner

from gpustack_cli import logs
from gpustack_cli.main import app
from gpustack_core.allocation import ANNOTATION
from gpustack_core.instance_metrics import API_GROUP
from gpustack_core.modes import AllocationMode
from gpustack_core.pods import PART_OF_LABEL, pod_from_object
from gpustack_core.reasons import AttributionReason, QueryReason
from gpustack_devicemanager import daemon
from gpustack_devicemanager.attribution import (
    Attributed,
    NonInstance,
    PodRecord,
    Unattributed,
    attribute,
)
from gpustack_devicemanager.daemon import ServeOptions
from gpustack_devicemanager.holder import SnapshotHolder
from gpustack_devicemanager.monitor import TickContext, run_monitor, tick
from gpustack_simulator.pidbind import (
    UNBOUND_PID_BASE,
    PidBindingBackend,
    bind_replayed_pids,
    holders,
    pid_binding,
)
from gpustack_simulator.procfs import write_procfs
from gpustack_simulator.recording import ProcEntry
from gpustack_vendors.model import (
    CardSample,
    Detection,
    DeviceProcesses,
    PartitionSample,
    ProcessRow,
)

R = AttributionReason
REPO = Path(__file__).resolve().parents[3]
MFR = "nvidia"
DEVICE = "GPU-8d2f4a61-0000-4000-8000-000000000001"
OTHER_DEVICE = "GPU-8d2f4a61-0000-4000-8000-000000000002"
INSTANCE_UID = "7c1e2a4b-0f5d-4a59-9d0e-1b2c3d4e5f60"
POD_A = "0b9f3c1e-2d4a-4e6b-8c7d-9e0f1a2b3c4d"
POD_B = "11111111-2222-4333-8444-555555555555"
STRANGER = "99999999-8888-4777-8666-555555555555"
MAIN_A = "a" * 64
MAIN_B = "b" * 64
SSHD_B = "c" * 64
STRANGER_ID = "d" * 64
GIB = 1 << 30

CgroupShape = Callable[[str, str], str]


def systemd_v2(pod: str, container: str) -> str:
    slug = pod.replace("-", "_")
    return (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{slug}.slice/"
        f"cri-containerd-{container}.scope"
    )


def cgroupfs_v1(pod: str, container: str) -> str:
    path = f"/kubepods/besteffort/pod{pod}/{container}"
    return "\n".join(f"{n}:{c}:{path}" for n, c in [(3, "memory"), (2, "cpu,cpuacct"), (1, "pids")])


def kind_nested_v2(pod: str, container: str) -> str:
    """A kind node's view from a container in its own cgroup namespace: ``..`` up to the root."""
    slug = pod.replace("-", "_")
    return (
        "0::/../../kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
        f"kubelet-kubepods-besteffort-pod{slug}.slice/cri-containerd-{container}.scope"
    )


SHAPES = [systemd_v2, cgroupfs_v1, kind_nested_v2]


def grant(device: str, mode: AllocationMode, manufacturer: str = MFR) -> dict[str, Any]:
    return {
        "devices": {
            "groups": [
                {
                    "manufacturer": manufacturer,
                    "accelerators": [{"id": device, "mode": int(mode)}],
                }
            ]
        }
    }


def pod_object(
    uid: str,
    name: str,
    containers: dict[str, str],
    allocation: dict[str, Any] | None,
    *,
    namespace: str = "team-a",
    instance: bool = True,
) -> dict[str, Any]:
    """A Pod on this node: ``containers`` maps name → bare ID ("" while not yet created)."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "creationTimestamp": "2026-11-29T09:00:00Z",
    }
    if allocation is not None:
        metadata["annotations"] = {ANNOTATION: json.dumps(allocation)}
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
                {"name": n, "containerID": f"containerd://{cid}" if cid else ""}
                for n, cid in containers.items()
            ]
        },
    }


def records(pods: Sequence[dict[str, Any]]) -> dict[str, PodRecord]:
    return {p["metadata"]["uid"]: PodRecord.from_pod(pod_from_object(p)) for p in pods}


def rows(*pids: int, memory: int = GIB) -> DeviceProcesses:
    return DeviceProcesses(DEVICE, tuple(ProcessRow(pid, memory, 10) for pid in pids))


def proc(tmp_path: Path, table: dict[int, str]) -> Path:
    """A fake ``/proc`` with each PID in the given cgroup (text)."""
    root = tmp_path / "proc"
    write_procfs(
        root, {str(pid): ProcEntry(cgroup=text, comm="sleep") for pid, text in table.items()}
    )
    return root


def pids_of(answer: dict[str, DeviceProcesses], device: str = DEVICE) -> list[int]:
    return [row.pid for row in answer[device].rows]


POD_A_SLICED = pod_object(
    POD_A, "qwen-a", {"main": MAIN_A}, {"main": grant(DEVICE, AllocationMode.SLICED)}
)


# -- the case: two live processes, three replayed rows ---------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.__name__)
def test_two_live_processes_take_two_of_three_rows_and_attribution_finds_the_pod(
    tmp_path: Path, shape: CgroupShape
) -> None:
    root = proc(
        tmp_path,
        {
            1: "0::/init.scope",
            502: shape(POD_A, MAIN_A),
            501: shape(POD_A, MAIN_A),
            777: shape(STRANGER, STRANGER_ID),
        },
    )
    pods = [POD_A_SLICED]
    answer = bind_replayed_pids({DEVICE: rows(8103, 8101, 8102)}, pods, MFR, root)

    # Sorted recorded PIDs take sorted live PIDs; the one left over moves above pid_max.
    assert pids_of(answer) == [UNBOUND_PID_BASE + 8103, 501, 502]
    assert [row.memory_bytes for row in answer[DEVICE].rows] == [GIB] * 3

    outcomes = attribute(pids_of(answer), root, records(pods))
    assert outcomes[501] == outcomes[502] == Attributed(pod_uid=POD_A, container="main")
    assert outcomes[UNBOUND_PID_BASE + 8103] == Unattributed(R.EXITED)


def test_end_to_end_through_the_monitor_tick(tmp_path: Path) -> None:
    """The wrapper as the daemon wires it: Pods through ``watch``, rows through ``processes``."""
    root = proc(tmp_path, {501: systemd_v2(POD_A, MAIN_A), 601: systemd_v2(POD_B, MAIN_B)})
    pod_b = pod_object(
        POD_B,
        "qwen-b",
        {"main": MAIN_B},
        {"main": grant(DEVICE, AllocationMode.SLICED)},
        namespace="team-b",
    )
    replay = FakeReplay({DEVICE: rows(8301, 8302, memory=2 * GIB)})
    binding = PidBindingBackend(replay, root)
    pods_source = binding.watch(lambda: [POD_A_SLICED, pod_b])
    context = TickContext(MFR, 2.0, root)

    snapshot = tick(binding, pods_source(), context, datetime.now(UTC))

    assert snapshot.slices is not None
    [device] = snapshot.slices.devices
    assert (device.memory_reason, device.cores_reason) == ("", "")
    assert device.rows_attributed == 2
    usages = {(u.pod_uid, u.container): u.memory_used_mib for u in snapshot.slices.usages}
    assert usages == {(POD_A, "main"): 2048, (POD_B, "main"): 2048}


async def test_the_running_monitor_binds_with_the_pods_it_ticked_on(tmp_path: Path) -> None:
    """As ``serve`` wires it: the monitor's Pod source is the binding's ``watch``."""
    root = proc(tmp_path, {501: systemd_v2(POD_A, MAIN_A)})
    binding = PidBindingBackend(FakeReplay({DEVICE: rows(8101)}), root)
    holder = SnapshotHolder(2)

    async def inline(fn: Callable[..., Any], *args: Any, limiter: object = None) -> Any:
        return fn(*args)

    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: run_monitor(
                binding,
                holder,
                binding.watch(lambda: [POD_A_SLICED]),
                TickContext(MFR, 2.0, root),
                limiter=trio.CapacityLimiter(1),
                run_sync=inline,
                task_status=task_status,
            )
        )
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    snapshot = holder.current.snapshot
    assert snapshot is not None
    assert snapshot.slices is not None
    [usage] = snapshot.slices.usages
    assert (usage.pod_uid, usage.container, usage.memory_used_mib) == (POD_A, "main", 1024)


def test_without_binding_the_recorded_pids_find_no_pod(tmp_path: Path) -> None:
    """The gap this closes: the same tick on the unwrapped replay publishes no usage."""
    root = proc(tmp_path, {501: systemd_v2(POD_A, MAIN_A)})
    replay = FakeReplay({DEVICE: rows(8301)})
    snapshot = tick(replay, [POD_A_SLICED], TickContext(MFR, 2.0, root), datetime.now(UTC))
    assert snapshot.slices is not None
    [device] = snapshot.slices.devices
    assert device.memory_reason == R.PID_NAMESPACE_INVISIBLE
    assert snapshot.slices.usages == ()


# -- what stays as it is ------------------------------------------------------------------------


def test_a_device_nobody_holds_keeps_its_rows(tmp_path: Path) -> None:
    root = proc(tmp_path, {501: systemd_v2(POD_A, MAIN_A)})
    unheld = DeviceProcesses(OTHER_DEVICE, (ProcessRow(8201, GIB, None),))
    answer = bind_replayed_pids(
        {DEVICE: rows(8101), OTHER_DEVICE: unheld}, [POD_A_SLICED], MFR, root
    )
    assert answer[OTHER_DEVICE] is unheld
    assert pids_of(answer) == [501]


def test_nothing_is_bound_before_the_pods_are_known(tmp_path: Path) -> None:
    root = proc(tmp_path, {501: systemd_v2(POD_A, MAIN_A)})
    answered = {DEVICE: rows(8101)}
    binding = PidBindingBackend(FakeReplay(answered), root)
    assert binding.processes([DEVICE]) == answered
    binding.watch(lambda: None)()
    assert binding.processes([DEVICE]) == answered
    binding.watch(lambda: [POD_A_SLICED])()
    assert pids_of(binding.processes([DEVICE])) == [501]


def test_another_manufacturers_grant_holds_nothing_here(tmp_path: Path) -> None:
    root = proc(tmp_path, {501: systemd_v2(POD_A, MAIN_A)})
    amd = pod_object(
        POD_A, "chat", {"main": MAIN_A}, {"main": grant(DEVICE, AllocationMode.SLICED, "amd")}
    )
    answer = bind_replayed_pids({DEVICE: rows(8101)}, [amd], MFR, root)
    assert pids_of(answer) == [8101]


def test_a_device_with_no_rows_or_a_read_reason_passes_through(tmp_path: Path) -> None:
    root = proc(tmp_path, {501: systemd_v2(POD_A, MAIN_A)})
    unread = DeviceProcesses.unread(DEVICE, QueryReason.PERMISSION)
    answer = bind_replayed_pids({DEVICE: unread}, [POD_A_SLICED], MFR, root)
    assert answer[DEVICE] is unread


def test_a_malformed_pod_or_annotation_holds_nothing(tmp_path: Path) -> None:
    root = proc(tmp_path, {501: systemd_v2(POD_A, MAIN_A)})
    broken = pod_object(POD_A, "qwen-a", {"main": MAIN_A}, None)
    broken["metadata"]["annotations"] = {ANNOTATION: "{not json"}
    answer = bind_replayed_pids({DEVICE: rows(8101)}, [{"metadata": {}}, broken], MFR, root)
    assert pids_of(answer) == [8101]


# -- no live counterpart: unattributable, never invented ----------------------------------------


@pytest.mark.parametrize("container_id", [MAIN_A, ""], ids=["no-live-process", "not-created-yet"])
def test_a_holder_with_no_live_process_leaves_every_row_unattributable(
    tmp_path: Path, container_id: str
) -> None:
    # The recorded PIDs are live here, in a stranger's Pod: keeping them would invent a placement.
    root = proc(tmp_path, {8101: systemd_v2(STRANGER, STRANGER_ID), 42: "0::/init.scope"})
    pod = pod_object(
        POD_A, "qwen-a", {"main": container_id}, {"main": grant(DEVICE, AllocationMode.SLICED)}
    )
    stranger = pod_object(STRANGER, "other", {"main": STRANGER_ID}, None)
    answer = bind_replayed_pids({DEVICE: rows(8101, 8102)}, [pod, stranger], MFR, root)

    assert pids_of(answer) == [UNBOUND_PID_BASE + 8101, UNBOUND_PID_BASE + 8102]
    outcomes = attribute(pids_of(answer), root, records([pod, stranger]))
    # Nothing on the node resolved: attribution's "every PID missing" rule.
    assert set(outcomes.values()) == {Unattributed(R.PID_NAMESPACE_INVISIBLE)}


def test_an_unlistable_proc_root_binds_nothing(tmp_path: Path) -> None:
    answer = bind_replayed_pids({DEVICE: rows(8101)}, [POD_A_SLICED], MFR, tmp_path / "absent")
    assert pids_of(answer) == [UNBOUND_PID_BASE + 8101]


# -- order and identity ------------------------------------------------------------------------


def test_holders_are_ordered_by_pod_and_container_with_visibility_last() -> None:
    pod_b = pod_object(
        POD_B,
        "qwen-b",
        {"main": MAIN_B, "sshd": SSHD_B},
        {
            "sshd": grant(DEVICE, AllocationMode.VISIBILITY),
            "main": grant(DEVICE, AllocationMode.SLICED),
        },
        namespace="team-b",
    )
    found = holders([pod_b, POD_A_SLICED], MFR)
    assert [(h.pod_name, h.container, h.visibility_only) for h in found[DEVICE]] == [
        ("qwen-a", "main", False),
        ("qwen-b", "main", False),
        ("qwen-b", "sshd", True),
    ]


def test_rows_are_dealt_round_robin_over_the_holding_containers(tmp_path: Path) -> None:
    """One process per holder first — what a recording shows — however the PIDs interleave."""
    pod_b = pod_object(
        POD_B,
        "qwen-b",
        {"main": MAIN_B, "sshd": SSHD_B},
        {
            "main": grant(DEVICE, AllocationMode.SLICED),
            "sshd": grant(DEVICE, AllocationMode.VISIBILITY),
        },
        namespace="team-b",
    )
    root = proc(
        tmp_path,
        {
            100: systemd_v2(POD_B, SSHD_B),
            200: systemd_v2(POD_B, MAIN_B),
            300: systemd_v2(POD_A, MAIN_A),
            301: systemd_v2(POD_A, MAIN_A),
        },
    )
    pods = [pod_b, POD_A_SLICED]
    answer = bind_replayed_pids({DEVICE: rows(8302, 8301)}, pods, MFR, root)
    assert pids_of(answer) == [200, 300]  # 8301 → qwen-a/main, 8302 → qwen-b/main
    outcomes = attribute(pids_of(answer), root, records(pods))
    assert outcomes[300] == Attributed(POD_A, "main")
    assert outcomes[200] == Attributed(POD_B, "main")

    more = bind_replayed_pids({DEVICE: rows(1, 2, 3, 4, 5)}, pods, MFR, root)
    assert pids_of(more) == [300, 200, 100, 301, UNBOUND_PID_BASE + 5]


def test_a_recorded_pid_on_several_rows_keeps_one_live_pid(tmp_path: Path) -> None:
    root = proc(tmp_path, {501: systemd_v2(POD_A, MAIN_A), 502: systemd_v2(POD_A, MAIN_A)})
    answer = bind_replayed_pids({DEVICE: rows(8101, 8102, 8101)}, [POD_A_SLICED], MFR, root)
    assert pids_of(answer) == [501, 502, 501]


def test_binding_is_stable_across_ticks(tmp_path: Path) -> None:
    root = proc(tmp_path, {501: systemd_v2(POD_A, MAIN_A), 502: systemd_v2(POD_A, MAIN_A)})
    first = bind_replayed_pids({DEVICE: rows(8101, 8102)}, [POD_A_SLICED], MFR, root)
    second = bind_replayed_pids({DEVICE: rows(8102, 8101)}, [POD_A_SLICED], MFR, root)
    assert dict(zip([8101, 8102], pids_of(first), strict=True)) == dict(
        zip([8102, 8101], pids_of(second), strict=True)
    )


def test_a_non_instance_holder_binds_and_attribution_says_so(tmp_path: Path) -> None:
    """Binding follows the annotation; whether the Pod is ours stays attribution's call."""
    root = proc(tmp_path, {501: systemd_v2(POD_A, MAIN_A)})
    plain = pod_object(
        POD_A,
        "batch",
        {"main": MAIN_A},
        {"main": grant(DEVICE, AllocationMode.SLICED)},
        instance=False,
    )
    answer = bind_replayed_pids({DEVICE: rows(8101)}, [plain], MFR, root)
    assert attribute(pids_of(answer), root, records([plain])) == {501: NonInstance(POD_A)}


# -- the CLI ----------------------------------------------------------------------------------


def test_the_flag_is_refused_without_simulate() -> None:
    result = CliRunner().invoke(
        app, ["device-manager", "serve", "--manufacturer", MFR, "--bind-replayed-pids"]
    )
    assert result.exit_code == 2, result.output
    assert "--bind-replayed-pids needs --simulate" in " ".join(result.output.split())


def test_with_simulate_the_flag_reaches_serve_and_reads_the_real_proc(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[ServeOptions] = []

    async def fake_serve(options: ServeOptions, backend: Any) -> None:
        seen.append(options)
        backend.close()

    monkeypatch.setattr(daemon, "serve_until_signalled", fake_serve)
    monkeypatch.setattr(logs, "configure", lambda level, *, json_logs: None)  # keep pytest's
    recording = REPO / "recordings" / "amd" / "rx7800xt.yaml"
    args = ["device-manager", "serve", "--simulate", str(recording), "--node-name", "n"]
    for extra, bind, root in (
        (["--bind-replayed-pids"], True, Path("/proc")),
        (["--bind-replayed-pids", "--proc-root", "/host/proc"], True, Path("/host/proc")),
    ):
        result = CliRunner().invoke(app, [*args, *extra])
        assert result.exit_code == 0, result.output
        assert seen[-1].proc_root == root
        wrap = seen[-1].monitor_wrapper
        assert wrap is not None
        # The composition root plugged in the simulator's binding, over the same proc root.
        bound, _ = wrap(FakeReplay({}), lambda: None)
        assert isinstance(bound, PidBindingBackend)
        assert (bound.proc_root, bind) == (root, True)
    result = CliRunner().invoke(app, [*args, "--proc-root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (seen[-1].monitor_wrapper, seen[-1].proc_root) == (None, tmp_path)


def test_the_flag_is_off_by_default() -> None:
    assert ServeOptions(manufacturer=MFR, node_name="n").monitor_wrapper is None


def test_the_simulators_wrapper_binds_what_the_monitor_reads(tmp_path: Path) -> None:
    root = proc(tmp_path, {501: systemd_v2(POD_A, MAIN_A)})
    replay = FakeReplay({DEVICE: rows(8101)})
    backend, pods = pid_binding(root)(replay, lambda: [POD_A_SLICED])
    assert pods() == [POD_A_SLICED]
    [row] = backend.processes([DEVICE])[DEVICE].rows
    assert row.pid == 501


def test_the_device_manager_package_knows_no_simulator() -> None:
    package = REPO / "packages" / "devicemanager" / "src" / "gpustack_devicemanager"
    assert not (package / "pidbind.py").exists()
    mentions = [
        path.name
        for path in package.rglob("*.py")
        if "gpustack_simulator" in path.read_text() or "bind_replayed" in path.read_text()
    ]
    assert mentions == []


# -- a replay stand-in ---------------------------------------------------------------------------


class FakeReplay:
    """Answers fixed process rows; one card so the tick can size the device."""

    manufacturer = MFR

    def __init__(self, answered: dict[str, DeviceProcesses]) -> None:
        self.answered = answered
        self.closed = False

    def detect(self) -> Detection:
        return Detection(MFR, ())

    def sample(self) -> list[CardSample]:
        return [CardSample(DEVICE, 81559, 4096, 20, 40, 100.0, unhealthy=False)]

    def processes(self, device_ids: Sequence[str]) -> dict[str, DeviceProcesses]:
        return {d: self.answered.get(d, DeviceProcesses(d)) for d in device_ids}

    def partitions(self, partition_ids: Sequence[str]) -> dict[str, PartitionSample]:
        return {}

    def close(self) -> None:
        self.closed = True


def test_everything_but_processes_passes_through(tmp_path: Path) -> None:
    replay = FakeReplay({})
    binding = PidBindingBackend(replay, tmp_path)
    assert binding.manufacturer == MFR
    assert binding.detect() == replay.detect()
    assert binding.sample() == replay.sample()
    assert binding.partitions(["MIG-x"]) == {}
    binding.close()
    assert replay.closed
