"""The running system for the local end-to-end suite: ``simulator up`` once, ``down`` at the end.

The suite drives the product the way a user does — the console script in its own processes,
kubectl against the cluster, Prometheus discovering the Device Managers — so the fixture uses
the same two commands a person would type, and reads ``endpoints.json`` for everything else.

Two targets, one suite: the cluster stand-in (the default) and, with
``GPUSTACK_E2E_CONTROL_PLANE=real``, a real kube-apiserver, controller-manager and scheduler
built from their Go modules (``./dev e2e-real``). A test that needs what only the stand-in has
(its ``/simulator/v1`` control endpoint that moves scenario time or injects faults) skips on
the real one, saying so.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gpustack_simulator.up import DeviceManagerEndpoint, Endpoints

V1 = "/apis/worker.gpustack.ai/v1"


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``gpustack-operator …`` as a user runs it (same interpreter, so the same install)."""
    return subprocess.run(
        [sys.executable, "-m", "gpustack_cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


CONTROL_PLANE = os.environ.get("GPUSTACK_E2E_CONTROL_PLANE", "standin")
"""Which cluster the suite runs against: ``standin`` (default) or ``real``."""


@dataclass
class System:
    """Everything ``simulator up`` reported, and clients speaking to it as its users."""

    state_dir: Path
    endpoints: Endpoints
    tokens: dict[str, str]
    real: bool = False
    """A real kube-apiserver (``--control-plane real``), not the stand-in."""

    @property
    def ca(self) -> Path:
        if self.real:
            return self.state_dir / "controlplane" / "pki" / "ca.crt"
        return self.state_dir / "cluster" / "pki" / "ca.crt"

    def standin_only(self, why: str) -> None:
        """Skip the calling test on the real control plane, which lacks ``why``."""
        if self.real:
            pytest.skip(f"the real control plane has no {why}")

    def api(self, user: str = "admin") -> httpx.Client:
        """An API client as ``user``: bearer token, the stand-in's CA verified."""
        return httpx.Client(
            base_url=self.endpoints.cluster,
            verify=ssl.create_default_context(cafile=str(self.ca)),
            headers={"Authorization": f"Bearer {self.tokens[user]}"},
            timeout=30,
            trust_env=False,
        )

    def metrics(self, namespace: str, name: str, user: str = "admin") -> httpx.Response:
        with self.api(user) as client:
            return client.get(f"{V1}/namespaces/{namespace}/instances/{name}/metrics")

    def control(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """The stand-in's test control endpoint (clock, faults), as admin."""
        self.standin_only("/simulator/v1 control endpoint (scenario time, faults)")
        with self.api() as client:
            response = client.request(method, f"/simulator/v1/{path}", json=body)
            response.raise_for_status()
            return response.json() if response.content else None

    def device_manager(self, node: str, manufacturer: str) -> DeviceManagerEndpoint:
        return next(
            d
            for d in self.endpoints.device_managers
            if d.node == node and d.manufacturer == manufacturer
        )

    def exposition(self, node: str, manufacturer: str) -> str:
        dm = self.device_manager(node, manufacturer)
        return httpx.get(dm.metrics, verify=False, timeout=10, trust_env=False).text

    def snapshot(self, node: str, manufacturer: str) -> dict[str, Any]:
        dm = self.device_manager(node, manufacturer)
        body: dict[str, Any] = httpx.get(
            dm.snapshot, verify=False, timeout=10, trust_env=False
        ).json()
        return body

    def kubectl(self, *args: str, context: str = "admin") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kubectl", "--kubeconfig", self.endpoints.kubeconfig, "--context", context, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "KUBECONFIG": ""},
        )


@pytest.fixture(scope="session")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    state_dir = tmp_path_factory.mktemp("system")
    started = cli(
        "simulator", "up", "--state-dir", str(state_dir), "--monitor-period", "2s",
        "--control-plane", CONTROL_PLANE, timeout=600,
    )  # fmt: skip
    assert started.returncode == 0, f"simulator up failed:\n{started.stdout}\n{started.stderr}"
    try:
        document = yaml.safe_load((state_dir / "kubeconfig").read_text())
        tokens = {u["name"]: u["user"]["token"] for u in document["users"]}
        yield System(state_dir, Endpoints.load(state_dir), tokens, real=CONTROL_PLANE == "real")
    finally:
        stopped = cli("simulator", "down", "--state-dir", str(state_dir))
        assert stopped.returncode == 0, stopped.stderr
