"""The worker's subresource against metrics-server, through the same real kube-aggregator.

``python tests/bench/aggregated_peer.py [--rounds 40] [--json docs/performance-aggregated.json]``:
``simulator up --control-plane real`` of the demo (etcd, kube-apiserver, the controllers, Kueue,
nfd-master and metrics-server, all built from their modules), then, through kube-apiserver:

- ``metrics.k8s.io``: metrics-server's ``pods/llama-70b`` (what ``kubectl top pod`` reads);
- ``ours``: the worker's ``instances/llama-70b/metrics`` for the Instance that Pod runs;
- ``apiserver``: ``pods/llama-70b`` itself, which kube-apiserver answers from its own storage
  without proxying anywhere: the floor of a request through this server.

Each cell is a (target, clients) pair: ``1`` is one keep-alive httpx client reading back to back,
``32`` is 32 httpx clients (one connection each) at once, as a dashboard's fan-out would be, and
``kubectl`` is one ``kubectl get --raw`` process per request, as a person or a script runs it.
A round runs every cell once, in an order shuffled with a fixed seed (``--seed``), so the
machine's drift falls on every target alike; the clients live in a process of their own
(:data:`LOAD`), the servers in theirs. Per cell it records p50/p90/p99, requests a second, the
bytes of an answer, and each server's CPU per request (``utime + stime`` from ``/proc``, before
and after each burst, of kube-apiserver, the worker and metrics-server). Figures only; nothing
asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scrape_bench import cpu_ms, head_revision, machine, percentile

from gpustack_simulator.controlplane import binaries
from gpustack_simulator.controlplane.netns import delete_recorded
from gpustack_simulator.controlplane.start import up_real
from gpustack_simulator.up import down

PATHS = {
    "metrics.k8s.io": "/apis/metrics.k8s.io/v1beta1/namespaces/team-a/pods/llama-70b",
    "ours": "/apis/worker.gpustack.ai/v1/namespaces/team-a/instances/llama-70b/metrics",
    "apiserver": "/api/v1/namespaces/team-a/pods/llama-70b",
}
CLIENTS = ("kubectl", "1", "32")
PER_BURST = {"kubectl": 5, "1": 10, "32": 64}
"""Requests a cell makes in one round (32 clients: two each)."""
SERVERS = ("kube-apiserver", "worker", "metrics-server")

LOAD = r'''
import asyncio, json, ssl, subprocess, sys, time
import httpx

server, ca, cert, key, kubectl, kubeconfig = sys.argv[1:7]
context = ssl.create_default_context(cafile=ca)
context.load_cert_chain(cert, key)
pools = {}
reconnects = [0]

async def pool(n):
    if n not in pools:
        pools[n] = [httpx.AsyncClient(base_url=server, verify=context, trust_env=False,
                                      timeout=60) for _ in range(n)]
    return pools[n]

async def burst(path, clients, count):
    """``count`` reads of ``path``: latencies (s), statuses, bytes of the last answer."""
    latencies, statuses, size = [], [], [0]
    if clients == "kubectl":
        for _ in range(count):
            began = time.perf_counter()
            done = subprocess.run([kubectl, "--kubeconfig", kubeconfig, "get", "--raw", path],
                                  capture_output=True)
            latencies.append(time.perf_counter() - began)
            statuses.append(200 if done.returncode == 0 else 500)
            size[0] = len(done.stdout)
        return latencies, statuses, size[0]
    each = await pool(int(clients))
    share = [count // len(each) + (1 if k < count % len(each) else 0) for k in range(len(each))]

    async def one(client, n):
        for _ in range(n):
            began = time.perf_counter()
            try:
                response = await client.get(path)
            except httpx.RemoteProtocolError:  # a kept connection the server had just closed
                reconnects[0] += 1
                began = time.perf_counter()  # timed afresh, as Go's client retries it
                response = await client.get(path)
            latencies.append(time.perf_counter() - began)
            statuses.append(response.status_code)
            size[0] = len(response.content)

    await asyncio.gather(*(one(c, n) for c, n in zip(each, share) if n))
    return latencies, statuses, size[0]

async def main():
    for line in sys.stdin:
        order = json.loads(line)
        began = time.perf_counter()
        latencies, statuses, size = await burst(order["path"], order["clients"], order["count"])
        print(json.dumps({"latencies": latencies, "statuses": statuses, "bytes": size,
                          "seconds": time.perf_counter() - began,
                          "reconnects": reconnects[0]}), flush=True)
        reconnects[0] = 0

asyncio.run(main())
'''


def _ready(kubectl: str, kubeconfig: str, deadline: float) -> None:
    """metrics-server has two scrapes of llama-70b (its rate needs both); the worker answers."""
    for path in (PATHS["metrics.k8s.io"], PATHS["ours"]):
        while True:
            done = subprocess.run(
                [kubectl, "--kubeconfig", kubeconfig, "get", "--raw", path],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"{path} never answered: {done.stderr.strip()}")
            time.sleep(1)


def run(rounds: int, seed: int) -> dict[str, Any]:
    """Up, the shuffled rounds, down; the figures."""
    started_at = time.monotonic()
    load_start = list(os.getloadavg())
    with tempfile.TemporaryDirectory() as folder:
        state = Path(folder) / "state"
        up_real("demo", state, monitor_period="2s")
        try:
            processes = json.loads((state / "processes.json").read_text())
            pids = {p["name"]: int(p["pid"]) for p in processes if p["name"] in SERVERS}
            endpoints = json.loads((state / "endpoints.json").read_text())
            pki = state / "controlplane" / "pki"
            kubeconfig = str(state / "controlplane" / "admin.kubeconfig")
            kubectl = str(binaries.locate(("kubectl",))["kubectl"])
            _ready(kubectl, kubeconfig, time.monotonic() + 300)
            script = Path(folder) / "load.py"
            script.write_text(LOAD)
            load = subprocess.Popen(
                [
                    sys.executable,
                    str(script),
                    endpoints["cluster"],
                    str(pki / "ca.crt"),
                    str(pki / "admin.crt"),
                    str(pki / "admin.key"),
                    kubectl,
                    kubeconfig,
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert load.stdin is not None
            assert load.stdout is not None
            cells = [(t, c) for t in PATHS for c in CLIENTS]
            figures: dict[str, dict[str, Any]] = {
                f"{t}/{c}": {
                    "latencies": [],
                    "errors": 0,
                    "reconnects": 0,
                    "seconds": 0.0,
                    "cpu_ms": dict.fromkeys(SERVERS, 0.0),
                    "bytes": 0,
                }
                for t, c in cells
            }
            shuffler = random.Random(seed)
            for k in range(rounds + 1):  # round 0 warms every cell (connections, caches)
                order = cells[:]
                shuffler.shuffle(order)
                for target, clients in order:
                    before = {name: cpu_ms(pid) for name, pid in pids.items()}
                    request = {
                        "path": PATHS[target],
                        "clients": clients,
                        "count": PER_BURST[clients],
                    }
                    load.stdin.write(json.dumps(request) + "\n")
                    load.stdin.flush()
                    answer = json.loads(load.stdout.readline())
                    after = {name: cpu_ms(pid) for name, pid in pids.items()}
                    if k == 0:
                        continue
                    cell = figures[f"{target}/{clients}"]
                    cell["latencies"] += answer["latencies"]
                    cell["errors"] += sum(1 for s in answer["statuses"] if s != 200)
                    cell["reconnects"] += answer["reconnects"]
                    cell["seconds"] += answer["seconds"]
                    cell["bytes"] = answer["bytes"]
                    for name in pids:
                        cell["cpu_ms"][name] += after[name] - before[name]
            load.stdin.close()
            load.wait(timeout=30)
        finally:
            down(state)
            delete_recorded(state)  # the network namespace, as `simulator down` deletes it
    out: dict[str, Any] = {}
    for key, cell in figures.items():
        n = len(cell["latencies"])
        ordered = sorted(cell["latencies"])
        out[key] = {
            "n": n,
            "errors": cell["errors"],
            "reconnects": cell["reconnects"],
            "p50_ms": percentile(ordered, 0.50) * 1e3,
            "p90_ms": percentile(ordered, 0.90) * 1e3,
            "p99_ms": percentile(ordered, 0.99) * 1e3,
            "requests_per_second": n / cell["seconds"],
            "bytes": cell["bytes"],
            "server_cpu_ms_per_request": {
                name: spent / n for name, spent in cell["cpu_ms"].items()
            },
        }
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": round(time.monotonic() - started_at, 1),
        "command": " ".join(["tests/bench/aggregated_peer.py", *sys.argv[1:]]),
        "revision": head_revision(),
        "load_average_start": load_start,
        "load_average_end": list(os.getloadavg()),
        "machine": machine(),
        "rounds": rounds,
        "seed": seed,
        "per_burst": PER_BURST,
        "paths": PATHS,
        "cells": out,
    }


def main() -> None:
    """Parse, run, write the JSON, print it."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--seed", type=int, default=20261207)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    data = run(args.rounds, args.seed)
    text = json.dumps(data, indent=1) + "\n"
    if args.json:
        args.json.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
