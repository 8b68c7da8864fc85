"""The local e2e suite's handle on a running system (``System``), apart from the conftest.

Kept out of ``conftest.py`` so test modules import it by a name of its own: with the contract
suite collected in the same run (``./dev e2e-real``), ``from conftest import …`` would find the
other directory's conftest.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

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
