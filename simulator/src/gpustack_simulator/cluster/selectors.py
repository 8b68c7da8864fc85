"""Label and field selectors, as the API server parses them.

Only what the daemons and kubectl send is accepted; anything else is rejected with the API
server's own wording, so a client bug shows up as a 400 rather than as a silently wider list.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Predicate = Callable[[Mapping[str, Any]], bool]

_SET_OP = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EXISTS = re.compile(r"^\s*(!?)([A-Za-z0-9_./-]+)\s*$")
_EQUALITY = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|=|!=)\s*([A-Za-z0-9_.-]*)\s*$")

FIELDS: Mapping[str, Callable[[Mapping[str, Any]], str]] = {
    "metadata.name": lambda o: str(o.get("metadata", {}).get("name", "")),
    "metadata.namespace": lambda o: str(o.get("metadata", {}).get("namespace", "")),
    "spec.nodeName": lambda o: str(o.get("spec", {}).get("nodeName", "")),
    "status.phase": lambda o: str(o.get("status", {}).get("phase", "")),
}


class SelectorError(ValueError):
    """A selector the API server would reject (answered as 400 BadRequest)."""


def _split(text: str) -> list[str]:
    """Split on commas outside parentheses (``a in (x,y),b=c``)."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in parts if p.strip()]


def label_selector(text: str) -> Predicate:
    """Parse ``a=b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``, comma-joined."""
    checks: list[Predicate] = []
    for term in _split(text):
        if match := _SET_OP.match(term):
            key, op, raw = match.groups()
            values = {v.strip() for v in raw.split(",") if v.strip()}
            checks.append(_set_check(key, op == "in", values))
        elif match := _EQUALITY.match(term):
            key, op, value = match.groups()
            checks.append(_equality_check(key, op != "!=", value))
        elif match := _EXISTS.match(term):
            negate, key = match.groups()
            checks.append(_exists_check(key, not negate))
        else:
            raise SelectorError(f"unable to parse requirement: {term.strip()!r}")
    return lambda obj: all(check(obj) for check in checks)


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = obj.get("metadata", {}).get("labels") or {}
    return labels


def _set_check(key: str, inside: bool, values: set[str]) -> Predicate:
    def check(obj: Mapping[str, Any]) -> bool:
        labels = _labels(obj)
        return (
            (key in labels and labels[key] in values)
            if inside
            else (key not in labels or labels[key] not in values)
        )

    return check


def _equality_check(key: str, equal: bool, value: str) -> Predicate:
    def check(obj: Mapping[str, Any]) -> bool:
        labels = _labels(obj)
        return (labels.get(key) == value) if equal else (labels.get(key) != value)

    return check


def _exists_check(key: str, present: bool) -> Predicate:
    return lambda obj: (key in _labels(obj)) == present


def field_selector(text: str) -> Predicate:
    """Parse ``spec.nodeName=n1,status.phase!=Failed`` over the fields the API supports here."""
    checks: list[Predicate] = []
    for term in _split(text):
        match = _EQUALITY.match(term)
        if match is None:
            raise SelectorError(f"invalid selector: {term.strip()!r}; can't understand it")
        field, op, value = match.groups()
        getter = FIELDS.get(field)
        if getter is None:
            raise SelectorError(f"field label not supported: {field}")
        checks.append(_field_check(getter, value, op != "!="))
    return lambda obj: all(check(obj) for check in checks)


def _field_check(getter: Callable[[Mapping[str, Any]], str], value: str, equal: bool) -> Predicate:
    return lambda obj: (getter(obj) == value) == equal


@dataclass(frozen=True)
class Narrowing:
    """What a request's selectors require exactly, as far as the store's indexes answer it.

    Each field is a necessary condition of the selectors it was read from, so an index bucket
    for it holds a superset of the answer, in list order; the caller still applies the
    selectors themselves (``Store.candidates``).
    """

    node_name: str | None = None
    """``spec.nodeName=<value>`` (the empty value selects objects with no node)."""
    name: str | None = None
    """``metadata.name=<value>``."""
    namespace: str | None = None
    """``metadata.namespace=<value>``."""
    labels: tuple[tuple[str, str], ...] = ()
    """``key=value`` label requirements."""
    label_keys: tuple[str, ...] = ()
    """Label keys that must be present (``key``, ``key in (…)``)."""


NOTHING = Narrowing()
"""No requirement an index can use: the whole list (of the namespace)."""

_NARROWING_FIELDS = {"spec.nodeName": "node_name", "metadata.name": "name"}


def narrowing(labels: str, fields: str) -> Narrowing:
    """The index-usable part of a ``labelSelector`` and ``fieldSelector`` (parsed as above).

    Call it after :func:`label_selector` and :func:`field_selector` accepted the same text: it
    reads only the equality terms and ignores what it does not use.
    """
    found: dict[str, str] = {}
    pairs: list[tuple[str, str]] = []
    keys: list[str] = []
    for term in _split(fields):
        match = _EQUALITY.match(term)
        if match is None or match[2] == "!=":
            continue
        field, _, value = match.groups()
        if field == "metadata.namespace":
            found.setdefault("namespace", value)
        elif field in _NARROWING_FIELDS:
            found.setdefault(_NARROWING_FIELDS[field], value)
    for term in _split(labels):
        if match := _SET_OP.match(term):
            if match[2] == "in":
                keys.append(match[1])
        elif match := _EQUALITY.match(term):
            if match[2] != "!=":
                pairs.append((match[1], match[3]))
        elif (match := _EXISTS.match(term)) and not match[1]:
            keys.append(match[2])
    if not (found or pairs or keys):
        return NOTHING
    return Narrowing(
        node_name=found.get("node_name"),
        name=found.get("name"),
        namespace=found.get("namespace"),
        labels=tuple(pairs),
        label_keys=tuple(keys),
    )


def match_label_selector(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy a ``LabelSelector`` object (``matchLabels`` and expressions).

    The empty selector selects everything, as ``metav1.LabelSelectorAsSelector`` makes it; an
    operator it does not know (or ``In`` without values) is a ``SelectorError``, so a webhook
    configuration carrying one is refused when written rather than misread when called.
    """
    expressions = list(selector.get("matchExpressions") or ())
    for expr in expressions:
        op, values = expr.get("operator"), expr.get("values") or ()
        if op in {"In", "NotIn"} and not values:
            raise SelectorError(f"{op} requires one or more values for key {expr.get('key')!r}")
        if op in {"Exists", "DoesNotExist"} and values:
            raise SelectorError(f"{op} takes no values (key {expr.get('key')!r})")
        if op not in {"In", "NotIn", "Exists", "DoesNotExist"}:
            raise SelectorError(f'"{op}" is not a valid label selector operator')
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in expressions:
        key, op, values = expr.get("key"), expr.get("operator"), list(expr.get("values") or ())
        present = key in labels
        if (
            (op == "In" and not (present and labels[key] in values))
            or (op == "NotIn" and present and labels[key] in values)
            or (op == "Exists" and not present)
            or (op == "DoesNotExist" and present)
        ):
            return False
    return True
