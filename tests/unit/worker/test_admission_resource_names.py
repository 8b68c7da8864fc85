"""The worker's Pod webhook judges the configured resource names (issue #31, item 1).

Beside the GPU Operator, ours is moved to ``gpustack.ai/nvidia-gpu``: the worker (given
``GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME``) must fold a slice of the new name, and leave a
Pod asking for ``nvidia.com/gpu.sliced`` alone, which is then no resource of ours. Driven
through ``build_app`` as the daemon builds it (``Surface.names``), not a hand-made webhook.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import trio
from test_admission import Cluster, _never, _NoAuthentication, applied, pod, review_body

from gpustack_core.resourceconfig import names_with
from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig
from gpustack_worker.api import Surface, build_app
from gpustack_worker.authz import Authorizer
from gpustack_worker.subresource import Sources
from gpustack_worker.summaries import SummaryCache

MOVED = "gpustack.ai/nvidia-gpu"


async def _mutate(p: dict[str, Any]) -> dict[str, Any]:
    config = KubeConfig("https://api.invalid", None, None, None, False, "default")
    client = KubeClient(config, transport=httpx.MockTransport(Cluster(items=[])))
    body = review_body(p)
    scope: dict[str, Any] = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1", "method": "POST", "scheme": "https",
        "path": "/mutate-v1-pod", "raw_path": b"/mutate-v1-pod", "query_string": b"",
        "root_path": "", "client": ("10.0.0.1", 40000), "server": ("10.0.0.2", 31443),
        "headers": [(b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())],
        "extensions": {},
    }  # fmt: skip
    sent: list[dict[str, Any]] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async with trio.open_nursery() as nursery:

        async def no_summary(node: str) -> Any:
            raise AssertionError("the webhook reads no kubelet")

        surface = Surface(
            sources=Sources(client, SummaryCache(no_summary, nursery)),
            authenticator=_NoAuthentication,  # type: ignore[arg-type]
            authorizer=Authorizer(_never, nursery),
            names=names_with({"nvidia": MOVED}),
        )
        app: Any = build_app(surface)
        await app(scope, receive, send)
        await client.aclose()
        nursery.cancel_scope.cancel()
    out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    response: dict[str, Any] = json.loads(out)["response"]
    return response


async def test_a_slice_of_the_moved_name_is_folded() -> None:
    p = pod({f"{MOVED}.sliced": "1", f"{MOVED}.sliced.memory-percentage": "25"})
    limits = applied(p, await _mutate(p))["spec"]["containers"][0]["resources"]["limits"]
    assert limits[f"{MOVED}.sliced.units"] == "400000"  # 25 % x 16,000
    assert limits[f"{MOVED}.sliced.cores-percentage"] == "100"


async def test_the_default_name_is_no_longer_ours() -> None:
    p = pod({"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "25"})
    response = await _mutate(p)
    assert response["allowed"] is True
    assert "patch" not in response
