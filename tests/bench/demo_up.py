"""The demo's start-up: ``simulator up`` of ``demo`` (13 Device Managers on 12 nodes).

Taken both ways in one run, alternating: every Device Manager in one process (the default) and
one process each (``--process-each``), so the ratio compares two figures measured minutes apart
on the same machine. "up" is wall time until ``up`` returned: every Device Manager serving a
sample with its node's Pods known, the worker ready, gate 1 registered and the four applied
Instances Ready. The CPU figure is what every process started for the run spent until then
(it does not move with the neighbours' load the way wall time does).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from fleet import _cpu_seconds, _footprint

from gpustack_simulator.up import down, up


def _once(fleet: bool) -> tuple[float, float, float]:
    """Wall seconds of ``up``, CPU seconds of its processes, their summed RSS in MiB."""
    with tempfile.TemporaryDirectory(prefix="gpustack-bench-demo-") as folder:
        state = Path(folder)
        started = time.perf_counter()
        try:
            up("demo", state, fleet=fleet)
            wall = time.perf_counter() - started
            cpu = sum(_cpu_seconds(state).values())
            rss = sum(v for k, v in _footprint(state).items() if k != "processes")
        finally:
            down(state)
    return wall, cpu, rss


def bench_demo_up(runs: int = 2) -> dict[str, float]:
    """Median of ``runs`` starts each way; the figures for the ratio table."""
    walls: dict[bool, list[float]] = {True: [], False: []}
    cpus: dict[bool, list[float]] = {True: [], False: []}
    rss: dict[bool, float] = {}
    for _ in range(runs):
        for fleet in (True, False):
            wall, cpu, resident = _once(fleet)
            walls[fleet].append(wall)
            cpus[fleet].append(cpu)
            rss[fleet] = resident
    figures: dict[str, float] = {}
    for fleet, label in ((True, "one process"), (False, "a process each")):
        wall = sorted(walls[fleet])[len(walls[fleet]) // 2]
        cpu = sorted(cpus[fleet])[len(cpus[fleet]) // 2]
        key = "fleet" if fleet else "process_each"
        figures[f"demo_up_s_{key}"] = wall
        figures[f"demo_cpu_s_{key}"] = cpu
        print(
            f"{'simulator up demo, DMs in ' + label:<52} up {wall:6.2f} s   "
            f"CPU {cpu:6.2f} s   RSS {rss[fleet]:6.0f} MiB   (n={runs})"
        )
    return figures
