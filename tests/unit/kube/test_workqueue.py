"""The work queue's guarantees, driven by trio's MockClock (no real waiting)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from gpustack_kube.workqueue import ExponentialBackoff, ShutDown, WorkQueue


async def test_a_key_added_twice_is_handed_out_once() -> None:
    queue = WorkQueue()
    for key in ("a/x", "a/y", "a/x"):
        queue.add(key)
    assert [await queue.get(), await queue.get()] == ["a/x", "a/y"]
    assert len(queue) == 0


async def test_a_key_is_never_handed_out_while_it_is_processed() -> None:
    queue = WorkQueue()
    queue.add("k")
    assert await queue.get() == "k"
    queue.add("k")  # a change arrives while "k" is reconciled
    assert len(queue) == 0  # not handed to a second worker now
    queue.done("k")
    assert await queue.get() == "k"  # but not lost: once more after done
    queue.done("k")
    assert len(queue) == 0


async def test_add_after_waits_on_the_clock(autojump_clock: trio.testing.MockClock) -> None:
    queue = WorkQueue()
    start = trio.current_time()
    queue.add_after("late", 30)
    queue.add_after("soon", 5)
    assert await queue.get() == "soon"
    assert trio.current_time() - start == pytest.approx(5)
    assert await queue.get() == "late"
    assert trio.current_time() - start == pytest.approx(30)


async def test_an_add_wakes_a_waiting_get(autojump_clock: trio.testing.MockClock) -> None:
    queue = WorkQueue()
    queue.add_after("late", 100)
    got: list[str] = []

    async def take() -> None:
        got.append(await queue.get())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(take)
        await trio.sleep(1)
        queue.add("now")
    assert got == ["now"]
    assert trio.current_time() < 100


def test_backoff_doubles_per_key_up_to_the_cap_and_forget_resets() -> None:
    limiter = ExponentialBackoff(base=0.005, cap=1000)
    delays = [limiter.when("k") for _ in range(20)]
    assert delays[:4] == [0.005, 0.01, 0.02, 0.04]
    assert max(delays) == 1000
    assert limiter.when("other") == 0.005  # per key
    assert [limiter.when("k") for _ in range(2000)][-1] == 1000  # no overflow, ever
    limiter.forget("k")
    assert limiter.when("k") == 0.005


async def test_rate_limited_retries_back_off(autojump_clock: trio.testing.MockClock) -> None:
    queue = WorkQueue(ExponentialBackoff(base=1, cap=8))
    start = trio.current_time()
    seen = []
    for _ in range(5):
        queue.add_rate_limited("k")
        key = await queue.get()
        seen.append(round(trio.current_time() - start))
        queue.done(key)
    assert seen == [1, 3, 7, 15, 23]  # waits of 1, 2, 4, 8, 8


async def test_shut_down_releases_waiters(autojump_clock: trio.testing.MockClock) -> None:
    queue = WorkQueue()
    with trio.fail_after(1):
        async with trio.open_nursery() as nursery:

            async def wait() -> None:
                with pytest.raises(ShutDown):
                    await queue.get()

            nursery.start_soon(wait)
            await trio.sleep(0.01)
            queue.shut_down()
