"""Kubernetes resource quantities, parsed exactly.

Quantities are parsed to :class:`fractions.Fraction` so that sums are exact and rounding happens
once, at the end, in :mod:`gpustack_core.units` ("bytes summed first, then rounded up").
The grammar is apimachinery's: an optionally signed decimal number followed by a binary-SI suffix
(``Ki`` … ``Ei``), a decimal-SI suffix (``n u m k M G T P E``) or a decimal exponent (``e3``).
"""

from __future__ import annotations

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
    text = _quantity_text(value)
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
