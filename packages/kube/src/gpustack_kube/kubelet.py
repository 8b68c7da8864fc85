"""Reading a kubelet's ``/stats/summary``: through the API server, or from the kubelet itself.

Through the API server's node proxy (``GET /api/v1/nodes/<node>/proxy/stats/summary``) is the
default and needs nothing but a route to the API server — but it is authorized as
``nodes/proxy get``, which reaches every kubelet endpoint the proxy forwards (``/exec``,
``/run``, ``/pods`` …), not just statistics. Read directly (``https://<node-address>:10250/
stats/summary``), the kubelet authorizes the same identity itself (webhook authorization, as
kubeadm and managed clusters configure it) as ``nodes/stats get``: the narrow grant
metrics-server uses. Direct reads need the node's address and a network path to port 10250,
and the kubelet's serving certificate is verified against ``ca_file`` (or the system roots),
or not at all with ``insecure_tls`` for kubelets whose certificates are self-signed.
"""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import httpx

from gpustack_kube.client import DEFAULT_TIMEOUT, KubeClient, KubeError
from gpustack_kube.paths import node_summary_path

KUBELET_PORT = 10250


@dataclass(frozen=True)
class KubeletAccess:
    """How a daemon reaches a kubelet's summary (the ``--kubelet-*`` flags)."""

    direct: bool = False
    port: int = KUBELET_PORT
    ca_file: Path | None = None
    insecure_tls: bool = False

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS a direct read verifies the kubelet with."""
        if self.insecure_tls:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return context
        if self.ca_file is not None:
            return ssl.create_default_context(cafile=str(self.ca_file))
        return ssl.create_default_context()


class NoKubeletAddressError(KubeError):
    """A direct read was asked for a node whose address is not known."""


class SummaryReader:
    """One node's ``/stats/summary`` as bytes, bounded, by the configured route."""

    def __init__(
        self,
        client: KubeClient,
        access: KubeletAccess | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.client = client
        self.access = access or KubeletAccess()
        self._http = (
            httpx.AsyncClient(
                # With a transport given (tests), TLS is the transport's business.
                verify=True if transport is not None else self.access.ssl_context(),
                transport=transport,
                trust_env=False,
                timeout=httpx.Timeout(DEFAULT_TIMEOUT),
            )
            if self.access.direct
            else None
        )

    def url(self, address: str) -> str:
        """The kubelet's summary URL at ``address`` (an IPv6 address is bracketed)."""
        try:
            host = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
        except ValueError:
            host = address  # a DNS name, as a node may report for its InternalDNS
        return f"https://{host}:{self.access.port}/stats/summary"

    async def read(self, node: str, address: str | None, *, limit: int) -> bytes:
        """The summary of ``node``; ``address`` is needed only for a direct read."""
        if self._http is None:
            return await self.client.get_bytes(node_summary_path(node), limit=limit)
        if not address:
            raise NoKubeletAddressError(f"node {node}: no address known to reach its kubelet")
        return await self.client.get_bytes_at(self._http, self.url(address), limit=limit)

    async def aclose(self) -> None:
        """Close the direct connection pool, if any (the API client is the caller's)."""
        if self._http is not None:
            await self._http.aclose()

    async def __aenter__(self) -> SummaryReader:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


__all__ = ["KUBELET_PORT", "KubeletAccess", "NoKubeletAddressError", "SummaryReader"]
