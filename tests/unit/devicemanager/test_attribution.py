"""Attribution over fake proc trees: every reason, PID reuse, and the tree writer itself."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_core.instance_metrics import API_GROUP
from gpustack_core.pods import PART_OF_LABEL, pod_from_object
from gpustack_core.reasons import AttributionReason
from gpustack_devicemanager.attribution import (
    Attributed,
    NonInstance,
    Outcome,
    PodRecord,
    Unattributed,
    attribute,
)
from gpustack_simulator.procfs import write_procfs
from gpustack_simulator.recording import ProcEntry

R = AttributionReason
INSTANCE_UID = "7c1e2a4b-0f5d-4a59-9d0e-1b2c3d4e5f60"
POD = "0b9f3c1e-2d4a-4e6b-8c7d-9e0f1a2b3c4d"
PLAIN_POD = "11111111-2222-4333-8444-555555555555"
STRANGER = "99999999-8888-4777-8666-555555555555"
MAIN = "a" * 64
SIDECAR = "b" * 64
INIT = "c" * 64
DEBUG = "d" * 64
GONE = "e" * 64
PLAIN = "f" * 64


def systemd(pod: str, container: str, qos: str = "burstable") -> str:
    slug = pod.replace("-", "_")
    return (
        f"0::/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{slug}.slice/"
        f"cri-containerd-{container}.scope"
    )


def cgroupfs_v1(pod: str, container: str) -> str:
    path = f"/kubepods/besteffort/pod{pod}/{container}"
    return "\n".join(f"{n}:{c}:{path}" for n, c in [(3, "memory"), (2, "cpu,cpuacct"), (1, "pids")])


def pod_object(uid: str, *, instance: bool, deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": f"pod-{uid[:4]}",
        "namespace": "team-a",
        "uid": uid,
        "creationTimestamp": "2026-11-29T09:00:00Z",
    }
    if instance:
        metadata["labels"] = {PART_OF_LABEL: INSTANCE_UID}
        metadata["ownerReferences"] = [
            {
                "apiVersion": f"{API_GROUP}/v1",
                "kind": "Instance",
                "name": "llama",
                "uid": INSTANCE_UID,
                "controller": True,
            }
        ]
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    return {
        "metadata": metadata,
        "spec": {"containers": [{"name": "main"}, {"name": "sidecar"}]},
        "status": {
            "containerStatuses": [
                {"name": "main", "containerID": f"containerd://{MAIN}"},
                {"name": "sidecar", "containerID": f"cri-o://{SIDECAR}"},
            ],
            "initContainerStatuses": [{"name": "setup", "containerID": f"containerd://{INIT}"}],
            "ephemeralContainerStatuses": [{"name": "debugger", "containerID": DEBUG}],
        },
    }


def record(uid: str, *, instance: bool) -> PodRecord:
    return PodRecord.from_pod(pod_from_object(pod_object(uid, instance=instance)))


PODS = {POD: record(POD, instance=True), PLAIN_POD: record(PLAIN_POD, instance=False)}


def run(
    tmp_path: Path,
    procs: dict[str, ProcEntry],
    pids: list[int],
    read_file: Callable[[Path], bytes] = Path.read_bytes,
) -> dict[int, Outcome]:
    root = tmp_path / "proc"
    write_procfs(root, procs)
    return attribute(pids, root, PODS, read_file=read_file)


def one(tmp_path: Path, entry: ProcEntry, read_file: Callable[[Path], bytes] = Path.read_bytes
        ) -> Outcome:  # fmt: skip
    return run(tmp_path, {"4242": entry}, [4242], read_file)[4242]


# -- PodRecord -----------------------------------------------------------------------------------


def test_record_of_an_instance_pod() -> None:
    rec = record(POD, instance=True)
    assert rec.uid == POD
    assert (rec.namespace, rec.name) == ("team-a", f"pod-{POD[:4]}")
    assert rec.instance is True
    # Schemes stripped; init and ephemeral containers can open the device too.
    assert dict(rec.containers) == {
        MAIN: "main",
        SIDECAR: "sidecar",
        INIT: "setup",
        DEBUG: "debugger",
    }


def test_record_of_a_plain_pod_is_not_an_instance() -> None:
    assert record(PLAIN_POD, instance=False).instance is False


def test_a_terminating_instance_pod_stays_attributable() -> None:
    pod = pod_from_object(pod_object(POD, instance=True, deleting=True))
    assert PodRecord.from_pod(pod).instance is True


def test_record_containers_cannot_be_changed_behind_its_back() -> None:
    rec = record(POD, instance=True)
    with pytest.raises(TypeError):
        rec.containers[GONE] = "ghost"  # type: ignore[index]


# -- outcomes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cgroup", "name"),
    [
        (systemd(POD, MAIN), "main"),
        (cgroupfs_v1(POD, SIDECAR), "sidecar"),
        (systemd(POD, INIT, qos="besteffort"), "setup"),
        (systemd(POD, DEBUG), "debugger"),
    ],
)
def test_attributed_by_container_name(tmp_path: Path, cgroup: str, name: str) -> None:
    assert one(tmp_path, ProcEntry(cgroup=cgroup, comm="python3")) == Attributed(POD, name)


def test_a_pod_known_but_not_an_instance_is_excluded(tmp_path: Path) -> None:
    assert one(tmp_path, ProcEntry(cgroup=systemd(PLAIN_POD, MAIN))) == NonInstance(PLAIN_POD)


def test_non_instance_wins_over_an_unknown_container(tmp_path: Path) -> None:
    """Whose container it is does not matter once the Pod is not ours to report."""
    assert one(tmp_path, ProcEntry(cgroup=systemd(PLAIN_POD, GONE))) == NonInstance(PLAIN_POD)


@pytest.mark.parametrize(
    ("cgroup", "reason"),
    [
        (systemd(STRANGER, MAIN), R.UNKNOWN_POD),
        (systemd(POD, GONE), R.UNKNOWN_CONTAINER),  # e.g. restarted: a new ID not yet in status
        ("0::/system.slice/nvidia-persistenced.service", R.NO_POD_COMPONENT),
        (f"0::/kubepods/pod{POD}", R.NO_CONTAINER_COMPONENT),
        (f"{cgroupfs_v1(POD, MAIN)}\n0::/kubepods/pod{STRANGER}/{MAIN}", R.AMBIGUOUS_POD),
        (f"{cgroupfs_v1(POD, MAIN)}\n0::/kubepods/pod{POD}/{SIDECAR}", R.AMBIGUOUS_CONTAINER),
        ("not a cgroup file", R.UNREADABLE),
        ("", R.UNREADABLE),
    ],
)  # fmt: skip
def test_cgroup_reasons_pass_through(tmp_path: Path, cgroup: str, reason: R) -> None:
    assert one(tmp_path, ProcEntry(cgroup=cgroup)) == Unattributed(reason)


def test_zombie(tmp_path: Path) -> None:
    entry = ProcEntry(cgroup=systemd(POD, MAIN), state="Z", comm="python3")
    assert one(tmp_path, entry) == Unattributed(R.ZOMBIE)


def test_state_is_read_after_the_last_parenthesis(tmp_path: Path) -> None:
    """A process may name itself anything; ``a) Z (b`` must not read as a zombie."""
    sneaky = ProcEntry(cgroup=systemd(POD, MAIN), state="S", comm="a) Z (b")
    assert one(tmp_path, sneaky) == Attributed(POD, "main")
    hiding = ProcEntry(cgroup=systemd(POD, MAIN), state="Z", comm="x) R (y")
    assert one(tmp_path, hiding) == Unattributed(R.ZOMBIE)


def test_dead_state_is_exited(tmp_path: Path) -> None:
    assert one(tmp_path, ProcEntry(cgroup=systemd(POD, MAIN), state="X")) == Unattributed(R.EXITED)


@pytest.mark.parametrize("comm", ["nvidia-cuda-mps-server", "nvidia-cuda-mps-control"])
def test_mps_daemon_is_mediated(tmp_path: Path, comm: str) -> None:
    """Even inside an Instance Pod: the daemon's memory belongs to its clients."""
    assert one(tmp_path, ProcEntry(cgroup=systemd(POD, MAIN), comm=comm)) == Unattributed(
        R.MEDIATED
    )


def test_a_name_merely_mentioning_mps_is_not_mediated(tmp_path: Path) -> None:
    entry = ProcEntry(cgroup=systemd(POD, MAIN), comm="my-nvidia-cuda-mps")
    assert one(tmp_path, entry) == Attributed(POD, "main")


def test_one_missing_pid_has_exited(tmp_path: Path) -> None:
    outcomes = run(tmp_path, {"10": ProcEntry(cgroup=systemd(POD, MAIN))}, [10, 11])
    assert outcomes == {10: Attributed(POD, "main"), 11: Unattributed(R.EXITED)}


def test_every_pid_missing_means_the_pid_namespace_is_not_the_hosts(tmp_path: Path) -> None:
    outcomes = run(tmp_path, {"10": ProcEntry(cgroup=systemd(POD, MAIN))}, [11, 12])
    assert outcomes == dict.fromkeys([11, 12], Unattributed(R.PID_NAMESPACE_INVISIBLE))


def test_no_proc_root_at_all_is_invisible_too(tmp_path: Path) -> None:
    outcomes = attribute([7], tmp_path / "nowhere", PODS)
    assert outcomes == {7: Unattributed(R.PID_NAMESPACE_INVISIBLE)}


def test_no_pids_no_outcomes(tmp_path: Path) -> None:
    assert attribute([], tmp_path / "nowhere", PODS) == {}


def test_a_pid_vanishing_after_the_first_read_is_exited_not_invisible(tmp_path: Path) -> None:
    """It was there: the namespace is the host's, the process just exited mid-read."""

    def vanishing(path: Path) -> bytes:
        if path.name == "stat":
            raise ProcessLookupError(errno.ESRCH, "No such process")
        return path.read_bytes()

    assert one(tmp_path, ProcEntry(cgroup=systemd(POD, MAIN)), vanishing) == Unattributed(R.EXITED)


def test_duplicate_pids_are_answered_once(tmp_path: Path) -> None:
    outcomes = run(tmp_path, {"10": ProcEntry(cgroup=systemd(POD, MAIN))}, [10, 10, 10])
    assert outcomes == {10: Attributed(POD, "main")}


def failing(name: str, error: OSError, *, after: int = 0) -> Callable[[Path], bytes]:
    """A reader whose reads of ``name`` fail from the ``after``-th one on (0: every time)."""
    seen = {"n": 0}

    def read(path: Path) -> bytes:
        if path.name == name:
            seen["n"] += 1
            if seen["n"] > after:
                raise error
        return path.read_bytes()

    return read


@pytest.mark.parametrize("name", ["cgroup", "stat", "comm"])
@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (PermissionError(errno.EACCES, "denied"), R.PERMISSION),
        (OSError(errno.EIO, "I/O error"), R.UNREADABLE),
        (FileNotFoundError(errno.ENOENT, "gone"), R.EXITED),
    ],
)
def test_read_failures(tmp_path: Path, name: str, error: OSError, reason: R) -> None:
    entry = ProcEntry(cgroup=systemd(POD, MAIN))
    outcomes = run(tmp_path, {"1": entry, "2": entry}, [1, 2], failing(name, error))
    # Every read of that file fails, for both PIDs.
    if name == "cgroup" and reason is R.EXITED:
        reason = R.PID_NAMESPACE_INVISIBLE  # every PID missing at the first read
    assert outcomes == {1: Unattributed(reason), 2: Unattributed(reason)}


