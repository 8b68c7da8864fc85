"""gpustack_kube against the cluster stand-in: real HTTPS, the written kubeconfig, real RBAC."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest
import trio

from gpustack_kube.client import ApiError, KubeClient, TooLarge
from gpustack_kube.config import KubeConfig, load_config
from gpustack_kube.informer import Informer
from gpustack_simulator.cluster.server import RunningCluster
from gpustack_simulator.testing import cluster_standin
from patience import HANG

NODE = "gpu-node-1"
NODE_PODS = {"llama-70b", "embed-a", "qwen-a", "mig-3g"}


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[RunningCluster]:
    async with cluster_standin("nvidia-mixed", tmp_path) as running:
        yield running


def config(cluster: RunningCluster, context: str = "device-manager") -> KubeConfig:
    loaded = load_config(cluster.kubeconfig, context=context, environ={})
    assert loaded is not None
    return loaded


async def until(informer: Informer, condition: Callable[[list[dict[str, Any]]], bool]) -> None:
    with trio.fail_after(HANG):
        while not condition(informer.objects()):
            await informer.wait_changed()


def names(objects: list[dict[str, Any]]) -> set[str]:
    return {o["metadata"]["name"] for o in objects}


async def test_informer_follows_the_node_pods(cluster: RunningCluster) -> None:
    async with KubeClient(config(cluster)) as client, trio.open_nursery() as nursery:
        informer = Informer(client, "/api/v1/pods", field_selector=f"spec.nodeName={NODE}")
        await nursery.start(informer.run)

        assert informer.synced
        assert informer.last_error is None
        listed = informer.objects()
        assert names(listed) >= NODE_PODS
        assert all(p["spec"]["nodeName"] == NODE for p in listed)
        assert int(informer.version) == cluster.state.store.version

        cluster.state.update_pod(
            "team-a", "llama-70b", lambda pod: pod["metadata"]["labels"].update(tier="gold")
        )
        await until(
            informer,
            lambda objs: any(
                o["metadata"]["name"] == "llama-70b"
                and o["metadata"]["labels"].get("tier") == "gold"
                for o in objs
            ),
        )
        assert listed != informer.objects()  # the earlier snapshot was not edited in place
        assert int(informer.version) == cluster.state.store.version

        cluster.state.delete_pod("team-a", "embed-a")
        await until(informer, lambda objs: "embed-a" not in names(objs))
        assert names(informer.objects()) == names(listed) - {"embed-a"}

        stats = informer.statistics()
        assert (stats.lists, stats.relists, stats.expired, stats.errors) == (1, 0, 0, 0)
        assert stats.events >= 2
        nursery.cancel_scope.cancel()


async def test_bounded_read_of_the_kubelet_summary(
    cluster: RunningCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A proxy in the environment must not capture the API server's traffic.
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    path = f"/api/v1/nodes/{NODE}/proxy/stats/summary"
    async with KubeClient(config(cluster)) as client:
        body = await client.get_bytes(path, limit=4 * 1024 * 1024)
        summary = json.loads(body)
        assert summary["node"]["nodeName"] == NODE
        with pytest.raises(TooLarge) as excinfo:
            await client.get_bytes(path, limit=len(body) - 1)
        assert excinfo.value.limit == len(body) - 1


async def test_forbidden_list_is_an_api_error(cluster: RunningCluster) -> None:
    async with KubeClient(config(cluster, "no-metrics")) as client:
        with pytest.raises(ApiError) as excinfo:
            await client.get("/api/v1/nodes")
    error = excinfo.value
    assert (error.status, error.reason) == (403, "Forbidden")
    assert 'User "no-metrics" cannot list resource "nodes"' in error.message
    assert json.loads(error.body)["kind"] == "Status"


async def test_watch_from_a_too_old_version_is_expired(cluster: RunningCluster) -> None:
    for _ in range(1100):  # push version 1 out of the store's 1000-event history
        cluster.state.update_pod("team-a", "qwen-a", lambda pod: None)
    async with KubeClient(config(cluster)) as client:
        with pytest.raises(ApiError) as excinfo:
            async for _ in client.watch("/api/v1/pods", {"resourceVersion": "1"}):
                pass
    assert excinfo.value.status == 410
    assert excinfo.value.expired


async def test_leaving_a_live_watch_early(cluster: RunningCluster) -> None:
    """The stream is still open when the caller stops: it is closed now, with no leftovers."""
    selector = {"fieldSelector": f"spec.nodeName={NODE}"}
    async with KubeClient(config(cluster)) as client:
        listed = await client.get("/api/v1/pods", selector)
        version = listed["metadata"]["resourceVersion"]
        cluster.state.update_pod(
            "team-a", "llama-70b", lambda pod: pod["metadata"]["labels"].update(tier="gold")
        )
        params = {**selector, "resourceVersion": version, "timeoutSeconds": 60}
        seen: list[dict[str, Any]] = []
        with trio.fail_after(HANG):
            async with aclosing(client.watch("/api/v1/pods", params)) as events:
                async for event in events:
                    seen.append(event)
                    break
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in seen] == [
            ("MODIFIED", "llama-70b")
        ]
        again = await client.get("/api/v1/namespaces/team-a/pods/llama-70b")
        assert again["metadata"]["labels"]["tier"] == "gold"


# --- lists in chunks: limit and continue, as kube-apiserver serves them ---------------------------


async def test_a_list_in_chunks_is_the_whole_list_from_one_snapshot(
    cluster: RunningCluster,
) -> None:
    async with KubeClient(config(cluster, "admin")) as client:
        whole = await client.get("/api/v1/pods")
        expected = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in whole["items"]]
        assert len(expected) > 5
        seen: list[tuple[str, str]] = []
        versions: set[str] = set()
        remaining: list[int] = []
        token = ""
        while True:
            params: dict[str, str | int | bool] = {"limit": 2}
            if token:
                params["continue"] = token
            chunk = await client.get("/api/v1/pods", params)
            seen += [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in chunk["items"]]
            versions.add(chunk["metadata"]["resourceVersion"])
            token = chunk["metadata"].get("continue", "")
            if not token:
                assert "remainingItemCount" not in chunk["metadata"]
                break
            remaining.append(chunk["metadata"]["remainingItemCount"])
            if len(seen) == 2:  # a write between two chunks is not in the list being read
                cluster.state.delete_pod(*expected[-1])
        assert seen == expected  # etcd's order (namespace, name), nothing twice, nothing lost
        assert versions == {whole["metadata"]["resourceVersion"]}
        assert remaining == sorted(remaining, reverse=True)
        assert remaining[0] == len(expected) - 2


async def test_a_continue_token_is_refused_when_forged_foreign_or_expired(
    cluster: RunningCluster,
) -> None:
    async with KubeClient(config(cluster, "admin")) as client:
        first = await client.get("/api/v1/pods", {"limit": 1})
        token = first["metadata"]["continue"]
        with pytest.raises(ApiError) as forged:
            await client.get("/api/v1/pods", {"limit": 1, "continue": "not-a-token"})
        assert forged.value.status == 400
        with pytest.raises(ApiError) as foreign:
            await client.get("/api/v1/nodes", {"limit": 1, "continue": token})
        assert foreign.value.status == 400
        cluster.state.chunks.keep_seconds = 0.0  # compacted since
        with pytest.raises(ApiError) as expired:
            await client.get("/api/v1/pods", {"limit": 1, "continue": token})
        assert (expired.value.status, expired.value.reason, expired.value.expired) == (
            410,
            "Expired",
            True,
        )


async def test_an_informer_reading_in_chunks_holds_what_one_whole_list_gives(
    cluster: RunningCluster,
) -> None:
    async with KubeClient(config(cluster, "admin")) as client, trio.open_nursery() as nursery:
        chunked = Informer(client, "/api/v1/pods", page_size=3)
        whole = Informer(client, "/api/v1/pods", page_size=0)
        await nursery.start(chunked.run)
        await nursery.start(whole.run)
        assert len(chunked.objects()) > 3
        by_key = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in whole.objects()}
        assert {
            (o["metadata"]["namespace"], o["metadata"]["name"]): o for o in chunked.objects()
        } == by_key
        assert chunked.version == whole.version
        nursery.cancel_scope.cancel()
