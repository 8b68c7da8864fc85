"""Kubelet summaries through the API server's proxy, or from the kubelet itself."""

from __future__ import annotations

import httpx
import pytest

from gpustack_kube.client import ApiError, KubeClient
from gpustack_kube.config import KubeConfig
from gpustack_kube.kubelet import KubeletAccess, NoKubeletAddressError, SummaryReader

CONFIG = KubeConfig("https://api.test", "sa-token", None, None, False, "gpustack-system")
SUMMARY = b'{"node": {"nodeName": "gpu-node-1"}, "pods": []}'


def _recording(seen: list[httpx.Request], status: int = 200) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, content=SUMMARY if status == 200 else b"Forbidden")

    return httpx.MockTransport(answer)


async def test_the_default_reads_through_the_api_servers_node_proxy() -> None:
    seen: list[httpx.Request] = []
    async with KubeClient(CONFIG, transport=_recording(seen)) as client:
        reader = SummaryReader(client)
        assert await reader.read("gpu-node-1", None, limit=1 << 20) == SUMMARY
    assert str(seen[0].url) == "https://api.test/api/v1/nodes/gpu-node-1/proxy/stats/summary"


@pytest.mark.parametrize(
    ("address", "url"),
    [
        ("10.0.0.7", "https://10.0.0.7:10250/stats/summary"),
        ("fd00::7", "https://[fd00::7]:10250/stats/summary"),
        ("gpu-node-1.internal", "https://gpu-node-1.internal:10250/stats/summary"),
    ],
)
async def test_direct_reads_go_to_the_kubelet_with_the_same_identity(
    address: str, url: str
) -> None:
    api: list[httpx.Request] = []
    kubelet: list[httpx.Request] = []
    async with KubeClient(CONFIG, transport=_recording(api)) as client:
        reader = SummaryReader(client, KubeletAccess(direct=True), transport=_recording(kubelet))
        assert await reader.read("gpu-node-1", address, limit=1 << 20) == SUMMARY
        await reader.aclose()
    assert api == []  # nothing went through the API server
    assert str(kubelet[0].url) == url
    assert kubelet[0].headers["Authorization"] == "Bearer sa-token"


async def test_a_direct_read_without_an_address_says_so() -> None:
    async with KubeClient(CONFIG, transport=_recording([])) as client:
        reader = SummaryReader(client, KubeletAccess(direct=True), transport=_recording([]))
        with pytest.raises(NoKubeletAddressError, match="gpu-node-1"):
            await reader.read("gpu-node-1", "", limit=1 << 20)
        await reader.aclose()


async def test_a_kubelet_refusal_is_an_api_error() -> None:
    async with KubeClient(CONFIG, transport=_recording([])) as client:
        reader = SummaryReader(
            client, KubeletAccess(direct=True, port=10255), transport=_recording([], status=403)
        )
        with pytest.raises(ApiError) as caught:
            await reader.read("gpu-node-1", "10.0.0.7", limit=1 << 20)
        await reader.aclose()
    assert caught.value.status == 403
