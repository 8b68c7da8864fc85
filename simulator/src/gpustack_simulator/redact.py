"""Redaction applied to a recording before it leaves the machine it was taken on.

Three kinds of host-identifying data are replaced, each consistently across the whole document
(the same value always becomes the same stand-in, so rows still line up across calls, with PID
arguments and with ``context``):

- **PIDs** (``pid``/``process_id``/``processId``/``proc_id`` fields, PID arguments, ``context``
  keys) become stand-ins from :data:`FIRST_FAKE_PID`, in the order of the real ones;
- **serials** (:data:`SERIAL_FIELDS`, e.g. amdsmi's ``asic_serial``) become stand-ins of the same
  format (same length, prefix and alphabet), since no backend reads them;
- **host names** (this machine's name, short and fully qualified) are replaced by
  :data:`HOST_STAND_IN` wherever a string holds one.

What each kind replaced is written into ``provenance.redacted``. UUIDs and PCI bus ids are kept:
they are the devices' identity, which detection and the Devices object carry
(``docs/recordings.md``, "Before you share a recording").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec

from gpustack_simulator.recording import Call, Context, Library, ProcEntry, Recording

PID_FIELDS = frozenset({"pid", "process_id", "processId", "proc_id"})
PID_ARGS: Mapping[str, tuple[int, ...]] = {
    # Calls whose arguments name a PID rather than return one.
    "rsmi_compute_process_gpus_get": (0,),
    "rsmi_compute_process_info_by_device_get": (0,),
}
FIRST_FAKE_PID = 100_001
SERIAL_FIELDS = frozenset({"asic_serial", "serial", "serial_number", "serialNumber", "sn"})
"""Answer fields holding a board or chip serial number; no backend reads them."""
HOST_STAND_IN = "redacted-host"
_NOT_A_HOST = frozenset({"localhost", "localhost.localdomain"})


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
    """Every PID a binding returned (in :data:`PID_FIELDS` fields)."""
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


def _answers(call: Call, rewrite: Callable[[Any], Any]) -> Call:
    """``call`` with ``rewrite`` applied to its answer and to every step of its series."""
    return msgspec.structs.replace(
        call,
        ret=msgspec.UNSET if call.ret is msgspec.UNSET else rewrite(call.ret),
        series=tuple(
            msgspec.structs.replace(
                s, ret=msgspec.UNSET if s.ret is msgspec.UNSET else rewrite(s.ret)
            )
            for s in call.series
        ),
    )


def _each_call(recording: Recording, change: Callable[[Call], Call]) -> Recording:
    libraries = tuple(
        msgspec.structs.replace(library, calls=tuple(change(c) for c in library.calls))
        for library in recording.libraries
    )
    return msgspec.structs.replace(recording, libraries=libraries)


def _pid_mapping(recording: Recording) -> dict[int, int]:
    pids = returned_pids(recording.libraries) | {int(pid) for pid in recording.context.procs}
    for library in recording.libraries:
        for call in library.calls:
            for position in PID_ARGS.get(call.fn, ()):
                if position < len(call.args) and isinstance(call.args[position], int):
                    pids.add(call.args[position])
    return {pid: FIRST_FAKE_PID + i for i, pid in enumerate(sorted(pids))}


def redact_pids(recording: Recording) -> Recording:
    """Replace every PID (in results, in PID arguments, in ``context``) consistently."""
    return _redact_pids(recording)[0]


def _redact_pids(recording: Recording) -> tuple[Recording, int]:
    mapping = _pid_mapping(recording)

    def call_of(call: Call) -> Call:
        args = list(call.args)
        for position in PID_ARGS.get(call.fn, ()):
            if position < len(args) and isinstance(args[position], int):
                args[position] = mapping.get(args[position], args[position])
        return _answers(
            msgspec.structs.replace(call, args=tuple(args)), lambda v: _rewrite(v, mapping)
        )

    redacted = _each_call(recording, call_of)
    context = Context(
        procs={str(mapping[int(pid)]): entry for pid, entry in recording.context.procs.items()}
    )
    return msgspec.structs.replace(redacted, context=context), len(mapping)


# -- serials -------------------------------------------------------------------------------------


def _serials(value: Any, found: set[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in SERIAL_FIELDS and isinstance(item, str):
                found.add(item)
            else:
                _serials(item, found)
    elif isinstance(value, list | tuple):
        for item in value:
            _serials(item, found)


def same_format(value: str, index: int) -> str:
    """A stand-in for serial ``value``: the same length, ``0x`` prefix and alphabet.

    ``0x0CEE36DDC4255115`` with index 1 becomes ``0x0000000000000001``; a value that is not a
    serial (``N/A``, empty) is kept.
    """
    prefix = value[:2] if value[:2].lower() == "0x" else ""
    body = value[len(prefix) :]
    if not body or not body.isalnum() or value.upper() == "N/A":
        return value
    alphabet = "d" if body.isdigit() else "X" if body.upper() == body else "x"
    digits = format(index, alphabet)
    return prefix + digits.rjust(len(body), "0")[-len(body) :]


def _rewrite_serials(value: Any, mapping: Mapping[str, str]) -> Any:
    if isinstance(value, dict):
        return {
            k: mapping.get(v, v)
            if k in SERIAL_FIELDS and isinstance(v, str)
            else _rewrite_serials(v, mapping)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_rewrite_serials(item, mapping) for item in value]
    return value


def _redact_serials(recording: Recording) -> tuple[Recording, int]:
    found: set[str] = set()
    for library in recording.libraries:
        for call in library.calls:
            _serials([call.ret, [s.ret for s in call.series]], found)
    mapping = {
        serial: same_format(serial, i + 1)
        for i, serial in enumerate(sorted(found))
        if same_format(serial, i + 1) != serial
    }
    if not mapping:
        return recording, 0
    return _each_call(
        recording, lambda call: _answers(call, lambda v: _rewrite_serials(v, mapping))
    ), len(mapping)


# -- host names ----------------------------------------------------------------------------------


def _names_pattern(names: Iterable[str]) -> re.Pattern[str] | None:
    kept = sorted(
        {n for n in names if len(n) >= 3 and n.lower() not in _NOT_A_HOST}, key=len, reverse=True
    )
    if not kept:
        return None
    return re.compile("|".join(re.escape(n) for n in kept), re.IGNORECASE)


def _scrub(value: Any, pattern: re.Pattern[str], count: list[int]) -> Any:
    if isinstance(value, str):
        scrubbed, n = pattern.subn(HOST_STAND_IN, value)
        count[0] += n
        return scrubbed
    if isinstance(value, dict):
        return {_scrub(k, pattern, count): _scrub(v, pattern, count) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(item, pattern, count) for item in value]
    return value


def _redact_host_names(recording: Recording, names: Sequence[str]) -> tuple[Recording, int]:
    pattern = _names_pattern(names)
    if pattern is None:
        return recording, 0
    count = [0]

    def scrub(value: Any) -> Any:
        return _scrub(value, pattern, count)

    def call_of(call: Call) -> Call:
        changed = msgspec.structs.replace(
            call, args=tuple(scrub(list(call.args))), kwargs=scrub(call.kwargs)
        )
        return _answers(changed, scrub)

    redacted = _each_call(recording, call_of)
    context = Context(
        procs={
            pid: ProcEntry(cgroup=scrub(e.cgroup), state=e.state, comm=scrub(e.comm))
            for pid, e in redacted.context.procs.items()
        }
    )
    provenance = msgspec.structs.replace(
        recording.provenance, host={k: scrub(v) for k, v in recording.provenance.host.items()}
    )
    node = {k: scrub(v) for k, v in recording.node.items()}
    return msgspec.structs.replace(
        redacted, context=context, provenance=provenance, node=node
    ), count[0]


def redact(recording: Recording, *, host_names: Sequence[str] = ()) -> Recording:
    """Replace PIDs, serials and ``host_names``; say in ``provenance.redacted`` what was done."""
    recording, pids = _redact_pids(recording)
    recording, serials = _redact_serials(recording)
    recording, hosts = _redact_host_names(recording, host_names)
    notes = (
        f"pid: {pids} PIDs replaced by {FIRST_FAKE_PID}-{FIRST_FAKE_PID + pids - 1}, the same "
        "PID by the same stand-in in rows, PID arguments and context"
        if pids
        else "pid: no PIDs in the answers",
        f"serial: {serials} serial numbers ({', '.join(sorted(SERIAL_FIELDS))}) replaced by "
        "stand-ins of the same format"
        if serials
        else "serial: no serial numbers in the answers",
        f"hostname: {hosts} occurrences of this host's name replaced by {HOST_STAND_IN}"
        if hosts
        else "hostname: no string held this host's name",
    )
    provenance = msgspec.structs.replace(recording.provenance, redacted=notes)
    return msgspec.structs.replace(recording, provenance=provenance)
