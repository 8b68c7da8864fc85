"""What a long-running worker's controllers hold stays bounded (issue #32, item 6).

A controller lives as long as its process: its record of writes, what it has said of each
Instance, and its shutdown wait must not grow with (or poll through) the life of the cluster.
"""

from __future__ import annotations

import logging

import httpx
import trio
import trio.testing

from gpustack_core.instance import instance_from_object
from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig
from gpustack_kube.workqueue import WorkQueue
from gpustack_worker.instances.controller import ControllerOptions, InstanceController
from gpustack_worker.instancetypes.controller import InstanceTypeController
from gpustack_worker.keyworkers import WRITES_KEPT, KeyWorkers


def _client() -> KubeClient:
    """A client no test request reaches: every call would answer 500."""
    config = KubeConfig("https://api.invalid", None, None, None, False, "default")
    return KubeClient(config, transport=httpx.MockTransport(lambda _: httpx.Response(500)))


def _instance(name: str, uid: str) -> object:
    return instance_from_object({
        "apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "Instance",
        "metadata": {"name": name, "namespace": "team-a", "uid": uid},
        "spec": {"image": "ubuntu:24.04", "resources": {"cpu": "1", "ram": "1Gi"}},
    })  # fmt: skip


async def test_the_write_record_keeps_only_the_latest_writes() -> None:
    for controller in (
        InstanceController(_client(), ControllerOptions(leader_election=False)),
        InstanceTypeController(_client()),
    ):
        for n in range(WRITES_KEPT + 10):
            controller.writes.append(("create", f"pod team-a/p{n}"))
        assert len(controller.writes) == WRITES_KEPT
        assert controller.writes[-1] == ("create", f"pod team-a/p{WRITES_KEPT + 9}")
        assert ("create", "pod team-a/p9") not in controller.writes
        assert ("create", "pod team-a/p10") in controller.writes


async def test_what_was_said_of_an_instance_goes_with_it() -> None:
    controller = InstanceController(_client(), ControllerOptions(leader_election=False))
    gone, kept = _instance("ws", "uid-1"), _instance("ws-2", "uid-2")
    controller._event(gone, "Normal", "Scheduled", "on node-a")  # type: ignore[arg-type]
    controller._event(kept, "Normal", "Scheduled", "on node-b")  # type: ignore[arg-type]
    assert len(controller._told) == 2
    # The informer holds neither (as after a delete): reconciling ws forgets ws, not ws-2.
    assert await controller.reconcile("team-a/ws") is None
    assert list(controller._told) == ["team-a/ws-2/uid-2"]


async def test_a_hand_written_policy_warning_is_forgotten_with_the_policy() -> None:
    controller = InstanceController(_client(), ControllerOptions(leader_election=False))
    controller._told["policy:team-a"] = "hand-written"
    await controller.reconcile("team-a")  # no policy there any more (the informer holds none)
    assert "policy:team-a" not in controller._told


async def test_drain_returns_when_the_last_reconcile_ends_without_polling(
    mock_clock: trio.testing.MockClock,
) -> None:
    del mock_clock  # time stands still: no autojump
    # No autojump: a drain that slept between looks would never wake on this clock, so it
    # returning proves it was woken by the reconcile ending.
    release = trio.Event()
    started = trio.Event()

    async def reconcile(_key: str) -> None:
        started.set()
        await release.wait()

    queue = WorkQueue()
    workers = KeyWorkers(queue, reconcile, logging.getLogger("test"))
    drained = trio.Event()

    async def drain() -> None:
        await workers.drain(timeout=5)
        drained.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(workers.run, 2)
        queue.add("a")
        await started.wait()
        nursery.start_soon(drain)
        await trio.testing.wait_all_tasks_blocked()
        assert not drained.is_set()  # the reconcile in flight is waited for
        release.set()
        await trio.testing.wait_all_tasks_blocked()
        assert drained.is_set()
        assert workers.busy == 0
