"""What the Pod webhook's ``matchConditions`` keep from it, it would have left untouched.

kube-apiserver no longer sends a Pod that names none of our resources (issue #31, item 2;
:mod:`gpustack_core.podmatch`). That is only safe if the webhook, sent such a Pod, answers it
allowed with no patch: in particular a Pod on a Kueue queue (the reference's selection) with
the fit pin on, and a Pod naming a resource that merely looks like ours. Hypothesis draws such
Pods; each is judged by both hooks, as kube-apiserver would send it.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig
from gpustack_worker.admission import MUTATE_PATH, VALIDATE_PATH, AdmissionWebhook, DevicesCache

OTHER_KEYS = [
    "cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "example.com/fpga",
    "nvidia.com/gpux", "nvidia.com/mig-1g.10gb", "amd.com/gpu-shared", "gpu.intel.com/i915",
    "device.gpustack.ai/accelerator.allocated", "huawei.com/Ascend910",
]  # fmt: skip
"""Resources none of ours: the kubelet's own, other plugins', and names one character off."""


def _container(name: str, limits: dict[str, str], requests: dict[str, str]) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits:
        resources["limits"] = limits
    if requests:
        resources["requests"] = requests
    return {"name": name, "image": "busybox", "resources": resources}


amounts = st.dictionaries(st.sampled_from(OTHER_KEYS), st.sampled_from(["1", "2", "500m"]))
pods = st.builds(
    lambda app, init, queued: {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "labels": {"kueue.x-k8s.io/queue-name": "default"} if queued else {},
        },
        "spec": {
            "containers": [_container(f"c{i}", *pair) for i, pair in enumerate(app)],
            **({"initContainers": [_container("i0", *init)]} if init else {}),
        },
    },
    st.lists(st.tuples(amounts, amounts), min_size=1, max_size=3),
    st.none() | st.tuples(amounts, amounts),
    st.booleans(),
)


def _review(pod: dict[str, Any]) -> bytes:
    request = {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
               "operation": "CREATE", "namespace": "team-a", "object": pod}  # fmt: skip
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(body).encode()


def _unreachable(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"the webhook read {request.url.path} for a Pod asking for nothing")


async def _judge(pod: dict[str, Any]) -> list[dict[str, Any]]:
    config = KubeConfig("https://api.invalid", None, None, None, False, "default")
    async with KubeClient(config, transport=httpx.MockTransport(_unreachable)) as client:
        webhook = AdmissionWebhook(DevicesCache(client), fit_affinity=lambda: True)
        answers = []
        for path in (MUTATE_PATH, VALIDATE_PATH):
            code, body = await webhook.handle(path, _review(pod))
            assert code == 200, body
            answers.append(json.loads(body)["response"])
    return answers


@settings(max_examples=60, deadline=None)
@given(pod=pods)
def test_a_pod_the_conditions_do_not_send_is_one_the_webhook_leaves_alone(
    pod: dict[str, Any],
) -> None:
    for response in trio.run(_judge, pod):
        assert response == {"uid": "u1", "allowed": True}
