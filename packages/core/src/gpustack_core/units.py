"""Unit arithmetic shared by every figure the project reports.

All rounding lives here so that the worker's subresource and the Device Manager's exporter can
never disagree by a rounding step. The rule is **round up**: a non-zero measurement must never
read as ``0``, because ``0`` means "measured and idle" (585,728 B of working set is 1 MiB, not 0).
"""

from __future__ import annotations

import re
from fractions import Fraction

MIB = 1 << 20
"""Bytes in one MiB, the unit of every memory and storage figure."""

NANOCORES_PER_MILLICORE = 1_000_000
MILLICORES_PER_CORE = 1_000

UNITS_PER_ACCELERATOR = 1_600_000
"""One whole accelerator in allocation units (the reference system's ``ResourceMaxUnits``)."""


def ceil_div(numerator: int, denominator: int) -> int:
    """Return ``⌈numerator / denominator⌉`` for non-negative integers.

    Written as quotient plus a remainder test rather than ``(n + d - 1) // d`` so the same
    algorithm stays correct in fixed-width ports (the classic form overflows near 2**64).
    """
    if denominator <= 0:
        raise ValueError(f"ceil_div: denominator must be positive, got {denominator}")
    if numerator < 0:
        raise ValueError(f"ceil_div: numerator must be non-negative, got {numerator}")
    quotient, remainder = divmod(numerator, denominator)
    return quotient + (1 if remainder else 0)


def ceil_fraction(value: Fraction) -> int:
    """Round an exact non-negative rational up to an integer; negatives clamp to ``0``.

    Negative usage is never physical: metrics.k8s.io has been seen serving ``-250m``, which a
    fixed-width consumer wraps to ~1.8e19. Clamping to zero is the spec's answer.
    """
    if value <= 0:
        return 0
    return ceil_div(value.numerator, value.denominator)


def bytes_to_mib(value: int) -> int:
    """Convert a byte count to MiB, rounding up (non-zero never reads ``0``)."""
    return ceil_div(max(value, 0), MIB)


def nanocores_to_millicores(value: int) -> int:
    """Convert a nanocore rate to millicores, rounding up."""
    return ceil_div(max(value, 0), NANOCORES_PER_MILLICORE)


def percent_of(used: int, total: int) -> int | None:
    """Return ``⌈used × 100 / total⌉``, or ``None`` when the total is not a usable denominator.

    Not clamped: a used figure above its total is an anomaly to investigate (a leaking quota),
    and clamping would present it as a perfectly enforced one.
    """
    if total <= 0 or used < 0:
        return None
    return ceil_div(used * 100, total)


def restate_against_cap(measured_percent: int, cap_percent: int) -> int:
    """Restate a whole-card compute percentage against a slice's compute cap.

    A slice capped at 25 % measuring 11 % of the card used ``⌈11 × 100 / 25⌉ = 44`` % of its own
    allowance. A cap of ``0`` (not stated) or ``≥ 100`` (the whole card) passes the figure
    through. Not clamped: above 100 means the cap is not being enforced.
    """
    if cap_percent <= 0 or cap_percent >= 100:
        return measured_percent
    return ceil_div(max(measured_percent, 0) * 100, cap_percent)


def slice_memory_mib(units: int, card_mib: int) -> int | None:
    """Return a logical slice's memory quota in MiB, or ``None`` when it cannot be stated.

    ``max(units × card / 1,600,000, 1)``: units are clamped to one whole card, the division
    floors (the quota is what the shim enforces), and a granted slice never reads ``0``.
    """
    if units <= 0 or card_mib <= 0:
        return None
    units = min(units, UNITS_PER_ACCELERATOR)
    return max(units * card_mib // UNITS_PER_ACCELERATOR, 1)


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_DURATION_SCALE = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def seconds_of(text: str) -> float:
    """``15s``, ``1m``, ``500ms``, ``1h`` or plain seconds, as every period flag takes them.

    Raises ``ValueError`` naming the text when it is not a positive duration.
    """
    match = _DURATION.match(text.strip())
    if match is None or float(match[1]) <= 0:
        raise ValueError(f"{text!r} is not a positive duration like 15s, 1m or 500ms")
    return float(match[1]) * _DURATION_SCALE[match[2]]
