"""The summary cache: freshness, failures never cached, one in-flight read per node."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import trio
import trio.testing

from gpustack_core.kubelet import Summary, parse_summary
from gpustack_worker.summaries import SummaryCache


def summary(node: str) -> Summary:
    return parse_summary(f'{{"node": {{"nodeName": "{node}"}}, "pods": []}}')


class Kubelets:
    """Counts reads per node; can be slow or failing."""

    def __init__(self) -> None:
        self.reads: dict[str, int] = {}
        self.delay = 0.5
        self.fail = False

    async def read(self, node: str) -> Summary:
        self.reads[node] = self.reads.get(node, 0) + 1
        await trio.sleep(self.delay)
        if self.fail:
            raise ConnectionError(f"{node}: connection refused")
        return summary(node)


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_a_thousand_callers_over_ten_nodes_cost_ten_reads(
    autojump_clock: trio.testing.MockClock,
) -> None:
    kubelets = Kubelets()
    answered: list[str] = []
    async with trio.open_nursery() as background:
        cache = SummaryCache(kubelets.read, background)

        async def ask(node: str) -> None:
            answered.append((await cache.get(node)).node.node_name)

        async with trio.open_nursery() as callers:
            for i in range(1000):
                callers.start_soon(ask, f"node-{i % 10}")
        background.cancel_scope.cancel()
    assert kubelets.reads == {f"node-{i}": 1 for i in range(10)}
    assert sorted(set(answered)) == [f"node-{i}" for i in range(10)]
    assert len(answered) == 1000
    assert cache.statistics().reads == 10


async def test_fresh_for_max_age_then_read_again(autojump_clock: trio.testing.MockClock) -> None:
    kubelets = Kubelets()
    async with trio.open_nursery() as background:
        cache = SummaryCache(kubelets.read, background, max_age=15)
        await cache.get("n1")
        await trio.sleep(14)
        await cache.get("n1")
        assert kubelets.reads["n1"] == 1
        await trio.sleep(2)
        await cache.get("n1")
        assert kubelets.reads["n1"] == 2
        background.cancel_scope.cancel()


async def test_failures_are_never_cached(autojump_clock: trio.testing.MockClock) -> None:
    kubelets = Kubelets()
    kubelets.fail = True
    async with trio.open_nursery() as background:
        cache = SummaryCache(kubelets.read, background)
        with pytest.raises(ConnectionError, match="connection refused"):
            await cache.get("n1")
        kubelets.fail = False
        assert (await cache.get("n1")).node.node_name == "n1"  # tried again at once
        assert kubelets.reads["n1"] == 2
        background.cancel_scope.cancel()


async def test_a_caller_giving_up_does_not_cancel_the_shared_read(
    autojump_clock: trio.testing.MockClock,
) -> None:
    kubelets = Kubelets()
    kubelets.delay = 5
    async with trio.open_nursery() as background:
        cache = SummaryCache(kubelets.read, background)
        results: list[str] = []

        async def impatient() -> None:
            with trio.move_on_after(1):
                await cache.get("n1")

        async def patient() -> None:
            results.append((await cache.get("n1")).node.node_name)

        async with trio.open_nursery() as callers:
            callers.start_soon(impatient)
            callers.start_soon(patient)
        assert results == ["n1"]
        assert kubelets.reads == {"n1": 1}
        background.cancel_scope.cancel()


async def test_a_hung_kubelet_read_is_bounded(autojump_clock: trio.testing.MockClock) -> None:
    kubelets = Kubelets()
    kubelets.delay = 60
    async with trio.open_nursery() as background:
        cache = SummaryCache(kubelets.read, background, timeout=10)
        start = trio.current_time()
        with pytest.raises(trio.TooSlowError):
            await cache.get("n1")
        assert trio.current_time() - start == pytest.approx(10)
        background.cancel_scope.cancel()


async def test_nodes_nobody_reads_are_evicted(autojump_clock: trio.testing.MockClock) -> None:
    kubelets = Kubelets()
    kubelets.delay = 0
    async with trio.open_nursery() as background:
        cache = SummaryCache(kubelets.read, background, max_age=15)
        for i in range(100):
            await cache.get(f"drained-{i}")
        assert len(cache.cached_nodes) == 100
        await trio.sleep(16)  # every drained node's summary is now past max_age
        await cache.get("busy")
        assert cache.cached_nodes == {"busy"}
        await trio.sleep(10)  # within max_age: the busy node's summary is still served
        await cache.get("busy")
        assert kubelets.reads["busy"] == 1
        background.cancel_scope.cancel()


async def test_a_pod_started_after_the_cached_read_costs_one_more_read() -> None:
    """A summary read before a Pod started cannot list it: ``newer_than`` reads again, once."""
    kubelets = Kubelets()
    kubelets.delay = 0
    async with trio.open_nursery() as background:
        cache = SummaryCache(kubelets.read, background)
        await cache.get("n")
        assert kubelets.reads == {"n": 1}
        before = datetime.now(UTC) - timedelta(minutes=1)
        await cache.get("n", newer_than=before)  # the Pod predates the read: a hit
        assert kubelets.reads == {"n": 1}
        later = datetime.now(UTC) + timedelta(seconds=1)  # the Pod started after the read
        await cache.get("n", newer_than=later)
        assert kubelets.reads == {"n": 2}
        await cache.get("n", newer_than=later)  # no read began after it yet: read again
        assert kubelets.reads == {"n": 3}
        await cache.get("n", newer_than=datetime.now(UTC) - timedelta(seconds=1))
        assert kubelets.reads == {"n": 3}, "a read that began after the start answers it"
        background.cancel_scope.cancel()


async def test_a_read_near_the_bound_reads_ahead_without_waiting(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A node read continuously is never found expired: nobody waits on its kubelet."""
    kubelets = Kubelets()
    async with trio.open_nursery() as background:
        cache = SummaryCache(kubelets.read, background, max_age=15, refresh_ahead=2)
        first = await cache.get("n1")
        await trio.sleep(12)
        assert await cache.get("n1") is first  # not yet in the last two seconds: no read
        assert kubelets.reads["n1"] == 1
        await trio.sleep(1.5)  # 13.5 s old: this read starts the next one and does not wait
        started = trio.current_time()
        assert await cache.get("n1") is first
        assert trio.current_time() == started
        await trio.sleep(kubelets.delay + 0.1)
        assert kubelets.reads["n1"] == 2
        second = await cache.get("n1")
        assert second is not first
        await trio.sleep(3)  # the old summary's bound passed long ago: still no wait
        started = trio.current_time()
        assert await cache.get("n1") is second
        assert trio.current_time() == started
        background.cancel_scope.cancel()


async def test_a_failed_read_ahead_is_not_retried_for_the_same_summary(
    autojump_clock: trio.testing.MockClock,
) -> None:
    kubelets = Kubelets()
    async with trio.open_nursery() as background:
        cache = SummaryCache(kubelets.read, background, max_age=15, refresh_ahead=2)
        first = await cache.get("n1")
        kubelets.fail = True
        await trio.sleep(14)
        for _ in range(20):
            assert await cache.get("n1") is first
            await trio.sleep(0.04)
        assert kubelets.reads["n1"] == 2  # one read ahead, failed; not one per caller
        await trio.sleep(1)  # past the bound: the next caller reads (and fails) on demand
        with pytest.raises(ConnectionError):
            await cache.get("n1")
        background.cancel_scope.cancel()
