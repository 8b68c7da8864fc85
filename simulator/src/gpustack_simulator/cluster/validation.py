"""Custom resources checked against their CRD's structural schema, as the API server does.

Fields the schema does not declare are pruned (unless ``x-kubernetes-preserve-unknown-fields``)
and every violation becomes one ``details.causes`` entry of a 422 ``Invalid`` naming the field
path in the API server's spelling (``spec.replicas``, ``spec.ports[0].port``), so a controller
that writes a bad object sees the same refusal it would get from a cluster. Besides types,
enums, bounds, patterns and ``required``:

- ``oneOf``: exactly one alternative must hold, else kube-openapi's ``"<path>" must validate
  one and only one schema (oneOf). Found none valid`` (or ``Found <n> valid alternatives``),
  which kube-apiserver reports with no field (``<nil>``);
- ``x-kubernetes-list-type``: a ``set`` holds no item twice, a ``map`` holds objects no two of
  which share their ``x-kubernetes-list-map-keys`` (a key left out counts as its schema
  ``default``, as the server defaults before it checks): ``spec.ports[1]: Duplicate value:
  {"port":22,"protocol":"TCP"}``;
- what pruning drops is listed (``pruned``, as ``spec.ports[0].bogus``), for the request's
  field validation (``?fieldValidation=Strict|Warn|Ignore``, ``apiserver``).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TYPES: Mapping[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


@dataclass(frozen=True)
class Cause:
    """One violation: the ``details.causes`` entry of the 422."""

    field: str
    message: str
    reason: str = "FieldValueInvalid"


NO_FIELD = "<nil>"
"""The field kube-apiserver names for a schema error it cannot place (``oneOf``)."""


class _Run(list[Cause]):
    """The causes one validation finds, and the paths its pruning dropped."""

    def __init__(self, pruned: list[str] | None) -> None:
        super().__init__()
        self.pruned = pruned

    def drop(self, path: str) -> None:
        if self.pruned is not None:
            self.pruned.append(path)


def validate(
    obj: dict[str, Any], schema: Mapping[str, Any], pruned: list[str] | None = None
) -> list[Cause]:
    """Prune ``obj`` in place to what ``schema`` declares and list what violates it.

    ``apiVersion``, ``kind`` and ``metadata`` are the API server's own business (it validates
    them separately) and are left alone, as they are on a cluster. ``pruned`` (when given)
    receives the path of each field pruning dropped.
    """
    causes = _Run(pruned)
    properties = schema.get("properties") or {}
    for key in list(obj):
        if key in {"apiVersion", "kind", "metadata"}:
            continue
        if key in properties:
            obj[key] = _check(obj[key], properties[key], key, causes)
        elif not schema.get("x-kubernetes-preserve-unknown-fields"):
            del obj[key]
            causes.drop(key)
    for key in schema.get("required") or ():
        if key not in obj:
            causes.append(Cause(key, "Required value", "FieldValueRequired"))
    return list(causes)


def unknown_fields(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """The paths of ``obj``'s fields that ``schema`` would prune (``obj`` is left as it is)."""
    pruned: list[str] = []
    validate(copy.deepcopy(dict(obj)), schema, pruned)
    return pruned


def _is(value: Any, kind: str) -> bool:
    if isinstance(value, bool) and kind in {"integer", "number"}:
        return False
    return isinstance(value, TYPES.get(kind, (object,)))


def _check(value: Any, schema: Mapping[str, Any], path: str, causes: _Run) -> Any:
    if value is None:
        if not schema.get("nullable"):
            causes.append(
                Cause(
                    path,
                    f'Invalid value: "null": {path} in body must be of type '
                    f'{schema.get("type", "object")}: "null"',
                    "FieldValueTypeInvalid",
                )
            )
        return value
    kind = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        if not (_is(value, "integer") or _is(value, "string")):
            causes.append(
                Cause(
                    path,
                    f"Invalid value: {value!r}: must be an integer or a string",
                    "FieldValueTypeInvalid",
                )
            )
        elif (
            isinstance(value, str)
            and "pattern" in schema
            and re.search(schema["pattern"], value) is None
        ):
            # A string still answers to the pattern (a quantity's), as kube-apiserver checks.
            causes.append(
                Cause(
                    path,
                    f'Invalid value: "{value}": {path} in body should match '
                    f"'{schema['pattern']}'",
                )
            )
        return value
    if kind and not _is(value, kind):
        causes.append(
            Cause(
                path,
                f'Invalid value: "{_type(value)}": {path} in body must be of '
                f'type {kind}: "{_type(value)}"',
                "FieldValueTypeInvalid",
            )
        )
        return value
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(f'"{v}"' for v in schema["enum"])
        causes.append(
            Cause(
                path,
                f'Unsupported value: "{value}": supported values: {allowed}',
                "FieldValueNotSupported",
            )
        )
    _bounds(value, schema, path, causes)
    if isinstance(value, dict):
        value = _object(value, schema, path, causes)
    elif isinstance(value, list):
        if "items" in schema:
            value = [
                _check(v, schema["items"], f"{path}[{i}]", causes) for i, v in enumerate(value)
            ]
        _list_type(value, schema, path, causes)
    if "oneOf" in schema:
        _one_of(value, schema["oneOf"], path, causes)
    return value


