"""``-o yaml|json`` for the one-shot commands (``device-manager detect`` and ``monitor``).

Both formats carry the same document: the msgspec object turned into builtins, fields in their
declaration order, datetimes as RFC 3339 strings. JSON is indented and ends with a newline, so
the same input always gives the same bytes.
"""

from __future__ import annotations

import json

import msgspec

FORMATS = ("yaml", "json")


def render(value: object, fmt: str) -> str:
    """``value`` (a msgspec object) as YAML or JSON text."""
    document = msgspec.to_builtins(value)
    if fmt == "json":
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    if fmt != "yaml":
        raise ValueError(f"unknown output format {fmt!r}; one of {', '.join(FORMATS)}")
    import yaml  # only the one-shot commands print YAML

    text: str = yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    return text
