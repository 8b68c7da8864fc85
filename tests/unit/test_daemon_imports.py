"""A daemon's import path leaves out what it never uses (checked in fresh interpreters).

Every simulated node is a process of its own, so an unused import is paid once per Device
Manager: the simulator's replay machinery, httpx's command-line client and the rich/pygments
stack it drags in. ``tests/bench/startup.py`` measures the cost; this only pins the absence.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

UNUSED = ("gpustack_simulator", "httpx._main", "rich", "pygments")


@pytest.mark.parametrize(
    "daemon", ["gpustack_devicemanager.daemon", "gpustack_worker.daemon"], ids=["dm", "worker"]
)
def test_the_serve_path_imports_nothing_it_never_uses(daemon: str) -> None:
    code = (
        f"import gpustack_cli.main, gpustack_cli.logs, gpustack_cli.dm_cmds, {daemon}, sys\n"
        "print(*(n for n, m in sys.modules.items() if m is not None))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert daemon in loaded
    found = sorted(n for n in loaded if any(n == u or n.startswith(u + ".") for u in UNUSED))
    assert found == []


def test_httpx_still_works_with_its_cli_left_out() -> None:
    code = "import gpustack_cli, httpx; httpx.Client(trust_env=False).close(); print(httpx.main)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "function main" in done.stdout  # httpx's own stand-in for its missing CLI
