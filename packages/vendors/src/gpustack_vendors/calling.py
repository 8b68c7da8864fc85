"""The plumbing every backend over a handed-in binding shares: one error, ``_call`` and ``_maybe``.

A backend calls its binding through the bound function itself
(``self._call(self._mxsml.mxSmlGetDeviceCount)``), never by a name looked up at run time, so the
surface's argument and return types (``gpustack_vendors.<vendor>.surface``) reach the backend's
code and mypy checks each call against them. A failure the binding raises (an exception with the
library's numeric code in ``value``) becomes the backend's :class:`CallError` subclass, named by
the called function's ``__name__`` — the library's own name for every binding a backend is handed:
pynvml's and amdsmi's module functions, our ctypes bindings' methods, the replay stand-ins' typed
methods and the recorder's proxies, whose closures carry the wrapped function's name. The code
maps to a reason by number (:mod:`gpustack_vendors.errors`) and says whether the card itself is
gone (``fatal``). A figure a card may not support is read with ``_maybe``: absent rather than
fatal to the pass.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from typing import ClassVar, ParamSpec, TypeVar

from gpustack_core.reasons import QueryReason
from gpustack_vendors import errors

_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T")


class CallError(Exception):
    """A call failed; carries the numeric code and the reason it maps to.

    A subclass names its :attr:`library` (for the message), its code → reason table and, where
    the library has them, the codes that mean the card itself is unhealthy.
    """

    library: ClassVar[str]
    reasons: ClassVar[Mapping[int, QueryReason]]
    fatal_codes: ClassVar[Container[int]] = frozenset()

    def __init__(self, fn: str, code: int) -> None:
        super().__init__(f"{fn}: {self.library} error {code}{self.detail(code)}")
        self.fn = fn
        self.code = code
        self.reason = errors.reason(self.reasons, code)
        self.fatal = code in self.fatal_codes

    @staticmethod
    def detail(code: int) -> str:
        """Text after the code in the message (a status name, where the binding has one)."""
        return ""


def same(value: _T) -> _T:
    """``_maybe``'s conversion for an answer the backend reads as the binding returned it."""
    return value


class BindingBackend:
    """``_call`` and ``_maybe`` over the bound functions of a binding typed as its surface.

    :attr:`call_error` is the backend's :class:`CallError`; :meth:`_failure` is the exception
    class the binding raises (a class attribute, or the binding's own, as pynvml's).
    """

    call_error: ClassVar[type[CallError]]
    binding_error: ClassVar[type[Exception]]

    def _failure(self) -> type[Exception]:
        return self.binding_error

    def _call(self, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """``fn(*args)``; the binding's failure becomes :attr:`call_error` named ``fn.__name__``."""
        try:
            return fn(*args, **kwargs)
        except self._failure() as exc:
            raise self.call_error(fn.__name__, int(exc.value)) from exc  # type: ignore[attr-defined]

    def _maybe(
        self,
        convert: Callable[[_R], _T],
        fn: Callable[_P, _R],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _T | None:
        """A figure that may be unsupported on this card: absent rather than fatal to the pass.

        ``convert`` comes first because ``fn``'s arguments are the rest of the call.
        """
        try:
            return convert(self._call(fn, *args, **kwargs))
        except self.call_error:
            return None
