"""Placing the host PIDs a vendor library reports on the Pod containers that own them.

A row the Device Manager cannot place costs its whole device's figures (a partial sum published
as complete is quietly wrong), so every step that could mislead says so with a reason instead:
a process that vanished, a zombie whose memory is already being torn down, the MPS daemon that
holds memory on behalf of other processes, a cgroup this node's Pod index does not know.

PIDs are host facts that mean nothing off this node and, recorded, would leak the host's
process table, so none leaves this module except as the keys of the answer handed to the
caller: outcomes name Pods and containers, never processes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TypeAlias

from gpustack_core.pods import Pod, container_ids, is_instance_pod
from gpustack_core.reasons import AttributionReason
from gpustack_devicemanager.cgroup import CgroupIdentity, parse_cgroup

MPS_COMM_PREFIX = "nvidia-cuda-mps"
"""``nvidia-cuda-mps-server``/``-control`` as the kernel shows them: ``comm`` keeps 15 bytes,
which is exactly this prefix. The server allocates on its clients' behalf, so the memory it
holds belongs to whichever Pods talk to it, and the cgroup names only the daemon's own."""

ReadFile: TypeAlias = Callable[[Path], bytes]
"""How a ``/proc`` file is read. A seam so tests can change a file between two reads (PID
reuse) without sleeping or racing a real process."""

_Reader: TypeAlias = Callable[[str], bytes]
"""A :data:`ReadFile` on the path as text: the pass names 4,096 files a tick at the bounds,
and building a ``Path`` for each cost more than reading it."""

_CHUNK = 4096
"""One read takes the whole of ``stat``, ``comm`` or a ``cgroup`` file in practice."""


def _read_bytes(path: str) -> bytes:
    """``Path.read_bytes`` without a ``Path`` or a buffered file: open, read to the end, close.

    It raises what ``Path.read_bytes`` raises (the same ``OSError`` subclasses), so
    :func:`_read` turns them into the same reasons.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, _CHUNK):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _reader(read_file: ReadFile) -> _Reader:
    """The text-path reader for ``read_file``: the direct one for the default."""
    if read_file is Path.read_bytes:
        return _read_bytes
    return lambda path: read_file(Path(path))


@dataclass(frozen=True)
class PodRecord:
    """What attribution needs to know about one Pod on this node."""

    uid: str
    namespace: str
    name: str
    instance: bool
    containers: Mapping[str, str]
    """Bare container ID → container name, over app, init and ephemeral containers alike: any
    of them can open the device."""

    @classmethod
    def from_pod(cls, pod: Pod) -> PodRecord:
        """Reduce a Pod to its record.

        A terminating Instance Pod stays an Instance: its processes hold device memory until
        they exit, and calling them something else would hide that memory from the Instance
        still paying for it. A recreated Instance cannot inherit the figures, because its Pod
        has a new UID and consumers match by UID.
        """
        return cls(
            uid=pod.metadata.uid,
            namespace=pod.metadata.namespace,
            name=pod.metadata.name,
            instance=is_instance_pod(pod),
            containers=MappingProxyType(container_ids(pod)),
        )


@dataclass(frozen=True)
class Attributed:
    """The process runs in this Instance Pod's container (by name: IDs change on restart)."""

    pod_uid: str
    container: str


@dataclass(frozen=True)
class NonInstance:
    """The process runs in a Pod this node knows that no Instance owns: not ours to report."""

    pod_uid: str


@dataclass(frozen=True)
class Unattributed:
    """The process could not be placed; the reason is what the capability gauge will say."""

    reason: AttributionReason


Outcome: TypeAlias = Attributed | NonInstance | Unattributed


def _read(read_file: _Reader, path: str) -> bytes | AttributionReason:
    """Read one ``/proc`` file, turning the ways it fails into the reason each one means.

    ``ProcessLookupError`` (ESRCH) is what reading an already-open-but-exiting process's file
    raises, so it means "exited" just as a missing file does.
    """
    try:
        return read_file(path)
    except (FileNotFoundError, ProcessLookupError):
        return AttributionReason.EXITED
    except PermissionError:
        return AttributionReason.PERMISSION
    except OSError:
        return AttributionReason.UNREADABLE


