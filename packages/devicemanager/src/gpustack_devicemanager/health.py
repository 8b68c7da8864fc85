"""Liveness from the monitor's own progress."""

from __future__ import annotations

from dataclasses import dataclass

STALE_PERIODS = 3
"""A monitor that has not completed a tick for this many periods is not alive."""


@dataclass(frozen=True)
class Liveness:
    """Whether the monitor is making progress at ``now`` (all times monotonic seconds)."""

    period: float
    started_at: float

    def alive(self, now: float, last_tick: float | None) -> bool:
        """Alive while the newest completed tick (or the start, before any) is recent enough.

        Counting from the start gives the first tick (detection included) the same allowance
        as any other instead of failing the probe during start-up.
        """
        reference = self.started_at if last_tick is None else last_tick
        return now - reference <= STALE_PERIODS * self.period
