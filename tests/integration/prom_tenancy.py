"""Real Prometheus servers holding two tenants' ``gpustack_instance_*`` series; prom-label-proxy.

Shared by the isolation suite and the MetricAccess delivery test. Series are loaded by remote
write (our own encoder: a Prometheus that accepts them is one more proof of it) with recent
timestamps, so an instant query at :data:`EVAL_AT` sees them. Every tenant's series carry an
``instance`` and a value range of its own, so an answer can be traced to whose data it was.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from gpustack_core import remotewrite
from gpustack_simulator.controlplane.promlabelproxy import command

PROMETHEUS = shutil.which("prometheus")
MISSING = "Debian's `prometheus` package is not installed; .ci/run installs it"
A, B = "tenant-a", "tenant-b"
NOW_MS = (int(time.time()) // 60) * 60_000 - int(os.environ.get("GPUSTACK_TENANCY_AGE", "0")) * 1000
EVAL_AT = NOW_MS / 1000
"""The instant every query is evaluated at: the newest sample of the loaded data.

``GPUSTACK_TENANCY_AGE=<s>`` ages it by that much, as a whole-suite run does (the module is
imported long before its tests push): run a file alone that way to see what the suite sees."""
STEP_MS = 15_000
FAMILIES = ("gpustack_instance_memory_used_mib", "gpustack_instance_cores_utilization_percent")


def tenant_series(namespace: str, base: float) -> list[remotewrite.Series]:
    """Two Instances of ``namespace``, both families, 5 samples each, values from ``base``.

    Oldest first: a receiver drops a sample older than one it already has for the series.
    """
    out = []
    for i, instance in enumerate((f"{namespace}-qwen", f"{namespace}-llama")):
        for j, family in enumerate(FAMILIES):
            labels = {"__name__": family, "namespace": namespace, "instance": instance}
            samples = [(NOW_MS - k * STEP_MS, base + 10 * i + j + k / 10) for k in range(4, -1, -1)]
            out.append(remotewrite.Series(labels, samples))
    return out


NODE_SERIES = [
    remotewrite.Series(
        {"__name__": "gpustack_accelerator_up", "node": "node-1"},
        [(NOW_MS - k * STEP_MS, 900.0) for k in range(4, -1, -1)],
    )
]
"""A node-level series with no namespace: invisible to every tenant."""


def rules_for(*namespaces: str) -> str:
    """One recording and one alerting rule per tenant, each labelled with its namespace.

    The rules are evaluated at the server's wall clock, not at :data:`EVAL_AT`: the data is
    fixed when this module is imported, which in a whole-suite run is many minutes before a
    test pushes it, beyond the 5 min an instant selector looks back. So they read the newest
    sample of the last two hours.
    """
    rules = []
    for ns in namespaces:
        pick = f'last_over_time({FAMILIES[0]}{{namespace="{ns}"}}[2h])'
        rules.append(
            f"  - record: tenant:{FAMILIES[0]}:sum\n    expr: sum({pick})\n"
            f"    labels: {{namespace: {ns}}}\n"
        )
        rules.append(
            f"  - alert: MemoryInUse\n    expr: {pick} > 0\n    labels: {{namespace: {ns}}}\n"
        )
    return "groups:\n- name: tenants\n  interval: 1s\n  rules:\n" + "".join(rules)


def free_port() -> int:
    """A loopback port free now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, budget: float = 60.0) -> None:
    """Poll ``url`` until it answers 200."""
    deadline = time.monotonic() + budget
    while True:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} not ready in {budget:g}s")
        time.sleep(0.2)


@contextmanager
def process(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` running, its output in ``log``; killed and reaped however the block ends."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            proc.kill()
            proc.wait(timeout=30)


@contextmanager
def running_prometheus(folder: Path, rules: str = "") -> Iterator[str]:
    """A Prometheus accepting remote write (``--web.enable-remote-write-receiver``)."""
    assert PROMETHEUS is not None
    folder.mkdir(parents=True, exist_ok=True)
    config = "global:\n  evaluation_interval: 1s\n"
    if rules:
        (folder / "rules.yml").write_text(rules)
        config += f"rule_files: [{folder / 'rules.yml'}]\n"
    (folder / "prometheus.yml").write_text(config)
    port = free_port()
    argv = [
        PROMETHEUS,
        f"--config.file={folder / 'prometheus.yml'}",
        f"--storage.tsdb.path={folder / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-remote-write-receiver",
        "--storage.tsdb.retention.time=1d",
    ]
    base = f"http://127.0.0.1:{port}"
    with process(argv, folder / "prometheus.log"):
        wait_ready(f"{base}/-/ready")
        yield base


def push(base: str, series: Iterable[remotewrite.Series]) -> None:
    """Remote-write ``series`` into the Prometheus at ``base``; any refusal fails the test."""
    response = httpx.post(
        f"{base}/api/v1/write", content=remotewrite.body(series), headers=remotewrite.HEADERS
    )
    assert response.status_code == 204, (response.status_code, response.text)


@contextmanager
def running_label_proxy(binary: Path, upstream: str, folder: Path) -> Iterator[str]:
    """prom-label-proxy over ``upstream``, with the launcher's flags."""
    port = free_port()
    with process(command(binary, upstream, port), folder / "prom-label-proxy.log"):
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
