"""``helm install`` and the documented upgrade on a real kube-apiserver (issue #31, "Must show").

The chart with its defaults is installed by helm itself against etcd + kube-apiserver (no
controllers, no nodes: every object is stored, none runs), then upgraded as docs/deploy.md says
(the release's ``crds/`` applied server-side first, ``--reset-then-reuse-values``) to the GPU
Operator coexistence values (``resourceNames.nvidia``). Each object must be accepted by the
real API server: the CRDs, RBAC, the ValidatingAdmissionPolicy, the webhook configurations
whose CEL conditions the server compiles, the ResourceQuota. Then what the server stores says
what the values asked: the Pod hooks judge the moved base, every daemon is told it, and the
values set at install survive the upgrade.

Runs with ``GPUSTACK_E2E_CONTROL_PLANE=real``; skipped otherwise.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from apiserver_fixture import CHART, SYSTEM, Server, helm
from e2e_system import CONTROL_PLANE

pytestmark = pytest.mark.skipif(
    CONTROL_PLANE != "real", reason="helm installs into a real kube-apiserver (./dev e2e-real)"
)

MOVED = "gpustack.ai/nvidia-gpu"


def _kubeconfig(api: Server, path: Path) -> Path:
    cert, key = api.cert
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "real", "cluster": {"server": api.url,
                                                  "certificate-authority": str(api.ca)}}],
        "users": [{"name": "admin", "user": {"client-certificate": cert, "client-key": key}}],
        "contexts": [{"name": "real", "context": {"cluster": "real", "user": "admin"}}],
        "current-context": "real",
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config))
    return path


def _run(*command: str, kubeconfig: Path) -> str:
    done = subprocess.run(
        list(command),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={"KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin:/usr/local/bin",
             "HOME": str(kubeconfig.parent)},
    )  # fmt: skip
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _get(kubeconfig: Path, *what: str) -> dict[str, Any]:
    found: dict[str, Any] = yaml.safe_load(_run("kubectl", "get", *what, "-o", "yaml",
                                                kubeconfig=kubeconfig))  # fmt: skip
    return found


def _pod_hook_names(kubeconfig: Path) -> str:
    hooks = _get(kubeconfig, "mutatingwebhookconfiguration", "gpustack-operator-worker")
    [pods] = [h for h in hooks["webhooks"] if h["name"] == "pods.mutate.worker.gpustack.ai"]
    return " ".join(c["expression"] for c in pods["matchConditions"])


def _env(kubeconfig: Path, kind: str, name: str) -> dict[str, str]:
    workload = _get(kubeconfig, "-n", SYSTEM, kind, name)
    [container] = workload["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def test_install_then_the_documented_upgrade_to_the_coexistence_values(
    server: Server,
    tmp_path: Path,
) -> None:
    kubeconfig = _kubeconfig(server, tmp_path / "kubeconfig")
    _run(helm(), "install", "gpustack-operator", str(CHART), "--namespace", SYSTEM,
         "--create-namespace", "--set", "worker.logLevel=debug", kubeconfig=kubeconfig)  # fmt: skip
    for kind, name in (
        ("crd", "instances.worker.gpustack.ai"),
        ("crd", "devices.worker.gpustack.ai"),
        ("validatingadmissionpolicy", "gpustack-operator-device-manager-own-node"),
        ("validatingadmissionpolicybinding", "gpustack-operator-device-manager-own-node"),
        ("validatingadmissionpolicy", "gpustack-operator-device-manager-allocation-record"),
        ("validatingadmissionpolicybinding", "gpustack-operator-device-manager-allocation-record"),
        ("validatingwebhookconfiguration", "gpustack-operator-worker"),
        ("apiservice", "v1.worker.gpustack.ai"),
    ):
        assert _get(kubeconfig, kind, name)["metadata"]["name"] == name
    quota = _get(kubeconfig, "-n", SYSTEM, "resourcequota", "gpustack-operator-critical-pods")
    assert quota["spec"]["hard"] == {"pods": "1G"}
    assert "'nvidia.com/gpu'" in _pod_hook_names(kubeconfig)
    # docs/deploy.md, "Upgrade and uninstall": the CRDs first, server-side, then the upgrade.
    _run("kubectl", "apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds"),
         kubeconfig=kubeconfig)  # fmt: skip
    _run(helm(), "upgrade", "gpustack-operator", str(CHART), "--namespace", SYSTEM,
         "--reset-then-reuse-values", "--set", f"resourceNames.nvidia={MOVED}",
         kubeconfig=kubeconfig)  # fmt: skip
    conditions = _pod_hook_names(kubeconfig)
    assert f"'{MOVED}'" in conditions
    assert f"'{MOVED}.sliced'" in conditions
    assert "'nvidia.com/gpu'" not in conditions
    for kind, name in (
        ("deployment", "gpustack-operator-worker"),
        ("daemonset", "gpustack-operator-device-manager-nvidia"),
        ("daemonset", "gpustack-operator-device-manager-amd"),
    ):
        assert _env(kubeconfig, kind, name)["GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME"] == MOVED
    worker = _get(kubeconfig, "-n", SYSTEM, "deployment", "gpustack-operator-worker")
    [container] = worker["spec"]["template"]["spec"]["containers"]
    assert "--log-level=debug" in container["args"]  # the install's value, kept
