"""Kueue v0.17 on the real control plane, installed as its default kustomize overlay would.

The manager is built from its module and its manifests are read from the same module.
The overlay is not run (no kustomize here); what it does is done on the objects directly, each
step the overlay's own: the namespace ``kueue-system`` and the ``kueue-`` name prefix, the five
conversion webhooks (``config/components/crd/patches/webhook_in_*``), the Pod, Deployment and
StatefulSet webhooks kept out of ``kube-system`` and ``kueue-system``, the manager's ClusterRole
bound to its ServiceAccount, and its Role on Secrets in its namespace.

Certificates are Kueue's own (internal certificate management, its default): its rotator
writes the webhook pair into the Secret ``kueue-webhook-server-cert`` and injects the CA into
its webhook configurations and the five CRDs, then waits for the pair to appear in its
``certDir`` — which a kubelet does by mounting the Secret. No kubelet runs Kueue here, so
``simulator up`` copies the Secret's pair into the directory once, as that mount would (the
rotator's certificates last ten years; a rotation would not be followed). With internal
management off Kueue insists on metrics certificates at a fixed ``/etc/kueue/metrics/certs``,
which a test run must not write. The webhook Service is an ``ExternalName`` to the loopback
address the manager listens on, as the worker's is. The ``pod`` integration is on (the default
is ``batch/job`` only), and the visibility API (an aggregated API of its own) is off.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from gpustack_core import kueueconfig
from gpustack_simulator.controlplane import binaries

NAMESPACE = "kueue-system"
PREFIX = "kueue-"
WEBHOOK_SERVICE = "kueue-webhook-service"
WEBHOOK_SECRET = "kueue-webhook-server-cert"
SERVICE_ACCOUNT = "kueue-controller-manager"
CONVERTED = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
"""The CRDs whose versions convert through the webhook (the overlay's ``webhook_in_*``)."""
WORKLOAD_WEBHOOKS = frozenset(
    {"mpod.kb.io", "mdeployment.kb.io", "mstatefulset.kb.io",
     "vpod.kb.io", "vdeployment.kb.io", "vstatefulset.kb.io"}
)  # fmt: skip
"""Webhooks the overlay keeps out of ``kube-system`` and ``kueue-system``."""
FEATURE_GATES = "VisibilityOnDemand=false"


def module_dir(module: Path) -> Path:
    """The Kueue module's source in Go's module cache (the one ``module`` builds against)."""
    return binaries.module_source(module, "sigs.k8s.io/kueue", "config/components")


def _load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def _webhook_client(path: str, port: int) -> dict[str, Any]:
    """A webhook's client config; the ``caBundle`` is Kueue's rotator's to inject."""
    return {
        "service": {"name": WEBHOOK_SERVICE, "namespace": NAMESPACE, "path": path, "port": port}
    }


def _prefixed(obj: dict[str, Any]) -> dict[str, Any]:
    """The overlay's ``namePrefix`` and namespace on a component object."""
    obj["metadata"]["name"] = PREFIX + obj["metadata"]["name"]
    if "namespace" in obj["metadata"]:
        obj["metadata"]["namespace"] = NAMESPACE
    for subject in obj.get("subjects") or ():
        subject["name"], subject["namespace"] = SERVICE_ACCOUNT, NAMESPACE
    if "roleRef" in obj:
        obj["roleRef"]["name"] = PREFIX + obj["roleRef"]["name"]
    return obj


def manifests(source: Path, *, port: int, host: str = "127.0.0.1") -> list[dict[str, Any]]:
    """Everything Kueue needs on the API server, its webhooks at ``host:port``."""
    components = source / "config" / "components"
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": WEBHOOK_SERVICE, "namespace": NAMESPACE},
         "spec": {"type": "ExternalName", "externalName": host,
                  "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}},
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
         "metadata": {"name": WEBHOOK_SECRET, "namespace": NAMESPACE},
         "data": {"tls.crt": "", "tls.key": ""}},
    ]  # fmt: skip
    for path in sorted((components / "crd" / "bases").glob("*.yaml")):
        for crd in _load(path):
            if crd["spec"]["names"]["plural"] in CONVERTED:
                crd["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": _webhook_client("/convert", port),
                        "conversionReviewVersions": ["v1"],
                    },
                }
            objects.append(crd)
    rbac = components / "rbac"
    for name in ("role.yaml", "role_binding.yaml", "manager_secrets_role.yaml",
                 "manager_secrets_role_binding.yaml"):  # fmt: skip
        objects.extend(_prefixed(obj) for obj in _load(rbac / name))
    for configuration in _load(components / "webhook" / "manifests.yaml"):
        configuration["metadata"]["name"] = PREFIX + configuration["metadata"]["name"]
        for webhook in configuration.get("webhooks") or ():
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = _webhook_client(path, port)
            if webhook["name"] in WORKLOAD_WEBHOOKS:
                webhook["namespaceSelector"] = {"matchExpressions": [{
                    "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                    "values": ["kube-system", NAMESPACE]}]}  # fmt: skip
        objects.append(configuration)
    return objects


def configuration(*, webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    """The manager's ``Configuration`` (v1beta2): one replica, our certificates, Pods managed.

    ``resources`` is what the operator asks of any Kueue it runs on
    (:mod:`gpustack_core.kueueconfig`: accelerator requests into credits, what no queue declares
    left out), as a cluster administrator would put it in Kueue's config map.
    """
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {
            "enable": True,
            "webhookServiceName": WEBHOOK_SERVICE,
            "webhookSecretName": WEBHOOK_SECRET,
        },
        "integrations": {"frameworks": ["batch/job", "pod"]},
        "resources": kueueconfig.resources(),
    }


def mount_secret(secret: dict[str, Any], cert_dir: Path) -> bool:
    """Write the rotator's pair into ``cert_dir`` as a Secret volume would; ``False``: not yet.

    Files are written whole (a rename), so the rotator never reads half a certificate.
    """
    data = secret.get("data") or {}
    if not data.get("tls.crt") or not data.get("tls.key"):
        return False
    cert_dir.mkdir(parents=True, exist_ok=True)
    for key, value in data.items():
        if key not in {"tls.crt", "tls.key", "ca.crt", "ca.key"} or not value:
            continue
        part = cert_dir / f".{key}.part"
        part.write_bytes(base64.b64decode(value))
        part.chmod(0o600)
        part.replace(cert_dir / key)
    return True


def command(binary: Path, config: Path, kubeconfig: Path) -> list[str]:
    """The manager's command line."""
    return [
        str(binary),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--feature-gates={FEATURE_GATES}",
        "--zap-log-level=info",
    ]


def write_configuration(path: Path, document: dict[str, Any]) -> Path:
    """Write the manager's configuration file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path
