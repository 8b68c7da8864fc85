"""Object meta as every kind's strategy checks it (``ValidateObjectMeta``).

The name rule is the kind's: kube-apiserver passes each kind's ``nameFn`` (a DNS-1123
subdomain for most) to the one object-meta check every strategy calls.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping
from typing import Any

Cause = tuple[str, str, str]
"""(field path, message, reason), as ``apiserver.invalid`` lists them."""
NameRule = Callable[[str], str | None]
"""Why a name is refused (the message after its value), or ``None``."""

_SUBDOMAIN_CHARACTERS = frozenset(string.ascii_lowercase + string.digits + "-.")


def subdomain(name: str) -> str | None:
    """A DNS-1123 subdomain: the default name rule."""
    if (
        len(name) <= 253
        and name
        and set(name) <= _SUBDOMAIN_CHARACTERS
        and name[0].isalnum()
        and name[-1].isalnum()
    ):
        return None
    return (
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
        "or '.', and must start and end with an alphanumeric character"
    )


def validate_meta(obj: Mapping[str, Any], name_rule: NameRule) -> list[Cause]:
    """What ``metadata`` may not carry, with ``name_rule`` for the name."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    problem = name_rule(name)
    if problem is None:
        return []
    return [("metadata.name", f'Invalid value: "{name}": {problem}', "FieldValueInvalid")]
