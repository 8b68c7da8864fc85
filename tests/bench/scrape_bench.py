"""``/metrics`` against its floor and its peers, each in its own process, scraped by httpx.

``python tests/bench/scrape_bench.py --rounds 240 --json docs/performance.json`` then
``python tests/bench/write_page.py docs/performance.json docs/performance.md``. Figures only:
nothing here asserts anything about time.

Method (the page repeats it):

* every target is its own process (``scrape_targets.py``; node_exporter is Debian's binary
  with only its textfile collector), the client is this process: httpx, one keep-alive
  ``httpx.Client`` per target, TLS on loopback, Prometheus's own ``Accept`` header;
* rounds: each round every target gets its next figures (``prepare`` not timed; ``round``
  timed as part of the round's CPU), then its scrapes. A round's scrape count (0, 1 or 4) and
  encoding (identity or gzip) are drawn from a shuffled schedule with every combination the
  same number of times, and within a round the targets' scrapes run in shuffled order;
* a scrape's latency is the client's, the body read raw (no inflating on the client) and
  checked (its series counted) outside the timing; the server's CPU is its process's
  ``utime + stime`` from ``/proc/<pid>/stat`` (10 ms ticks, so per-request figures are means
  over a cell) read before and after each scrape, and before and after each round.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import httpx
from scrape_targets import round_families

from gpustack_devicemanager.exposition import Family, render
from gpustack_kube.certs import self_signed

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
NODE_EXPORTERS = ("prometheus-node-exporter", "node_exporter")
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
SCRAPES_PER_ROUND = (0, 1, 4)
ENCODINGS = ("identity", "gzip")
SERIES = 10_010
TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def cpu_ms(pid: int) -> float:
    """The process's CPU so far, all its threads, dead ones included (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_MS


class Target:
    """A target process, its scrape URL and how a round is made current there."""

    def __init__(self, name: str, url: str, pid: int, process: subprocess.Popen[str] | None):
        self.name, self.url, self.pid, self.process = name, url, pid, process
        self.client = httpx.Client(verify=False, trust_env=False, timeout=60)

    def command(self, text: str) -> None:
        """Send a command and wait for its ``ok``."""
        assert self.process is not None
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()
        assert self.process.stdout.readline().strip() == "ok", (self.name, text)


