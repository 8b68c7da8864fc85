"""How long a test waits in real time: long enough that only a hang ever reaches it.

A deadline in a test that runs real processes, sockets or informers bounds a hang; it must never
decide pass or fail on a healthy run. The suite is run on shared machines where a second of wall
time can stretch to ten, and a tight ``fail_after(3)`` then fails a correct system. So every
real-time wait in ``tests/`` takes its bound from here, and what a test *asserts* is a condition
(an event, a state reached), never that it was reached within a number of seconds. Where a bound
is itself the behaviour (a period, a backoff, a TTL), the test runs on ``trio.testing.MockClock``
and asserts it in virtual time instead.

``GPUSTACK_TEST_PATIENCE`` raises (or lowers, when hunting a hang) the bound for one run.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import trio

HANG = float(os.environ.get("GPUSTACK_TEST_PATIENCE", "120"))
"""Seconds after which a wait that a healthy run always finishes is taken for a hang."""


async def until(check: Callable[[], object], what: str, *, poll: float = 0.05) -> object:
    """``check()`` once it is truthy (polled every ``poll`` s); fails naming ``what`` on a hang."""
    last: object = None
    with trio.move_on_after(HANG):
        while True:
            last = check()
            if last:
                return last
            await trio.sleep(poll)
    pytest.fail(f"not within {HANG:.0f}s (a hang): {what}; last: {last!r}")
