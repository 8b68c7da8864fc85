"""The ``/metrics`` route at ~10k series: pre-rendered bytes against its floor and a naive exporter.

The exporter renders a round once per monitor period and a scrape writes those bytes, so a
scrape should cost about what serving a constant of the same size costs over the same server.
The comparison that justifies the design is ``prometheus_client``'s usual shape: labelled
``Gauge`` children rendered by ``generate_latest`` at scrape time, on the same server.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import httpx
import trio
from https_bench import serving, time_gets
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from quart import Response

from gpustack_devicemanager.exporter import (
    ACCELERATOR_FIELDS,
    ACCELERATOR_LABELS,
    POD_FIELDS,
    POD_LABELS,
)
from gpustack_devicemanager.exposition import ExpositionHolder, Family, Rendered, render
from gpustack_devicemanager.health import Liveness
from gpustack_devicemanager.holder import SnapshotHolder
from gpustack_devicemanager.server import build_app

PERIOD = 15.0
INSTANCES = 770
"""Each Instance has 6 Pod-level and 7 accelerator series: 770 of them make 10,010 series."""


def round_families(instances: int = INSTANCES) -> list[Family]:
    """A round shaped as ``exporter.compose`` shapes one: the same names, labels and order."""
    pod_families = [
        Family(f"gpustack_instance_{resource}_{kind}_{unit}", text, POD_LABELS)
        for resource, kind, unit, _, text in POD_FIELDS
    ]
    accelerator_families = [
        Family(f"gpustack_instance_accelerator_{suffix}", text, ACCELERATOR_LABELS)
        for suffix, _, text in ACCELERATOR_FIELDS
    ]
    for i in range(instances):
        labels = (
            f"team-{i % 17}",
            f"instance-{i:05d}",
            f"{i:08x}-1111-4222-8333-{i:012x}",
            f"gpu-node-{i % 8}",
        )
        for n, family in enumerate(pod_families):
            family.add(labels, float(1024 * (n + 1) + i))
        card = i % 8
        accelerator = (
            *labels,
            f"GPU-8d2f4a61-3c7e-4b19-a5d0-{card:012x}",
            str(card),
            "nvidia",
            ("Exclusive", "Shared", "Sliced", "Partitioned")[i % 4],
        )
        for n, family in enumerate(accelerator_families):
            family.add(accelerator, float((i * 7 + n) % 100))
    return [*pod_families, *accelerator_families]


def naive_registry(families: list[Family]) -> CollectorRegistry:
    """The same series as labelled ``Gauge`` children, the way most exporters hold them."""
    registry = CollectorRegistry(auto_describe=False)
    for family in families:
        gauge = Gauge(family.name, family.documentation, family.labels, registry=registry)
        for values, value in family.samples:
            gauge.labels(*values).set(value)
    return registry


def _median_p95(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


def _timed(fn: Callable[[], object], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


async def _latency(repeat: int) -> None:
    families = round_families()
    series = sum(len(f.samples) for f in families)
    rendered: Rendered = render(families)
    median, p95 = _median_p95(_timed(lambda: render(families), max(5, repeat // 5)))
    print(
        f"{f'render one round ({series:,} series, both formats)':<52} "
        f"median {median * 1e3:8.2f} ms   p95 {p95 * 1e3:8.2f} ms   (once per period)"
    )

    exposition = ExpositionHolder()
    exposition.publish(rendered)
    static = rendered.text
    registry = naive_registry(families)
    holder = SnapshotHolder(15)
    app = build_app(
        holder, Liveness(PERIOD, trio.current_time()), trio.current_time, dict, exposition
    )

    @app.route("/static")
    async def static_route() -> Response:
        return Response(static, content_type=CONTENT_TYPE_LATEST)

    @app.route("/naive")
    async def naive_route() -> Response:
        return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)

    async with (
        serving(app) as url,
        httpx.AsyncClient(verify=False, trust_env=False, timeout=60) as client,
    ):
        bodies = {}
        for path, what in (
            ("/metrics", "pre-rendered"),
            ("/static", "same bytes, constant"),
            ("/naive", "generate_latest per scrape"),
        ):
            samples, body = await time_gets(client, url + path, repeat)
            median, p95 = _median_p95(samples)
            bodies[path] = body
            print(
                f"{f'GET {path} ({what})':<52} "
                f"median {median * 1e3:8.2f} ms   p95 {p95 * 1e3:8.2f} ms   "
                f"({len(body) / 1e6:.2f} MB over HTTPS, n={repeat})"
            )
        # The comparison is fair only if all three serve the same exposition.
        assert bodies["/metrics"] == bodies["/static"] == bodies["/naive"]


def bench_metrics_route(repeat: int) -> None:
    """``/metrics`` at ~10k series against a constant route and a naive exporter route."""
    trio.run(_latency, repeat)


if __name__ == "__main__":
    bench_metrics_route(30)
