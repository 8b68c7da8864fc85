"""Redaction applied to a recording before it leaves the machine it was taken on.

PIDs are replaced by stable stand-ins (the same real PID always maps to the same fake one, so
rows still line up across calls and with ``context``); serials and host names are never
recorded in the first place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from gpustack_simulator.recording import Call, Context, Library, Recording

PID_FIELDS = frozenset({"pid", "process_id", "processId"})
PID_ARGS: Mapping[str, tuple[int, ...]] = {
    # Calls whose arguments name a PID rather than return one.
    "rsmi_compute_process_gpus_get": (0,),
    "rsmi_compute_process_info_by_device_get": (0,),
}
FIRST_FAKE_PID = 100_001


def _collect(value: Any, pids: set[int]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in PID_FIELDS and isinstance(item, int):
                pids.add(item)
            else:
                _collect(item, pids)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, pids)


def returned_pids(libraries: Iterable[Library]) -> set[int]:
    """Every PID a binding returned (in ``pid``/``process_id``/``processId`` fields)."""
    pids: set[int] = set()
    for library in libraries:
        for call in library.calls:
            _collect([call.ret, [s.ret for s in call.series]], pids)
    return pids


def _rewrite(value: Any, mapping: Mapping[int, int]) -> Any:
    if isinstance(value, dict):
        return {
            k: mapping.get(v, v) if k in PID_FIELDS and isinstance(v, int) else _rewrite(v, mapping)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_rewrite(item, mapping) for item in value]
    return value


def redact_pids(recording: Recording) -> Recording:
    """Replace every PID (in results, in PID arguments, in ``context``) consistently."""
    pids = returned_pids(recording.libraries) | {int(pid) for pid in recording.context.procs}
    for library in recording.libraries:
        for call in library.calls:
            for position in PID_ARGS.get(call.fn, ()):
                if position < len(call.args) and isinstance(call.args[position], int):
                    pids.add(call.args[position])
    mapping = {pid: FIRST_FAKE_PID + i for i, pid in enumerate(sorted(pids))}

    def call_of(call: Call) -> Call:
        args = list(call.args)
        for position in PID_ARGS.get(call.fn, ()):
            if position < len(args) and isinstance(args[position], int):
                args[position] = mapping.get(args[position], args[position])
        return msgspec.structs.replace(
            call,
            args=tuple(args),
            ret=msgspec.UNSET if call.ret is msgspec.UNSET else _rewrite(call.ret, mapping),
            series=tuple(
                msgspec.structs.replace(
                    s, ret=msgspec.UNSET if s.ret is msgspec.UNSET else _rewrite(s.ret, mapping)
                )
                for s in call.series
            ),
        )

    libraries = tuple(
        msgspec.structs.replace(library, calls=tuple(call_of(c) for c in library.calls))
        for library in recording.libraries
    )
    context = Context(
        procs={str(mapping[int(pid)]): entry for pid, entry in recording.context.procs.items()}
    )
    return msgspec.structs.replace(recording, libraries=libraries, context=context)
