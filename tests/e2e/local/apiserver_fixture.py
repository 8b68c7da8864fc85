"""etcd and kube-apiserver alone, for the tests that need only what the real server decides.

Admission (webhook ``matchConditions``, ValidatingAdmissionPolicies, quota), authentication
(bound ServiceAccount tokens, TokenReview) and RBAC (SubjectAccessReview) are kube-apiserver's
own; the cluster stand-in imitates some and evaluates no CEL. These tests need no controllers,
no scheduler and no nodes, so they start the two processes by hand (seconds, not ``simulator
up``'s minute) from the binaries ``clusters/controlplane/build.py`` builds, on loopback, with
the flags :mod:`gpustack_simulator.controlplane.components` gives the full control plane plus
what a test adds (an admission configuration file, say). One place for the start, the wait
for ``/readyz`` and the stop, so a change to how the server is started is made once.

The ``server`` fixture (``conftest.py``) is the default server; a test that needs other flags
starts its own with :func:`running_apiserver`.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gpustack_simulator.controlplane import binaries, components
from gpustack_simulator.controlplane.pki import ControlPlanePKI

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "clusters" / "chart"
RELEASE = "gpustack-operator"
SYSTEM = "gpustack-system"
READY_WITHIN = 180.0
"""Seconds kube-apiserver may take to answer ``/readyz`` (a cold etcd and its bootstrap)."""


@dataclass
class Server:
    """A running kube-apiserver: where it listens, its CA, and the admin's client certificate."""

    url: str
    ca: Path
    cert: tuple[str, str]

    def client(self) -> httpx.Client:
        """A client as the cluster admin (``system:masters``, by certificate)."""
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(*self.cert)
        return httpx.Client(base_url=self.url, verify=context, timeout=30, trust_env=False)

    def as_token(self, token: str) -> httpx.Client:
        """A client that is whoever ``token`` authenticates as, and nothing else."""
        context = ssl.create_default_context(cafile=str(self.ca))
        return httpx.Client(
            base_url=self.url,
            verify=context,
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
            trust_env=False,
        )


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports nothing listens on (all held until all are picked)."""
    held = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        held.append(sock)
    ports = [int(s.getsockname()[1]) for s in held]
    for sock in held:
        sock.close()
    return ports


def helm() -> str:
    """The helm binary (the cached download first), or the calling test skipped saying how."""
    cached = REPO / ".tools" / "helm" / "helm"
    found = str(cached) if cached.is_file() else shutil.which("helm")
    if found is None:
        pytest.skip("helm renders the chart: run `./dev tools-helm`")
    return found


def render_chart(*args: str) -> list[dict[str, Any]]:
    """``helm template`` of the chart as the release in ``gpustack-system``, parsed; ``args``
    are helm's own (``--set key=value``)."""
    done = subprocess.run(
        [helm(), "template", RELEASE, str(CHART), "--namespace", SYSTEM, *args],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _wait_ready(ready: Server, started: list[subprocess.Popen[bytes]], root: Path) -> None:
    deadline = time.monotonic() + READY_WITHIN
    with ready.client() as client:
        while True:
            try:
                if client.get("/readyz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert all(p.poll() is None for p in started), root / "kube-apiserver.log"
            assert time.monotonic() < deadline, "kube-apiserver never answered /readyz"
            time.sleep(1)


@contextmanager
def running_apiserver(root: Path, extra_flags: Sequence[str] = ()) -> Iterator[Server]:
    """etcd and kube-apiserver under ``root`` (logs, PKI, data), ready; stopped on exit.

    ``extra_flags`` are appended to kube-apiserver's command line. The server listens on
    loopback alone, so ``--endpoint-reconciler-type=none``: the ``kubernetes`` Service's
    endpoints refuse a loopback address and nothing here needs them.
    """
    found = binaries.locate(("etcd", "kube-apiserver"))
    pki = ControlPlanePKI.create(root / "pki", ["127.0.0.1"])
    ports = components.Ports(*free_ports(5))
    tokens = root / "tokens.csv"
    tokens.write_text("")
    commands = [
        components.etcd(found["etcd"], root / "etcd", ports),
        [
            *components.apiserver(found["kube-apiserver"], pki, ports, "127.0.0.1", tokens),
            "--endpoint-reconciler-type=none",
            *extra_flags,
        ],
    ]
    started: list[subprocess.Popen[bytes]] = []
    try:
        for command in commands:
            with (root / f"{Path(command[0]).name}.log").open("w") as log:
                started.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))
        admin = (str(pki.admin.cert), str(pki.admin.key))
        ready = Server(f"https://127.0.0.1:{ports.apiserver}", pki.ca, admin)
        _wait_ready(ready, started, root)
        yield ready
    finally:
        for process in reversed(started):
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def created(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` and the stored object; anything but 201 fails the test with the answer."""
    made = client.post(path, json=body)
    assert made.status_code == 201, made.text
    result: dict[str, Any] = made.json()
    return result
