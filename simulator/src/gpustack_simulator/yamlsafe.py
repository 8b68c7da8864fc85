"""YAML documents read with bounds, so a hostile file is a one-line error, not a crash.

PyYAML's safe loader builds nested values recursively: a 20,000-deep list raises
``RecursionError``, and a 5,000-digit integer hits Python's integer-conversion limit
(``ValueError``); both used to escape as tracebacks. Aliases let a small file expand
exponentially once the value is walked. PyYAML's *parser* is iterative, so its event stream is
scanned first — nesting depth, integer length and aliases bounded — and only a document that
passes is constructed.
"""

from __future__ import annotations

import re
from typing import Final

import yaml

from gpustack_core.decoding import ContractError

MAX_DEPTH: Final = 64
"""Nesting of mappings and sequences; the deepest recording or scenario nests under 12."""
MAX_INTEGER_DIGITS: Final = 40
"""Digits of an integer scalar; a uint128 has 39, no figure in a recording needs more."""
MAX_DOCUMENT_BYTES: Final = 64 << 20
"""The most a recording or scenario file is read (``gpustack_kube.files.read_capped``): the
largest recording is 32 KiB and a generated 1,000-node, 10,000-Instance fleet 3 MiB; a file
past this (or ``/dev/zero``) is refused before it is parsed, not read until memory runs out."""

_LOADER: Final[type[yaml.SafeLoader] | type[yaml.CSafeLoader]] = (
    yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader
)
"""libyaml's scanner and parser where PyYAML was built with it (its wheels are): the same
events and values, about six times less CPU. Every simulated process reads the recordings its
scenario names at start-up (``simulator up``, the stand-in and the Device Manager host each),
and with the pure-Python parser that was about 1.4 s of CPU per process for the demo's 238 KiB
of recordings. The constructor stays PyYAML's safe one either way."""

_LIBYAML_TOO_DEEP: Final = "while increasing flow level"
"""How libyaml's parser words a document nested past its own bound (``max_nest_level``)."""

_INTEGER: Final = re.compile(r"[-+]?(0x[0-9a-fA-F_]+|0o?[0-7_]+|[0-9][0-9_]*)")


def _line(event: yaml.Event) -> int:
    mark = event.start_mark
    return 0 if mark is None else mark.line + 1


def _scan(data: str | bytes, source: str) -> None:
    """Walk the event stream (iterative, no document built); raise at the first excess."""
    depth = 0
    for event in yaml.parse(data, Loader=_LOADER):
        if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise ContractError(
                    f"{source}: line {_line(event)}: nested deeper than {MAX_DEPTH} levels"
                )
        elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            raise ContractError(f"{source}: line {_line(event)}: YAML aliases are not accepted")
        elif (
            isinstance(event, yaml.ScalarEvent)
            and event.implicit[0]
            and len(event.value) > MAX_INTEGER_DIGITS
            and _INTEGER.fullmatch(event.value)
        ):
            raise ContractError(
                f"{source}: line {_line(event)}: an integer of "
                f"{len(event.value)} digits (at most {MAX_INTEGER_DIGITS})"
            )


def load_bounded(data: str | bytes, *, source: str) -> object:
    """``yaml.safe_load`` after bounding depth, integer size and aliases; else ContractError."""
    try:
        _scan(data, source)
        return yaml.load(data, Loader=_LOADER)  # a safe loader, C or Python
    except yaml.YAMLError as exc:
        if _LIBYAML_TOO_DEEP in str(exc):
            # libyaml stops at its own nesting bound (1000) before the scan sees level 65.
            raise ContractError(f"{source}: nested deeper than {MAX_DEPTH} levels") from exc
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ContractError(f"{source}: not valid YAML ({first})") from exc
    except ContractError:
        raise
    except (RecursionError, ValueError) as exc:  # belt and braces: the scan should catch these
        raise ContractError(f"{source}: not a readable document ({type(exc).__name__})") from exc


__all__ = ["MAX_DEPTH", "MAX_INTEGER_DIGITS", "load_bounded"]
