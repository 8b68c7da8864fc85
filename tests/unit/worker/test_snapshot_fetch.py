"""The worker's snapshot read: gzip accepted, revalidated by ETag, bounded after inflation,
one request per Device Manager at a time, and (with a nursery) off the request path."""

from __future__ import annotations

import datetime
import gzip
import json
from typing import Any

import httpx
import pytest
import trio

from gpustack_core.snapshot import MAX_SNAPSHOT_BYTES, Freshness, parse_snapshot
from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig
from gpustack_worker.subresource import SnapshotCache, Sources, _fetch, _read_snapshot
from gpustack_worker.summaries import SummaryCache

BASE = "https://10.0.0.7:32443"
SNAPSHOT = json.dumps(
    {"timestamp": "2026-12-01T10:00:00Z", "periodSeconds": 15, "groups": []}
).encode()


def _device_manager(seen: list[httpx.Request], body: bytes = SNAPSHOT) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.headers.get("If-None-Match") == '"v1"':
            return httpx.Response(304, headers={"ETag": '"v1"'})
        return httpx.Response(
            200,
            content=gzip.compress(body),
            headers={"ETag": '"v1"', "Content-Encoding": "gzip"},
        )

    return httpx.MockTransport(answer)


async def test_an_unchanged_snapshot_is_revalidated_not_refetched() -> None:
    seen: list[httpx.Request] = []
    cache = SnapshotCache()
    async with httpx.AsyncClient(transport=_device_manager(seen)) as client:
        first = await _read_snapshot(client, BASE, cache)
        second = await _read_snapshot(client, BASE, cache)
    assert first.period_seconds == 15
    assert second is first  # the parsed object itself: no body, no parse
    assert cache.revalidated == 1
    assert "gzip" in seen[0].headers["Accept-Encoding"]
    assert "If-None-Match" not in seen[0].headers
    assert seen[1].headers["If-None-Match"] == '"v1"'


async def test_a_304_without_a_cached_snapshot_is_an_error() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(304)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(ValueError, match="answered 304"):
            await _read_snapshot(client, BASE, SnapshotCache())


async def test_the_bound_counts_inflated_bytes() -> None:
    """A small gzip body that inflates past 4 MiB is refused, not held."""
    bomb = b'{"timestamp":"2026-12-01T10:00:00Z","groups":[' + b" " * (MAX_SNAPSHOT_BYTES + 1)
    assert len(gzip.compress(bomb)) < 64 * 1024
    async with httpx.AsyncClient(transport=_device_manager([], bomb)) as client:
        with pytest.raises(ValueError, match="larger than"):
            await _read_snapshot(client, BASE, SnapshotCache())


def test_the_cache_is_bounded_oldest_first() -> None:
    snapshot = parse_snapshot(SNAPSHOT)
    cache = SnapshotCache(limit=2)
    for base in ("a", "b", "c"):
        cache.put(base, '"t"', snapshot)
    assert cache.get("a") is None
    assert cache.get("b") is not None
    assert cache.get("c") is not None


# --- one request per Device Manager, off the request path --------------------------------------


def _stamped(at: datetime.datetime) -> bytes:
    stamp = at.isoformat().replace("+00:00", "Z")
    return json.dumps({"timestamp": stamp, "periodSeconds": 15, "groups": []}).encode()


class _Manager:
    """A Device Manager answering slowly: ``200`` with its current snapshot, or ``304``.

    The tests below run on ``autojump_clock``: its delay and their waits are virtual, so what
    they assert about who waited on whom holds however loaded the machine is.
    """

    def __init__(self) -> None:
        self.stamp = datetime.datetime.now(datetime.UTC)
        self.requests = 0
        self.delay = 0.5
        self.down = False

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        await trio.sleep(self.delay)
        if self.down:
            raise httpx.ConnectError("connection refused")
        tag = f'"{self.stamp.timestamp()}"'
        if request.headers.get("If-None-Match") == tag:
            return httpx.Response(304, headers={"ETag": tag})
        return httpx.Response(200, content=_stamped(self.stamp), headers={"ETag": tag})


def _sources(manager: _Manager, background: trio.Nursery | None) -> Sources:
    async def no_summary(node: str) -> Any:
        raise AssertionError("not read here")

    config = KubeConfig("https://api.invalid", None, None, None, False, "default")
    client = KubeClient(config, transport=httpx.MockTransport(lambda r: httpx.Response(404)))
    return Sources(
        client,
        SummaryCache(no_summary, background),  # type: ignore[arg-type]
        device_manager_transport=httpx.MockTransport(manager.handle),
        snapshots=SnapshotCache(clock=trio.current_time),
        freshness=Freshness(datetime.timedelta(seconds=15)),
        background=background,
    )


async def test_concurrent_reads_past_the_hold_share_one_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    manager = _Manager()
    async with trio.open_nursery() as nursery:
        sources = _sources(manager, None)
        got: list[object] = []

        async def read() -> None:
            got.append(await _fetch(sources, BASE))

        for _ in range(32):
            nursery.start_soon(read)
    assert manager.requests == 1
    assert len(got) == 32
    assert all(s is got[0] for s in got)
    assert sources.snapshots.shared == 31


async def test_with_a_background_nursery_readers_do_not_wait_for_the_revalidation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    manager = _Manager()
    async with trio.open_nursery() as background:
        sources = _sources(manager, background)
        first = await _fetch(sources, BASE)  # nothing usable yet: this read waits
        assert manager.requests == 1
        entry = sources.snapshots.get(BASE)
        assert entry is not None
        sources.snapshots.put(BASE, entry[0], entry[1], hold=0)  # the producer's tick is due
        manager.stamp += datetime.timedelta(seconds=15)
        started = trio.current_time()
        again = [await _fetch(sources, BASE) for _ in range(5)]
        assert trio.current_time() - started < manager.delay  # no read waited on it
        assert all(s is first for s in again)  # the last snapshot, still fresh, meanwhile
        await trio.sleep(manager.delay / 5)  # the detached request reaches the manager
        assert manager.requests == 2  # one revalidation for all five
        assert sources.snapshots.served_while_revalidating == 5
        await trio.sleep(manager.delay * 2)
        newer = await _fetch(sources, BASE)
        assert newer is not first
        assert newer.timestamp > first.timestamp  # the producer's new tick, once it is read
        background.cancel_scope.cancel()


async def test_a_failed_revalidation_lets_the_snapshot_stand_a_while(
    autojump_clock: trio.testing.MockClock,
) -> None:
    manager = _Manager()
    manager.delay = 0
    async with trio.open_nursery() as background:
        sources = _sources(manager, background)
        first = await _fetch(sources, BASE)
        entry = sources.snapshots.get(BASE)
        assert entry is not None
        sources.snapshots.put(BASE, entry[0], entry[1], hold=0)
        manager.down = True
        assert await _fetch(sources, BASE) is first
        await trio.sleep(0.01)  # the revalidation fails
        for _ in range(10):
            assert await _fetch(sources, BASE) is first
        assert manager.requests == 2  # not one more per read while it is down
        background.cancel_scope.cancel()


async def test_with_no_usable_snapshot_a_reader_waits_and_gets_the_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    manager = _Manager()
    manager.down = True
    manager.delay = 0
    async with trio.open_nursery() as background:
        sources = _sources(manager, background)
        with pytest.raises(httpx.ConnectError):
            await _fetch(sources, BASE)
        background.cancel_scope.cancel()
