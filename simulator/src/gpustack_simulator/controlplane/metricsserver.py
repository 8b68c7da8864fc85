"""metrics-server on the real control plane, from its Go module: clusters' ``metrics.k8s.io``.

Installed as its own ``manifests/base`` installs it (the APIService ``v1beta1.metrics.k8s.io``,
its ServiceAccount, the auth-reader and auth-delegator bindings, ``system:metrics-server`` and
the aggregated reader role), with the one edit every daemon here needs because this machine has no
Service network: its Service becomes an ``ExternalName`` naming the loopback address it listens
on, and the APIService names that port. The APIService keeps ``insecureSkipTLSVerify`` as its
manifest ships it.

It scrapes each node agent's ``/metrics/resource`` on the node's InternalIP and the port the Node
reports (``--kubelet-use-node-status-port``, as its Deployment runs it), verifying the node's
serving certificate against the cluster CA and presenting a client certificate of that CA, which
is what the node agent's kubelet endpoints require. It is here for two reasons: a cluster the
operator is installed in runs it, and it is the peer ``tests/bench/aggregated_peer.py`` measures
the worker's ``instances/<name>/metrics`` against, through the same kube-aggregator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpustack_simulator.controlplane import binaries

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "metrics-server"
RESOLUTION = "15s"
"""``--metric-resolution``, its manifest's (it must exceed the 10 s kubelet request timeout)."""


def module_dir(module: Path) -> Path:
    """metrics-server's source in Go's module cache (the one ``module`` builds against)."""
    return binaries.module_source(module, "sigs.k8s.io/metrics-server", "manifests/base")


def manifests(source: Path, *, port: int, host: str = "127.0.0.1") -> list[dict[str, Any]]:
    """Its RBAC, Service and APIService, the Service pointing at ``host:port``."""
    base = source / "manifests" / "base"
    objects: list[dict[str, Any]] = []
    for name in ("rbac.yaml", "service.yaml", "apiservice.yaml"):
        for obj in yaml.safe_load_all((base / name).read_text()):
            if not isinstance(obj, dict):
                continue
            if obj["kind"] == "Service":
                obj["spec"] = {
                    "type": "ExternalName",
                    "externalName": host,
                    "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
                }
            elif obj["kind"] == "APIService":
                obj["spec"]["service"]["port"] = port
            objects.append(obj)
    return objects


def command(
    binary: Path,
    kubeconfig: Path,
    *,
    port: int,
    cert_dir: Path,
    ca: Path,
    client_cert: Path,
    client_key: Path,
) -> list[str]:
    """Its Deployment's arguments, on loopback, with the kubelet credentials this cluster uses."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        "--kubelet-preferred-address-types=InternalIP",
        "--kubelet-use-node-status-port",
        f"--kubelet-certificate-authority={ca}",
        f"--kubelet-client-certificate={client_cert}",
        f"--kubelet-client-key={client_key}",
        f"--metric-resolution={RESOLUTION}",
        "--profiling=false",
    ]
