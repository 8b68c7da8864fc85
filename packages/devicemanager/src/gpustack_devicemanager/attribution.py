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

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
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


def _read(read_file: ReadFile, path: Path) -> bytes | AttributionReason:
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


def _state(stat: bytes) -> str | None:
    """The state letter of ``/proc/<pid>/stat``, or ``None`` when the text is not a stat line.

    The field follows the *last* ``)``: the command name before it is in parentheses and may
    itself hold spaces and parentheses (``prctl`` lets a process name itself ``a) Z (b``).
    """
    _, paren, rest = stat.decode("utf-8", "surrogateescape").rpartition(")")
    fields = rest.split()
    if not paren or not fields:
        return None
    return fields[0]


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
    base: Path, pods: Mapping[str, PodRecord], read_file: ReadFile
) -> tuple[Outcome, bool]:
    """One PID's outcome, and whether its ``/proc`` entry was missing at the first read."""
    first = _read(read_file, base / "cgroup")
    if isinstance(first, AttributionReason):
        return Unattributed(first), first is AttributionReason.EXITED

    stat = _read(read_file, base / "stat")
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

    comm = _read(read_file, base / "comm")
    if isinstance(comm, AttributionReason):
        return Unattributed(comm), False
    if comm.decode("utf-8", "surrogateescape").startswith(MPS_COMM_PREFIX):
        return Unattributed(AttributionReason.MEDIATED), False

    try:
        text = first.decode("utf-8")
    except UnicodeDecodeError:
        return Unattributed(AttributionReason.UNREADABLE), False
    outcome = _classify(parse_cgroup(text), pods)

    # The PID may have been reused between the vendor's report and these reads. A cgroup that
    # reads the same twice means whatever runs under this PID now runs in the same container,
    # so the answer holds either way; one that changed or vanished cannot be trusted. (Reuse
    # before the first read is undetectable here: the vendor reports no start time to compare.)
    second = _read(read_file, base / "cgroup")
    if second != first:
        return Unattributed(AttributionReason.UNSTABLE), False
    return outcome, False


def attribute(
    pids: Iterable[int],
    proc_root: Path,
    pods: Mapping[str, PodRecord],
    *,
    read_file: ReadFile = Path.read_bytes,
) -> dict[int, Outcome]:
    """Place each host PID on a Pod container, or say why it cannot be placed.

    ``pods`` is the node's Pod index keyed by UID. When every requested PID is missing from
    ``proc_root``, the likelier story is not that all of them exited at once but that this
    process cannot see the host's PIDs (it was started without ``hostPID``), so all of them get
    ``pid_namespace_invisible``: a deployment error to fix, not a race to wait out.
    """
    outcomes: dict[int, Outcome] = {}
    every_missing = True
    for pid in pids:
        if pid in outcomes:
            continue
        outcome, missing = _attribute_one(proc_root / str(pid), pods, read_file)
        outcomes[pid] = outcome
        every_missing = every_missing and missing
    if outcomes and every_missing:
        invisible = Unattributed(AttributionReason.PID_NAMESPACE_INVISIBLE)
        return dict.fromkeys(outcomes, invisible)
    return outcomes
