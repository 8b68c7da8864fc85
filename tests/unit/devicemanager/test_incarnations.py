"""The exporter publishes an Instance Pod only while it belongs to its Instance's current UID,
read with GETs of only the Instances the node's Pods name, cached per UID."""

from __future__ import annotations

from typing import Any

import httpx
import msgspec
import trio
import trio.testing

from gpustack_core.pods import Pod, pod_from_object
from gpustack_devicemanager.exporter import current_incarnations
from gpustack_devicemanager.incarnations import InstanceIncarnations
from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig


def pod(name: str, owner_uid: str, *, instance: str | None = None) -> Pod:
    obj: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": f"pod-{name}-{owner_uid}",
            "creationTimestamp": "2026-12-01T00:00:00Z",
            "labels": {"app.kubernetes.io/part-of": owner_uid},
            "ownerReferences": [
                {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "Instance",
                 "name": instance or name, "uid": owner_uid, "controller": True}
            ],
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "main"}]},
    }  # fmt: skip
    return pod_from_object(obj)


def plain(name: str) -> Pod:
    meta = {"name": name, "namespace": "team-a", "uid": name,
            "creationTimestamp": "2026-12-01T00:00:00Z"}  # fmt: skip
    return pod_from_object({"metadata": meta, "spec": {"containers": [{"name": "c"}]}})


def names(pods: list[Pod]) -> list[str]:
    return [p.metadata.name for p in pods]


def test_a_predecessors_pod_is_left_out() -> None:
    old = pod("ws", "uid-old")
    current = pod("other", "uid-other")
    dm = plain("device-manager")
    kept = current_incarnations([old, current, dm], {("team-a", "ws"): "uid-new",
                                                     ("team-a", "other"): "uid-other"})  # fmt: skip
    assert names(kept) == ["other", "device-manager"]  # non-Instance Pods always pass


def test_a_deleted_instances_pod_is_left_out() -> None:
    assert current_incarnations([pod("ws", "uid-1")], {}) == []


def test_unknown_instances_leave_everything_as_it_was() -> None:
    """Before the Instance informer syncs nothing is known, so nothing is dropped."""
    pods = [pod("ws", "uid-1")]
    assert current_incarnations(pods, None) == pods


def test_the_current_incarnation_is_published() -> None:
    pods = [pod("ws", "uid-1")]
    assert current_incarnations(pods, {("team-a", "ws"): "uid-1"}) == pods


# -- Reading the current UIDs: only the Instances the node's Pods name, cached per UID --------


class Instances:
    """A fake API server holding Instances by (namespace, name); counts the GETs."""

    def __init__(self, uids: dict[str, str]) -> None:
        self.uids = dict(uids)
        self.reads: list[str] = []
        self.failing = False

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.method == "GET"
        *_, namespace_word, namespace, plural, name = request.url.path.split("/")
        assert (namespace_word, plural) == ("namespaces", "instances")
        assert request.url.path.startswith("/apis/worker.gpustack.ai/v1alpha1/")
        self.reads.append(name)
        if self.failing:
            return httpx.Response(503, json={"kind": "Status", "message": "unavailable"})
        uid = self.uids.get(name)
        if uid is None:
            return httpx.Response(404, json={"kind": "Status", "reason": "NotFound", "code": 404})
        meta = {"name": name, "namespace": namespace, "uid": uid}
        return httpx.Response(200, json={"kind": "Instance", "metadata": meta})


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def reader(server: Instances, clock: Clock, recheck: float = 300.0) -> InstanceIncarnations:
    config = KubeConfig("https://api.invalid", None, None, None, False, "default")
    client = KubeClient(config, transport=httpx.MockTransport(server))
    return InstanceIncarnations(client, recheck=recheck, clock=clock)


async def test_only_the_instances_the_pods_name_are_read_once_each() -> None:
    server = Instances({"ws": "uid-1", "other": "uid-2", "unrelated": "uid-9"})
    incarnations = reader(server, Clock())
    pods = [pod("ws", "uid-1"), pod("other", "uid-2"), plain("device-manager")]
    assert await incarnations.current_uids(pods) == {
        ("team-a", "ws"): "uid-1",
        ("team-a", "other"): "uid-2",
    }
    assert sorted(server.reads) == ["other", "ws"]
    assert current_incarnations(pods, await incarnations.current_uids(pods)) == pods
    assert len(server.reads) == 2  # both answers stand: no read in the second round


