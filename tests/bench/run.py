"""Benchmarks of the shared core: figures printed, nothing asserted about time.

Run with ``./dev bench`` (``./dev bench --quick`` for a pass of a few minutes: fewer repeats,
the fleet at 10 nodes only; ``--fleet-sizes 10,100,1000`` for the big one). The scale mirrors a
busy node: hundreds of Instance Pods, each read against a kubelet summary and a snapshot every
monitor period, by the exporter and the worker. The last table puts the side-by-side figures
as ratios (each within one run, so a loaded machine moves both sides); ``docs/performance.md``
records them with the machine they were taken on.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from demo_up import bench_demo_up
from devicemanager import bench_monitor_pass, bench_snapshot_route
from fleet import bench_fleet
from metrics import bench_metrics_route
from startup import bench_startup
from worker import bench_worker_routes

from gpustack_core.kubelet import parse_summary, usage_from_summary
from gpustack_core.pods import parse_pod
from gpustack_core.sample import instance_sample
from gpustack_core.snapshot import encode_snapshot, parse_snapshot
from gpustack_core.usage import DeclaredTotals
from gpustack_simulator.demo import load_demo
from gpustack_simulator.recording import load_recording
from gpustack_simulator.replay import pynvml_standin
from gpustack_simulator.synth.timeline import VirtualClock
from gpustack_vendors.nvidia import NvidiaBackend

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO.parent / "shared" / "corpus" / "kubelet-summary"
RECORDINGS = REPO / "recordings"


def measure(name: str, fn: Callable[[], object], *, repeat: int, per: int = 1) -> None:
    """Print the median and p95 of ``repeat`` timed calls (each doing ``per`` operations)."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) / per)
    samples.sort()
    p95 = samples[min(len(samples) - 1, int(len(samples) * 0.95))]
    print(
        f"{name:<52} median {statistics.median(samples) * 1e6:10.1f} µs   "
        f"p95 {p95 * 1e6:10.1f} µs   (n={repeat}, per={per})"
    )


def bench_replay(repeat: int) -> None:
    """One replayed monitor-style pass over the 8-GPU node, against a plain call baseline."""
    recording = load_recording(RECORDINGS / "nvidia" / "h100-8x.yaml")
    clock = VirtualClock()
    module = pynvml_standin.build_module(recording, clock=clock)
    backend = NvidiaBackend(module)
    devices = [d.id for d in backend.detect().devices]
    replayer = module.__dict__["__replayer__"]

    def one_pass() -> None:
        backend.sample()
        backend.processes(devices)

    before = replayer.calls_made
    one_pass()
    calls = replayer.calls_made - before
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        one_pass()
        samples.append(time.perf_counter() - start)
    per_pass = statistics.median(samples)

    def plain(x: int) -> int:
        return x

    start = time.perf_counter()
    for i in range(calls * repeat):
        plain(i)
    baseline = (time.perf_counter() - start) / (calls * repeat)
    print(
        f"{'replayed monitor pass, 8x H100 (' + str(calls) + ' binding calls)':<52} "
        f"median {per_pass * 1e6:10.1f} µs   {calls / per_pass:12,.0f} calls/s"
    )
    print(
        f"{'plain Python function call (baseline)':<52} "
        f"median {baseline * 1e9:10.1f} ns   {1 / baseline:12,.0f} calls/s   "
        f"(replay costs {per_pass / calls / baseline:,.0f}x a plain call)"
    )


