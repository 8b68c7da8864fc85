"""The handle every contract test gets (kept apart from conftest so tests can import it)."""

from __future__ import annotations

import ssl
import uuid
from dataclasses import dataclass

import httpx

from gpustack_kube.client import KubeClient


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
