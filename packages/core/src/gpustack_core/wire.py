"""JSON spelling and struct options shared by every wire contract.

Python fields are snake_case; the wire is the Kubernetes flavour of camelCase in which acronyms
keep their capitals (``memoryTotalMiB``, ``podUID``, ``deviceID``, ``deviceIDs``). One function
spells every key and one base class carries the options, so no struct can drift from the others.
"""

from __future__ import annotations

import msgspec

_ACRONYMS = {"mib": "MiB", "uid": "UID", "id": "ID", "ids": "IDs", "ip": "IP", "ips": "IPs"}


def json_name(field: str) -> str:
    """Spell a snake_case field name as its wire key (first word lower-case, as is)."""
    first, *rest = field.split("_")
    return first + "".join(_ACRONYMS.get(word, word.capitalize()) for word in rest)


class Wire(msgspec.Struct, rename=json_name, omit_defaults=True, kw_only=True, frozen=True):
    """Base of every wire struct: camelCase keys, absent keys for absent figures, immutable.

    Unknown keys are ignored on decode, so a newer producer adding fields never breaks a reader.
    Subclasses repeat ``frozen=True, kw_only=True``: msgspec does not inherit ``kw_only``, and
    type checkers inherit neither.
    """
