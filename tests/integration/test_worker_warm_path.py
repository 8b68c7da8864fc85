"""The worker's warm path: a repeated subresource read asks the API server nothing.

Instances, Instance Pods and Device Manager Pods come from informers (``gpustack_worker.views``),
the kubelet summary from the 15 s per-node cache, and a snapshot is held until its Device
Manager's next tick. Every API-server request is counted where the stand-in authorizes it, so
"zero requests" is measured at the server, not inferred from the client's code. Scoping must
stay exact while cached: a recreated Instance reads zeros, never its predecessor's Pod.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from dm_stack import Stack, open_stack

from gpustack_core.kubelet import Summary, parse_summary
from gpustack_kube.client import KubeClient
from gpustack_kube.config import load_config
from gpustack_kube.paths import INSTANCES
from gpustack_simulator.cluster.app import Caller, Routes
from gpustack_worker.subresource import Sources, instance_metrics, instance_metrics_json
from gpustack_worker.summaries import SummaryCache
from gpustack_worker.views import Views
from patience import HANG

NODE = "gpu-node-1"


@dataclass
class Warm:
    stack: Stack
    sources: Sources
    views: Views
    client: KubeClient
    admin: KubeClient
    """Writes as a user would make them (the worker may not write Instances)."""
    requests: list[tuple[str, str, str, str]]
    """(caller, verb, resource, name) of every request the stand-in authorized."""


@pytest.fixture
async def warm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Warm]:
    seen: list[tuple[str, str, str, str]] = []
    original = Routes.authorize

    def counting(self: Routes, caller: Caller, verb: str, resource: str, **kw: Any) -> None:
        seen.append((caller.name, verb, resource, str(kw.get("name", ""))))
        original(self, caller, verb, resource, **kw)

    monkeypatch.setattr(Routes, "authorize", counting)
    async with open_stack("nvidia-mixed", tmp_path) as stack:
        state = stack.cluster.state
        [dm] = state.expanded.device_managers
        port = int(stack.daemon.urls[0].rsplit(":", 1)[1])
        state.bind_pod_address(dm.namespace, dm.name, "127.0.0.1", port)
        config = load_config(stack.cluster.kubeconfig, context="worker")
        admin_config = load_config(stack.cluster.kubeconfig, context="admin")
        assert config is not None
        assert admin_config is not None
        async with (
            KubeClient(config) as client,
            KubeClient(admin_config) as admin,
            trio.open_nursery() as background,
        ):

            async def read(node: str) -> Summary:
                body = await client.get_bytes(
                    f"/api/v1/nodes/{node}/proxy/stats/summary", limit=32 << 20
                )
                return parse_summary(body)

            views = Views.of(client, "gpustack-system")
            background.start_soon(views.run)
            with trio.fail_after(HANG):
                while not (
                    views.instances.synced and views.pods.synced and views.device_managers.synced
                ):
                    await trio.sleep(0.05)
            sources = Sources(client, SummaryCache(read, background), views=views)
            yield Warm(stack, sources, views, client, admin, seen)
            background.cancel_scope.cancel()


async def test_a_warm_read_makes_no_api_server_request(warm: Warm) -> None:
    await warm.stack.next_tick()
    first = (await instance_metrics(warm.sources, "team-a", "llama-70b")).sample
    assert first.accelerators  # a running, allocated Instance: every source is exercised
    before = len(warm.requests)
    held = warm.sources.snapshots.held
    again = (await instance_metrics(warm.sources, "team-a", "llama-70b")).sample
    assert warm.requests[before:] == []  # Instance, Pod, DM Pods, kubelet: all from caches
    assert warm.sources.snapshots.held == held + 1  # the snapshot was not asked for either
    assert again == first


async def test_the_first_read_is_what_a_live_read_would_be(warm: Warm) -> None:
    await warm.stack.next_tick()
    cached = (await instance_metrics(warm.sources, "team-a", "embed-a")).sample
    live_sources = Sources(warm.client, warm.sources.summaries)
    live = (await instance_metrics(live_sources, "team-a", "embed-a")).sample
    assert cached == live


async def test_a_recreated_instance_never_reads_its_predecessors_pod(warm: Warm) -> None:
    path = INSTANCES.path("team-a", "qwen-a")
    old = await warm.client.get(path)
    running = (await instance_metrics(warm.sources, "team-a", "qwen-a")).sample
    assert running.cpu_used_milli_cores  # before: the Pod is this Instance's and measured
    await warm.admin.delete(path)
    body = {k: v for k, v in old.items() if k != "status"}
    body["metadata"] = {"name": "qwen-a", "namespace": "team-a"}
    created = await warm.admin.create(INSTANCES.path("team-a"), body)
    assert created["metadata"]["uid"] != old["metadata"]["uid"]
    new_uid = created["metadata"]["uid"]
    # At once, the informer may not have seen the new UID yet: the answer may then still be the
    # old incarnation's, but it must say so (its metadata.uid), never blend the two.
    at_once = await instance_metrics(warm.sources, "team-a", "qwen-a")
    if at_once.metadata.uid == new_uid:
        assert (at_once.sample.cpu_used_milli_cores, at_once.sample.accelerators) == (0, None)
    else:
        assert at_once.metadata.uid == old["metadata"]["uid"]
    with trio.fail_after(HANG):  # the Instance watch delivers the new UID
        while getattr(warm.views.instance("team-a", "qwen-a"), "uid", None) != new_uid:
            await trio.sleep(0.05)
    after = await instance_metrics(warm.sources, "team-a", "qwen-a")
    assert after.metadata.uid == new_uid
    assert (after.sample.cpu_used_milli_cores, after.sample.accelerators) == (0, None)


async def test_an_instance_created_a_moment_ago_is_read_through(warm: Warm) -> None:
    old = await warm.client.get(INSTANCES.path("team-a", "qwen-a"))
    body = {k: v for k, v in old.items() if k != "status"}
    body["metadata"] = {"name": "fresh-one", "namespace": "team-a"}
    await warm.admin.create(INSTANCES.path("team-a"), body)
    sample = (await instance_metrics(warm.sources, "team-a", "fresh-one")).sample
    assert sample.cpu_used_milli_cores == 0  # found (no 404) and, with no Pod, zeros


# --- the answer reused while its inputs are the same objects ------------------------------------


async def test_a_repeated_read_sends_the_same_answer_computed_once(warm: Warm) -> None:
    await warm.stack.next_tick()
    first = await instance_metrics_json(warm.sources, "team-a", "llama-70b")
    again = await instance_metrics_json(warm.sources, "team-a", "llama-70b")
    assert again is first  # the same bytes: nothing was recomputed or re-encoded
    fresh = await instance_metrics(warm.sources, "team-a", "llama-70b")
    assert json.loads(first) == json.loads(msgspec.json.encode(fresh))
    assert json.loads(first)["sample"]["accelerators"]


async def test_a_reused_answer_still_drops_a_snapshot_that_aged_past_its_bound(warm: Warm) -> None:
    await warm.stack.next_tick()
    now = datetime.now(UTC)
    current = await instance_metrics_json(warm.sources, "team-a", "llama-70b", now=now)
    assert json.loads(current)["sample"]["accelerators"]
    later = now + timedelta(hours=1)  # every snapshot held is stale by then
    aged = await instance_metrics_json(warm.sources, "team-a", "llama-70b", now=later)
    assert aged is not current
    expected = await instance_metrics(warm.sources, "team-a", "llama-70b", now=later)
    assert json.loads(aged) == json.loads(msgspec.json.encode(expected))
    assert "accelerators" not in json.loads(aged)["sample"]


async def test_a_recreated_instance_never_gets_its_predecessors_answer(warm: Warm) -> None:
    path = INSTANCES.path("team-a", "qwen-a")
    old = await warm.client.get(path)
    running = json.loads(await instance_metrics_json(warm.sources, "team-a", "qwen-a"))
    assert running["sample"]["cpuUsedMilliCores"]
    assert running["metadata"]["uid"] == old["metadata"]["uid"]
    await warm.admin.delete(path)
    body = {k: v for k, v in old.items() if k != "status"}
    body["metadata"] = {"name": "qwen-a", "namespace": "team-a"}
    created = await warm.admin.create(INSTANCES.path("team-a"), body)
    new_uid = created["metadata"]["uid"]
    with trio.fail_after(HANG):
        while getattr(warm.views.instance("team-a", "qwen-a"), "uid", None) != new_uid:
            await trio.sleep(0.05)
    after = json.loads(await instance_metrics_json(warm.sources, "team-a", "qwen-a"))
    assert after["metadata"]["uid"] == new_uid
    assert after["sample"]["cpuUsedMilliCores"] == 0
    assert "accelerators" not in after["sample"]
