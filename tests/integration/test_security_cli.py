"""The console script against hostile inputs: bounded reads, one-line errors, its own processes.

Issue #28's CLI cases, run as the real ``gpustack-operator`` process (memory capped, so a read
without a bound fails the test instead of the machine), each a regression that held before:

- every file a user names is read with a size cap (``simulator validate /dev/zero`` grew to
  20 GB), a kubeconfig and the files it names too;
- every user error is one line and an exit code, never a traceback: a kubeconfig that is not
  UTF-8, a ``processes.json`` that is corrupt, not UTF-8 or of the wrong shape;
- ``simulator down`` signals only processes ``simulator up`` started: an entry whose PID now
  belongs to another process (a reused PID, a forged file) is left alone.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpustack_simulator.up import _spawn, down, write_processes

SCRIPT = str(Path(sys.executable).parent / "gpustack-operator")
RECORDINGS = Path(__file__).resolve().parents[2] / "recordings"
MEMORY_CAP = 1 << 30
"""1 GiB of address space: plenty for the CLI, far less than an unbounded read of /dev/zero."""


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The console script, memory-capped, 60 s at most, without the caller's cluster."""
    environ = {**os.environ, "KUBECONFIG": "", "KUBERNETES_SERVICE_HOST": "", **(env or {})}
    return subprocess.run(
        [SCRIPT, *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        preexec_fn=_capped,
        env=environ,
    )


def one_line(done: subprocess.CompletedProcess[str], code: int = 1) -> str:
    """The single error line; fails on a traceback, several lines or another exit code."""
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == code, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr[-2000:]
    return lines[0]


# -- bounded reads ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["simulator", "replay", "/dev/zero", "--samples", "1"],
        ["device-manager", "detect", "--simulate", "/dev/zero"],
    ],
    ids=["replay", "detect"],
)
def test_an_endless_file_is_refused_at_the_cap(argv: list[str]) -> None:
    line = one_line(run(*argv))
    assert "/dev/zero" in line, line
    assert "larger than" in line, line


def test_validate_refuses_an_endless_file_in_its_one_line(tmp_path: Path) -> None:
    """``validate`` reports one line per file on stdout, the exit code counting failures."""
    done = run("simulator", "validate", "/dev/zero", str(RECORDINGS / "nvidia" / "t4.yaml"))
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 1, done.stderr[-2000:]
    refused, accepted = done.stdout.splitlines()
    assert refused.startswith("/dev/zero: invalid"), refused
    assert "larger than" in refused, refused
    assert accepted.endswith("t4.yaml: ok (nvidia, 18 calls, synthesized)"), accepted


def test_an_endless_scenario_is_refused_at_the_cap(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as sink:  # a sparse 2 GiB file: no disk used, every byte a NUL
        sink.truncate(2 << 30)
    line = one_line(
        run("simulator", "up", "--state-dir", str(tmp_path / "s"), "--scenario", str(huge))
    )
    assert "larger than" in line, line


@pytest.mark.parametrize("flag", ["--kubeconfig", "env"])
def test_an_endless_kubeconfig_is_refused_at_the_cap(flag: str) -> None:
    if flag == "env":
        done = run("worker", "--secure-port", "0", env={"KUBECONFIG": "/dev/zero"})
    else:
        done = run("worker", "--secure-port", "0", "--kubeconfig", "/dev/zero")
    line = one_line(done)
    assert "larger than" in line, line


def test_a_file_a_kubeconfig_names_is_read_with_the_cap_too(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1', "
        "certificate-authority: /dev/zero}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    line = one_line(run("worker", "--secure-port", "0", "--kubeconfig", str(kubeconfig)))
    assert "larger than" in line, line


# -- one line per user error ----------------------------------------------------------------------


def test_a_kubeconfig_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_bytes(b"\xff\xfe\x00current-context: [")
    for argv in (
        ["worker", "--secure-port", "0", "--kubeconfig", str(kubeconfig)],
        [
            "device-manager",
            "serve",
            "--simulate",
            str(RECORDINGS / "nvidia" / "t4.yaml"),
            "--kubeconfig",
            str(kubeconfig),
            "--secure-port",
            "0",
            "--bind-address",
            "127.0.0.1",
            "--no-device-plugin",
        ],
    ):
        line = one_line(run(*argv))
        assert str(kubeconfig) in line, line
        assert "UTF-8" in line, line


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"\xff\xfe\x00", b'{"a": 1}', b'[{"name": "x", "pid": "seven"}]', b"[1]"],
    ids=["not-json", "not-utf8", "object", "pid-not-int", "entry-not-object"],
)
@pytest.mark.parametrize("command", ["down", "up"])
def test_a_corrupt_processes_json_is_one_line(tmp_path: Path, content: bytes, command: str) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "processes.json").write_bytes(content)
    line = one_line(run("simulator", command, "--state-dir", str(state)))
    assert "processes.json" in line, line