@contextmanager
def python_target(kind: str, cert: Path, key: Path) -> Iterator[Target]:
    """One of ``scrape_targets.py``'s kinds in a process of its own."""
    process = subprocess.Popen(
        [sys.executable, str(HERE / "scrape_targets.py"), kind, str(cert), str(key)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=HERE,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        yield Target(kind, url, process.pid, process)
    finally:
        if process.stdin:
            process.stdin.close()
        process.wait(10)


class NodeExporter(Target):
    """node_exporter's textfile collector: a round writes the file, as a cron job would."""

    def __init__(self, url: str, process: subprocess.Popen[str], folder: Path) -> None:
        super().__init__("node_exporter", url, process.pid, None)
        self.folder = folder
        self.text = b""

    def command(self, text: str) -> None:
        """``prepare N`` renders the text (here, not counted); ``round N`` writes it."""
        verb, number = text.split()
        if verb == "prepare":
            self.text = _text_of_round(int(number))
        else:
            staged = self.folder / "gpustack.prom.tmp"
            staged.write_bytes(self.text)
            staged.rename(self.folder / "gpustack.prom")


def _text_of_round(number: int) -> bytes:
    families = []
    for name, text, labels, samples in round_families(number):
        family = Family(name, text, labels)
        family.samples.extend(samples)
        families.append(family)
    return render(families).text


@contextmanager
def node_exporter(binary: str, cert: Path, key: Path, folder: Path) -> Iterator[Target]:
    """Debian's node_exporter, only its textfile collector, TLS from a web config file."""
    textfiles = folder / "textfile"
    textfiles.mkdir()
    (textfiles / "gpustack.prom").write_bytes(_text_of_round(0))
    web = folder / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [
            binary,
            "--collector.disable-defaults",
            "--collector.textfile",
            f"--collector.textfile.directory={textfiles}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--web.config.file={web}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        url = f"https://127.0.0.1:{port}/metrics"
        deadline = time.monotonic() + 10
        while True:
            try:
                httpx.get(url, verify=False, trust_env=False)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        target = NodeExporter(url, process, textfiles)
        yield target
    finally:
        process.terminate()
        process.wait(10)


def scrape(target: Target, encoding: str) -> tuple[float, float, bytes, bool, str]:
    """One GET: latency (ms), server CPU (ms), raw body, whether gzipped, content type."""
    headers = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": encoding}
    cpu = cpu_ms(target.pid)
    start = time.perf_counter()
    with target.client.stream("GET", target.url, headers=headers) as response:
        raw = b"".join(response.iter_raw())
        status = response.status_code
        gzipped = response.headers.get("content-encoding") == "gzip"
        content_type = response.headers.get("content-type", "")
    elapsed = (time.perf_counter() - start) * 1e3
    assert status == 200, (target.name, status)
    return elapsed, cpu_ms(target.pid) - cpu, raw, gzipped, content_type


def _series(body: bytes) -> int:
    return sum(1 for line in body.splitlines() if line.startswith(b"gpustack_"))


def percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of an ordered sample."""
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def run(rounds_per_cell: int, seed: int) -> dict[str, object]:
    """The interleaved rounds; figures per (target, encoding) and (target, encoding, scrapes)."""
    rng = random.Random(seed)
    schedule = [
        (scrapes, encoding)
        for scrapes in SCRAPES_PER_ROUND
        for encoding in ENCODINGS
        for _ in range(rounds_per_cell)
    ]
    rng.shuffle(schedule)
    latencies: dict[tuple[str, str], list[float]] = defaultdict(list)
    first_latencies: dict[tuple[str, str], list[float]] = defaultdict(list)
    request_cpu: dict[tuple[str, str], list[float]] = defaultdict(list)
    round_cpu: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    wire: dict[tuple[str, str], int] = {}
    served: dict[str, str] = {}
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        cert, key = self_signed(["127.0.0.1"], folder / "tls")
        targets = [
            stack.enter_context(python_target(kind, cert, key))
            for kind in ("ours", "static", "prometheus_client")
        ]
        binary = next((b for b in map(shutil.which, NODE_EXPORTERS) if b), None)
        if binary is not None:
            targets.append(stack.enter_context(node_exporter(binary, cert, key, folder)))
        for target in targets:  # warm: connections open, code paths taken
            for encoding in ENCODINGS * 3:
                scrape(target, encoding)
        for number, (scrapes, encoding) in enumerate(schedule, start=1):
            for target in targets:
                target.command(f"prepare {number}")
            before = {t.name: cpu_ms(t.pid) for t in targets}
            for target in rng.sample(targets, len(targets)):
                target.command(f"round {number}")
            order = [t for t in targets for _ in range(scrapes)]
            rng.shuffle(order)
            seen: set[str] = set()
            for target in order:
                latency, cpu, raw, gzipped, content_type = scrape(target, encoding)
                key_ = (target.name, encoding)
                latencies[key_].append(latency)
                request_cpu[key_].append(cpu)
                if target.name not in seen:
                    seen.add(target.name)
                    first_latencies[key_].append(latency)
                    assert gzipped == (encoding == "gzip"), key_
                    body = gzip.decompress(raw) if gzipped else raw
                    assert _series(body) == SERIES, (target.name, _series(body))
                    wire[key_] = len(raw)
                    served[target.name] = content_type
            for target in targets:
                round_cpu[(target.name, encoding, scrapes)].append(
                    cpu_ms(target.pid) - before[target.name]
                )
        names = [t.name for t in targets]
    scrape_cells = {}
    for (name, encoding), samples in sorted(latencies.items()):
        ordered = sorted(samples)
        firsts = sorted(first_latencies[(name, encoding)])
        scrape_cells[f"{name}/{encoding}"] = {
            "n": len(ordered),
            "p50_ms": percentile(ordered, 0.5),
            "p90_ms": percentile(ordered, 0.9),
            "p99_ms": percentile(ordered, 0.99),
            "first_in_round_p50_ms": percentile(firsts, 0.5),
            "server_cpu_ms_per_request": statistics.fmean(request_cpu[(name, encoding)]),
            "bytes_on_the_wire": wire[(name, encoding)],
        }
    round_cells = {
        f"{name}/{encoding}/{scrapes}": {
            "n": len(samples),
            "server_cpu_ms_per_round": statistics.fmean(samples),
        }
        for (name, encoding, scrapes), samples in sorted(round_cpu.items())
    }
    return {
        "targets": names,
        "content_types": served,
        "node_exporter": binary,
        "scrapes": scrape_cells,
        "rounds": round_cells,
        "rounds_per_cell": rounds_per_cell,
        "seed": seed,
    }


def exporter_rounds(before: str | None, rounds: int) -> dict[str, object]:
    """``exporter_round.py`` on this tree, and on ``before``'s packages when given."""
    found: dict[str, object] = {}
    trees = [("now", None), ("before", before)] if before else [("now", None)]
    for label, revision in trees:
        env = dict(os.environ)
        with tempfile.TemporaryDirectory() as folder:
            if revision is not None:
                archive = subprocess.run(
                    ["git", "archive", revision, "packages/core/src", "packages/devicemanager/src"],
                    cwd=REPO,
                    check=True,
                    capture_output=True,
                ).stdout
                subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
                env["PYTHONPATH"] = os.pathsep.join(
                    [f"{folder}/packages/core/src", f"{folder}/packages/devicemanager/src"]
                )
            out = subprocess.run(
                [sys.executable, str(HERE / "exporter_round.py"), str(rounds), "5"],
                cwd=HERE,
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        found[label] = {"revision": revision or head_revision(), **json.loads(out)}
    return found


def head_revision() -> str:
    """The checkout's short HEAD, recorded with every run's figures."""
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def machine() -> dict[str, object]:
    """What the figures were taken on."""
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory = next(
        int(line.split()[1]) // 1024
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal")
    )
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_mib": memory,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "httpx": version("httpx"),
        "prometheus_client": version("prometheus_client"),
    }


def main() -> None:
    """Run everything once and write one JSON document."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=240, help="rounds in all (≥ 240: n ≥ 200)")
    parser.add_argument("--seed", type=int, default=20261203)
    parser.add_argument("--before", default=None, help="a revision to time the exporter round on")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    per_cell = max(1, args.rounds // (len(SCRAPES_PER_ROUND) * len(ENCODINGS)))
    started = datetime.now(UTC)
    load_start = os.getloadavg()
    exporter = exporter_rounds(args.before, 20)
    scrapes = run(per_cell, args.seed)
    document = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": round((datetime.now(UTC) - started).total_seconds(), 1),
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "machine": machine(),
        "command": " ".join(["tests/bench/scrape_bench.py", *sys.argv[1:]]),
        "exporter_round": exporter,
        **scrapes,
    }
    args.json.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
