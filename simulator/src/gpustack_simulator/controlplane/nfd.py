"""Node Feature Discovery's ``nfd-master`` on the real control plane, from its Go module.

On a cluster the Device Manager and the worker publish NodeFeature objects (the
``acceleratable.*`` and ``general.*`` keys, ``gpustack.ai/managed``) and nfd-master turns them into
node labels, which the InstanceType chain's ResourceFlavors select. No nfd-worker runs here (it
inspects the host's own hardware); only nfd-master does, installed as NFD's own ``deployment/base``
would install it: its CRDs (``nfd-api-crds.yaml``), its ServiceAccount, ClusterRole and binding
in ``node-feature-discovery``, and ``-extra-label-ns`` for the label namespaces the chart's docs
tell an NFD install to allow (docs/deploy.md). Leader election is off: one replica.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpustack_simulator.controlplane import binaries

NAMESPACE = "node-feature-discovery"
SERVICE_ACCOUNT = "nfd-master"
EXTRA_LABEL_NS = (
    "gpustack.ai",
    "feature.gpustack.ai",
    "acceleratable.feature.gpustack.ai",
    "general.feature.gpustack.ai",
)
"""The label namespaces NFD must allow for ours (docs/deploy.md's ``master.extraLabelNs``)."""


def module_dir(module: Path) -> Path:
    """NFD's source in Go's module cache (the one ``module`` builds against)."""
    return binaries.module_source(module, "sigs.k8s.io/node-feature-discovery", "deployment/base")


def _load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def manifests(source: Path) -> list[dict[str, Any]]:
    """NFD's CRDs and nfd-master's RBAC, in its namespace as its kustomization puts them."""
    base = source / "deployment" / "base"
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        *_load(base / "nfd-crds" / "nfd-api-crds.yaml"),
    ]
    rbac = base / "rbac"
    for name in ("master-serviceaccount.yaml", "master-clusterrole.yaml",
                 "master-clusterrolebinding.yaml"):  # fmt: skip
        for obj in _load(rbac / name):
            if obj["kind"] == "ServiceAccount":
                obj["metadata"]["namespace"] = NAMESPACE
            for subject in obj.get("subjects") or ():
                subject["namespace"] = NAMESPACE
            objects.append(obj)
    return objects


def command(binary: Path, kubeconfig: Path, port: int) -> list[str]:
    """nfd-master's command line: our label namespaces allowed, its port on loopback."""
    return [
        str(binary),
        f"-kubeconfig={kubeconfig}",
        f"-extra-label-ns={','.join(EXTRA_LABEL_NS)}",
        f"-port={port}",
        "-resync-period=1m",
    ]