def test_undecodable_cgroup_is_unreadable(tmp_path: Path) -> None:
    write_procfs(tmp_path / "proc", {"5": ProcEntry(cgroup=systemd(POD, MAIN))})
    (tmp_path / "proc" / "5" / "cgroup").write_bytes(b"0::/kubepods/\xff\xfe\n")
    assert attribute([5], tmp_path / "proc", PODS) == {5: Unattributed(R.UNREADABLE)}


@pytest.mark.parametrize("stat", [b"", b"5 (python3 S 1 5 5\n", b"5 (python3)\n", b"5 (x)   \n"])
def test_a_stat_without_a_state_is_unreadable(tmp_path: Path, stat: bytes) -> None:
    write_procfs(tmp_path / "proc", {"5": ProcEntry(cgroup=systemd(POD, MAIN))})
    (tmp_path / "proc" / "5" / "stat").write_bytes(stat)
    assert attribute([5], tmp_path / "proc", PODS) == {5: Unattributed(R.UNREADABLE)}


def test_non_utf8_comm_is_still_read(tmp_path: Path) -> None:
    """``comm`` is whatever bytes a process chose; only its prefix matters."""
    write_procfs(tmp_path / "proc", {"5": ProcEntry(cgroup=systemd(POD, MAIN))})
    (tmp_path / "proc" / "5" / "comm").write_bytes(b"\xff\xfeweird\n")
    assert attribute([5], tmp_path / "proc", PODS) == {5: Attributed(POD, "main")}


