"""The handle every contract test gets (kept apart from conftest so tests can import it)."""

from __future__ import annotations

import os
import ssl
import uuid
from dataclasses import dataclass

import httpx

from gpustack_kube.client import KubeClient

ON_A_CLUSTER = bool(os.environ.get("GPUSTACK_CONTRACT_KUBECONFIG")) or (
    os.environ.get("GPUSTACK_E2E_CONTROL_PLANE") == "real"
)
"""The contract suite runs against a whole system (kind, or ``./dev e2e-real``), not the bare
stand-in: known at import, so a test that only makes sense on the bare one skips by a marker
(whose reason pytest reports; a skip raised inside a trio test loses it)."""


@dataclass
class Target:
    """What each contract test gets: a client with write access and its own namespace."""

    client: KubeClient
    namespace: str
    simulated: bool


@dataclass
class Server:
    """An API server as raw HTTP sees it: the differential suite's handle."""

    url: str
    context: ssl.SSLContext
    token: str
    version: str = ""
    """``/version``'s ``gitVersion`` (the real server's)."""

    async def namespace(self) -> str:
        """A fresh scratch namespace on this server."""
        name = f"diff-{uuid.uuid4().hex[:8]}"
        async with httpx.AsyncClient(
            base_url=self.url,
            verify=self.context,
            trust_env=False,
            headers={"Authorization": f"Bearer {self.token}"},
        ) as client:
            made = await client.post(
                "/api/v1/namespaces",
                json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
            )
            assert made.status_code == 201, made.text
        return name
