"""A fake ``/proc`` holding just what attribution reads: ``<pid>/cgroup``, ``stat`` and ``comm``.

The Device Manager reads its proc root as plain files, so a directory tree in the kernel's
formats is all it takes to replay a recorded (or scenario-made) process table without the
processes. The formats are the kernel's own, not simplified: a ``stat`` line whose command name
holds spaces or parentheses must trip up a parser here exactly as it would on a node.

A tree is replaced whole by swapping a symlink, so a reader never sees a half-written table or
no table at all: ``root`` becomes a link to a hidden sibling directory, and each write builds a
new sibling and repoints the link with one atomic rename.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from gpustack_simulator.recording import ProcEntry

COMM_BYTES = 15
"""The kernel's ``TASK_COMM_LEN`` less its NUL: what ``comm`` and ``stat`` show of a name."""

_STAT_FIELDS_AFTER_STATE = 49
"""``stat`` has 52 fields since Linux 3.5; three (pid, comm, state) are written explicitly."""

_PID = re.compile(r"[0-9]+")


def _comm(name: str) -> bytes:
    """The name as the kernel keeps it: cut to 15 bytes, even mid-character, as ``prctl`` does."""
    return name.encode("utf-8")[:COMM_BYTES]


def _stat(pid: int, entry: ProcEntry) -> bytes:
    """A full-width ``stat`` line: ``pid (comm) S ppid …`` with plausible zeros after."""
    # Field n (1-based, as proc(5) numbers them) is rest[n - 4]: ppid 1, pgrp and session the
    # pid itself, priority 20, one thread, zeros elsewhere.
    rest = ["1", str(pid), str(pid)] + ["0"] * (_STAT_FIELDS_AFTER_STATE - 3)
    rest[18 - 4] = "20"
    rest[20 - 4] = "1"
    tail = " ".join(rest)
    return b"%d (%s) %s %s\n" % (
        pid,
        _comm(entry.comm),
        entry.state.encode("utf-8"),
        tail.encode("ascii"),
    )


def _pid_of(key: str) -> int:
    if not _PID.fullmatch(key) or int(key) == 0:
        raise ValueError(f"process table key {key!r} is not a PID (a positive decimal number)")
    return int(key)


def _validated(procs: Mapping[str, ProcEntry]) -> dict[int, ProcEntry]:
    """Check the table before anything touches the disk, so a bad one leaves the old tree."""
    table: dict[int, ProcEntry] = {}
    for key, entry in procs.items():
        pid = _pid_of(key)
        if pid in table:
            raise ValueError(f"process table names PID {pid} twice (as {key!r} and another)")
        if len(entry.state) != 1 or entry.state.isspace() or not entry.state.isascii():
            raise ValueError(f"PID {pid}: state {entry.state!r} is not one state letter")
        table[pid] = entry
    return table


def _write_tree(directory: Path, table: Mapping[int, ProcEntry]) -> None:
    for pid, entry in table.items():
        base = directory / str(pid)
        base.mkdir()
        cgroup = entry.cgroup
        if cgroup and not cgroup.endswith("\n"):
            cgroup += "\n"  # the kernel ends every line; recordings store the text stripped
        (base / "cgroup").write_bytes(cgroup.encode("utf-8"))
        (base / "stat").write_bytes(_stat(pid, entry))
        (base / "comm").write_bytes(_comm(entry.comm) + b"\n")


def _looks_like_procfs(directory: Path) -> bool:
    """Empty, or only PID directories: safe to replace. Anything else may be someone's data."""
    return all(_PID.fullmatch(child.name) and child.is_dir() for child in directory.iterdir())


def write_procfs(root: Path, procs: Mapping[str, ProcEntry]) -> None:
    """Make ``root`` show exactly ``procs`` (keyed by PID as text), replacing any earlier tree.

    ``root`` may be absent, a link an earlier call made, or a plain directory holding nothing
    but PID directories (an empty ``mkdtemp`` included); anything else there is refused rather
    than deleted. Converting a plain directory into the link leaves ``root`` missing for the
    instant between two renames; every later write is a single atomic swap. The previous tree
    is removed after the swap; a reader still holding one of its files open keeps reading it,
    as with a process that exits under a reader of the real ``/proc``.
    """
    table = _validated(procs)
    parent = root.parent
    prefix = f".{root.name}."
    previous: Path | None = None
    if root.is_symlink():
        target = Path(os.readlink(root))
        previous = target if target.is_absolute() else parent / target
    elif root.is_dir():
        if not _looks_like_procfs(root):
            raise FileExistsError(f"{root} holds more than PID directories; refusing to replace it")
    elif root.exists():
        raise FileExistsError(f"{root} exists and is not a directory")
    parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    link = parent / f"{fresh.name}.link"
    try:
        _write_tree(fresh, table)
        link.symlink_to(fresh.name)
        if root.is_dir() and not root.is_symlink():
            previous = parent / f"{fresh.name}.old"
            root.rename(previous)
        os.replace(link, root)
    except BaseException:
        link.unlink(missing_ok=True)
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    # Only ever delete what this module made: a sibling under the hidden prefix.
    if previous is not None and previous.parent == parent and previous.name.startswith(prefix):
        shutil.rmtree(previous, ignore_errors=True)
