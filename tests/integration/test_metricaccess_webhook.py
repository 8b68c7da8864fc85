"""The MetricAccess webhook, registered with the cluster stand-in as the chart renders it.

The stand-in calls webhooks as kube-apiserver does (AdmissionReview v1 over HTTPS, the caller's
``userInfo`` in it) and answers the worker's SubjectAccessReviews from the scenario's RBAC. The
ValidatingWebhookConfiguration is the chart's, rendered with ``multiTenantMetrics.enabled``;
only its ``caBundle`` is swapped for the CA of the worker running here. Two tenants of team-a
write MetricAccess objects through the API with their own tokens: alice may also read team-b's
metrics, mallory may not. What is stored is what the expected verdicts say, from the users'
rules below, never from the webhook.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import trio
import yaml

from gpustack_kube.client import ApiError, KubeClient
from gpustack_kube.config import load_config, parse_kubeconfig
from gpustack_simulator.testing import cluster_standin
from gpustack_worker.daemon import Running, WorkerOptions, serve
from gpustack_worker.metricaccess.controller import METRIC_ACCESSES

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "deploy"))
from chart_helm import NAMESPACE, find, needs_helm, render

pytestmark = needs_helm

REPO = Path(__file__).resolve().parents[2]
WORKER = "gpustack-operator-worker"
ADMISSION = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
WRITE = {"apiGroups": ["observability.gpustack.ai"], "resources": ["metricaccesses"],
         "verbs": ["get", "create", "update"], "namespaces": ["team-a"]}  # fmt: skip
USERS = [
    {"name": "alice", "token": "alice-token", "groups": ["system:authenticated"], "rules": [
        WRITE,
        {"apiGroups": ["metrics.k8s.io"], "resources": ["pods"], "verbs": ["get"],
         "namespaces": ["team-b"]},
    ]},
    {"name": "mallory", "token": "mallory-token", "groups": ["system:authenticated"],
     "rules": [WRITE]},
]  # fmt: skip


@dataclass
class Stack:
    alice: KubeClient
    mallory: KubeClient


def _scenario(path: Path) -> Path:
    document = yaml.safe_load((REPO / "recordings" / "scenarios" / "walkthrough.yaml").read_text())
    document["users"] = [*(document.get("users") or []), *USERS]
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    scenario = _scenario(tmp_path / "tenants.yaml")
    async with (
        cluster_standin(scenario, tmp_path / "cluster") as cluster,
        trio.open_nursery() as nursery,
    ):
        options = WorkerOptions(secure_port=0, bind_address="127.0.0.1")
        # The worker's own user: its SubjectAccessReviews are what the chart grants it.
        kube = load_config(cluster.kubeconfig, context="worker")
        running: Running = await nursery.start(
            lambda task_status: serve(options, kube=kube, task_status=task_status)
        )
        cluster.state.webhook_services[(NAMESPACE, WORKER, 443)] = urlsplit(running.urls[0]).netloc
        ca = base64.b64encode(running.certificate.read_bytes()).decode()
        configuration = find(
            render(
                {"multiTenantMetrics": {"enabled": True, "prometheusURL": "http://prometheus:9090"}}
            ),
            "ValidatingWebhookConfiguration",
            WORKER,
        )
        # Only the MetricAccess hook: the Pod and Instance hooks are tested elsewhere.
        configuration["webhooks"] = [
            h for h in configuration["webhooks"] if h["name"].startswith("metricaccesses.")
        ]
        assert len(configuration["webhooks"]) == 1
        configuration["webhooks"][0]["clientConfig"]["caBundle"] = ca
        try:
            async with KubeClient(parse_kubeconfig(cluster.kubeconfig)) as admin:
                await admin.create(ADMISSION, configuration)
            alice_config = load_config(cluster.kubeconfig, context="alice")
            mallory_config = load_config(cluster.kubeconfig, context="mallory")
            assert alice_config is not None
            assert mallory_config is not None
            async with KubeClient(alice_config) as alice, KubeClient(mallory_config) as mallory:
                yield Stack(alice, mallory)
        finally:
            running.shutdown.set()


def _access(name: str, **spec: Any) -> dict[str, Any]:
    prometheus = {"serviceName": "prometheus-operated", "servicePort": 9090}
    prometheus.update(spec.pop("target", {}))
    return {
        "apiVersion": "observability.gpustack.ai/v1",
        "kind": "MetricAccess",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "metrics": ["gpustack_instance_memory_used_mib"],
            "remoteWrite": {"enabled": True, "interval": "30s",
                            "target": {"type": "prometheus", "prometheus": prometheus}},
            **spec,
        },
    }  # fmt: skip


async def _refused(kube: KubeClient, obj: dict[str, Any]) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await kube.create(METRIC_ACCESSES.path("team-a"), obj)
    return caught.value


async def test_own_namespace_is_admitted(stack: Stack) -> None:
    created = await stack.mallory.create(METRIC_ACCESSES.path("team-a"), _access("own"))
    assert created["metadata"]["name"] == "own"


async def test_a_selector_naming_another_namespace_is_refused_422(stack: Stack) -> None:
    naming_b = _access("naming-b", metrics=['{__name__="x", namespace="team-b"}'])
    error = await _refused(stack.alice, naming_b)
    assert error.status == 422
    assert "spec.metrics[0]" in str(error)
    assert "\n" not in str(error)


async def test_another_source_only_for_a_requester_who_may_read_it(stack: Stack) -> None:
    error = await _refused(stack.mallory, _access("from-b", source="team-b"))
    assert error.status == 403
    assert 'User "mallory" cannot get resource "pods" in namespace "team-b"' in str(error)
    created = await stack.alice.create(
        METRIC_ACCESSES.path("team-a"), _access("from-b", source="team-b")
    )
    assert created["spec"]["source"] == "team-b"
    # mallory cannot widen alice's object to her own liking either: an edit of the spec is
    # judged again, for mallory.
    created["spec"]["metrics"] = ["gpustack_instance_.*"]
    with pytest.raises(ApiError) as caught:
        await stack.mallory.update(METRIC_ACCESSES.path("team-a", "from-b"), created)
    assert caught.value.status == 403


async def test_a_target_in_another_namespace_needs_get_services_there(stack: Stack) -> None:
    error = await _refused(stack.alice, _access("to-mon", target={"namespace": "monitoring"}))
    assert error.status == 403
    assert "spec.remoteWrite.target.prometheus.namespace" in str(error)
