"""C-ABI plumbing every fake C library shares.

Reading scalar arguments, writing through the caller's pointers, checking an answer's rows.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any


def scalar(arg: object) -> int:
    """A C scalar argument as an int, whether passed as a Python int or a ctypes value."""
    value = getattr(arg, "value", arg)
    if not isinstance(value, int):
        raise TypeError(f"expected an integer argument, got {arg!r}")
    return value


def target(pointer: object) -> Any:
    """Something indexable that writes into the caller's memory.

    The bindings pass ``ctypes.pointer``s and arrays, both writable by index; ``ctypes.byref``
    gives a ``CArgObject`` that is not, so it is turned back into a pointer to its object.
    """
    obj = getattr(pointer, "_obj", None)
    return ctypes.pointer(obj) if obj is not None else pointer


def rows(name: str, value: object, row_type: type) -> Sequence[Any]:
    """``value`` as the list of ``row_type`` rows the answer to ``name`` must be."""
    if not isinstance(value, Sequence) or not all(isinstance(row, row_type) for row in value):
        raise TypeError(f"{name}: answer must be a list of {row_type.__name__}, got {value!r}")
    return value
