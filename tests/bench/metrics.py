"""The ``/metrics`` route at ~10k series: pre-rendered bytes against its floor and two peers.

The exporter renders a round's format on its first scrape (only what changed, off the loop;
``scrape_bench.py`` measures that per round) and later scrapes write those bytes, so such a
scrape should cost about what serving a constant of the same size costs over the same server.
The comparisons that justify the design, each plain and gzip, same exposition:

* a static constant on the same HTTPS server (the floor);
* ``prometheus_client``'s usual shape: labelled ``Gauge`` children rendered by
  ``generate_latest`` at scrape time, gzipped per scrape when asked (as its own ASGI app does);
* Debian's ``prometheus-node-exporter`` (Go) serving the same text from its textfile collector,
  which re-reads and re-parses the file on every scrape — skipped, saying so, when absent.

Bodies are read raw (``aiter_raw``), so the client never spends time inflating: the figure is
the server's, and the bytes are what crossed the wire.
"""

from __future__ import annotations

import gzip
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import trio
from https_bench import serving
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from quart import Response, request

from gpustack_devicemanager.encoded import Encoded, accepts_gzip
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
from gpustack_kube.certs import self_signed

PERIOD = 15.0
NODE_EXPORTER = Path("/usr/bin/prometheus-node-exporter")
TEXT_ACCEPT = "text/plain;version=0.0.4"
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


async def _scrape(
    client: httpx.AsyncClient, url: str, encoding: str, repeat: int
) -> tuple[list[float], bytes, bool]:
    """Time ``repeat`` GETs after one warm-up; the last raw body and whether it was gzipped."""
    headers = {"Accept": TEXT_ACCEPT, "Accept-Encoding": encoding}
    samples: list[float] = []
    raw = b""
    gzipped = False
    for n in range(repeat + 1):
        start = time.perf_counter()
        async with client.stream("GET", url, headers=headers) as response:
            assert response.status_code == 200, (url, response.status_code)
            raw = b"".join([chunk async for chunk in response.aiter_raw()])
            gzipped = response.headers.get("content-encoding") == "gzip"
        if n:
            samples.append(time.perf_counter() - start)
    return samples, raw, gzipped


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def node_exporter(text: bytes, folder: Path) -> Iterator[str | None]:
    """Debian's node_exporter serving ``text`` from its textfile collector over HTTPS.

    Only that collector (``--collector.disable-defaults``), so the body is the same text plus
    the collector's own few series. Yields ``None`` when the binary is not installed.
    """
    if not NODE_EXPORTER.exists():
        yield None
        return
    textfiles = folder / "textfile"
    textfiles.mkdir()
    (textfiles / "gpustack.prom").write_bytes(text)
    cert, key = self_signed(["127.0.0.1"], folder / "tls")
    web = folder / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    port = _free_port()
    process = subprocess.Popen(
        [
            str(NODE_EXPORTER),
            "--collector.disable-defaults",
            "--collector.textfile",
            f"--collector.textfile.directory={textfiles}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--web.config.file={web}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"https://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(5)


def _series(body: bytes) -> int:
    return sum(1 for line in body.splitlines() if line.startswith(b"gpustack_"))


async def _latency(repeat: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    families = round_families()
    series = sum(len(f.samples) for f in families)
    rendered: Rendered = render(families)
    cpu = []
    for _ in range(max(5, repeat // 5)):
        start = time.process_time()
        fresh = render(families)  # no earlier round to build on: every family rendered
        for body in (fresh.text_body, fresh.openmetrics_body):
            body.gzipped  # noqa: B018 - made and kept
        cpu.append(time.process_time() - start)
    figures["render_cpu_ms"] = statistics.median(cpu) * 1e3
    print(
        f"{f'full render ({series:,} series, both formats + gzip)':<52} "
        f"median CPU {figures['render_cpu_ms']:8.2f} ms   (no earlier round to build on)"
    )

    exposition = ExpositionHolder()
    exposition.publish(families)
    static = Encoded.of(rendered.text)
    registry = naive_registry(families)
    holder = SnapshotHolder(15)
    app = build_app(
        holder, Liveness(PERIOD, trio.current_time()), trio.current_time, dict, exposition
    )

    @app.route("/static")
    async def static_route() -> Response:
        if accepts_gzip(request.headers.get("Accept-Encoding", "")):
            return Response(
                static.gzipped,
                content_type=CONTENT_TYPE_LATEST,
                headers={"Content-Encoding": "gzip"},
            )
        return Response(static.identity, content_type=CONTENT_TYPE_LATEST)

    @app.route("/naive")
    async def naive_route() -> Response:
        body = generate_latest(registry)
        if accepts_gzip(request.headers.get("Accept-Encoding", "")):
            return Response(
                gzip.compress(body),
                content_type=CONTENT_TYPE_LATEST,
                headers={"Content-Encoding": "gzip"},
            )
        return Response(body, content_type=CONTENT_TYPE_LATEST)

    with tempfile.TemporaryDirectory() as folder:
        async with (
            serving(app) as url,
            httpx.AsyncClient(verify=False, trust_env=False, timeout=60) as client,
        ):
            with node_exporter(rendered.text, Path(folder)) as go_url:
                targets = [
                    ("metrics", url + "/metrics", "pre-rendered"),
                    ("static", url + "/static", "same bytes, constant"),
                    ("naive", url + "/naive", "generate_latest per scrape"),
                ]
                if go_url is not None:
                    targets.append(("node_exporter", go_url + "/metrics", "node_exporter textfile"))
                else:
                    print(f"  (node_exporter skipped: {NODE_EXPORTER} is not installed)")
                for key, target, what in targets:
                    for encoding in ("identity", "gzip"):
                        samples, raw, gzipped = await _scrape(client, target, encoding, repeat)
                        body = gzip.decompress(raw) if gzipped else raw
                        # The comparison is fair only if all serve the same exposition: ours
                        # byte for byte, node_exporter the same series (plus its own).
                        if key == "node_exporter":
                            assert _series(body) == _series(rendered.text)
                        else:
                            assert body == rendered.text, key
                        assert gzipped == (encoding == "gzip"), (key, encoding)
                        median, p95 = _median_p95(samples)
                        figures[f"{key}_{encoding}_ms"] = median * 1e3
                        figures[f"{key}_{encoding}_bytes"] = len(raw)
                        print(
                            f"{f'GET {key} {encoding} ({what})':<52} "
                            f"median {median * 1e3:8.2f} ms   p95 {p95 * 1e3:8.2f} ms   "
                            f"({len(raw) / 1e3:,.0f} KB on the wire, n={repeat})"
                        )
    return figures


def bench_metrics_route(repeat: int) -> dict[str, float]:
    """``/metrics`` at ~10k series against a constant, a naive exporter and node_exporter."""
    figures: dict[str, float] = trio.run(_latency, repeat)
    return figures


if __name__ == "__main__":
    bench_metrics_route(10)