def _fields(stat: bytes) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name, from ``state`` (field 3) on.

    They follow the *last* ``)``: the command name before it is in parentheses and may itself
    hold spaces and parentheses (``prctl`` lets a process name itself ``a) Z (b``).
    """
    _, paren, rest = stat.decode("utf-8", "surrogateescape").rpartition(")")
    fields = rest.split()
    if not paren or not fields:
        return None
    return fields


def _state(stat: bytes) -> str | None:
    """The state letter of ``/proc/<pid>/stat``, or ``None`` when the text is not a stat line."""
    fields = _fields(stat)
    return fields[0] if fields else None


_START_TIME_FIELD = 22 - 3
"""``starttime`` (field 22 of ``proc_pid_stat(5)``) in :func:`_fields`' list, which starts at 3."""


def _start_time(stat: bytes) -> str | None:
    """The process as ``stat`` names it: start time (clock ticks since boot) and command name.

    With the PID, the start time identifies the process; the name (``stat`` carries ``comm``
    in parentheses, so it costs no read) is kept too, because a process can rename itself
    (``prctl``) and the name decides whether it is the MPS daemon: a renamed process is read
    in full again.
    """
    fields = _fields(stat)
    if fields is None or len(fields) <= _START_TIME_FIELD:
        return None
    text = stat.decode("utf-8", "surrogateescape")
    name = text[text.find("(") + 1 : text.rfind(")")]
    return f"{fields[_START_TIME_FIELD]}:{name}"


def _identity(stat: bytes) -> tuple[str | None, str | None]:
    """:func:`_state` and :func:`_start_time` of one ``stat`` text, decoded and split once."""
    text = stat.decode("utf-8", "surrogateescape")
    head, paren, rest = text.rpartition(")")
    fields = rest.split(None, _START_TIME_FIELD + 1)
    if not paren or not fields:
        return None, None
    if len(fields) <= _START_TIME_FIELD:
        return fields[0], None
    return fields[0], f"{fields[_START_TIME_FIELD]}:{head[text.find('(') + 1 :]}"


_MEDIATED = Unattributed(AttributionReason.MEDIATED)

Known: TypeAlias = CgroupIdentity | AttributionReason | Unattributed
"""What a process's reads said that holds for its life: its cgroup's answer, or "mediated"."""


@dataclass(slots=True)
class _Entry:
    """One placed process: its identity, what its reads said, and the last answer given."""

    started: str
    """Start time and name, as :func:`_start_time` writes them."""
    known: Known
    record: PodRecord | None = None
    """The node's record of the process's Pod when ``outcome`` was decided (``None``: none)."""
    outcome: Outcome | None = None
    """The answer for ``record``; it stands while the index hands over the same record."""


@dataclass
class AttributionCache:
    """What the last ticks learnt per process, keyed by PID and checked by start time.

    A process's cgroup is fixed for its life in practice (container processes are not
    migrated), and a PID with the same start time is the same process, so once a PID was
    placed a later tick needs only its ``stat`` (state, name and start time): one read instead
    of four. A name that changed is read in full, as a new process would be. A reused PID has
    a new start time and is read in full again, so it is never placed on the previous
    process's Pod. Entries of PIDs not asked about in a tick
    are dropped at its end: the cache holds at most one tick's PIDs.
    """

    entries: dict[int, _Entry] = field(default_factory=dict)
    hits: int = 0
    """PIDs placed from the cache (one read each); for tests and benchmarks."""

    def retain(self, pids: Iterable[int]) -> None:
        """Forget every PID not in ``pids``."""
        keep = set(pids)
        for pid in [pid for pid in self.entries if pid not in keep]:
            del self.entries[pid]


def _from_cache(
    entry: _Entry,
    base: str,
    pods: Mapping[str, PodRecord],
    read_file: _Reader,
    cache: AttributionCache,
) -> tuple[Outcome, bool] | None:
    """The warm path: one ``stat`` read; ``None`` when the process must be read in full.

    The Pod side is looked up afresh every tick; only when the index hands over the very
    record the last answer was decided on (records are immutable) is that answer reused.
    """
    stat = _read(read_file, base + "stat")
    if isinstance(stat, AttributionReason):
        return Unattributed(stat), stat is AttributionReason.EXITED
    state, started = _identity(stat)
    if state in {"Z", "X"} or started != entry.started:
        return None  # a zombie now, or another process under a reused PID: the full path says
    cache.hits += 1
    known = entry.known
    if isinstance(known, Unattributed):
        return known, False
    if isinstance(known, AttributionReason):
        return Unattributed(known), False
    record = pods.get(known.pod_uid)
    if entry.outcome is None or record is not entry.record:
        entry.record, entry.outcome = record, _classify(known, pods)
    return entry.outcome, False


