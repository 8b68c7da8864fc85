"""JSON key spelling for the wire contracts.

Python fields are snake_case; the wire is the Kubernetes flavour of camelCase in which acronyms
keep their capitals (``memoryTotalMiB``, ``podUID``, ``deviceID``, ``deviceIDs``). One function
spells every key so no struct can drift from the others.
"""

from __future__ import annotations

_ACRONYMS = {"mib": "MiB", "uid": "UID", "id": "ID", "ids": "IDs", "ip": "IP"}


def json_name(field: str) -> str:
    """Spell a snake_case field name as its wire key (first word lower-case, as is)."""
    first, *rest = field.split("_")
    return first + "".join(_ACRONYMS.get(word, word.capitalize()) for word in rest)
