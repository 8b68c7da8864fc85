"""The cluster stand-in keeps two rules of kube-apiserver a tenant could otherwise exploit.

Over real HTTPS with the project's kube client, and a webhook server the stand-in calls over
HTTPS, as ``test_standin_admission.py`` does. Each case was accepted before the fix:

- ``kubernetes.io/metadata.name`` on a Namespace is its name, whatever the request says: a
  tenant labelling its namespace ``kube-system`` no longer falls outside the Pod webhook's
  ``namespaceSelector`` (the chart's ``NotIn [gpustack-system, kube-system]``) and so no longer
  skips gate 1;
- a Pod's spec cannot change after creation but for the fields kube-apiserver allows
  (``spec.containers[*].resources`` included: the webhook folded ``.sliced.units`` at create
  time, and the device plugin reads it at admission), a 422 ``Invalid`` in the server's words.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from test_standin_admission import WebhookServer, register, webhook, webhook_server

from gpustack_core.quantity import parse_quantity
from gpustack_core.webhooks import ALWAYS_EXCLUDED
from gpustack_kube.client import ApiError, KubeClient, PatchType
from gpustack_kube.config import parse_kubeconfig
from gpustack_simulator.cluster.server import RunningCluster
from gpustack_simulator.testing import cluster_standin

NAMESPACES = "/api/v1/namespaces"
NAME_LABEL = "kubernetes.io/metadata.name"
FORBIDDEN_UPDATE = (
    'Pod "{name}" is invalid: spec: Forbidden: pod updates may not change fields other than '
    "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)
"""kube-apiserver's ``ValidatePodUpdate`` message up to its diff (pkg/apis/core/validation)."""


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[RunningCluster]:
    async with cluster_standin("nvidia-mixed", tmp_path) as running:
        yield running


@pytest.fixture
async def hooks(tmp_path: Path) -> AsyncIterator[WebhookServer]:
    async with webhook_server(tmp_path) as server:
        yield server


@pytest.fixture
async def kube(cluster: RunningCluster) -> AsyncIterator[KubeClient]:
    async with KubeClient(parse_kubeconfig(cluster.kubeconfig)) as client:
        yield client


def namespace(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def pod(name: str, namespace: str, limits: dict[str, str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox:1"}
    if limits is not None:
        container["resources"] = {"limits": limits, "requests": limits}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [container]},
    }


# -- kubernetes.io/metadata.name ----------------------------------------------------------------


async def test_a_namespace_cannot_name_itself_kube_system(kube: KubeClient) -> None:
    created = await kube.create(NAMESPACES, namespace("tenant-x", {NAME_LABEL: "kube-system"}))
    assert created["metadata"]["labels"][NAME_LABEL] == "tenant-x"
    stored = await kube.get(f"{NAMESPACES}/tenant-x")
    assert stored["metadata"]["labels"][NAME_LABEL] == "tenant-x"

    # Later, by a patch or an update: forced back each time.
    patched = await kube.patch(
        f"{NAMESPACES}/tenant-x", {"metadata": {"labels": {NAME_LABEL: "gpustack-system"}}}
    )
    assert patched["metadata"]["labels"][NAME_LABEL] == "tenant-x"
    stored["metadata"]["labels"] = {"team": "x"}  # the label dropped altogether
    replaced = await kube.update(f"{NAMESPACES}/tenant-x", stored)
    assert replaced["metadata"]["labels"] == {"team": "x", NAME_LABEL: "tenant-x"}


async def test_the_label_closes_the_pod_webhook_bypass(
    kube: KubeClient, hooks: WebhookServer
) -> None:
    # Gate 1's selector exactly as the chart renders it, the webhook answering "no".
    selector = {
        "matchExpressions": [
            {"key": NAME_LABEL, "operator": "NotIn", "values": list(ALWAYS_EXCLUDED)}
        ]
    }
    await register(
        kube,
        "ValidatingWebhookConfiguration",
        "gate-1",
        webhook("pods.validate.example.test", hooks.client("/deny"), namespaceSelector=selector),
    )
    await kube.create(NAMESPACES, namespace("sneaky", {NAME_LABEL: "kube-system"}))
    with pytest.raises(ApiError) as refused:
        await kube.create(f"{NAMESPACES}/sneaky/pods", pod("bypass", "sneaky"))
    assert refused.value.status == 403, refused.value
    assert [r.request["name"] for r in hooks.reviews] == ["bypass"]  # the webhook was asked

    # The real kube-system is still excluded: the selector itself is unchanged.
    await kube.create(f"{NAMESPACES}/kube-system/pods", pod("system", "kube-system"))
    assert [r.request["name"] for r in hooks.reviews] == ["bypass"]


# -- Pod spec immutability -------------------------------------------------------------------------


SLICE = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "160000"}
WHOLE = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "1600000"}


