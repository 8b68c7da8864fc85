"""Field errors worded as kube-apiserver words them (``k8s.io/apimachinery/.../field``).

A refusal a user reads in ``kubectl`` should look like every other refusal the API server gives:
``spec.additionalVolumes[1].mountPath: Invalid value: "/mnt//x": must be an absolute, canonical
path``. The wording is apimachinery's ``field.Error.Error()``: the path, the error type, the
value (quoted as Go's ``%q`` for strings) for the types that show one, then the detail; several
errors aggregate as ``[a, b]``. The ``Status`` causes use the same type's ``reason``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

ErrorType = Literal[
    "Not found",
    "Required value",
    "Duplicate value",
    "Invalid value",
    "Unsupported value",
    "Forbidden",
    "Too long",
    "Too many",
]

REASONS: Final[dict[str, str]] = {
    "Not found": "FieldValueNotFound",
    "Required value": "FieldValueRequired",
    "Duplicate value": "FieldValueDuplicate",
    "Invalid value": "FieldValueInvalid",
    "Unsupported value": "FieldValueNotSupported",
    "Forbidden": "FieldValueForbidden",
    "Too long": "FieldValueTooLong",
    "Too many": "FieldValueTooMany",
}
"""Each type's ``metav1.CauseType``, the ``reason`` of a ``details.causes`` entry."""

_NO_VALUE: Final = frozenset({"Required value", "Forbidden", "Too long"})
"""Types whose message shows no value (apimachinery omits it for these)."""

_UNSET: Final = object()


def _go_value(value: Any) -> str:
    """A value as ``%q``/``%v`` print it: strings quoted with Go's escapes, numbers bare."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True, slots=True)
class FieldError:
    """One refusal of one field."""

    field: str
    """The path in the API's spelling: ``spec.ports[1]``, ``metadata.name``."""
    type: ErrorType
    value: Any = _UNSET
    """The offending value, shown for the types that show one; unset for none."""
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"

    def body(self) -> str:
        """The message without its field (apimachinery's ``ErrorBody``): a cause's message."""
        body: str = self.type
        if self.type not in _NO_VALUE and self.value is not _UNSET:
            body = f"{body}: {_go_value(self.value)}"
        if self.detail:
            body = f"{body}: {self.detail}"
        return body

    @property
    def reason(self) -> str:
        """The cause's ``reason`` in a ``Status``."""
        return REASONS[self.type]

    def cause(self) -> dict[str, str]:
        """The ``details.causes`` entry: the field apart, as kubectl prints ``* field: body``."""
        return {"reason": self.reason, "message": self.body(), "field": self.field}


def invalid(field: str, value: Any, detail: str) -> FieldError:
    """``field: Invalid value: <value>: detail``."""
    return FieldError(field, "Invalid value", value, detail)


def duplicate(field: str, value: Any) -> FieldError:
    """``field: Duplicate value: <value>``."""
    return FieldError(field, "Duplicate value", value)


def required(field: str, detail: str) -> FieldError:
    """``field: Required value: detail``."""
    return FieldError(field, "Required value", detail=detail)


def forbidden(field: str, detail: str) -> FieldError:
    """``field: Forbidden: detail``."""
    return FieldError(field, "Forbidden", detail=detail)


def not_found(field: str, value: Any, detail: str = "") -> FieldError:
    """``field: Not found: <value>``."""
    return FieldError(field, "Not found", value, detail)


def aggregate(errors: Sequence[FieldError]) -> str:
    """One message for several errors: ``[a, b]``, as apimachinery's ``ToAggregate().Error()``."""
    texts = list(dict.fromkeys(str(e) for e in errors))
    if len(texts) == 1:
        return texts[0]
    return "[" + ", ".join(texts) + "]"


def refusal_status(errors: Sequence[FieldError]) -> tuple[int, str]:
    """The code and reason a webhook refuses ``errors`` with, as kube-apiserver words them.

    ``403 Forbidden`` when every error is a ``Forbidden`` one (a closed gate, an immutable
    field): the request is well formed and not allowed. Otherwise ``422 Invalid``.
    """
    if all(e.type == "Forbidden" for e in errors):
        return 403, "Forbidden"
    return 422, "Invalid"


__all__ = [
    "REASONS",
    "ErrorType",
    "FieldError",
    "aggregate",
    "duplicate",
    "forbidden",
    "invalid",
    "not_found",
    "refusal_status",
    "required",
]
