"""What every ctypes binding's wrapper shares: its error class and its per-call symbol lookup.

Each binding keeps its own status codes, names and exception class (callers branch on them);
the shape is the same everywhere:

- :class:`StatusError`: a non-success status, ``args == (value, function)`` so it pickles and
  copies without losing the code, printed as ``function: NAME (value)``;
- :class:`CLibrary`: symbols looked up per call, not at construction, so a library that lacks one
  function (an older driver) still serves the others, and a missing symbol raises the binding's
  own "function not found" code rather than one that would blame the device;
- :func:`grow_and_retry`: the bounded probe-then-fill negotiation for a list whose length the
  library reports and which may grow between probe and fill.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, TypeVar

_Status = Callable[..., int]

T = TypeVar("T")


class StatusError(Exception):
    """A non-success status; consumers branch on :attr:`value`, never on the text."""

    def __init__(self, value: int, function: str | None = None) -> None:
        super().__init__(value, function)
        self.value = value
        self.function = function

    def describe(self) -> str:
        """The status in words: the header's name and the value, unless a binding says more."""
        return f"{self.status_name(self.value)} ({self.value})"

    @staticmethod
    def status_name(value: int) -> str:
        """The header's name for ``value``; each binding supplies its own table."""
        return f"STATUS_{value}"

    def __str__(self) -> str:
        text = self.describe()
        return f"{self.function}: {text}" if self.function else text


class CLibrary:
    """Pythonic calls over a vendor library object: a ``ctypes.CDLL`` or a fake with its ABI.

    A subclass names its :attr:`error` class, its :attr:`success` code and the code a missing
    symbol is raised as (:attr:`missing_symbol`).
    """

    error: ClassVar[type[StatusError]]
    success: ClassVar[int] = 0
    missing_symbol: ClassVar[int]

    def __init__(self, lib: object) -> None:
        self.lib = lib

    def _function(self, name: str) -> _Status:
        try:
            function: _Status = getattr(self.lib, name)
        except AttributeError:
            raise self.error(self.missing_symbol, name) from None
        return function

    def _call(self, name: str, *args: object) -> None:
        status = int(self._function(name)(*args))
        if status != self.success:
            raise self.error(status, name)


def grow_and_retry(
    probe: Callable[[], int | None],
    fill: Callable[[int], T | None],
    *,
    attempts: int,
    slack: int,
    empty: T,
    exhausted: Callable[[], Exception],
) -> T:
    """Probe for the row count, then fill a buffer with room to spare; re-probe if it outgrew it.

    ``probe()`` returns how many rows the library holds, or ``None`` for none at all (``empty``
    is returned), raising on a status that is not the protocol working. ``fill(capacity)``
    returns the rows, or ``None`` when the library answered that the buffer was too small.
    Capacity grows to at least twice the last one, so the retry makes progress; after
    ``attempts`` rounds ``exhausted()`` is raised, because a truncated list returned as complete
    would drop processes (their memory would read as free).
    """
    capacity = 0
    for _ in range(attempts):
        count = probe()
        if count is None:
            return empty
        capacity = max(count + slack, capacity * 2)
        rows = fill(capacity)
        if rows is not None:
            return rows
    raise exhausted()
