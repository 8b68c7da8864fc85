"""Step functions of virtual time, the shape every synthesized figure takes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

_V = TypeVar("_V")


@dataclass(frozen=True)
class Steps(Generic[_V]):
    """A value that changes at given times: ``Steps(((0, 93), (30, 223)))``."""

    points: Sequence[tuple[float, _V]]

    def at(self, t: float) -> _V:
        """The value in force at ``t`` (the first value before the first point)."""
        current = self.points[0][1]
        for start, value in self.points:
            if start > t:
                break
            current = value
        return current


def const(value: _V) -> Steps[_V]:
    """A value that never changes."""
    return Steps(((0.0, value),))


@dataclass
class VirtualClock:
    """Time that moves only when told to, so a synthesized timeline is exact and instant."""

    now: float = 0.0

    def __call__(self) -> float:
        """The current virtual time, in seconds."""
        return self.now

    def sleep(self, seconds: float) -> None:
        """Advance instead of waiting."""
        self.now += seconds


_N = TypeVar("_N")


@dataclass(frozen=True)
class NodeSpec(Generic[_N]):
    """A node to synthesize (a vendor's node description) and what a reader needs to know."""

    file: str
    description: str
    sources: tuple[str, ...]
    node: _N
    samples: int = 4
    interval: float = 15.0
