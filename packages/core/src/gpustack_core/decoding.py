"""One decoding entry point so every parser reports errors the same precise way."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

T = TypeVar("T")


class ContractError(ValueError):
    """Input does not match a wire contract; the message names the document and the field."""


def decode_json(data: bytes | str, type_: type[T], *, what: str) -> T:
    """Decode ``data`` as ``type_``, naming ``what`` and the JSON path of the first bad field.

    msgspec's message already carries the path (``at `$.pods[0].cpu.usageNanoCores```); we
    prefix what was being read so a log line stands on its own.
    """
    try:
        return msgspec.json.decode(data, type=type_, strict=True)
    except msgspec.ValidationError as exc:
        raise ContractError(f"{what}: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise ContractError(f"{what}: not valid JSON ({exc})") from exc
    except RecursionError as exc:
        # Nesting a thousand levels deep is an attack or a bug, never a document of ours.
        raise ContractError(f"{what}: nested too deeply to decode") from exc
    except UnicodeEncodeError as exc:
        raise ContractError(f"{what}: text is not valid Unicode ({exc.reason})") from exc


def convert(obj: Any, type_: type[T], *, what: str) -> T:
    """Like :func:`decode_json` for already-parsed objects (YAML, kube client dicts)."""
    try:
        return msgspec.convert(obj, type=type_, strict=True)
    except msgspec.ValidationError as exc:
        raise ContractError(f"{what}: {exc}") from exc
    except RecursionError as exc:
        raise ContractError(f"{what}: nested too deeply to decode") from exc
