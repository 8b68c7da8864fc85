"""The worker's tail on the demo stack under 32 httpx clients, profiled with py-spy.

``python tests/bench/worker_tail.py [--seconds 20] [--clients 32] [--out DIR]``: ``simulator
up`` of the demo (stand-in, fleet of Device Managers, worker), then a load process of
``--clients`` httpx clients (each its own ``httpx.AsyncClient``: one keep-alive TLS connection,
the front-proxy client certificate, as the aggregator presents it) reading one Instance's
``metrics`` subresource back to back, while ``py-spy record`` samples the worker process.
``--nodes 1000``: a generated fleet (ten Instances a node, 15 s period) instead of the demo,
the clients reading one Instance on every node in turn, each read once before the clock. It
writes the load's figures (JSON), py-spy's collapsed stacks, and a summary: the functions that
hold the samples (self, and anywhere on the stack). Figures only; nothing asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from gpustack_simulator.fleet import generate, to_yaml
from gpustack_simulator.up import down, up
from gpustack_simulator.yamlsafe import load_bounded

PATH = "/apis/worker.gpustack.ai/v1/namespaces/team-a/instances/llama-70b/metrics"
LOAD = """
import asyncio, json, math, ssl, sys, time
import httpx

base, ca, cert = sys.argv[1], sys.argv[2], sys.argv[3]
clients, seconds, paths = int(sys.argv[4]), float(sys.argv[5]), open(sys.argv[6]).read().split()
headers = {"X-Remote-User": "admin", "X-Remote-Group": "system:masters"}
turn = [0]

def next_url():
    turn[0] += 1
    return base + paths[turn[0] % len(paths)]

async def one(latencies, errors, warmed, start, deadline):
    context = ssl.create_default_context(cafile=ca)
    context.load_cert_chain(cert)
    async with httpx.AsyncClient(verify=context, trust_env=False, timeout=60) as client:
        for _ in range(math.ceil(len(paths) / clients)):  # every path read once, untimed
            await client.get(next_url(), headers=headers)
        warmed.append(1)
        await start.wait()
        while time.monotonic() < deadline[0]:
            url = next_url()
            began = time.perf_counter()
            response = await client.get(url, headers=headers)
            latencies.append(time.perf_counter() - began)
            if response.status_code != 200:
                errors.append(response.status_code)

async def main():
    start, latencies, errors, warmed, deadline = asyncio.Event(), [], [], [], [0.0]
    tasks = [
        asyncio.create_task(one(latencies, errors, warmed, start, deadline))
        for _ in range(clients)
    ]
    while len(warmed) < clients:
        await asyncio.sleep(0.05)
    print("started", flush=True)
    began = time.monotonic()
    deadline[0] = began + seconds
    start.set()
    await asyncio.gather(*tasks)
    took = time.monotonic() - began
    ordered = sorted(latencies)
    pick = lambda q: ordered[max(0, math.ceil(q * len(ordered)) - 1)] * 1e3
    print(json.dumps({"requests": len(ordered), "seconds": took, "rps": len(ordered) / took,
                      "errors": len(errors), "p50_ms": pick(0.5), "p90_ms": pick(0.9),
                      "p99_ms": pick(0.99)}))

asyncio.run(main())
"""


def summarize(collapsed: Path, top: int = 25) -> str:
    """The frames holding the most samples: as the leaf (self) and anywhere (inclusive)."""
    leaf: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        frames = stack.split(";")
        total += count
        leaf[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    lines = [f"{total} samples", "", "self:"]
    lines += [f"{100 * n / total:5.1f} %  {frame}" for frame, n in leaf.most_common(top)]
    lines += ["", "inclusive:"]
    lines += [f"{100 * n / total:5.1f} %  {frame}" for frame, n in inclusive.most_common(top)]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Bring the demo up, load and profile the worker, take it down."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--nodes", type=int, default=0, help="a generated fleet this size")
    parser.add_argument("--out", type=Path, default=Path("worker-tail"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    with tempfile.TemporaryDirectory() as folder:
        state = Path(folder) / "state"
        scenario, paths = "demo", [PATH]
        if args.nodes:  # ten Instances a node; the clients read one Instance on every node
            generated = generate(nodes=args.nodes, instances=args.nodes * 10)
            scenario = str(Path(folder) / "fleet.yaml")
            Path(scenario).write_text(to_yaml(generated))
            document = load_bounded(Path(scenario).read_text(), source=scenario)
            assert isinstance(document, dict)
            paths = [
                f"/apis/worker.gpustack.ai/v1/namespaces/{i['namespace']}/instances/{i['name']}"
                "/metrics"
                for i in document["instances"][: args.nodes]
            ]
        listed = Path(folder) / "paths"
        listed.write_text("\n".join(paths) + "\n")
        started = time.perf_counter()
        period = "15s" if args.nodes else "2s"
        up(scenario, state, monitor_period=period, timeout=max(600, args.nodes * 0.6))
        print(f"up in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        try:
            endpoints = json.loads((state / "endpoints.json").read_text())
            processes = json.loads((state / "processes.json").read_text())
            worker = next(int(p["pid"]) for p in processes if p["name"] == "worker")
            script = Path(folder) / "load.py"
            script.write_text(LOAD)
            load = subprocess.Popen(
                [
                    sys.executable,
                    str(script),
                    endpoints["worker"],
                    str(state / "worker-tls" / "ca.crt"),
                    str(state / "cluster" / "pki" / "front-proxy-client.pem"),
                    str(args.clients),
                    str(args.seconds),
                    str(listed),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert load.stdout is not None
            assert load.stdout.readline().strip() == "started"  # every client warm
            collapsed = args.out / "worker.collapsed"
            subprocess.run(
                [
                    spy,
                    "record",
                    "--pid",
                    str(worker),
                    "--duration",
                    str(int(args.seconds)),
                    "--rate",
                    "200",
                    "--format",
                    "raw",
                    "--output",
                    str(collapsed),
                    "--nonblocking",
                ],
                check=True,
                capture_output=True,
            )
            out, _ = load.communicate(timeout=args.seconds + 120)
            figures = json.loads(out)
            figures["load_average"] = list(os.getloadavg())
            figures["clients"] = args.clients
            figures["nodes"] = args.nodes or "demo"
            figures["paths"] = len(paths)
            (args.out / "load.json").write_text(json.dumps(figures, indent=2) + "\n")
            (args.out / "profile.txt").write_text(summarize(collapsed))
            print(json.dumps(figures))
        finally:
            down(state)


if __name__ == "__main__":
    main()