def _classify(parsed: CgroupIdentity | AttributionReason, pods: Mapping[str, PodRecord]) -> Outcome:
    if isinstance(parsed, AttributionReason):
        return Unattributed(parsed)
    record = pods.get(parsed.pod_uid)
    if record is None:
        return Unattributed(AttributionReason.UNKNOWN_POD)
    if not record.instance:
        return NonInstance(pod_uid=parsed.pod_uid)
    name = record.containers.get(parsed.container_id)
    if name is None:
        return Unattributed(AttributionReason.UNKNOWN_CONTAINER)
    return Attributed(pod_uid=parsed.pod_uid, container=name)


def _attribute_one(
    base: str,
    pods: Mapping[str, PodRecord],
    read_file: _Reader,
    remember: Callable[[str, Known], None] | None = None,
) -> tuple[Outcome, bool]:
    """One PID's outcome, and whether its ``/proc`` entry was missing at the first read.

    ``remember`` receives the process's start time and what its cgroup and name said, once
    both cgroup reads agreed (a stable answer is the only one worth keeping).
    """
    first = _read(read_file, base + "cgroup")
    if isinstance(first, AttributionReason):
        return Unattributed(first), first is AttributionReason.EXITED

    stat = _read(read_file, base + "stat")
    if isinstance(stat, AttributionReason):
        return Unattributed(stat), False
    state = _state(stat)
    if state is None:
        return Unattributed(AttributionReason.UNREADABLE), False
    if state == "Z":
        return Unattributed(AttributionReason.ZOMBIE), False
    if state == "X":
        # "Dead": the kernel is removing it this instant; nothing of it is left to attribute.
        return Unattributed(AttributionReason.EXITED), False

    comm = _read(read_file, base + "comm")
    if isinstance(comm, AttributionReason):
        return Unattributed(comm), False
    if comm.decode("utf-8", "surrogateescape").startswith(MPS_COMM_PREFIX):
        started = _start_time(stat)
        if remember is not None and started is not None:
            remember(started, _MEDIATED)
        return _MEDIATED, False

    try:
        text = first.decode("utf-8")
    except UnicodeDecodeError:
        return Unattributed(AttributionReason.UNREADABLE), False
    parsed = parse_cgroup(text)
    outcome = _classify(parsed, pods)

    # The PID may have been reused between the vendor's report and these reads. A cgroup that
    # reads the same twice means whatever runs under this PID now runs in the same container,
    # so the answer holds either way; one that changed or vanished cannot be trusted. (Reuse
    # before the first read is undetectable here: the vendor reports no start time to compare.)
    second = _read(read_file, base + "cgroup")
    if second != first:
        return Unattributed(AttributionReason.UNSTABLE), False
    started = _start_time(stat)
    if remember is not None and started is not None:
        remember(started, parsed)
    return outcome, False


def attribute(
    pids: Iterable[int],
    proc_root: Path,
    pods: Mapping[str, PodRecord],
    *,
    read_file: ReadFile = Path.read_bytes,
    cache: AttributionCache | None = None,
) -> dict[int, Outcome]:
    """Place each host PID on a Pod container, or say why it cannot be placed.

    With a ``cache`` kept across ticks, a process placed before costs one read (see
    :class:`AttributionCache`); the answers are the same as without it.

    ``pods`` is the node's Pod index keyed by UID. When every requested PID is missing from
    ``proc_root``, the likelier story is not that all of them exited at once but that this
    process cannot see the host's PIDs (it was started without ``hostPID``), so all of them get
    ``pid_namespace_invisible``: a deployment error to fix, not a race to wait out.
    """
    outcomes: dict[int, Outcome] = {}
    every_missing = True
    read = _reader(read_file)
    root = os.fspath(proc_root)
    for pid in pids:
        if pid in outcomes:
            continue
        base = f"{root}/{pid}/"
        warm = None
        if cache is not None and (cached := cache.entries.get(pid)) is not None:
            warm = _from_cache(cached, base, pods, read, cache)
        if warm is None:
            remember = None
            if cache is not None:
                cache.entries.pop(pid, None)

                def remember(started: str, known: Known, pid: int = pid) -> None:
                    cache.entries[pid] = _Entry(started, known)

            warm = _attribute_one(base, pods, read, remember)
        outcome, missing = warm
        outcomes[pid] = outcome
        every_missing = every_missing and missing
    if cache is not None:
        cache.retain(outcomes)
    if outcomes and every_missing:
        invisible = Unattributed(AttributionReason.PID_NAMESPACE_INVISIBLE)
        return dict.fromkeys(outcomes, invisible)
    return outcomes
