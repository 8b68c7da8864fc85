"""The CLI's foreground mode of a daemon: serve until SIGTERM or SIGINT, then stop gracefully."""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import trio

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stoppable(Protocol):
    """What a daemon's ``serve`` reports once it listens: the event that stops it."""

    @property
    def shutdown(self) -> trio.Event:
        """Set to stop serving (gracefully)."""
        ...


R = TypeVar("R", bound=Stoppable)


async def serve_until_signalled(
    start: Callable[[trio.TaskStatus[R]], Awaitable[object]],
    announce: Callable[[R], None],
    log: logging.Logger,
) -> None:
    """Serve until the first SIGTERM or SIGINT, then stop gracefully; returns once stopped.

    ``start`` is a ``serve`` taking ``task_status``; ``announce`` runs once it listens, and the
    signal sets the ``shutdown`` it reported.
    """
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async with trio.open_nursery() as nursery:
            running: R = await nursery.start(start)
            announce(running)
            async for signum in signals:
                log.info("received %s, stopping", signal.Signals(signum).name)
                running.shutdown.set()
                break