def _ratio_table(figures: dict[str, float]) -> None:
    """The side-by-side figures as ratios, one line each (a missing side is skipped)."""

    def ratio(a: str, b: str) -> str:
        if a not in figures or b not in figures or not figures[b]:
            return "n/a"
        return f"{figures[a] / figures[b]:.2f}x"

    rows = [
        (
            "/metrics plain vs static constant (HTTPS)",
            ratio("metrics_identity_ms", "static_identity_ms"),
        ),
        ("/metrics gzip vs static gzip", ratio("metrics_gzip_ms", "static_gzip_ms")),
        (
            "naive prometheus_client plain vs /metrics plain",
            ratio("naive_identity_ms", "metrics_identity_ms"),
        ),
        (
            "naive prometheus_client gzip vs /metrics gzip",
            ratio("naive_gzip_ms", "metrics_gzip_ms"),
        ),
        (
            "node_exporter textfile plain vs /metrics plain",
            ratio("node_exporter_identity_ms", "metrics_identity_ms"),
        ),
        (
            "node_exporter textfile gzip vs /metrics gzip",
            ratio("node_exporter_gzip_ms", "metrics_gzip_ms"),
        ),
        ("/metrics bytes, plain vs gzip", ratio("metrics_identity_bytes", "metrics_gzip_bytes")),
        ("warm subresource vs /healthz (same worker)", ratio("subresource_us", "healthz_us")),
        ("worker req/s, 8 clients vs 1", ratio("throughput_8_rps", "throughput_1_rps")),
        ("worker req/s, 32 clients vs 1", ratio("throughput_32_rps", "throughput_1_rps")),
        (
            "worker at 32 clients: req/s, p99 ms",
            f"{figures.get('throughput_32_rps', float('nan')):.0f}, "
            f"{figures.get('throughput_32_p99_ms', float('nan')):.1f}",
        ),
        (
            "device-manager serve imports vs bare interpreter (CPU)",
            ratio("startup_dm", "startup_floor"),
        ),
        ("worker imports vs bare interpreter (CPU)", ratio("startup_worker", "startup_floor")),
        (
            "demo up: DMs a process each vs in one process (wall)",
            ratio("demo_up_s_process_each", "demo_up_s_fleet"),
        ),
        (
            "demo up: DMs a process each vs in one process (CPU)",
            ratio("demo_cpu_s_process_each", "demo_cpu_s_fleet"),
        ),
        (
            "10 nodes, DM RSS: a process each vs one fleet process",
            ratio("processes_10_device-managers", "fleet_10_device-managers"),
        ),
        (
            "10 nodes, up time: a process each vs one fleet process",
            ratio("processes_10_up_s", "fleet_10_up_s"),
        ),
        (
            "fleet DM RSS, 100 vs 10 nodes",
            ratio("fleet_100_device-managers", "fleet_10_device-managers"),
        ),
        (
            "fleet DM RSS, 1000 vs 100 nodes",
            ratio("fleet_1000_device-managers", "fleet_100_device-managers"),
        ),
    ]
    for size in sorted({int(k.split("_")[1]) for k in figures if k.startswith("fleet_")}):
        rows.append(
            (
                f"fleet {size}: worker RSS MiB, settled / after reading every node",
                f"{figures.get(f'fleet_{size}_worker', float('nan')):.0f} / "
                f"{figures.get(f'fleet_{size}_worker_after_spread', float('nan')):.0f}",
            )
        )
        rows.append(
            (
                f"fleet {size}: worker p99 ms, 8 clients one Instance / 32 every node's",
                f"{figures.get(f'fleet_{size}_worker_p99_ms', float('nan')):.1f} / "
                f"{figures.get(f'fleet_{size}_spread_p99_ms', float('nan')):.1f}",
            )
        )
    print()
    print(f"{'ratios (within this run)':<60} value")
    for name, value in rows:
        print(f"{name:<60} {value}")
    load = os.getloadavg()
    print(
        f"{'load average at the end (1, 5, 15 min)':<60} {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )


def main() -> None:
    """Run every benchmark once and print one line each, then the ratio table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument(
        "--quick", action="store_true", help="a few minutes: fewer repeats, fleet at 10 only"
    )
    parser.add_argument("--fleet-sizes", default=None, help="comma-separated (default 10,100)")
    parser.add_argument("--fleet-period", default="15s", help="the fleet's monitor period")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    if args.quick:
        args.repeat = min(args.repeat, 10)
    sizes = tuple(
        int(n) for n in (args.fleet_sizes or ("10" if args.quick else "10,100")).split(",")
    )
    figures: dict[str, float] = {}
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    node = load_demo()
    pods = [parse_pod(bytes(raw)) for raw in node.pods]
    summary_bytes = bytes(node.kubelet_summary)
    summary = parse_summary(summary_bytes)
    snapshots = {m: parse_snapshot(bytes(raw)) for m, raw in node.snapshots.items()}
    fallback = DeclaredTotals(0, 0, 0)
    now = datetime(2026, 11, 29, 9, 0, 5, tzinfo=UTC)

    def compose_node(times: int) -> None:
        for _ in range(times):
            for pod in pods:
                usage = usage_from_summary(
                    summary,
                    namespace=pod.metadata.namespace,
                    name=pod.metadata.name,
                    uid=pod.metadata.uid,
                )
                instance_sample(
                    pod=pod, fallback=fallback, usage=usage, snapshots=snapshots, now=now
                )

    measure(
        "compose one Instance sample (demo mix)",
        lambda: compose_node(100),
        repeat=args.repeat,
        per=100 * len(pods),
    )
    measure(
        "parse the demo kubelet summary", lambda: parse_summary(summary_bytes), repeat=args.repeat
    )
    nvidia = bytes(node.snapshots["nvidia"])
    measure(
        "parse + re-encode the demo NVIDIA snapshot",
        lambda: encode_snapshot(parse_snapshot(nvidia)),
        repeat=args.repeat,
    )

    bench_replay(args.repeat)
    bench_monitor_pass(max(3, args.repeat // 10))
    bench_snapshot_route(max(50, args.repeat * 4))
    figures.update(bench_metrics_route(max(5 if args.quick else 20, args.repeat // 2)))
    figures.update(bench_worker_routes(max(50, args.repeat * 2), 2.0 if args.quick else 5.0))
    startup = bench_startup(3 if args.quick else 5)
    figures["startup_floor"] = startup["bare interpreter (floor)"]
    figures["startup_dm"] = startup["device-manager serve (its imports)"]
    figures["startup_worker"] = startup["worker (its imports)"]
    figures.update(bench_demo_up(1 if args.quick else 2))
    figures.update(bench_fleet(sizes, 2.0 if args.quick else 3.0, args.fleet_period))

    if CORPUS.is_dir():
        largest = max(CORPUS.glob("*.json"), key=lambda p: p.stat().st_size)
        data = largest.read_bytes()
        pods_in = len(json.loads(data).get("pods", []))
        measure(
            f"parse {largest.name} ({len(data)} B, {pods_in} pods)",
            lambda: parse_summary(data),
            repeat=args.repeat,
        )
    else:
        print(f"skipped the corpus summary: {CORPUS} is absent")
    _ratio_table(figures)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
