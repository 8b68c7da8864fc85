"""The worker's Pod admission webhook, registered with the cluster stand-in as the chart renders it.

The stand-in calls webhooks the way kube-apiserver does (``gpustack_simulator.cluster.admission``:
AdmissionReview v1 over HTTPS to ``clientConfig.service``, the certificate verified against the
``caBundle`` for ``<service>.<namespace>.svc``). The configurations are the chart's own, rendered
by helm; only the ``caBundle`` is swapped for the CA of the worker running here (self-signed at
start). So a Pod created through the API is folded by the real worker over real TLS, then checked
by its validating webhook, and a malformed one is refused with kube-apiserver's wording.
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

from gpustack_kube.client import ApiError, KubeClient
from gpustack_kube.config import load_config, parse_kubeconfig
from gpustack_simulator.cluster.server import RunningCluster
from gpustack_simulator.testing import cluster_standin
from gpustack_worker.daemon import Running, WorkerOptions, serve

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "deploy"))
from chart_helm import NAMESPACE, find, needs_helm, render

pytestmark = needs_helm

WORKER = "gpustack-operator-worker"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
PODS = "/api/v1/namespaces/default/pods"
DEVICES = "/apis/worker.gpustack.ai/v1alpha1/devices"
NODE = "admission-node"


@dataclass
class Stack:
    cluster: RunningCluster
    worker: Running
    kube: KubeClient


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with (
        cluster_standin("nvidia-mixed", tmp_path / "cluster") as cluster,
        trio.open_nursery() as nursery,
    ):
        options = WorkerOptions(secure_port=0, bind_address="127.0.0.1")
        # The admin context: the stand-in's "worker" user mirrors the daemons' grants, which do
        # not include the webhook's `list devices` yet (gpustack_simulator.scenario.rbac); the
        # chart's grant is checked by test_chart_least_privilege.py.
        kube = load_config(cluster.kubeconfig, context="admin")
        running: Running = await nursery.start(
            lambda task_status: serve(options, kube=kube, task_status=task_status)
        )
        address = urlsplit(running.urls[0]).netloc
        cluster.state.webhook_services[(NAMESPACE, WORKER, 443)] = address
        ca = base64.b64encode(running.certificate.read_bytes()).decode()
        async with KubeClient(parse_kubeconfig(cluster.kubeconfig)) as admin:
            for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
                configuration = find(render(), kind, WORKER)
                for hook in configuration["webhooks"]:
                    hook["clientConfig"]["caBundle"] = ca
                await admin.create(f"{ADMISSION}/{kind.lower()}s", configuration)
            await admin.create(DEVICES, _devices())
            try:
                yield Stack(cluster, running, admin)
            finally:
                running.shutdown.set()


def _devices() -> dict[str, Any]:
    """An H100 80GB HBM3 node in MIG mode (sizes from recordings/nvidia/h100-mig.yaml)."""
    profiles = [
        {"name": "1g.10gb", "memoryMib": 9856, "count": 7},
        {"name": "3g.40gb", "memoryMib": 40448, "count": 2},
    ]
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Devices",
        "metadata": {"name": NODE},
        "spec": {
            "groups": [
                {
                    "id": "h100",
                    "manufacturer": "nvidia",
                    "name": "NVIDIA H100 80GB HBM3",
                    "memory": 81559,
                    "accelerators": [
                        {
                            "id": "GPU-0",
                            "index": 0,
                            "status": {"physicalSliced": {"profiles": profiles, "count": 2}},
                        }
                    ],
                }
            ]
        },
    }


def _pod(name: str, limits: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}],
        },
    }


async def test_a_slice_is_folded_by_the_worker_through_the_standin(stack: Stack) -> None:
    created = await stack.kube.create(
        PODS,
        _pod(
            "slice",
            {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "20000"},
        ),
    )
    limits = created["spec"]["containers"][0]["resources"]["limits"]
    # ⌈20000 × 1,600,000 / 81,559⌉ against the pinned node's card
    assert limits["nvidia.com/gpu.sliced.units"] == "392355"
    assert limits["nvidia.com/gpu.sliced.cores-percentage"] == "100"
    stored = await stack.kube.get(f"{PODS}/slice")
    assert stored["spec"]["containers"][0]["resources"]["limits"] == limits


async def test_a_partition_is_folded_from_its_profile(stack: Stack) -> None:
    created = await stack.kube.create(
        PODS,
        _pod(
            "mig",
            {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-1g.10gb": "1"},
        ),
    )
    limits = created["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu.partitioned.units"] == "193353"  # ⌈9856 × 1.6e6 / 81,559⌉


async def test_a_malformed_request_is_refused_with_the_rule(stack: Stack) -> None:
    with pytest.raises(ApiError) as caught:
        await stack.kube.create(PODS, _pod("bad", {"nvidia.com/gpu.sliced": "1"}))
    assert caught.value.status == 403
    assert caught.value.message == (
        'pods "bad" is forbidden: admission webhook "pods.mutate.worker.gpustack.ai" denied the '
        "request: spec.containers[0].resources.limits: Required value: a nvidia.com/gpu.sliced "
        "request must set nvidia.com/gpu.sliced.memory-percentage or "
        "nvidia.com/gpu.sliced.memory-mib"
    )
    with pytest.raises(ApiError):
        await stack.kube.get(f"{PODS}/bad")


async def test_a_pod_without_accelerators_is_untouched(stack: Stack) -> None:
    created = await stack.kube.create(PODS, _pod("plain", {"cpu": "1"}))
    assert created["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "1"}
