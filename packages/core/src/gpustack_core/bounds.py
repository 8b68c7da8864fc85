"""The physical bounds of a Device Manager's figures: what no card can measure is no measurement.

A snapshot is an upstream its readers do not control — a vendor library returning garbage, a
sentinel read as a number, a node whose Device Manager is not ours. A figure outside what any
card can physically show is therefore dropped, with ``invalid_data`` noted, and never published:
a plausible-looking wrong number is worse than an absent one, and an absent figure always says
why (instance-metrics-reference.md, "Reasons for absent figures").

The bounds, each inclusive:

- memory, MiB: a used figure from 0 to the card's own stated total (or, where the card states
  none, :data:`MAX_CARD_MEMORY_MIB`); a card's total above 0 and at most that ceiling — 0 is
  "not stated", as the snapshot defines it, and stays silent;
- a whole card's percentages (memory, compute): 0 to 100;
- temperature, °C: from absolute zero to :data:`MAX_TEMPERATURE_CELSIUS`;
- power, W: 0 to :data:`MAX_POWER_WATTS`;
- every float finite (NaN and infinities are no reading).
"""

from __future__ import annotations

import math
from typing import Final, TypeVar

from gpustack_core.reasons import SectionReason

MAX_CARD_MEMORY_MIB: Final = 4 << 20
"""4 TiB of memory on one card. The largest accelerators made carry 288 GiB (AMD MI355X, NVIDIA
B300), so this leaves room for fourteen times that before a stated total is refused; 10^15 MiB
(an unset 64-bit field, a byte count read as MiB) is far beyond it."""

PERCENT_CAPACITY: Final = 100
"""A whole card's utilization can be no more than all of it."""

ABSOLUTE_ZERO_CELSIUS: Final = -273
"""No temperature is below it (−273.15 °C; the snapshot carries whole degrees)."""

MAX_TEMPERATURE_CELSIUS: Final = 200
"""A card shuts itself down far below this (GPU thermal shutdown sits around 90–125 °C), and
lead-free solder melts a few degrees above it: no working card reports more."""

MAX_POWER_WATTS: Final = 5000
"""The largest accelerator modules draw about 1.4 kW (OAM/SXM boards); five kilowatts through
one card's connectors is beyond any board made."""

N = TypeVar("N", int, float)


def within(value: N | None, low: N, high: N | None, what: str) -> tuple[N | None, str]:
    """``value`` when it is a finite figure in ``[low, high]``, else absent with its note.

    ``high`` of ``None`` checks the lower bound only (nothing states the upper one). The note is
    ``"<what>: invalid_data: <why>"``, empty when the figure stands or was absent already.
    """
    if value is None:
        return None, ""
    if isinstance(value, float) and not math.isfinite(value):
        return None, f"{what}: {SectionReason.INVALID_DATA}: {value} is not a finite number"
    if value < low:
        return None, f"{what}: {SectionReason.INVALID_DATA}: {value} is below {low}"
    if high is not None and value > high:
        return None, (
            f"{what}: {SectionReason.INVALID_DATA}: {value} exceeds the physical capacity {high}"
        )
    return value, ""


def card_memory(total: int) -> tuple[int | None, str]:
    """A card's stated total memory: ``None`` silently when not stated (``0``), else checked."""
    if total == 0:
        return None, ""
    if total < 0:
        return None, f"memory total: {SectionReason.INVALID_DATA}: {total} is below 1"
    return within(total, 1, MAX_CARD_MEMORY_MIB, "memory total")


def temperature(value: int | None) -> tuple[int | None, str]:
    """A card's temperature, °C, between absolute zero and :data:`MAX_TEMPERATURE_CELSIUS`."""
    return within(value, ABSOLUTE_ZERO_CELSIUS, MAX_TEMPERATURE_CELSIUS, "temperature")


def power(value: float | None) -> tuple[float | None, str]:
    """A card's power draw, W, between 0 and :data:`MAX_POWER_WATTS`."""
    return within(value, 0.0, float(MAX_POWER_WATTS), "power")
