"""Opening a vendor's C library lazily: the one loader every ctypes binding here uses.

Each binding keeps its own documented search order (an environment-variable override, then the
vendor's install paths, then the dynamic linker's search path) and its own
:class:`LibraryNotFound` subclass; what they share lives here:

- :func:`with_override`: ``$VARIABLE`` if set, then the binding's paths;
- :func:`open_first`: the first candidate that opens (and, where the soname is shared with an
  unrelated library, that the binding accepts), or one error naming the library and every path
  tried with why each failed;
- :func:`declare`: each symbol's C signature from a table, skipping symbols the library lacks so
  they are reported when called (as the binding's own "function not found" code) rather than
  making the whole library unusable.

Nothing here runs at import: a binding module imports cleanly on a host without the library, and
the replay simulator hands the bindings' wrapper classes fake libraries instead.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

Signature = tuple[tuple[Any, ...], Any]
"""A symbol's ``(argtypes, restype)``."""


class LibraryNotFound(OSError):  # noqa: N818 - named for what happened, like NVML's
    """No candidate path could be opened; the message names every path and why each failed.

    ``tried`` is the paths in order; ``attempts`` pairs each with its reason. Each binding raises
    its own subclass, so callers can tell which library was missing.
    """

    def __init__(self, library: str, tried: Sequence[tuple[str, str]]) -> None:
        self.library = library
        self.attempts = tuple(tried)
        self.tried = tuple(path for path, _ in tried)
        listed = "; ".join(f"{path} ({reason})" for path, reason in tried)
        super().__init__(f"{library} could not be loaded. Tried: {listed or 'no paths'}")

    def __reduce__(self) -> tuple[type[LibraryNotFound], tuple[str, tuple[Any, ...]]]:
        # OSError pickles as ``cls(*args)`` and our args are the message alone; rebuild from the
        # attempts instead, so a cached load failure survives copy and pickle.
        return (type(self), (self.library, self.attempts))


def with_override(variable: str, paths: Iterable[str]) -> tuple[str, ...]:
    """``$variable`` first when it is set and not empty, then ``paths`` in order."""
    override = os.environ.get(variable)
    return ((override,) if override else ()) + tuple(paths)


def returning(restype: Any, table: Mapping[str, tuple[Any, ...]]) -> dict[str, Signature]:
    """A signature table whose every symbol returns ``restype``: ``{name: argtypes}`` widened."""
    return {name: (argtypes, restype) for name, argtypes in table.items()}


def declare(lib: object, signatures: Mapping[str, Signature]) -> None:
    """Give each symbol its C signature, so ctypes checks widths instead of guessing.

    A symbol this library lacks is skipped here and reported when called, so one missing
    function does not make the whole library unusable.
    """
    for name, (argtypes, restype) in signatures.items():
        try:
            function = getattr(lib, name)
        except AttributeError:
            continue
        function.argtypes = list(argtypes)
        function.restype = restype


def open_first(
    paths: Iterable[str],
    *,
    library: str,
    not_found: type[LibraryNotFound],
    signatures: Mapping[str, Signature],
    mode: int | None = None,
    before: Callable[[str], None] | None = None,
    reject: Callable[[ctypes.CDLL], str | None] | None = None,
) -> ctypes.CDLL:
    """Open the first of ``paths`` that loads, declare ``signatures`` on it and return it.

    ``mode`` is passed to ``ctypes.CDLL`` when given (ctypes' default is ``RTLD_LOCAL``).
    ``before(path)`` runs first for each candidate (loading a helper library the vendor's needs);
    an ``OSError`` from it counts as that path failing. ``reject(lib)`` may refuse a library that
    opened, with the reason to record (a soname shared with an unrelated library). Raises
    ``not_found(library, tried)`` when no path serves.
    """
    tried: list[tuple[str, str]] = []
    for path in paths:
        try:
            if before is not None:
                before(path)
            lib = ctypes.CDLL(path) if mode is None else ctypes.CDLL(path, mode=mode)
        except OSError as exc:
            tried.append((path, str(exc) or type(exc).__name__))
            continue
        reason = reject(lib) if reject is not None else None
        if reason is not None:
            tried.append((path, reason))
            continue
        declare(lib, signatures)
        return lib
    raise not_found(library, tried)