# -- down signals only what up started ------------------------------------------------------------


def _bystander(env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A process of this user that ``up`` did not start, leading its own process group."""
    return subprocess.Popen(
        ["sleep", "300"], start_new_session=True, env={**os.environ, **(env or {})}
    )


def _alive(process: subprocess.Popen[bytes]) -> bool:
    time.sleep(0.3)
    return process.poll() is None


def _start_time(pid: int) -> int:
    """``/proc/<pid>/stat`` field 22, read here independently of the code under test."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19])


def _down_leaves(tmp_path: Path, bystander: subprocess.Popen[bytes], **entry: object) -> None:
    try:
        state = tmp_path / "state"
        state.mkdir()
        recorded = {"name": "cluster", "pid": bystander.pid, "log": str(state / "c.log"), **entry}
        (state / "processes.json").write_text(json.dumps([recorded]))
        done = run("simulator", "down", "--state-dir", str(state))
        assert "Traceback" not in done.stderr, done.stderr
        assert _alive(bystander), "down signalled a process it did not start"
        assert f"not stopped: cluster (pid {bystander.pid})" in done.stderr, done.stderr
    finally:
        bystander.kill()
        bystander.wait()


def test_down_leaves_a_process_that_only_shares_a_recorded_pid(tmp_path: Path) -> None:
    """What an older ``up`` wrote, or anyone: a name and a PID, nothing that proves it."""
    _down_leaves(tmp_path, _bystander())


def test_down_leaves_a_process_whose_start_time_differs(tmp_path: Path) -> None:
    """A recorded PID reused: same PID, command line and token, a later start."""
    bystander = _bystander({"GPUSTACK_SIMULATOR_UP": "t0ken"})
    start = _start_time(bystander.pid) - 100  # the process up started was an earlier one
    _down_leaves(tmp_path, bystander, startTime=start, command=["sleep", "300"], token="t0ken")


def test_down_leaves_a_forged_entry_without_the_token(tmp_path: Path) -> None:
    """A forged entry copying a stranger's start time and command line from ``/proc``."""
    bystander = _bystander()
    start = _start_time(bystander.pid)
    _down_leaves(tmp_path, bystander, startTime=start, command=["sleep", "300"], token="guessed")


def test_down_still_stops_what_up_started(tmp_path: Path) -> None:
    """The positive side: a process started and recorded the way ``up`` does is stopped."""
    state = tmp_path / "state"
    (state / "logs").mkdir(parents=True)
    started = _spawn("cluster", ["sleep", "300"], state / "logs")
    write_processes(state, [started])
    assert down(state) == ["cluster"]
    with pytest.raises(ProcessLookupError):  # signalled, waited for and reaped by down
        os.kill(started.process.pid, 0)
    assert started.process.poll() is not None  # the Popen learns it is gone (no warning)
    assert not (state / "processes.json").exists()
