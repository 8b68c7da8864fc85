"""Bounded, jittered delays between attempts, shared by the informer and write retries."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Bounded exponential delay between failed attempts.

    Every node runs a Device Manager, so after an API server outage they all retry at once;
    the jitter (a fraction taken off, never added, so ``maximum`` stays a true bound) spreads
    them out.
    """

    initial: float = 1.0
    maximum: float = 60.0
    factor: float = 2.0
    jitter: float = 0.2

    def delay(self, failures: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait after the ``failures``-th consecutive failure (1-based)."""
        base = self.initial
        for _ in range(max(0, failures - 1)):
            base *= self.factor
            if base >= self.maximum:
                break
        base = min(base, self.maximum)
        return base * (1.0 - self.jitter * rand())