def _holds(value: Any, schema: Mapping[str, Any], path: str) -> bool:
    """Whether ``value`` validates against ``schema`` alone (nothing recorded, nothing pruned)."""
    trial = _Run(None)
    _check(copy.deepcopy(value), schema, path, trial)
    return not trial


def _one_of(value: Any, alternatives: Any, path: str, causes: _Run) -> None:
    """kube-openapi's ``oneOf``: exactly one alternative holds."""
    held = sum(_holds(value, alt, path) for alt in alternatives or () if isinstance(alt, Mapping))
    if held == 1:
        return
    found = "Found none valid" if held == 0 else f"Found {held} valid alternatives"
    causes.append(
        Cause(
            NO_FIELD,
            f'Invalid value: "": "{path}" must validate one and only one schema (oneOf). {found}',
        )
    )


def _list_type(items: list[Any], schema: Mapping[str, Any], path: str, causes: _Run) -> None:
    """``x-kubernetes-list-type``: no item of a ``set`` twice, no key of a ``map`` twice."""
    kind = schema.get("x-kubernetes-list-type")
    if kind == "set":
        seen: list[Any] = []
        for i, item in enumerate(items):
            if item in seen:
                causes.append(
                    Cause(f"{path}[{i}]", f"Duplicate value: {_json(item)}", "FieldValueDuplicate")
                )
            seen.append(item)
    elif kind == "map":
        names = [str(k) for k in schema.get("x-kubernetes-list-map-keys") or ()]
        fields = (schema.get("items") or {}).get("properties") or {}
        keys: list[dict[str, Any]] = []
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                causes.append(
                    Cause(
                        f"{path}[{i}]",
                        f"Invalid value: {_json(item)}: must be an object for an array of "
                        "list-type map",
                    )
                )
                return
            key = {n: item.get(n, (fields.get(n) or {}).get("default")) for n in names}
            if key in keys:
                causes.append(
                    Cause(f"{path}[{i}]", f"Duplicate value: {_json(key)}", "FieldValueDuplicate")
                )
            keys.append(key)


def _json(value: Any) -> str:
    """A value as apimachinery shows a composite one in a field error (compact JSON)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _object(
    value: dict[str, Any], schema: Mapping[str, Any], path: str, causes: _Run
) -> dict[str, Any]:
    properties = schema.get("properties")
    extra = schema.get("additionalProperties")
    preserve = schema.get("x-kubernetes-preserve-unknown-fields")
    result: dict[str, Any] = {}
    for key, item in value.items():
        child = f"{path}.{key}"
        if properties is not None and key in properties:
            result[key] = _check(item, properties[key], child, causes)
        elif isinstance(extra, Mapping):
            result[key] = _check(item, extra, child, causes)
        elif preserve or extra is True or (properties is None and not schema.get("type")):
            result[key] = item
        else:
            causes.drop(child)
    for key in schema.get("required") or ():
        if key not in value:
            causes.append(Cause(f"{path}.{key}", "Required value", "FieldValueRequired"))
    return result


def _bounds(value: Any, schema: Mapping[str, Any], path: str, causes: _Run) -> None:
    if _is(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            causes.append(
                Cause(
                    path,
                    f"Invalid value: {value}: {path} in body should be greater "
                    f"than or equal to {schema['minimum']}",
                )
            )
        if "maximum" in schema and value > schema["maximum"]:
            causes.append(
                Cause(
                    path,
                    f"Invalid value: {value}: {path} in body should be less "
                    f"than or equal to {schema['maximum']}",
                )
            )
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            causes.append(
                Cause(
                    path,
                    f'Invalid value: "{value}": {path} in body should be at '
                    f"least {schema['minLength']} chars long",
                )
            )
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            causes.append(
                Cause(
                    path,
                    f"Too long: may not be more than {schema['maxLength']} bytes",
                    "FieldValueTooLong",
                )
            )
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            causes.append(
                Cause(
                    path,
                    f'Invalid value: "{value}": {path} in body should match '
                    f"'{schema['pattern']}'",
                )
            )
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            causes.append(
                Cause(
                    path,
                    f"Too many: {len(value)}: must have at most {schema['maxItems']} items",
                    "FieldValueTooMany",
                )
            )
        if "minItems" in schema and len(value) < schema["minItems"]:
            causes.append(
                Cause(
                    path,
                    f"Invalid value: {len(value)}: {path} in body should have "
                    f"at least {schema['minItems']} items",
                )
            )


def _type(value: Any) -> str:
    for name in ("boolean", "integer", "number", "string", "array", "object"):
        if _is(value, name):
            return name
    return type(value).__name__
