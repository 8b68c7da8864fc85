"""Fleet start-up and footprint: ``simulator up --fleet`` at 10, 100 (and 1,000) nodes.

Each size is a generated scenario (``simulator fleet``: ten Instances per node) brought up with
every Device Manager in one process, then taken down. Printed per size: the time ``up`` took
until every Device Manager served a sample with its node's Pods known (this includes waiting
for the first monitor tick after each Pod index synced, up to one period), when the fleet host
had every member listening, each process's resident set, and the worker's subresource under 8
clients. At 10 nodes the same scenario also runs the old way, one process per Device Manager,
for the side-by-side.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpustack_simulator.fleet import generate, to_yaml
from gpustack_simulator.up import UpError, down, up

CLIENT = Path(__file__).with_name("load_client.py")
PERIOD = "15s"
LISTENING = re.compile(r"(\d+) Device Managers listening ([\d.]+) s after start")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _footprint(state: Path) -> dict[str, float]:
    """Resident MiB per role: the stand-in, the worker, all Device Manager processes summed."""
    roles: dict[str, float] = {"cluster": 0.0, "worker": 0.0, "device-managers": 0.0}
    processes = json.loads((state / "processes.json").read_text())
    for entry in processes:
        role = entry["name"] if entry["name"] in {"cluster", "worker"} else "device-managers"
        roles[role] += _rss_mib(int(entry["pid"]))
    roles["processes"] = len(processes)
    return roles


def _load(state: Path, seconds: float) -> dict[str, float]:
    endpoints = json.loads((state / "endpoints.json").read_text())
    url = endpoints["worker"] + (
        "/apis/worker.gpustack.ai/v1/namespaces/team-0/instances/inst-00000/metrics"
    )
    done = subprocess.run(
        [
            sys.executable,
            str(CLIENT),
            url,
            "--ca",
            str(state / "worker-tls" / "ca.crt"),
            "--cert",
            str(state / "cluster" / "pki" / "front-proxy-client.pem"),
            "--clients",
            "8",
            "--seconds",
            str(seconds),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


def _one(
    nodes: int, *, fleet: bool, folder: Path, load_seconds: float, period: str = PERIOD
) -> dict[str, float]:
    scenario = folder / f"fleet-{nodes}.yaml"
    if not scenario.exists():
        scenario.write_text(to_yaml(generate(nodes=nodes, instances=nodes * 10)))
    state = folder / f"state-{nodes}-{'fleet' if fleet else 'processes'}"
    start = time.perf_counter()
    try:
        up(str(scenario), state, monitor_period=period, fleet=fleet, timeout=max(300, nodes * 0.6))
    except UpError as exc:
        down(state)
        first = str(exc).splitlines()[0]
        label = f"{nodes} nodes, {'fleet' if fleet else 'processes'}"
        print(f"{label:<52} failed: {first}")
        return {"failed": 1.0}
    figures = {"up_s": time.perf_counter() - start}
    try:
        figures.update(_footprint(state))
        if fleet:
            found = LISTENING.search((state / "logs" / "device-managers.log").read_text())
            figures["listening_s"] = float(found[2]) if found else float("nan")
        load = _load(state, load_seconds)
        figures["worker_rps"] = load["requests"] / load["seconds"]
        figures["worker_p99_ms"] = load["p99_ms"]
    finally:
        down(state)
    how = ("one fleet process" if fleet else "a process per DM") + f", {period}"
    listening = f", listening at {figures['listening_s']:.1f} s" if fleet else ""
    print(
        f"{f'{nodes} nodes / {nodes * 10} Instances, {how}':<52} "
        f"up {figures['up_s']:6.1f} s{listening}   RSS: Device Managers "
        f"{figures['device-managers']:6.0f} MiB, stand-in {figures['cluster']:4.0f}, worker "
        f"{figures['worker']:4.0f}   worker 8 clients {figures['worker_rps']:5.0f} req/s "
        f"p99 {figures['worker_p99_ms']:5.1f} ms"
    )
    return figures


def bench_fleet(
    sizes: tuple[int, ...], load_seconds: float = 3.0, period: str = PERIOD
) -> dict[str, float]:
    """Every size with ``--fleet``, and 10 nodes one process each; figures keyed by run."""
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if 10 in sizes:
            for key, value in _one(
                10, fleet=False, folder=folder, load_seconds=load_seconds
            ).items():
                figures[f"processes_10_{key}"] = value
        for nodes in sizes:
            for key, value in _one(
                nodes, fleet=True, folder=folder, load_seconds=load_seconds, period=period
            ).items():
                figures[f"fleet_{nodes}_{key}"] = value
    return figures


if __name__ == "__main__":
    # fleet.py [SIZE ...] [--period 15s]
    args = sys.argv[1:]
    chosen = PERIOD
    if "--period" in args:
        at = args.index("--period")
        chosen = args[at + 1]
        del args[at : at + 2]
    bench_fleet(tuple(int(n) for n in (args or ["10", "100"])), period=chosen)