# -- PID reuse ---------------------------------------------------------------------------------


def second_cgroup_read(replacement: Callable[[Path], bytes]) -> Callable[[Path], bytes]:
    """A reader that answers the second read of each ``cgroup`` with ``replacement``."""
    reads: dict[Path, int] = {}

    def read(path: Path) -> bytes:
        if path.name == "cgroup":
            reads[path] = reads.get(path, 0) + 1
            if reads[path] == 2:
                return replacement(path)
        return path.read_bytes()

    return read


@pytest.mark.parametrize(
    "replacement",
    [
        systemd(STRANGER, GONE),  # reused by a process in another Pod
        systemd(POD, SIDECAR),  # reused by the same Pod's other container
        "0::/user.slice/user-1000.slice/session-3.scope",  # reused by a host process
    ],
)
def test_a_cgroup_that_changes_between_reads_is_unstable(tmp_path: Path, replacement: str) -> None:
    reader = second_cgroup_read(lambda _: (replacement + "\n").encode())
    assert one(tmp_path, ProcEntry(cgroup=systemd(POD, MAIN)), reader) == Unattributed(R.UNSTABLE)


def test_a_cgroup_gone_at_the_second_read_is_unstable(tmp_path: Path) -> None:
    def gone(_: Path) -> bytes:
        raise FileNotFoundError(errno.ENOENT, "gone")

    reader = second_cgroup_read(gone)
    assert one(tmp_path, ProcEntry(cgroup=systemd(POD, MAIN)), reader) == Unattributed(R.UNSTABLE)


