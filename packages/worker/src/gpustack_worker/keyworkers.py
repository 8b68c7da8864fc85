"""The worker half every controller of the worker shares: tasks taking keys off a work queue.

client-go's ``processNextWorkItem``, once: a key is reconciled by one task at a time; an API
error or an object that does not decode puts it back rate-limited (the reconcile is
level-triggered and idempotent, so retrying is always right); success forgets its failures and,
when the reconcile asks for a recheck in some seconds, adds it back after them. ``busy`` counts
the reconciles in flight so :meth:`KeyWorkers.drain` can end a shutdown with no write half-made;
the last one out wakes the drain (an event, not a poll: a shutdown waits no tick longer than its
last write, and an idle worker spends no wake-ups on it).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final

import trio

from gpustack_core.decoding import ContractError
from gpustack_kube.client import KubeError
from gpustack_kube.workqueue import ShutDown, WorkQueue

WRITES_KEPT: Final = 1024
"""How many of a controller's latest writes :func:`write_log` keeps. The log is read by tests and
by someone debugging a live worker; kept whole it would grow for the life of the process."""


def write_log() -> deque[tuple[str, str]]:
    """A controller's ``(verb, what)`` record of its writes: the latest :data:`WRITES_KEPT`."""
    return deque(maxlen=WRITES_KEPT)


class KeyWorkers:
    """``reconcile`` run over ``queue``'s keys by :meth:`run`'s tasks.

    ``again_at_once``: errors that put the key back without a backoff (another writer moved
    the object meanwhile: read it again now). ``after``: awaited after each key, success or not
    (the Instance controller posts the Events its reconcile queued).
    """

    def __init__(
        self,
        queue: WorkQueue,
        reconcile: Callable[[str], Awaitable[float | None]],
        log: logging.Logger,
        *,
        again_at_once: tuple[type[KubeError], ...] = (),
        after: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.queue = queue
        self.reconcile = reconcile
        self.log = log
        self.again_at_once = again_at_once
        self.after = after
        self.busy = 0
        self._idle = trio.Event()
        self._idle.set()

    async def run(self, workers: int) -> None:
        """``workers`` tasks, until the queue is shut down."""
        async with trio.open_nursery() as nursery:
            for _ in range(workers):
                nursery.start_soon(self._worker)

    async def drain(self, timeout: float = 10.0) -> None:
        """Stop taking keys and wait (at most ``timeout``) for the reconciles in flight.

        Cancelling a worker mid-request abandons the request it was sending; draining first
        lets a clean shutdown (or a test's teardown) end with no write half-made.
        """
        self.queue.shut_down()
        with trio.move_on_after(timeout):
            while self.busy:  # a key taken since the last one finished: wait for it too
                await self._idle.wait()

    async def _worker(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except ShutDown:
                return
            if not self.busy:
                self._idle = trio.Event()
            self.busy += 1
            try:
                try:
                    requeue = await self.reconcile(key)
                except self.again_at_once:
                    self.queue.add(key)
                except (KubeError, ContractError) as exc:
                    self.log.warning("reconciling %s: %s; retrying", key, exc)
                    self.queue.add_rate_limited(key)
                else:
                    self.queue.forget(key)
                    if requeue:
                        self.queue.add_after(key, requeue)
                finally:
                    self.queue.done(key)
                if self.after is not None:
                    await self.after()
            finally:
                self.busy -= 1
                if not self.busy:
                    self._idle.set()