async def _refused(call: Any) -> ApiError:
    with pytest.raises(ApiError) as refused:
        await call
    return refused.value


@pytest.mark.parametrize("how", ["strategic", "merge", "put"])
async def test_pod_resources_cannot_change_after_creation(kube: KubeClient, how: str) -> None:
    path = "/api/v1/namespaces/team-a/pods/slice"
    await kube.create("/api/v1/namespaces/team-a/pods", pod("slice", "team-a", SLICE))
    resources = {"limits": WHOLE, "requests": WHOLE}
    if how == "put":
        current = await kube.get(path)
        current["spec"]["containers"][0]["resources"] = resources
        error = await _refused(kube.update(path, current))
    elif how == "merge":  # the containers list replaced whole
        container = {"name": "main", "image": "busybox:1", "resources": resources}
        error = await _refused(kube.patch(path, {"spec": {"containers": [container]}}))
    else:  # containers merged by name
        body = {"spec": {"containers": [{"name": "main", "resources": resources}]}}
        error = await _refused(kube.patch(path, body, PatchType.STRATEGIC))
    assert error.status == 422, error
    assert error.reason == "Invalid", error
    assert error.message.startswith(FORBIDDEN_UPDATE.format(name="slice")), error.message
    stored = await kube.get(path)
    limits = stored["spec"]["containers"][0]["resources"]["limits"]
    # By value: the server may store a quantity canonically ("160k"), as kube-apiserver does.
    assert {k: parse_quantity(v) for k, v in limits.items()} == {
        k: parse_quantity(v) for k, v in SLICE.items()
    }


async def test_what_kube_apiserver_allows_a_pod_update_still_goes(kube: KubeClient) -> None:
    path = "/api/v1/namespaces/team-a/pods/mutable"
    await kube.create("/api/v1/namespaces/team-a/pods", pod("mutable", "team-a", SLICE))
    changed = await kube.patch(
        path,
        {
            "metadata": {"labels": {"tier": "gold"}, "annotations": {"note": "x"}},
            "spec": {
                "containers": [{"name": "main", "image": "busybox:2"}],
                "tolerations": [{"key": "gpu", "operator": "Exists"}],  # an addition
                "activeDeadlineSeconds": 600,
            },
        },
        PatchType.STRATEGIC,
    )
    assert changed["spec"]["containers"][0]["image"] == "busybox:2"
    assert changed["metadata"]["labels"]["tier"] == "gold"
    assert changed["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    # Removing that toleration is not an addition.
    error = await _refused(kube.patch(path, {"spec": {"tolerations": []}}))
    assert error.status == 422, error
    assert error.message.startswith(FORBIDDEN_UPDATE.format(name="mutable")), error.message


async def test_the_same_quantity_spelled_otherwise_is_no_change(kube: KubeClient) -> None:
    path = "/api/v1/namespaces/team-a/pods/spelled"
    await kube.create("/api/v1/namespaces/team-a/pods", pod("spelled", "team-a", {"cpu": "0.5"}))
    current = await kube.get(path)
    resources = {"limits": {"cpu": "500m"}, "requests": {"cpu": "500m"}}
    current["spec"]["containers"][0]["resources"] = resources
    current["metadata"].setdefault("labels", {})["touched"] = "yes"
    updated = await kube.update(path, current)
    assert updated["metadata"]["labels"]["touched"] == "yes"