def test_instability_overrides_every_cgroup_derived_answer(tmp_path: Path) -> None:
    """An exclusion or an unknown Pod read from a recycled PID is as untrustworthy."""
    reader = second_cgroup_read(lambda _: b"0::/\n")
    procs = {
        "1": ProcEntry(cgroup=systemd(PLAIN_POD, MAIN)),
        "2": ProcEntry(cgroup=systemd(STRANGER, MAIN)),
        "3": ProcEntry(cgroup="0::/system.slice/x.service"),
    }
    outcomes = run(tmp_path, procs, [1, 2, 3], reader)
    assert outcomes == dict.fromkeys([1, 2, 3], Unattributed(R.UNSTABLE))


def test_reuse_between_reads_via_the_simulator_tree(tmp_path: Path) -> None:
    """The tree itself swapped between the two reads, as the simulator does each tick."""
    root = tmp_path / "proc"
    swapped = {"done": False}

    def read(path: Path) -> bytes:
        data = path.read_bytes()
        if path.name == "comm" and not swapped["done"]:
            swapped["done"] = True
            write_procfs(root, {"4242": ProcEntry(cgroup=systemd(STRANGER, MAIN))})
        return data

    write_procfs(root, {"4242": ProcEntry(cgroup=systemd(POD, MAIN))})
    assert attribute([4242], root, PODS, read_file=read) == {4242: Unattributed(R.UNSTABLE)}


@settings(max_examples=60, deadline=None)
@given(
    table=st.dictionaries(
        st.integers(1, 60),
        st.builds(
            ProcEntry,
            cgroup=st.sampled_from(
                [systemd(POD, MAIN), systemd(PLAIN_POD, MAIN), systemd(STRANGER, MAIN), "0::/"]
            )
            | st.text(max_size=40),
            state=st.sampled_from("RSDZTtXI"),
            comm=st.text(max_size=20),
        ),
        max_size=8,
    ),
    extra=st.lists(st.integers(-5, 80), max_size=8),
)
def test_any_table_answers_every_pid_exactly_once(
    table: dict[int, ProcEntry], extra: list[int]
) -> None:
    pids = [*table, *extra]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "proc"
        write_procfs(root, {str(pid): entry for pid, entry in table.items()})
        outcomes = attribute(pids, root, PODS)
    assert set(outcomes) == set(pids)
    for pid, outcome in outcomes.items():
        assert isinstance(outcome, Attributed | NonInstance | Unattributed)
        if pid not in table:
            missing = R.EXITED if table else R.PID_NAMESPACE_INVISIBLE
            assert outcome == Unattributed(missing)
        elif table[pid].state == "Z":
            assert outcome == Unattributed(R.ZOMBIE)
        if isinstance(outcome, Attributed):
            assert outcome == Attributed(POD, "main")


# -- the fake proc tree ------------------------------------------------------------------------


def stat_fields(text: str) -> tuple[int, str, list[str]]:
    head, _, rest = text.rpartition(")")
    pid, _, comm = head.partition(" (")
    return int(pid), comm, rest.split()


