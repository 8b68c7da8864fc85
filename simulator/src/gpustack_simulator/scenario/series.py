"""Usage time series: what a Pod's ``usage`` points mean at any scenario time.

The kubelet summary and metrics.k8s.io read the same series, so the two agree on a figure at
the same instant; CPU time is integrated from the points so cumulative counters never go back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from gpustack_core.quantity import parse_quantity
from gpustack_simulator.scenario.schema import PodDoc, Quantity


def _base_units(value: Quantity, *, nano: bool) -> int:
    """A usage figure in base units: whole numbers as written, quantities converted exactly."""
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value} is negative")
        return value
    amount = parse_quantity(value) * (10**9 if nano else 1)
    if amount < 0:
        raise ValueError(f"quantity {value!r} is negative")
    return math.ceil(amount)


@dataclass(frozen=True)
class _Point:
    t: float
    nanocores: int | None
    memory: int | None
    storage: int | None


@dataclass(frozen=True)
class _Series:
    """A Pod's usage points; each holds from its ``t`` until the next."""

    points: tuple[_Point, ...]

    def at(self, t: float) -> _Point | None:
        """The point in force at ``t``; ``None`` before the first (the kubelet has no entry)."""
        current = None
        for point in self.points:
            if point.t > t:
                break
            current = point
        return current

    def core_nanoseconds(self, t: float) -> int:
        """Cumulative CPU (``usageCoreNanoSeconds``): the rate integrated up to ``t``."""
        total = Fraction(0)
        for i, point in enumerate(self.points):
            if point.t > t:
                break
            end = t if i + 1 == len(self.points) else min(t, self.points[i + 1].t)
            total += (point.nanocores or 0) * (Fraction(end) - Fraction(point.t))
        return math.floor(total)


def _series(doc: PodDoc) -> _Series:
    return _Series(
        tuple(
            _Point(
                t=p.t,
                nanocores=None if p.cpu is None else _base_units(p.cpu, nano=True),
                memory=None if p.memory is None else _base_units(p.memory, nano=False),
                storage=None if p.storage is None else _base_units(p.storage, nano=False),
            )
            for p in doc.usage
        )
    )
