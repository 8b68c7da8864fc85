"""The recording format ``accel-recording/v1``: one YAML document per node.

A recording is what a vendor **binding** answered, call by call, at the Python boundary the
backends use — not converted figures. Replaying it through a stand-in with the binding's own
interface is what lets CI run the unchanged backend code against hardware we do not own.

Values are JSON-shaped. Three tagged forms carry what JSON cannot:

* ``{"_handle": "gpu0"}`` — a device handle, by symbolic ref (``handles`` says how it was got);
* ``{"_type": "c_nvmlMemory_t", "total": …}`` — a binding struct with every field;
* ``{"_type": "friendly", …}`` — pynvml's attribute-bag objects (process lists).

Errors are ``{"type": <class name>, "code": <numeric code>}``; replay rebuilds them from the
code, never from message text. See ``docs/recordings.md``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import msgspec
import yaml

from gpustack_core.decoding import ContractError, convert
from gpustack_core.wire import Wire
from gpustack_kube.files import read_capped
from gpustack_simulator.yamlsafe import MAX_DOCUMENT_BYTES, load_bounded

SCHEMA = "accel-recording/v1"


class Raises(Wire, frozen=True, kw_only=True):
    """An error the binding raised: its class name (for readers) and numeric code (for replay)."""

    type: str
    code: int


class Step(Wire, frozen=True, kw_only=True):
    """One point of a time series: the answer from ``t`` seconds after init until the next."""

    t: float
    ret: Any = msgspec.UNSET
    raises: Raises | None = None


class RowFilter(Wire, frozen=True, kw_only=True):
    """Answer only rows whose ``field`` exceeds argument ``arg`` (NVML's ``lastSeenTimeStamp``).

    The filtered argument is not part of the call's identity. When no row passes, the call
    raises ``empty_raises`` — NVML answers NOT_FOUND for a card with no new samples.
    """

    arg: int
    field: str
    empty_raises: Raises | None = None


class Call(Wire, frozen=True, kw_only=True):
    """One function with one set of arguments, and its answer: static, raised, or a series."""

    fn: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = {}
    ret: Any = msgspec.UNSET
    raises: Raises | None = None
    series: tuple[Step, ...] = ()
    filter: RowFilter | None = None


class HandleOrigin(Wire, frozen=True, kw_only=True):
    """How a handle was obtained, so a reader can tell which device a ref names."""

    fn: str
    args: tuple[Any, ...] = ()
    position: int | None = None
    """Index in the returned list, for calls that return several handles."""


class Binding(Wire, frozen=True, kw_only=True):
    """Which binding answered: its import name, distribution and version."""

    module: str
    dist: str = ""
    version: str = ""


class Load(Wire, frozen=True, kw_only=True):
    """Whether the binding (and its shared library) loaded at all."""

    ok: bool = True
    raises: Raises | None = None


class Library(Wire, frozen=True, kw_only=True):
    """Everything one binding answered on the node."""

    id: str
    """The stand-in that replays it: ``pynvml``, ``amdsmi`` or ``rocm_smi``."""
    binding: Binding
    load: Load = Load()
    handles: dict[str, HandleOrigin] = {}
    calls: tuple[Call, ...] = ()


class Provenance(Wire, frozen=True, kw_only=True):
    """Where the answers came from: real hardware, or public facts put together by hand."""

    kind: Literal["recorded", "synthesized"]
    sources: tuple[str, ...] = ()
    """Public sources a synthesized recording's figures come from."""
    recorded_at: datetime | None = None
    recorder: str = ""
    host: dict[str, str] = {}
    """Host facts kept after redaction (driver, kernel, GPU model); never names or serials."""
    redacted: tuple[str, ...] = ()
    """What the recorder replaced before writing the file, one line per kind (PIDs, serials,
    host names), so a reader knows which values are stand-ins."""
    notes: str = ""


class Fault(Wire, frozen=True, kw_only=True):
    """A scripted failure: ``fn`` (with ``args``, if given) raises between ``from`` and ``to``."""

    fn: str
    args: tuple[Any, ...] | None = None
    start: float = msgspec.field(name="from")
    end: float = msgspec.field(name="to")
    raises: Raises


class ProcEntry(Wire, frozen=True, kw_only=True):
    """What ``/proc/<pid>`` showed for a recorded PID, for attribution replay."""

    cgroup: str
    state: str = "S"
    comm: str = ""


class Context(Wire, frozen=True, kw_only=True):
    """The node around the library: the process table a fake procfs is built from."""

    procs: dict[str, ProcEntry] = {}


class Recording(Wire, frozen=True, kw_only=True):
    """One node's recording."""

    schema: Literal["accel-recording/v1"]
    vendor: str
    description: str
    provenance: Provenance
    libraries: tuple[Library, ...]
    node: dict[str, str] = {}
    loop_seconds: float | None = None
    """Replay time wraps after this many seconds, so a long-running demo keeps moving."""
    faults: tuple[Fault, ...] = ()
    context: Context = Context()

    def library(self, library_id: str) -> Library:
        """The named library; a recording lacking it cannot back that stand-in."""
        for library in self.libraries:
            if library.id == library_id:
                return library
        raise ContractError(f"recording of {self.vendor}: no library {library_id!r}")


def _walk_handles(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        if set(value) == {"_handle"}:
            yield str(value["_handle"])
            return
        for item in value.values():
            yield from _walk_handles(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _walk_handles(item)


def check(recording: Recording) -> list[str]:
    """Return every semantic problem the schema cannot express, each naming its path."""
    problems: list[str] = []
    if recording.provenance.kind == "synthesized" and not recording.provenance.sources:
        problems.append("$.provenance.sources: a synthesized recording must list its sources")
    if recording.provenance.kind == "recorded" and recording.provenance.recorded_at is None:
        problems.append("$.provenance.recordedAt: a recorded recording must say when")
    for li, library in enumerate(recording.libraries):
        seen: set[str] = set()
        for ci, call in enumerate(library.calls):
            path = f"$.libraries[{li}].calls[{ci}]"
            problems.extend(_check_call(call, path, library, f"$.libraries[{li}]"))
            key = call_key(call)
            if key in seen:
                problems.append(f"{path}: {call.fn} with these arguments is recorded twice")
            seen.add(key)
    for fi, fault in enumerate(recording.faults):
        if fault.end <= fault.start:
            problems.append(
                f"$.faults[{fi}]: 'to' ({fault.end}) must be after 'from' ({fault.start})"
            )
    for pid in recording.context.procs:
        if not pid.isdigit():
            problems.append(f"$.context.procs[{pid!r}]: a PID must be a decimal number")
    return problems


def _check_call(call: Call, path: str, library: Library, base: str) -> list[str]:
    problems: list[str] = []
    answers = sum((call.ret is not msgspec.UNSET, call.raises is not None, bool(call.series)))
    if answers != 1:
        problems.append(
            f"{path}: exactly one of ret, raises, series must be given "
            f"(found {answers}) for {call.fn}"
        )
    for si, step in enumerate(call.series):
        if (step.ret is msgspec.UNSET) == (step.raises is None):
            problems.append(f"{path}.series[{si}]: exactly one of ret, raises")
        if si and step.t < call.series[si - 1].t:
            problems.append(f"{path}.series[{si}].t: {step.t} goes back in time")
    if call.filter is not None and not 0 <= call.filter.arg < len(call.args):
        problems.append(f"{path}.filter.arg: {call.filter.arg} is not an argument index")
    problems.extend(
        f"{path}.args: handle {ref!r} is not in {base}.handles"
        for ref in _walk_handles([call.args, call.kwargs])
        if ref not in library.handles
    )
    answers_given = [call.ret, *(step.ret for step in call.series)]
    problems.extend(
        f"{path}.ret: handle {ref!r} is not in {base}.handles"
        for ref in _walk_handles([a for a in answers_given if a is not msgspec.UNSET])
        if ref not in library.handles
    )
    return problems


def canonical(value: Any) -> str:
    """One spelling per argument list, so lookups by value are exact."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_json_default)


def _json_default(value: object) -> object:
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"not JSON-shaped: {value!r}")


def call_key(call: Call) -> str:
    """A call's identity: its function and arguments, less any filtered argument."""
    args = list(call.args)
    if call.filter is not None and 0 <= call.filter.arg < len(args):
        args[call.filter.arg] = None
    return canonical([call.fn, args, call.kwargs])


def parse_recording(data: str | bytes, *, source: str) -> Recording:
    """Parse and check a recording; the error names the source, the path and the field."""
    document = load_bounded(data, source=source)
    recording = convert(document, Recording, what=source)
    problems = check(recording)
    if problems:
        raise ContractError(f"{source}: " + "; ".join(problems))
    return recording


def load_recording(path: Path) -> Recording:
    """Read a recording file (at most :data:`~.yamlsafe.MAX_DOCUMENT_BYTES` of it)."""
    return parse_recording(read_capped(path, MAX_DOCUMENT_BYTES, "recording"), source=str(path))


def dump_recording(recording: Recording) -> str:
    """Serialize as YAML, keys in schema order, for review in a diff."""
    document = msgspec.to_builtins(recording)
    text: str = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
    return text
