"""A rate-limited work queue with client-go's guarantees, for level-triggered controllers.

The guarantees a reconciler is written against (``k8s.io/client-go/util/workqueue``):

* **Deduplicated**: a key added many times before it is taken is handed out once.
* **Never concurrent per key**: a key being processed is not handed out again; added meanwhile,
  it is marked dirty and handed out once more after :meth:`done`, so no change is lost.
* **Rate-limited retries**: :meth:`add_rate_limited` delays a failing key exponentially per key
  (base × 2^failures, capped), and :meth:`forget` resets it once the key succeeds.
* **Delayed adds**: :meth:`add_after` for "look again in 30 s" (a lease, a pending node port).

Keys are strings (``namespace/name``), as client-go's. Time is trio's clock, so tests drive
it with ``MockClock``.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import trio


@dataclass
class ExponentialBackoff:
    """Per-key delay: ``base × 2^failures``, at most ``cap`` (client-go: 5 ms … 1000 s)."""

    base: float = 0.005
    cap: float = 1000.0
    _failures: dict[str, int] = field(default_factory=dict)

    def when(self, key: str) -> float:
        """The delay before ``key``'s next try, counting this failure."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        if failures > math.log2(self.cap / self.base) + 1:
            return self.cap
        return min(self.base * (1 << failures), self.cap)

    def forget(self, key: str) -> None:
        """``key`` succeeded: its next failure starts from ``base`` again."""
        self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        """How many times ``key`` has failed since it last succeeded."""
        return self._failures.get(key, 0)


class ShutDown(Exception):  # noqa: N818 — named as client-go's ``ShutDown``
    """The queue was shut down: no more keys will be handed out."""


class WorkQueue:
    """Keys to reconcile; see the module docstring for the guarantees."""

    def __init__(self, limiter: ExponentialBackoff | None = None) -> None:
        self.limiter = limiter or ExponentialBackoff()
        self._queue: list[str] = []
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._waiting: list[tuple[float, int, str]] = []
        self._sequence = 0
        self._wakeup = trio.Event()
        self._shut_down = False
        self.adds = 0
        """Keys accepted by :meth:`add` (including ones deduplicated); for tests and metrics."""

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: str) -> None:
        """Queue ``key`` unless it is already queued; mark it dirty if it is being processed."""
        self.adds += 1
        if self._shut_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
            self._notify()

    def add_after(self, key: str, delay: float) -> None:
        """Queue ``key`` once ``delay`` seconds have passed (at once when ``delay <= 0``)."""
        if delay <= 0:
            self.add(key)
            return
        self._sequence += 1
        heapq.heappush(self._waiting, (trio.current_time() + delay, self._sequence, key))
        self._notify()

    def add_rate_limited(self, key: str) -> None:
        """Queue ``key`` after its backoff: how a failed reconcile is retried."""
        self.add_after(key, self.limiter.when(key))

    def forget(self, key: str) -> None:
        """Reset ``key``'s backoff (after a successful reconcile)."""
        self.limiter.forget(key)

    async def get(self) -> str:
        """The next key, waiting for one; call :meth:`done` with it when finished."""
        while True:
            if self._shut_down:
                raise ShutDown
            self._release_due()
            if self._queue:
                key = self._queue.pop(0)
                self._dirty.discard(key)
                self._processing.add(key)
                return key
            self._wakeup = trio.Event()
            deadline = self._waiting[0][0] if self._waiting else math.inf
            with trio.move_on_at(deadline):
                await self._wakeup.wait()

    def done(self, key: str) -> None:
        """Finished with ``key``; if it was added while processing, queue it again now."""
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.append(key)
            self._notify()

    def shut_down(self) -> None:
        """Stop handing out keys; waiting :meth:`get` calls raise :class:`ShutDown`."""
        self._shut_down = True
        self._notify()

    def _release_due(self) -> None:
        now = trio.current_time()
        while self._waiting and self._waiting[0][0] <= now:
            _, _, key = heapq.heappop(self._waiting)
            self.add(key)

    def _notify(self) -> None:
        self._wakeup.set()
