"""The chart's quota admits its critical-priority Pods where GKE's rule applies (issue #31, item 6).

GKE's kube-apiserver limits the ``system-node-critical`` and ``system-cluster-critical``
priority classes with the ResourceQuota admission's ``limitedResources``: outside kube-system a
Pod of those classes is created only in a namespace with a ResourceQuota whose scope covers its
class. This starts etcd and kube-apiserver with that admission configuration (the mechanism
documented for "Limit Priority Class consumption by default"), shows a Device Manager-like Pod
refused in the release namespace, applies the chart's ResourceQuota as rendered, and shows the
Pod (and a worker-like one) created. No controller-manager runs, so the quota's status is
written as its controller would (hard from spec, nothing used).

Runs with ``GPUSTACK_E2E_CONTROL_PLANE=real``; skipped otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from apiserver_fixture import SYSTEM, Server, render_chart, running_apiserver
from e2e_system import CONTROL_PLANE

pytestmark = pytest.mark.skipif(
    CONTROL_PLANE != "real", reason="quota admission is kube-apiserver's (./dev e2e-real)"
)

CRITICAL = ["system-node-critical", "system-cluster-critical"]
LIMITED = {
    "apiVersion": "apiserver.config.k8s.io/v1",
    "kind": "AdmissionConfiguration",
    "plugins": [
        {
            "name": "ResourceQuota",
            "configuration": {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "ResourceQuotaConfiguration",
                "limitedResources": [
                    {
                        "resource": "pods",
                        "matchScopes": [
                            {"scopeName": "PriorityClass", "operator": "In", "values": CRITICAL}
                        ],
                    }
                ],
            },
        }
    ],
}


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """etcd and kube-apiserver with critical priority classes limited, as on GKE."""
    root = tmp_path_factory.mktemp("apiserver-limited")
    admission = root / "admission.yaml"
    admission.write_text(yaml.safe_dump(LIMITED))
    with running_apiserver(root, [f"--admission-control-config-file={admission}"]) as ready:
        yield ready


def _quota() -> dict[str, Any]:
    [quota] = [d for d in render_chart() if d["kind"] == "ResourceQuota"]
    return quota


def _pod(name: str, priority: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "priorityClassName": priority,
            "automountServiceAccountToken": False,
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }


def test_the_charts_quota_admits_the_critical_pods(limited: Server) -> None:
    pods = f"/api/v1/namespaces/{SYSTEM}/pods"
    with limited.client() as admin:
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM}}
        assert admin.post("/api/v1/namespaces", json=namespace).status_code == 201
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
        made = admin.post(f"/api/v1/namespaces/{SYSTEM}/serviceaccounts", json=account)
        assert made.status_code in (201, 409), made.text
        # Without the quota: refused, in the words GKE users see (kube-apiserver answers 500).
        refused = admin.post(pods, json=_pod("device-manager", "system-node-critical"))
        assert refused.status_code != 201, refused.text
        assert "insufficient quota to match these scopes" in refused.json()["message"]
        # The chart's quota, and its status as the quota controller would write it.
        quota = _quota()
        made = admin.post(f"/api/v1/namespaces/{SYSTEM}/resourcequotas", json=quota)
        assert made.status_code == 201, made.text
        stored = made.json()
        stored["status"] = {"hard": quota["spec"]["hard"], "used": {"pods": "0"}}
        name = quota["metadata"]["name"]
        put = admin.put(f"/api/v1/namespaces/{SYSTEM}/resourcequotas/{name}/status", json=stored)
        assert put.status_code == 200, put.text
        deadline = time.monotonic() + 20
        while True:  # the admission plugin reads quotas from its informer
            created = admin.post(pods, json=_pod("device-manager", "system-node-critical"))
            if created.status_code == 201 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert created.status_code == 201, created.text
        worker = admin.post(pods, json=_pod("worker", "system-cluster-critical"))
        assert worker.status_code == 201, worker.text
