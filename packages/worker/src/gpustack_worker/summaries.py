"""The kubelet summary cache: one read per node, however many Instances are asked about.

A console polling every Instance of a node must cost the kubelet one request per freshness
bound, not one per Instance. So a node's summary is cached for ``max_age`` (15 s for the
subresource), failures are never cached (the next caller tries again), and concurrent callers
for one node share a single in-flight read. That read is *detached*: it runs in the cache's own
nursery under its own 10 s deadline, so a caller that gives up does not cancel it for the
others waiting on it.

A read a summary close to ``max_age`` gets starts the next read *ahead* (``refresh_ahead``
seconds before the bound), detached, and is answered the cached summary still within its
bound: a node read continuously is then never found expired, so no request waits on the
kubelet once per bound (all 32 of a console's in-flight reads did, every 15 s). A node nobody
reads in that last stretch is read on demand, as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import trio

from gpustack_core.kubelet import Summary

DEFAULT_MAX_AGE = 15.0
READ_TIMEOUT = 10.0
REFRESH_AHEAD = 2.0
"""Seconds before ``max_age`` a read starts the next kubelet read (at most a fifth of it)."""

Reader = Callable[[str], Awaitable[Summary]]
"""Reads one node's summary (the node-proxy GET plus parsing); raises on any failure."""


@dataclass
class _Flight:
    """One read in progress; every caller for the node waits on ``done``."""

    done: trio.Event = field(default_factory=trio.Event)
    summary: Summary | None = None
    error: BaseException | None = None


@dataclass(frozen=True)
class CacheStatistics:
    """How many reads reached the kubelet, and how many callers the cache answered."""

    reads: int
    hits: int
    shared: int


class SummaryCache:
    """Per-node summaries with a freshness bound and single-flight reads."""

    def __init__(
        self,
        read: Reader,
        nursery: trio.Nursery,
        *,
        max_age: float = DEFAULT_MAX_AGE,
        timeout: float = READ_TIMEOUT,
        refresh_ahead: float = REFRESH_AHEAD,
    ) -> None:
        self._read = read
        self._nursery = nursery
        self._max_age = max_age
        self._ahead_at = max_age - min(refresh_ahead, max_age / 5)
        self._timeout = timeout
        self._cached: dict[str, tuple[float, datetime, Summary]] = {}
        """Node → (trio time it was cached, wall-clock start of its read, the summary)."""
        self._flights: dict[str, _Flight] = {}
        self._ahead_of: dict[str, float] = {}
        """Node → the cached summary (by its cache time) a read ahead was started for."""
        self._reads = self._hits = self._shared = 0
        self._swept_at = -float("inf")

    async def get(self, node: str, *, newer_than: datetime | None = None) -> Summary:
        """The node's summary, at most ``max_age`` old; raises what the read raised.

        ``newer_than``: a cached summary read before that wall-clock moment does not do (a Pod
        that started after the read cannot be in it); a read is made, or joined, instead. Once
        a read that began after ``newer_than`` is cached, it answers every such caller: a Pod
        start costs one kubelet read, not one per caller.
        """
        cached = self._cached.get(node)
        if cached is not None and (newer_than is None or cached[1] > newer_than):
            age = trio.current_time() - cached[0]
            if age <= self._max_age:
                self._hits += 1
                if (
                    age >= self._ahead_at
                    and node not in self._flights
                    and self._ahead_of.get(node) != cached[0]
                ):
                    self._ahead_of[node] = cached[0]  # once per summary, even if it fails
                    self._start(node)  # the next read, ahead: this caller does not wait
                return cached[2]
        flight = self._flights.get(node)
        if flight is None:
            flight = self._start(node)
        else:
            self._shared += 1
        await flight.done.wait()
        if flight.error is not None:
            raise flight.error
        assert flight.summary is not None
        return flight.summary

    def _start(self, node: str) -> _Flight:
        flight = _Flight()
        self._flights[node] = flight
        self._nursery.start_soon(self._fly, node, flight)
        return flight

    async def _fly(self, node: str, flight: _Flight) -> None:
        self._reads += 1
        started = datetime.now(UTC)
        try:
            with trio.fail_after(self._timeout):
                flight.summary = await self._read(node)
        except Exception as exc:  # handed to every waiter; never cached
            flight.error = exc
        else:
            now = trio.current_time()
            self._cached[node] = (now, started, flight.summary)
            self._sweep(now)
        finally:
            del self._flights[node]
            flight.done.set()

    def _sweep(self, now: float) -> None:
        """Drop summaries past ``max_age``: they are never served again, only held.

        A node nobody reads any more (drained, deleted, its Instances gone) would otherwise
        keep its last summary for the worker's lifetime. Swept at most once per ``max_age``,
        so the cost stays one pass over the nodes per freshness period.
        """
        if now - self._swept_at < self._max_age:
            return
        self._swept_at = now
        for node in [n for n, (at, _, _) in self._cached.items() if now - at > self._max_age]:
            del self._cached[node]
            self._ahead_of.pop(node, None)

    @property
    def cached_nodes(self) -> frozenset[str]:
        """The nodes whose summary is held now."""
        return frozenset(self._cached)

    def statistics(self) -> CacheStatistics:
        """Counters for the load test and ``/debug``."""
        return CacheStatistics(self._reads, self._hits, self._shared)
