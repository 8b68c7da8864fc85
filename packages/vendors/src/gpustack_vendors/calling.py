"""The plumbing every backend over a handed-in binding shares: one error, ``_call`` and ``_maybe``.

A backend calls its binding by method name; a failure the binding raises (an exception with the
library's numeric code in ``value``) becomes the backend's :class:`CallError` subclass, which
maps that code to a reason by number (:mod:`gpustack_vendors.errors`) and says whether the card
itself is gone (``fatal``). A figure a card may not support is read with ``_maybe``: absent
rather than fatal to the pass.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from typing import Any, ClassVar, TypeVar

from gpustack_core.reasons import QueryReason
from gpustack_vendors import errors

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


class BindingBackend:
    """``_call`` and ``_maybe`` over the binding :meth:`_binding` returns.

    :attr:`call_error` is the backend's :class:`CallError`; :meth:`_failure` is the exception
    class the binding raises (a class attribute, or the binding's own, as pynvml's).
    """

    call_error: ClassVar[type[CallError]]
    binding_error: ClassVar[type[Exception]]

    def _binding(self) -> object:
        """The binding, typed by the subclass as its surface (``<vendor>.surface``)."""
        raise NotImplementedError

    def _failure(self) -> type[Exception]:
        return self.binding_error

    def _call(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self._binding(), fn)(*args)
        except self._failure() as exc:
            raise self.call_error(fn, int(exc.value)) from exc  # type: ignore[attr-defined]

    def _maybe(self, fn: str, *args: Any, convert: Callable[[Any], _T]) -> _T | None:
        """A figure that may be unsupported on this card: absent rather than fatal to the pass."""
        try:
            return convert(self._call(fn, *args))
        except self.call_error:
            return None
