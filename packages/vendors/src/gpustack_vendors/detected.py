"""The handles a backend's last detection found, detected on first use: one lock, one cache."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

_C = TypeVar("_C")
_P = TypeVar("_P")


class Detected(Generic[_C, _P]):
    """Cards (``_C``) and partitions (``_P``) by id, as the last detection remembered them.

    Asked before any detection has found a card, it runs ``detect`` (which calls
    :meth:`remember`) and answers what that found.
    """

    def __init__(self, detect: Callable[[], object]) -> None:
        self._detect = detect
        self._lock = threading.Lock()
        self._cards: dict[str, _C] = {}
        self._partitions: dict[str, _P] = {}

    def remember(self, cards: dict[str, _C], partitions: dict[str, _P] | None = None) -> None:
        """Replace what is known with one detection's findings."""
        with self._lock:
            self._cards, self._partitions = cards, {} if partitions is None else partitions

    def both(self) -> tuple[dict[str, _C], dict[str, _P]]:
        """The cards and the partitions, detecting first if no card is known."""
        with self._lock:
            if self._cards:
                return self._cards, self._partitions
        self._detect()
        with self._lock:
            return self._cards, self._partitions

    def cards(self) -> dict[str, _C]:
        """The cards, detecting first if none is known."""
        return self.both()[0]