async def test_a_predecessors_pod_is_left_out_once_read() -> None:
    server = Instances({"ws": "uid-new"})
    incarnations = reader(server, Clock())
    old = pod("ws", "uid-old")
    uids = await incarnations.current_uids([old])
    assert uids == {}
    assert current_incarnations([old], uids) == []
    await incarnations.current_uids([old])
    assert server.reads == ["ws"]  # a UID found not current is never read again


async def test_a_deleted_instance_reads_as_gone() -> None:
    incarnations = reader(Instances({}), Clock())
    assert await incarnations.current_uids([pod("ws", "uid-1")]) == {}


async def test_a_new_incarnation_is_read_on_its_first_round() -> None:
    """The predecessor's positive answer never stands in for the new UID, nor outlives it."""
    server = Instances({"ws": "uid-1"})
    clock = Clock()
    incarnations = reader(server, clock)
    first = pod("ws", "uid-1")
    assert await incarnations.current_uids([first]) == {("team-a", "ws"): "uid-1"}
    server.uids["ws"] = "uid-2"  # deleted and recreated; the first Pod still lingers
    clock.now = 1.0
    second = pod("ws", "uid-2")
    uids = await incarnations.current_uids([first, second])
    assert uids == {("team-a", "ws"): "uid-2"}
    assert current_incarnations([first, second], uids) == [second]
    assert server.reads == ["ws", "ws"]


async def test_a_positive_answer_is_read_again_after_the_recheck() -> None:
    server = Instances({"ws": "uid-1"})
    clock = Clock()
    incarnations = reader(server, clock, recheck=60.0)
    lingering = pod("ws", "uid-1")
    await incarnations.current_uids([lingering])
    clock.now = 59.0
    assert await incarnations.current_uids([lingering]) == {("team-a", "ws"): "uid-1"}
    del server.uids["ws"]  # deleted; the garbage collector has not reached the Pod
    clock.now = 60.0
    assert await incarnations.current_uids([lingering]) == {}
    assert server.reads == ["ws", "ws"]


async def test_a_failed_read_changes_nothing() -> None:
    server = Instances({"ws": "uid-1"})
    clock = Clock()
    incarnations = reader(server, clock, recheck=10.0)
    server.failing = True
    never_read = [pod("ws", "uid-1")]
    assert await incarnations.current_uids(never_read) == {("team-a", "ws"): "uid-1"}
    server.failing = False
    await incarnations.current_uids(never_read)
    server.uids["ws"] = "uid-2"
    server.failing = True
    clock.now = 20.0
    # Due for a recheck, but the read fails: the last answer stands.
    assert await incarnations.current_uids(never_read) == {("team-a", "ws"): "uid-1"}
    assert incarnations.statistics().failed_reads == 2


async def test_terminating_pods_and_forgotten_uids_are_not_read() -> None:
    server = Instances({"ws": "uid-1", "gone": "uid-3"})
    incarnations = reader(server, Clock())
    leaving = pod("gone", "uid-3")
    leaving = msgspec.structs.replace(
        leaving,
        metadata=msgspec.structs.replace(
            leaving.metadata, deletion_timestamp=leaving.metadata.creation_timestamp
        ),
    )
    await incarnations.current_uids([pod("ws", "uid-1"), leaving])
    assert server.reads == ["ws"]
    assert incarnations.statistics().cached == 1
    await incarnations.current_uids([])
    assert incarnations.statistics().cached == 0  # no Pod names it any more


async def test_reading_ahead_leaves_the_round_nothing_to_read() -> None:
    server = Instances({"ws": "uid-1"})
    incarnations = reader(server, Clock())
    pods: list[Pod] | None = None
    changed = trio.Event()

    async def wait_changed() -> None:
        await changed.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(incarnations.follow, lambda: pods, wait_changed)
        await trio.testing.wait_all_tasks_blocked()
        assert server.reads == []  # the node's Pods are not known yet
        pods = [pod("ws", "uid-1")]
        changed.set()
        changed = trio.Event()
        await trio.testing.wait_all_tasks_blocked()
        assert server.reads == ["ws"]
        assert await incarnations.current_uids(pods) == {("team-a", "ws"): "uid-1"}
        assert server.reads == ["ws"]  # the round found it cached
        nursery.cancel_scope.cancel()
