"""A CRD's structural OpenAPI v3 schema, generated from the wire structs that describe it.

Kubernetes requires a *structural* schema (every node typed, no ``$ref``, junctors only as
value constraints, ``nullable`` instead of ``null`` types), while msgspec emits JSON Schema
2020-12 with shared ``$defs``. This module translates one into the other so the structs stay
the single description: refs are inlined, ``null`` branches dropped (``omit_defaults`` never
writes a ``None``), struct defaults dropped (they mean "absent", not "defaulted"), ``x-default``
renamed to the ``default`` the API server applies, and the struct docstring's first paragraph
kept as the description. Pure: no I/O, so every daemon and test computes the same schema.
"""

from __future__ import annotations

from typing import Any

import msgspec

_DROPPED = frozenset({"title", "default", "$defs"})


def structural_schema(struct: type) -> dict[str, Any]:
    """The structural schema of ``struct`` (a msgspec Struct), refs inlined."""
    (root,), components = msgspec.json.schema_components([struct], ref_template="#/$defs/{name}")
    converted = _convert(root, components, ())
    assert isinstance(converted, dict)
    return converted


def _first_paragraph(text: str) -> str:
    return " ".join(text.strip().split("\n\n", 1)[0].split())


def _convert(node: Any, components: dict[str, Any], seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_convert(item, components, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if name in seen:
            raise ValueError(f"{' -> '.join((*seen, name))}: a recursive type has no CRD schema")
        merged = {**components[name], **{k: v for k, v in node.items() if k != "$ref"}}
        return _convert(merged, components, (*seen, name))
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in _DROPPED:
            out = _keyword(out, key, value, components, seen)
    if "enum" in out and "type" not in out and all(isinstance(v, str) for v in out["enum"]):
        out["type"] = "string"
    if out.get("additionalProperties") is False:
        del out["additionalProperties"]  # structural schemas prune unknown fields anyway
    return out


def _keyword(
    out: dict[str, Any], key: str, value: Any, components: dict[str, Any], seen: tuple[str, ...]
) -> dict[str, Any]:
    """``out`` with one JSON Schema keyword translated into it."""
    if key == "x-default":
        out["default"] = value
    elif key == "description":
        out[key] = _first_paragraph(value)
    elif key == "properties":  # field names, not keywords
        out[key] = {name: _convert(field, components, seen) for name, field in value.items()}
    elif key == "required":
        if value:
            out[key] = sorted(value)
    elif key == "anyOf":
        branches = [b for b in value if b != {"type": "null"}]
        if len(branches) == 1:
            return {**_convert(branches[0], components, seen), **out}  # the field's own win
        out[key] = _convert(branches, components, seen)
    else:
        out[key] = _convert(value, components, seen)
    return out
