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
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from gpustack_simulator.fleet import generate, to_yaml
from gpustack_simulator.up import UpError, down, up
from gpustack_simulator.yamlsafe import load_bounded

CLIENT = Path(__file__).with_name("load_client.py")
PERIOD = "15s"
LISTENING = re.compile(r"(\d+) Device Managers listening ([\d.]+) s after start")
CENSUS_FROM = 300
"""From this many nodes on, a census counts the settled members while ``up`` waits."""
CENSUS_SECONDS = 120.0
TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


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


def _cpu_seconds(state: Path, rss: dict[str, float] | None = None) -> dict[str, float]:
    """CPU seconds so far of each process started for ``state`` (found by its command line).

    ``rss``, when given, is filled with each role's resident MiB now.
    """
    found: dict[str, float] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if str(state) not in command:
                continue
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        role = (
            "device-managers"
            if "fleet_host" in command
            else "worker"
            if " worker " in command
            else "cluster"
        )
        found[role] = found.get(role, 0.0) + (int(fields[11]) + int(fields[12])) / TICKS
        if rss is not None:
            rss[role] = rss.get(role, 0.0) + int(fields[21]) * PAGE / 2**20
    return found


class Census:
    """While ``up`` waits: every ``CENSUS_SECONDS``, how many members serve a settled sample,
    and how busy each process was (share of one core) since the previous count."""

    def __init__(self, state: Path, timeout: float) -> None:
        self.state, self.timeout = state, timeout
        self.done = threading.Event()
        self.lines: list[str] = []
        self.last: tuple[float, int, int] = (0.0, 0, 0)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Census:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.thread.join()

    def _count(self, client: httpx.Client) -> tuple[int, int]:
        spec = self.state / "fleet.json"
        if not spec.exists():
            return 0, 0
        members = json.loads(spec.read_text())["members"]
        settled = 0
        for member in members:
            if self.done.is_set():
                break
            url = f"https://{member['address']}:{member['port']}/monitor/snapshot"
            try:
                response = client.get(url)
                settled += response.status_code == 200 and "slices" in response.json()
            except (httpx.HTTPError, OSError, ValueError):
                pass
        return settled, len(members)

    def _run(self) -> None:
        start = time.perf_counter()
        before, at = _cpu_seconds(self.state), start
        # The last count just before up's own deadline, so a failed run still says how far it got.
        moments = list(range(int(CENSUS_SECONDS), int(self.timeout), int(CENSUS_SECONDS)))
        moments.append(int(self.timeout) - 25)
        with httpx.Client(verify=False, timeout=3, trust_env=False) as client:
            for moment in sorted(set(moments)):
                if self.done.wait(max(0.0, start + moment - time.perf_counter())):
                    return
                settled, total = self._count(client)
                rss: dict[str, float] = {}
                now, cpu = time.perf_counter(), _cpu_seconds(self.state, rss)
                busy = ", ".join(
                    f"{role} {(cpu[role] - before.get(role, 0.0)) / (now - at):.0%} "
                    f"({rss.get(role, 0.0):.0f} MiB)"
                    for role in sorted(cpu)
                )
                load = Path("/proc/loadavg").read_text().split()[:3]
                self.last = (now - start, settled, total)
                self.lines.append(
                    f"  census at {now - start:5.0f} s: {settled}/{total} settled; "
                    f"CPU (of one core) and RSS {busy}; load {' '.join(load)}"
                )
                print(self.lines[-1], flush=True)
                before, at = cpu, now


SPREAD_CLIENTS = 32


def _spread_paths(scenario: Path, nodes: int) -> Path:
    """One Instance on each node (the first ``nodes`` of the scenario: Instance j is on node
    j mod nodes), as the paths of their metrics."""
    document = load_bounded(scenario.read_text(), source=str(scenario))
    assert isinstance(document, dict)
    paths = [
        f"/apis/worker.gpustack.ai/v1/namespaces/{i['namespace']}/instances/{i['name']}/metrics"
        for i in document["instances"][:nodes]
    ]
    listed = scenario.with_suffix(".paths")
    listed.write_text("\n".join(paths) + "\n")
    return listed


def _load(
    state: Path, seconds: float, *, clients: int = 8, paths: Path | None = None
) -> dict[str, float]:
    endpoints = json.loads((state / "endpoints.json").read_text())
    url = endpoints["worker"] + (
        "/apis/worker.gpustack.ai/v1/namespaces/team-0/instances/inst-00000/metrics"
    )
    spread = ["--paths", str(paths)] if paths is not None else []
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
            str(clients),
            "--seconds",
            str(seconds),
            *spread,
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
    timeout = max(300, nodes * 0.6)
    census = Census(state, timeout) if fleet and nodes >= CENSUS_FROM else None
    try:
        if census is None:
            up(str(scenario), state, monitor_period=period, fleet=fleet, timeout=timeout)
        else:
            with census:
                up(str(scenario), state, monitor_period=period, fleet=fleet, timeout=timeout)
    except UpError as exc:
        down(state)
        first = str(exc).splitlines()[0]
        label = f"{nodes} nodes, {'fleet' if fleet else 'processes'}"
        print(f"{label:<52} failed: {first}")
        if census is not None and census.last[2]:
            print(f"  {census.last[1]} of {census.last[2]} settled {census.last[0]:.0f} s in")
            return {"failed": 1.0, "settled": float(census.last[1])}
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
        spread = _load(
            state, load_seconds, clients=SPREAD_CLIENTS, paths=_spread_paths(scenario, nodes)
        )
        figures["spread_rps"] = spread["requests"] / spread["seconds"]
        figures["spread_p99_ms"] = spread["p99_ms"]
        figures["spread_errors"] = spread["errors"]
        figures["worker_after_spread"] = _footprint(state)["worker"]  # every node's figures read
    finally:
        down(state)
    how = ("one fleet process" if fleet else "a process per DM") + f", {period}"
    listening = f", listening at {figures['listening_s']:.1f} s" if fleet else ""
    print(
        f"{f'{nodes} nodes / {nodes * 10} Instances, {how}':<52} "
        f"up {figures['up_s']:6.1f} s{listening}   RSS: Device Managers "
        f"{figures['device-managers']:6.0f} MiB, stand-in {figures['cluster']:4.0f}, worker "
        f"{figures['worker']:4.0f}   worker 8 clients {figures['worker_rps']:5.0f} req/s "
        f"p99 {figures['worker_p99_ms']:5.1f} ms; {SPREAD_CLIENTS} clients over {nodes} "
        f"nodes' Instances {figures['spread_rps']:5.0f} req/s p99 "
        f"{figures['spread_p99_ms']:5.1f} ms ({figures['spread_errors']:.0f} errors), worker "
        f"then {figures['worker_after_spread']:.0f} MiB"
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
