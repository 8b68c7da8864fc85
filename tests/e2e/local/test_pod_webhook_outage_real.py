"""A worker outage blocks only accelerator Pods (issue #31, item 2), on a real kube-apiserver.

The chart's Pod webhooks are ``failurePolicy: Fail``. Their ``matchConditions`` (CEL) decide
which Pod creations kube-apiserver sends at all; only the real server evaluates them (the
stand-in does not), so this runs etcd and kube-apiserver alone — no worker, no scheduler — and
registers the chart's webhook configurations pointed at a port nothing listens on: the worker
down. A Pod that is not sent is created; a Pod that is sent is refused with kube-apiserver's
own "failed calling webhook". Which Pods should be sent comes from the issue and the resource
names' contract (``shared/reference/operator-half.md``, "Resource names"), written out here by
hand, not read from the code that builds the conditions.

Runs with ``GPUSTACK_E2E_CONTROL_PLANE=real`` (the built control-plane binaries and helm);
skipped otherwise.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from apiserver_fixture import Server, free_ports, render_chart
from e2e_system import CONTROL_PLANE

pytestmark = pytest.mark.skipif(
    CONTROL_PLANE != "real",
    reason="matchConditions are evaluated by a real kube-apiserver only (./dev e2e-real)",
)

WORKER = "gpustack-operator-worker"
REFUSED = 'failed calling webhook "pods.mutate.worker.gpustack.ai"'
OPT_OUT = {"gpustack.ai/pod-webhook": "disabled"}


def _webhooks_with_the_worker_down() -> list[dict[str, Any]]:
    """The chart's two webhook configurations, each hook's client a port nothing listens on."""
    [closed] = free_ports(1)
    kinds = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    configurations = [d for d in render_chart() if d["kind"] in kinds]
    assert len(configurations) == 2
    for configuration in configurations:
        for hook in configuration["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            bundle = hook["clientConfig"]["caBundle"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{closed}{path}", "caBundle": bundle}
    return configurations


def _pod(
    name: str,
    limits: dict[str, str] | None = None,
    *,
    labels: dict[str, str] | None = None,
    init: dict[str, str] | None = None,
) -> dict[str, Any]:
    def container(cname: str, wanted: dict[str, str] | None) -> dict[str, Any]:
        out: dict[str, Any] = {"name": cname, "image": "busybox"}
        if wanted is not None:
            out["resources"] = {"limits": wanted}
        return out

    spec: dict[str, Any] = {
        "containers": [container("main", limits)],
        "automountServiceAccountToken": False,
    }
    if init is not None:
        spec["initContainers"] = [container("setup", init)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


@pytest.fixture(scope="module")
def cluster(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        for name, labels in (("team-a", {}), ("opted-out", OPT_OUT)):
            namespace = {"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": name, "labels": labels}}  # fmt: skip
            assert client.post("/api/v1/namespaces", json=namespace).status_code == 201
            account = {"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": "default"}}  # fmt: skip
            made = client.post(f"/api/v1/namespaces/{name}/serviceaccounts", json=account)
            assert made.status_code in (201, 409), made.text  # 409: a controller made it
        for configuration in _webhooks_with_the_worker_down():
            plural = configuration["kind"].lower() + "s"
            made = client.post(
                f"/apis/admissionregistration.k8s.io/v1/{plural}", json=configuration
            )
            # Accepted: the real server compiled every CEL condition.
            assert made.status_code == 201, made.text
        time.sleep(2)  # the webhook dispatcher picks new configurations up from its informer
        yield client


SLICE = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "20"}
NOT_SENT = {
    "nothing": _pod("nothing"),
    "cpu-memory-and-another-vendors-resource": _pod(
        "cpu-memory-and-another-vendors-resource",
        {"cpu": "1", "memory": "1Gi", "example.com/fpga": "1", "nvidia.com/gpux": "1"},
    ),
    "only-the-kueue-queue-label": _pod(
        "only-the-kueue-queue-label", labels={"kueue.x-k8s.io/queue-name": "default"}
    ),
    "a-whole-card-opted-out-by-its-label": _pod(
        "a-whole-card-opted-out-by-its-label", {"nvidia.com/gpu": "1"}, labels=OPT_OUT
    ),
}
SENT = {
    "a-whole-card": _pod("a-whole-card", {"nvidia.com/gpu": "1"}),
    "an-amd-share-in-an-init-container": _pod(
        "an-amd-share-in-an-init-container", init={"amd.com/gpu.shared": "1"}
    ),
    "an-ascend-slice": _pod("an-ascend-slice", {"huawei.com/npu.sliced": "1",
                                                "huawei.com/npu.sliced.memory-mib": "4096"}),
    "a-partition": _pod("a-partition", {"nvidia.com/gpu.partitioned": "1",
                                        "nvidia.com/gpu.partitioned.mig-1g.10gb": "1"}),
    "visibility": _pod("visibility", {"device.gpustack.ai/nvidia.visibility": "1"}),
    "a-slice-whose-opt-out-label-is-not-enough": _pod(
        "a-slice-whose-opt-out-label-is-not-enough", SLICE, labels=OPT_OUT
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(NOT_SENT))
def test_a_pod_that_needs_no_webhook_is_created_while_the_worker_is_down(
    cluster: httpx.Client, name: str
) -> None:
    created = cluster.post("/api/v1/namespaces/team-a/pods", json=NOT_SENT[name])
    assert created.status_code == 201, created.text


@pytest.mark.parametrize("name", list(SENT))
def test_an_accelerator_pod_is_still_refused_while_the_worker_is_down(
    cluster: httpx.Client, name: str
) -> None:
    refused = cluster.post("/api/v1/namespaces/team-a/pods", json=SENT[name])
    assert refused.status_code != 201, refused.text
    assert REFUSED in refused.json()["message"]


def test_an_opted_out_namespace_sends_nothing(cluster: httpx.Client) -> None:
    created = cluster.post("/api/v1/namespaces/opted-out/pods", json=_pod("slice", SLICE))
    assert created.status_code == 201, created.text


def test_the_chart_ca_bundle_is_kept(cluster: httpx.Client) -> None:
    """The configurations as stored still carry the chart's caBundle (nothing was dropped)."""
    stored = cluster.get(
        f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{WORKER}"
    ).json()
    [pods] = [h for h in stored["webhooks"] if h["name"] == "pods.mutate.worker.gpustack.ai"]
    assert base64.b64decode(pods["clientConfig"]["caBundle"]).startswith(b"-----BEGIN")
    assert [c["name"] for c in pods["matchConditions"]] == [
        "asks-for-accelerators",
        "not-opted-out",
    ]