def test_tree_layout_and_formats(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    write_procfs(root, {"31": ProcEntry(cgroup="0::/a", state="R", comm="a) b (c")})
    base = root / "31"
    assert sorted(p.name for p in base.iterdir()) == ["cgroup", "comm", "stat"]
    assert (base / "cgroup").read_text() == "0::/a\n"  # recordings store it stripped
    assert (base / "comm").read_text() == "a) b (c\n"
    pid, comm, rest = stat_fields((base / "stat").read_text())
    assert (pid, comm) == (31, "a) b (c")
    assert rest[0] == "R"
    assert len(rest) + 2 == 52  # pid, comm, then 50 more: every field Linux 3.5+ writes
    assert rest[1] == "1"  # ppid
    assert rest[20 - 3] == "1"  # field 20, num_threads


def test_comm_is_cut_to_the_kernels_fifteen_bytes(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    write_procfs(root, {"1": ProcEntry(cgroup="0::/", comm="nvidia-cuda-mps-server")})
    assert (root / "1" / "comm").read_bytes() == b"nvidia-cuda-mps\n"
    assert stat_fields((root / "1" / "stat").read_text())[1] == "nvidia-cuda-mps"


def test_a_cgroup_already_ending_in_newline_is_kept(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    write_procfs(root, {"1": ProcEntry(cgroup="1:cpu:/\n0::/\n"), "2": ProcEntry(cgroup="")})
    assert (root / "1" / "cgroup").read_text() == "1:cpu:/\n0::/\n"
    assert (root / "2" / "cgroup").read_bytes() == b""


def hidden_siblings(root: Path) -> list[str]:
    return sorted(p.name for p in root.parent.iterdir() if p.name.startswith(f".{root.name}."))


def test_a_rewrite_replaces_the_whole_tree_and_cleans_up(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    write_procfs(root, {"1": ProcEntry(cgroup="0::/a"), "2": ProcEntry(cgroup="0::/b")})
    write_procfs(root, {"3": ProcEntry(cgroup="0::/c")})
    assert sorted(p.name for p in root.iterdir()) == ["3"]
    assert len(hidden_siblings(root)) == 1  # only the live tree is left
    assert root.is_symlink()


def test_a_file_open_across_a_rewrite_still_reads(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    write_procfs(root, {"1": ProcEntry(cgroup="0::/a")})
    with (root / "1" / "cgroup").open() as held:
        write_procfs(root, {})
        assert held.read() == "0::/a\n"
    assert not (root / "1").exists()


def test_an_existing_empty_or_pid_only_directory_is_taken_over(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    (root / "9").mkdir(parents=True)
    write_procfs(root, {"1": ProcEntry(cgroup="0::/a")})
    assert sorted(p.name for p in root.iterdir()) == ["1"]
    assert len(hidden_siblings(root)) == 1


def test_a_directory_with_other_content_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    (root / "precious.txt").write_text("keep me")
    with pytest.raises(FileExistsError):
        write_procfs(root, {"1": ProcEntry(cgroup="0::/a")})
    assert (root / "precious.txt").read_text() == "keep me"
    assert hidden_siblings(root) == []


def test_a_file_in_the_way_is_refused(tmp_path: Path) -> None:
    (tmp_path / "proc").write_text("x")
    with pytest.raises(FileExistsError):
        write_procfs(tmp_path / "proc", {})


@pytest.mark.parametrize(
    "procs",
    [
        {"abc": ProcEntry(cgroup="0::/")},
        {"-1": ProcEntry(cgroup="0::/")},
        {"0": ProcEntry(cgroup="0::/")},
        {"../1": ProcEntry(cgroup="0::/")},
        {"٣": ProcEntry(cgroup="0::/")},  # a digit, but not an ASCII one
        {"7": ProcEntry(cgroup="0::/"), "07": ProcEntry(cgroup="0::/")},
        {"7": ProcEntry(cgroup="0::/", state="")},
        {"7": ProcEntry(cgroup="0::/", state="SS")},
        {"7": ProcEntry(cgroup="0::/", state=" ")},
    ],
)
def test_a_bad_table_is_refused_and_the_old_tree_kept(
    tmp_path: Path, procs: dict[str, ProcEntry]
) -> None:
    root = tmp_path / "proc"
    write_procfs(root, {"1": ProcEntry(cgroup="0::/a")})
    with pytest.raises(ValueError, match=r"PID|state"):
        write_procfs(root, procs)
    assert (root / "1" / "cgroup").read_text() == "0::/a\n"
    assert len(hidden_siblings(root)) == 1


def test_leading_zeros_name_the_same_pid(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    write_procfs(root, {"007": ProcEntry(cgroup="0::/a")})
    assert [p.name for p in root.iterdir()] == ["7"]


def test_a_failed_write_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "proc"
    write_procfs(root, {"1": ProcEntry(cgroup="0::/a")})

    def broken(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, "disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        write_procfs(root, {"2": ProcEntry(cgroup="0::/b")})
    assert sorted(p.name for p in root.iterdir()) == ["1"]
    assert len(hidden_siblings(root)) == 1
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".link")]
