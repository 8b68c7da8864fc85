"""The latest snapshot, swapped atomically and served as bytes serialized once per tick."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import trio

from gpustack_core.snapshot import MonitorSnapshot, encode_snapshot
from gpustack_devicemanager.encoded import Encoded


@dataclass(frozen=True)
class Published:
    """One tick's result: the snapshot, its bytes, and when (monotonic) it completed."""

    snapshot: MonitorSnapshot | None
    encoded: Encoded
    """The bytes as served: identity, gzip and the ``ETag``, all made by the tick."""
    completed_at: float | None

    @property
    def body(self) -> bytes:
        """The snapshot's JSON, uncompressed."""
        return self.encoded.identity


def before_first_tick(period_seconds: int) -> bytes:
    """What ``/monitor/snapshot`` answers before any tick: 200, empty groups, zero time."""
    return msgspec.json.encode(
        {"timestamp": "0001-01-01T00:00:00Z", "periodSeconds": period_seconds, "groups": []}
    )


class SnapshotHolder:
    """Only the latest snapshot is kept; readers take one reference and do no work.

    Replacing one attribute is atomic under the GIL, so a request thread never sees half a
    snapshot, and the request path never serializes: the bytes were made by the tick.
    """

    def __init__(self, period_seconds: int) -> None:
        self._published = Published(None, Encoded.of(before_first_tick(period_seconds)), None)
        self._next = trio.Event()

    @property
    def current(self) -> Published:
        """The latest publication (a frozen record)."""
        return self._published

    def publish(self, snapshot: MonitorSnapshot, completed_at: float) -> Published:
        """Store a new tick's snapshot; the previous one is dropped."""
        published = Published(snapshot, Encoded.of(encode_snapshot(snapshot)), completed_at)
        self._published = published
        # Wake whoever builds on the snapshot (the exporter's round) and arm a fresh event for
        # the next tick. Called from the event loop (the monitor awaits its tick thread first).
        woken, self._next = self._next, trio.Event()
        woken.set()
        return published

    async def next_publication(self, after: Published | None, *, timeout: float) -> Published:
        """The first publication other than ``after``, or the current one after ``timeout``.

        The exporter's round follows the monitor's tick this way, so its figures are never a
        period older than the snapshot it serves. The timeout keeps rounds coming when ticks
        stop (a hung library): a round on the old snapshot then reports it stale.
        """
        if self._published is after:
            with trio.move_on_after(timeout):
                await self._next.wait()
        return self._published
