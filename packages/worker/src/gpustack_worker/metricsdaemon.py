"""``gpustack-operator metrics-gateway``: the tenant's door and the MetricAccess delivery, deployed.

docs/multi-tenant-metrics.md, "Install". One process, two parts, each switchable:

- **the gateway** (:class:`gpustack_worker.metricsgateway.MetricsGateway` behind the identity
  guard, :func:`gpustack_worker.metricsgateway.guarded`) on its own HTTPS port, forwarding to
  prom-label-proxy on loopback (the chart runs it as a sidecar listening on ``127.0.0.1`` only,
  so nothing reaches it but through the gateway's checks). Every replica serves;
- **the MetricAccess controller** (:mod:`gpustack_worker.metricaccess`), reading through the same
  prom-label-proxy and leader-elected on a Lease of its own in the release namespace, as the
  worker's controllers are: every replica watches, one delivers.

It is a process apart from the worker because it is opt-in (``multiTenantMetrics``) and holds
different permissions (reading every tenant's figures through the proxy, writing to tenants'
Prometheus servers): the worker's Pod gains neither.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import httpx
import trio
from hypercorn.config import Config

from gpustack_core import contract
from gpustack_kube.certs import CA_FILE
from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig, load_config
from gpustack_kube.leader import ElectionConfig
from gpustack_serving.access import AccessReviewer
from gpustack_serving.certs import serving_hosts, serving_pair
from gpustack_serving.config import hypercorn_config, terminate_tls
from gpustack_serving.connections import bind, serve_connections, ssl_connections
from gpustack_serving.signals import serve_until_signalled as until_signalled
from gpustack_worker.metricaccess.controller import MetricAccessController, MetricAccessOptions
from gpustack_worker.metricsgateway import MetricsGateway, access_settings, guarded

log = logging.getLogger("gpustack.worker.metricsgateway")

GATEWAY_PORT: Final = 8443
LABEL_PROXY_URL: Final = "http://127.0.0.1:9091"
"""Where the chart's prom-label-proxy sidecar listens: loopback only."""
LEASE: Final = "gpustack-operator-metricaccess-controller"


class StartupError(Exception):
    """The process cannot start; one line for the operator."""


@dataclass(frozen=True)
class MetricsDaemonOptions:
    """The flags of ``gpustack-operator metrics-gateway``."""

    secure_port: int = GATEWAY_PORT
    bind_address: str = "0.0.0.0"
    cert_dir: Path | None = None
    kubeconfig: Path | None = None
    kube_context: str | None = None
    label_proxy_url: str = LABEL_PROXY_URL
    """prom-label-proxy (``-label namespace``) in front of the cluster Prometheus."""
    cluster_url: str | None = None
    """The cluster Prometheus itself, for ``metricIsolation: false`` deliveries; ``None``
    refuses them (the chart leaves it unset unless asked)."""
    gateway: bool = True
    controller: bool = True
    system_namespace: str = contract.SYSTEM_NAMESPACE
    """Where the controller's Lease lives."""
    identity: str = field(
        default_factory=lambda: os.environ.get("POD_NAME") or socket.gethostname()
    )
    hosts: Sequence[str] = ("localhost", "127.0.0.1")
    timeout: float = 30.0
    """Seconds a forwarded query may take."""


@dataclass
class Running:
    """What a caller learns once the process runs."""

    urls: list[str]
    shutdown: trio.Event
    controller: MetricAccessController | None
    certificate: Path | None


def _config(options: MetricsDaemonOptions, cert: Path, key: Path) -> Config:
    config = hypercorn_config(Config(), "gpustack.worker.metricsgateway.http")
    return terminate_tls(config, options.bind_address, options.secure_port, cert, key)


def controller_for(client: KubeClient, options: MetricsDaemonOptions) -> MetricAccessController:
    """The MetricAccess controller as deployed: leader-elected on :data:`LEASE`."""
    election = ElectionConfig(
        namespace=options.system_namespace, name=LEASE, identity=options.identity
    )
    return MetricAccessController(
        client,
        MetricAccessOptions(
            isolating_url=options.label_proxy_url,
            cluster_url=options.cluster_url,
            election=election,
        ),
    )


async def serve(
    options: MetricsDaemonOptions,
    *,
    kube: KubeConfig | None = None,
    task_status: trio.TaskStatus[Running] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the enabled parts until ``Running.shutdown`` is set (SIGTERM does that in the CLI)."""
    if not (options.gateway or options.controller):
        raise ValueError("neither the gateway nor the controller is enabled: nothing to run")
    if kube is None:
        kube = load_config(options.kubeconfig, context=options.kube_context)
    if kube is None:  # every decision here is the API server's: there is no standalone mode
        raise StartupError("no cluster: give --kubeconfig, set KUBECONFIG, or run in a Pod")
    shutdown = trio.Event()
    async with (
        KubeClient(kube) as client,
        httpx.AsyncClient(timeout=options.timeout) as http,
        trio.open_nursery() as nursery,
    ):
        controller = controller_for(client, options) if options.controller else None
        if controller is not None:
            nursery.start_soon(controller.run)
        urls: list[str] = []
        certificate: Path | None = None
        if options.gateway:
            hosts = serving_hosts(options.hosts, options.bind_address)
            cert, key = serving_pair(
                options.cert_dir, lambda: hosts, organization="gpustack metrics-gateway"
            )
            trust = cert.parent / CA_FILE  # the self-signed pair's CA, or --cert-dir's
            certificate = trust if trust.exists() else cert
            config = _config(options, cert, key)
            tls = config.create_ssl_context()
            assert tls is not None  # terminate_tls set the pair
            reviewer = AccessReviewer(client.post, access_settings(), trio.current_time)
            app = MetricsGateway(options.label_proxy_url, guarded(reviewer), http)
            sock = bind(options.bind_address, options.secure_port)
            urls = await nursery.start(
                lambda task_status: serve_connections(
                    app,  # type: ignore[arg-type]  # a plain ASGI 3 callable
                    config,
                    [sock],
                    ssl_connections(app, config, tls),  # type: ignore[arg-type]
                    shutdown=shutdown,
                    task_status=task_status,
                )
            )
        task_status.started(Running(urls, shutdown, controller, certificate))
        await shutdown.wait()
        if controller is not None:
            await controller.drain()
        nursery.cancel_scope.cancel()


async def serve_until_signalled(options: MetricsDaemonOptions) -> None:
    """The CLI's foreground mode: SIGTERM or SIGINT stops it gracefully."""

    def announce(running: Running) -> None:
        parts = [f"the gateway at {', '.join(running.urls)}"] if running.urls else []
        if running.controller is not None:
            parts.append(f"the MetricAccess controller (lease {LEASE})")
        log.info("serving %s", " and ".join(parts))

    await until_signalled(
        lambda task_status: serve(options, task_status=task_status), announce, log
    )


__all__ = ["GATEWAY_PORT", "LEASE", "MetricsDaemonOptions", "Running", "StartupError", "serve"]
