"""The worker's keep-alive timer: hypercorn's idle timeout, one task per connection."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from gpustack_worker.tls import IdleTimer


class _Group:
    """What ``IdleTimer.restart`` uses of hypercorn's task group: its nursery."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery


class _Terminated:
    def __init__(self) -> None:
        self.event = trio.Event()

    def is_set(self) -> bool:
        return self.event.is_set()

    async def wait(self) -> None:
        await self.event.wait()


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def _never() -> None:
    raise AssertionError("IdleTimer runs its own watch, not hypercorn's timer task")


async def test_an_idle_connection_is_closed_after_the_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    closed: list[float] = []

    async def close() -> None:
        closed.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        timer = IdleTimer(5.0, _Terminated(), close)
        start = trio.current_time()
        await timer.restart(_Group(nursery), _never)
    assert closed == [pytest.approx(start + 5.0)]


async def test_requests_keep_it_open_and_idleness_counts_from_the_last_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    closed: list[float] = []

    async def close() -> None:
        closed.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        timer = IdleTimer(5.0, _Terminated(), close)
        group = _Group(nursery)
        start = trio.current_time()
        await timer.restart(group, _never)
        for _ in range(10):  # a request every 4 s, each taking 3 s: never 5 s idle
            await trio.sleep(4)
            await timer.stop()
            await trio.sleep(3)
            await timer.restart(group, _never)
        assert closed == []
        last_answer = trio.current_time()
    assert closed == [pytest.approx(last_answer + 5.0)]
    assert last_answer - start == pytest.approx(70)


async def test_shutdown_closes_an_idle_connection_at_once_and_a_busy_one_after_its_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    closed: list[str] = []
    terminated = _Terminated()
    async with trio.open_nursery() as nursery:
        group = _Group(nursery)
        idle = IdleTimer(5.0, terminated, lambda: _append(closed, "idle"))
        busy = IdleTimer(5.0, terminated, lambda: _append(closed, "busy"))
        await idle.restart(group, _never)
        await busy.restart(group, _never)
        await busy.stop()  # a request in progress
        await trio.sleep(1)
        terminated.event.set()
        await trio.sleep(0.5)
        assert closed == ["idle"]
        await trio.sleep(2)  # still answering
        assert closed == ["idle"]
        await busy.restart(group, _never)  # the answer is out
        await trio.sleep(0.2)
        assert closed == ["idle", "busy"]


async def _append(closed: list[str], what: str) -> None:
    closed.append(what)
