"""``processes.json``: what ``simulator up`` started, recorded so ``down`` can prove it.

``down`` runs later, from any shell, and signals each recorded process group. A PID alone proves
nothing by then: the process may have exited and its PID gone to another one (``down`` would
SIGTERM, then SIGKILL, a stranger's process group), and the file lies in a state directory
anyone with access to it can edit. So each entry records, besides the PID, what the process
cannot change about itself and a stranger would not share:

- its start time (``/proc/<pid>/stat`` field 22, clock ticks since boot, fixed at fork): a
  reused PID belongs to a process started later;
- its command line, exactly as ``up`` gave it;
- a random token ``up`` put in its environment (:data:`MARKER`), read back from
  ``/proc/<pid>/environ``, which only its owner (or root) can read: a forged entry naming
  someone else's process, even with that process's start time and command line, names a
  process without the token.

A process is signalled only when all three still hold; an entry that does not prove itself
(one written by an older ``up``, a stranger's PID) is left alone and reported. The file is
read with a size cap, and anything but a list of such entries is one error line.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from pathlib import Path

import msgspec

from gpustack_core.decoding import ContractError, decode_json
from gpustack_core.wire import Wire
from gpustack_kube.files import read_capped

FILE = "processes.json"
MAX_BYTES = 16 << 20
"""``processes.json`` lists a few processes (a fleet host stands for all Device Managers)."""
MARKER = "GPUSTACK_SIMULATOR_UP"
"""The environment variable carrying the token that ties a process to its entry."""
PROC = Path("/proc")


class Entry(Wire, frozen=True, kw_only=True):
    """One started process as ``processes.json`` records it."""

    name: str
    pid: int
    log: str = ""
    start_time: int | None = None
    """Clock ticks after boot at which the process was forked; absent in older files."""
    command: tuple[str, ...] = ()
    token: str = ""


def new_token() -> str:
    """A fresh token for one process's environment (:data:`MARKER`)."""
    return secrets.token_hex(16)


def start_time(pid: int, proc: Path = PROC) -> int | None:
    """The process's start time (``/proc/<pid>/stat`` field 22), or ``None`` if it is gone.

    The command name (field 2) may hold spaces and parentheses, so the fields are counted from
    the last ``)``.
    """
    try:
        stat = (proc / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    fields = stat.rsplit(b")", 1)[-1].split()
    try:
        return int(fields[19])  # field 22 of the whole line; the 20th after the name
    except (IndexError, ValueError):
        return None


def _cmdline(pid: int, proc: Path) -> tuple[str, ...] | None:
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return tuple(part.decode(errors="replace") for part in raw.split(b"\0")[:-1])


def _has_token(pid: int, token: str, proc: Path) -> bool:
    try:
        environ = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return f"{MARKER}={token}".encode() in environ.split(b"\0")


def disproof(entry: Entry, proc: Path = PROC) -> str | None:
    """Why ``entry``'s PID is not (or no longer) the process ``up`` started; ``None``: it is."""
    if entry.start_time is None or not entry.command or not entry.token:
        return "the entry records no start time, command line and token to prove the process"
    started = start_time(entry.pid, proc)
    if started is None:
        return "no such process"
    if started != entry.start_time:
        return f"started at tick {started}, not {entry.start_time}: the PID was reused"
    if _cmdline(entry.pid, proc) != entry.command:
        return "its command line is not the one recorded"
    if not _has_token(entry.pid, entry.token, proc):
        return "its environment does not carry the token up gave it"
    return None


def load(state_dir: Path) -> list[Entry]:
    """The entries of ``state_dir``'s ``processes.json`` (none without the file).

    Raises :class:`ContractError`, one line naming the file, when it is too large, not UTF-8,
    not JSON or not a list of entries.
    """
    path = state_dir / FILE
    if not path.exists():
        return []
    try:
        data = read_capped(path, MAX_BYTES, FILE)
    except OSError as exc:
        raise ContractError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ContractError(f"{path}: not UTF-8 (byte {exc.start} cannot be decoded)") from exc
    return list(decode_json(data, list[Entry], what=str(path)))


def dump(entries: Sequence[Entry]) -> str:
    """``processes.json``'s text."""
    return json.dumps(msgspec.to_builtins(list(entries)), indent=2) + "\n"
