"""The worker's snapshot read: gzip accepted, revalidated by ETag, bounded after inflation."""

from __future__ import annotations

import gzip
import json

import httpx
import pytest

from gpustack_core.snapshot import MAX_SNAPSHOT_BYTES, parse_snapshot
from gpustack_worker.subresource import SnapshotCache, _read_snapshot

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
