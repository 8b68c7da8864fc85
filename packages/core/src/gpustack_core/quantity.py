"""Kubernetes resource quantities, parsed exactly.

Quantities are parsed to :class:`fractions.Fraction` so that sums are exact and rounding happens
once, at the end, in :mod:`gpustack_core.units` ("bytes summed first, then rounded up").
The grammar is apimachinery's: an optionally signed decimal number followed by a binary-SI suffix
(``Ki`` … ``Ei``), a decimal-SI suffix (``n u m k M G T P E``) or a decimal exponent (``e3``).
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

from gpustack_core.units import MILLICORES_PER_CORE, ceil_fraction

_BINARY_SI = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

_QUANTITY = re.compile(
    r"""
    (?P<sign>[+-])?
    (?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)
    (?:
        (?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)
      | [eE](?P<exponent>[+-]?[0-9]+)
      | (?P<decimal>[numkMGTPE]?)
    )
    """,
    re.VERBOSE,
)

MAX_QUANTITY_LENGTH = 64
"""Longer strings are rejected: no real limit or usage needs more, and it bounds the work."""

MAX_DECIMAL_EXPONENT = 64
"""Exponents past ±64 are rejected rather than expanded into enormous integers."""


class QuantityError(ValueError):
    """A string is not a Kubernetes quantity; the message quotes it and says why."""


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a quantity such as ``250m``, ``2Gi``, ``1e3`` or ``1.5`` to an exact rational.

    JSON numbers are accepted too (YAML scenarios write ``cpu: 2``); floats go through their
    shortest ``repr`` so ``0.1`` means one tenth, not the nearest binary fraction.
    """
    return _parse_text(_quantity_text(value))


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Fraction:
    """Parse one spelling; memoized, since a node's Pods repeat a handful (``8``, ``64Gi``).

    The exporter reads every Instance Pod's limits each round, and exact parsing costs tens of
    µs a quantity: at ~800 Instance Pods that was a third of a round's CPU.

    A ``Fraction`` is immutable, so sharing one is safe; a refusal raises every time (not cached).
    """
    if not text:
        raise QuantityError("quantity '': empty string")
    if len(text) > MAX_QUANTITY_LENGTH:
        raise QuantityError(
            f"quantity {text[:16]!r}…: longer than {MAX_QUANTITY_LENGTH} characters"
        )
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(f"quantity {text!r}: not of the form <number>[suffix]")
    number = Fraction(match["number"])
    if match["sign"] == "-":
        number = -number
    if match["binary"] is not None:
        return number * (1 << (10 * _BINARY_SI[match["binary"]]))
    if match["exponent"] is not None:
        exponent = int(match["exponent"])
        if abs(exponent) > MAX_DECIMAL_EXPONENT:
            raise QuantityError(f"quantity {text!r}: exponent {exponent} is out of range")
    else:
        exponent = _DECIMAL_SI[match["decimal"]]
    return number * Fraction(10) ** exponent


def _quantity_text(value: object) -> str:
    """Spell a quantity as text, refusing what no Kubernetes quantity can be."""
    if isinstance(value, bool):
        raise QuantityError(f"quantity {value!r}: a boolean is not a quantity")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"quantity {value!r}: not a finite number")
        return repr(value)
    if isinstance(value, str):
        return value.strip()
    raise QuantityError(f"quantity {value!r}: expected a string or number")


def cpu_to_millicores(value: Fraction) -> int:
    """Convert a CPU quantity in cores to millicores, rounding up; negatives read ``0``."""
    return ceil_fraction(value * MILLICORES_PER_CORE)


_DECIMAL_SUFFIXES = {exponent: suffix for suffix, exponent in _DECIMAL_SI.items()}
_BINARY_SUFFIXES = {power: suffix for suffix, power in _BINARY_SI.items()}
_NANO = Fraction(1, 10**9)


def canonical_quantity(value: str | int | float) -> str:
    """The quantity as kube-apiserver stores and returns it (apimachinery's canonical form).

    A quantity keeps the format it was written in — binary SI (``Gi``), decimal SI (a plain
    number or ``k``, ``m``, …) or an exponent (``e3``) — and is then written with the largest
    suffix that keeps an integer mantissa: ``320000`` is ``320k``, ``8000m`` is ``8``, ``0.5``
    is ``500m``, ``1.5Gi`` is ``1536Mi``. A binary quantity below 1024 in magnitude, or not a
    whole number, is written in decimal SI. Precision finer than ``1n`` is rounded up, as the
    server rounds when it parses. Raises :class:`QuantityError` as :func:`parse_quantity` does.
    """
    text = _quantity_text(value)
    number = parse_quantity(value)
    match = _QUANTITY.fullmatch(text)
    assert match is not None  # parse_quantity accepted it
    if number == 0:
        return "0"
    if match["binary"] is not None and abs(number) >= 1024 and number.denominator == 1:
        mantissa, power = int(number), 0
        while mantissa % 1024 == 0 and power < max(_BINARY_SUFFIXES):
            mantissa //= 1024
            power += 1
        return f"{mantissa}{_BINARY_SUFFIXES.get(power, '')}"
    nanos = number / _NANO
    mantissa = math.ceil(nanos) if number > 0 else math.floor(nanos)
    exponent = -9
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    shift = exponent % 3  # Python's modulo is never negative: step down to a multiple of 3
    mantissa *= 10**shift
    exponent -= shift
    if match["exponent"] is not None:
        return f"{mantissa}e{exponent}" if exponent else str(mantissa)
    suffix = _DECIMAL_SUFFIXES.get(exponent)
    if suffix is None:
        return f"{mantissa}e{exponent}"
    return f"{mantissa}{suffix}"
