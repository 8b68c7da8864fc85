"""Start-up cost of each daemon's import path, in fresh interpreters.

``simulator up`` starts one process per daemon, and a fleet of them is import-bound: what a
daemon imports but never uses is paid once per process. Each figure is the CPU time of a
fresh ``python -c 'import …'`` (median of several), next to a bare interpreter as the floor,
with the modules no daemon uses that the path still loads. ``python -X importtime -c '…'``
on the same lines says where the rest goes.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys

PATHS = {
    "bare interpreter (floor)": "pass",
    "import gpustack_cli.main (the console script)": "import gpustack_cli.main",
    "device-manager serve (its imports)": (
        "import gpustack_cli.main, gpustack_cli.logs, gpustack_cli.dm_cmds, "
        "gpustack_devicemanager.daemon, trio"
    ),
    "worker (its imports)": (
        "import gpustack_cli.main, gpustack_cli.logs, gpustack_cli.dm_cmds, "
        "gpustack_worker.daemon, trio"
    ),
}
WATCHED = ("httpx._main", "rich", "pygments", "gpustack_simulator", "typer.rich_utils")
"""Modules no daemon uses: each should be absent from a daemon's import path."""


def _cpu(code: str, runs: int) -> float:
    """Median CPU seconds (user + system) of a fresh interpreter running ``code``.

    CPU time, not wall time: on a shared machine the wall clock measures the neighbours too,
    while the CPU an import costs is the same whoever else is running.
    """
    samples = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", code], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        samples.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(samples)


def _loaded(code: str) -> set[str]:
    """Every module ``code`` imports (a ``None`` entry, an import refused on purpose, is not)."""
    report = "import sys; print(*(n for n, m in sys.modules.items() if m is not None))"
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\n{report}"], check=True, capture_output=True, text=True
    )
    return set(done.stdout.split())


def bench_startup(runs: int = 5) -> dict[str, float]:
    """Print the median CPU time of each import path and which unused modules it loads."""
    figures: dict[str, float] = {}
    floor = _cpu("pass", runs)
    for name, code in PATHS.items():
        seconds = floor if code == "pass" else _cpu(code, runs)
        figures[name] = seconds
        unused = sorted(
            w for w in WATCHED if any(m == w or m.startswith(w + ".") for m in _loaded(code))
        )
        print(
            f"{name:<52} median {seconds * 1e3:8.1f} ms CPU   ({seconds / floor:4.1f}x a bare "
            f"interpreter; unused modules loaded: {', '.join(unused) or 'none'})"
        )
    return figures


if __name__ == "__main__":
    bench_startup()
