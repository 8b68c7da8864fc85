"""README command 1 as a user types it: ``./dev demo``, its first screen, then Ctrl-C.

Issue #31, "First contact": the first screen came only after the demo's 20-30 s waits (three
demo Instances never report accelerators, by design), and Ctrl-C ended with ``just``'s
``error: interrupted by SIGINT`` and exit 130. Here the whole chain runs — ``./dev``, ``just
setup``, the demo, the stack — in a session of its own, and Ctrl-C is a SIGINT to that whole
process group, as a terminal sends it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from e2e_system import CONTROL_PLANE

REPO = Path(__file__).resolve().parents[3]
FIRST_SCREEN_SECONDS = 15.0
"""The issue's bound from "up" to the first screen, on a quiet machine."""
QUIET = 1.0
"""A machine is quiet enough when its 1-minute load average is at most this share of its cores
(not oversubscribed: the suite itself, no second job beside it)."""


def _quiet() -> bool:
    return os.getloadavg()[0] <= QUIET * (os.cpu_count() or 1)


@pytest.mark.skipif(
    CONTROL_PLANE == "real",
    reason="the demo always runs on the stand-in (README command 1)",
)
def test_dev_demo_shows_its_first_screen_soon_and_ctrl_c_exits_0_silently(
    tmp_path: Path,
) -> None:
    state_dir = tmp_path / "demo"
    demo = subprocess.Popen(
        [str(REPO / "dev"), "demo", "--state-dir", str(state_dir)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own group: the SIGINT below reaches it all, and only it
    )
    seen: list[str] = []
    up_at = screen_at = None
    quiet = _quiet()
    try:
        assert demo.stdout is not None
        deadline = time.monotonic() + 300
        for line in demo.stdout:
            seen.append(line)
            if line.startswith("up in ") and up_at is None:
                up_at = time.monotonic()
            if "InstanceMetrics through the aggregator" in line and screen_at is None:
                screen_at = time.monotonic()
            if "refreshing every 5s" in line or time.monotonic() > deadline:
                break
        assert up_at is not None, "".join(seen)
        assert screen_at is not None, "".join(seen)
        os.killpg(demo.pid, signal.SIGINT)
        rest, _ = demo.communicate(timeout=120)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
    output = "".join(seen) + rest
    assert demo.returncode == 0, output
    assert not [line for line in output.splitlines() if line.startswith("error")], output
    assert "Traceback" not in output
    assert output.rstrip().splitlines()[-1].startswith("stopped ")
    assert not (state_dir / "processes.json").exists()
    # The bound is the issue's, for a quiet machine; a loaded one (a second job, a CI run
    # beside it) stretches any wall time, and a deadline must not decide there (docs/testing.md).
    # What holds everywhere is above: the screen came, from what had arrived, and Ctrl-C ended it.
    quiet = quiet and _quiet()
    assert not quiet or screen_at - up_at < FIRST_SCREEN_SECONDS, output
    # The hints name commands that run from here: kubectl, and paths that exist.
    assert "\n  kubectl --kubeconfig " in output
