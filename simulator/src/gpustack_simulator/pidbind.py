"""Binding a replay's process rows to live processes of the Pods that hold the replayed devices.

A recording's process rows carry the PIDs of the node it was recorded on. Replayed on a cluster
node (kind), those PIDs are nobody's — or worse, someone else's — so attribution through the
real ``/proc`` can place none of them. With ``device-manager serve --simulate <recording>
--bind-replayed-pids`` the CLI (the composition root) hands the Device Manager
:func:`pid_binding` as its monitor wrapper (``ServeOptions.monitor_wrapper``), which puts the
replay backend in a :class:`PidBindingBackend`; the Device Manager itself knows nothing of it.
Every monitor tick, the binding rewrites each row's PID on a device D into a live PID of a container
that the node's Pods' allocation annotations say holds D. Attribution then runs unchanged and
for real: it reads ``/proc/<pid>/cgroup`` of a live process and finds the Pod through its
cgroup, exactly as on a node with accelerators.

The rules, each chosen so binding can never *invent* an attribution:

* A container's live PIDs are the ``<proc-root>/<pid>`` whose ``cgroup`` the attribution parser
  reads as that Pod's UID and that container's bare ID (cgroup v1 and v2 alike).
* The candidates of D are the live PIDs of its holding containers, taken round-robin over the
  containers (each container's PIDs sorted) with the containers in a stable order: Pod
  namespace, Pod name, container name, and containers that hold D for ``Visibility`` only after
  the others. So one process per holding container — what the recordings show — comes first.
* D's distinct recorded PIDs, sorted, take the candidates in that order; every row of a recorded
  PID gets its live PID, so a process keeps one identity across its rows.
* A recorded PID left without a candidate becomes :data:`UNBOUND_PID_BASE` plus itself: above any
  PID the kernel hands out, so attribution reports it missing (``exited``, or
  ``pid_namespace_invisible`` when nothing on the node was bound) — never somebody's process.
* A device no Pod holds keeps its rows unchanged, and so does everything while the node's Pods
  are not known yet (no cluster, index not synced): then the tick publishes no slices anyway.

Only a replay may be bound: on a real library the PIDs are facts, and rewriting them would put
one tenant's memory on another's Instance. The CLI refuses ``--bind-replayed-pids`` without
``--simulate``.

This module plugs into the Device Manager, so it reads ``/proc/<pid>/cgroup`` and the Pods'
annotations with the Device Manager's own parsers (``cgroup``, ``podview``): a binding is only
sound if attribution reads the bound process exactly as this module did. It is the one simulator
module that may import the Device Manager (``tests/lint/layers.py``), never the other way round.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from gpustack_core.modes import AllocationMode
from gpustack_core.pods import container_ids
from gpustack_devicemanager.attribution import ReadFile
from gpustack_devicemanager.cgroup import CgroupIdentity, parse_cgroup
from gpustack_devicemanager.monitor import PodsSource
from gpustack_devicemanager.podview import PodEntry, decoded
from gpustack_vendors.model import CardSample, Detection, DeviceProcesses, PartitionSample
from gpustack_vendors.protocol import Backend

log = logging.getLogger("gpustack.simulator.pidbind")

UNBOUND_PID_BASE = 1 << 22
"""``PID_MAX_LIMIT`` on 64-bit Linux: ``pid_max`` cannot be set higher, so no process ever has
this PID or any above it. A recorded PID with no live counterpart is moved up here."""


@dataclass(frozen=True, order=True)
class Holder:
    """One container holding a device, with the key that orders it among the device's holders."""

    visibility_only: bool
    namespace: str
    pod_name: str
    container: str
    pod_uid: str
    container_id: str
    """Bare (no runtime scheme); empty while the kubelet has not reported the container yet."""

    @property
    def identity(self) -> CgroupIdentity:
        """What ``/proc/<pid>/cgroup`` reads as for a process of this container."""
        return CgroupIdentity(pod_uid=self.pod_uid, container_id=self.container_id)


def holders(pods: Iterable[PodEntry], manufacturer: str) -> dict[str, list[Holder]]:
    """Device id → the containers that hold it (in ``manufacturer``'s groups), in binding order.

    A Pod the API returned malformed, or whose annotation does not parse, holds nothing here;
    the monitor tick already says so in its log.
    """
    found: dict[str, dict[tuple[str, str], set[AllocationMode]]] = {}
    identities: dict[tuple[str, str], tuple[str, str, str]] = {}
    for entry in decoded(pods):
        if entry.grant_error is not None:
            continue
        pod, held = entry.pod, entry.grants
        ids = {name: bare for bare, name in container_ids(pod).items()}
        meta = pod.metadata
        for grant in held:
            if grant.manufacturer != manufacturer:
                continue
            key = (meta.uid, grant.container)
            identities[key] = (meta.namespace, meta.name, ids.get(grant.container, ""))
            found.setdefault(grant.accelerator.id, {}).setdefault(key, set()).add(
                grant.accelerator.mode
            )
    answer: dict[str, list[Holder]] = {}
    for device, containers in found.items():
        answer[device] = sorted(
            Holder(
                visibility_only=modes == {AllocationMode.VISIBILITY},
                namespace=identities[key][0],
                pod_name=identities[key][1],
                container=key[1],
                pod_uid=key[0],
                container_id=identities[key][2],
            )
            for key, modes in containers.items()
        )
    return answer


def live_pids(
    proc_root: Path,
    wanted: Iterable[CgroupIdentity],
    *,
    read_file: ReadFile = Path.read_bytes,
) -> dict[CgroupIdentity, list[int]]:
    """The live PIDs under ``proc_root`` of each wanted container, sorted; scanned once.

    A process that exits mid-scan, a kernel thread, an unreadable or foreign cgroup: each is
    simply not a candidate. A proc root that cannot be listed yields no candidates at all.
    """
    targets = {identity for identity in wanted if identity.container_id}
    found: dict[CgroupIdentity, list[int]] = {identity: [] for identity in targets}
    if not targets:
        return found
    try:
        entries = list(proc_root.iterdir())
    except OSError as exc:
        log.warning("cannot list %s to bind replayed PIDs: %s", proc_root, exc)
        return found
    for entry in entries:
        if not entry.name.isdecimal():
            continue
        try:
            text = read_file(entry / "cgroup").decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        parsed = parse_cgroup(text)
        if isinstance(parsed, CgroupIdentity) and parsed in found:
            found[parsed].append(int(entry.name))
    for pids in found.values():
        pids.sort()
    return found


def _candidates(
    device_holders: Sequence[Holder], live: Mapping[CgroupIdentity, Sequence[int]]
) -> list[int]:
    """Round-robin over the holders' sorted live PIDs: all first PIDs, then all second ones."""
    lists = [list(live.get(h.identity, ())) for h in device_holders if h.container_id]
    ordered: list[int] = []
    seen: set[int] = set()
    depth = max((len(pids) for pids in lists), default=0)
    for index in range(depth):
        for pids in lists:
            if index < len(pids) and pids[index] not in seen:
                seen.add(pids[index])
                ordered.append(pids[index])
    return ordered


def bind_rows(
    processes: Mapping[str, DeviceProcesses],
    device_holders: Mapping[str, Sequence[Holder]],
    live: Mapping[CgroupIdentity, Sequence[int]],
) -> dict[str, DeviceProcesses]:
    """Each held device's rows with their PIDs bound (see the module's rules); the rest as is."""
    bound: dict[str, DeviceProcesses] = {}
    for device, entry in processes.items():
        held = device_holders.get(device)
        if not held or not entry.rows:
            bound[device] = entry
            continue
        recorded = sorted({row.pid for row in entry.rows})
        candidates = _candidates(held, live)
        mapping = {
            pid: candidates[index] if index < len(candidates) else UNBOUND_PID_BASE + pid
            for index, pid in enumerate(recorded)
        }
        rows = tuple(replace(row, pid=mapping[row.pid]) for row in entry.rows)
        bound[device] = replace(entry, rows=rows)
        unbound = max(0, len(recorded) - len(candidates))
        if unbound:
            log.debug(
                "device %s: %d of %d replayed processes have no live process to bind to",
                device,
                unbound,
                len(recorded),
            )
    return bound


def bind_replayed_pids(
    processes: Mapping[str, DeviceProcesses],
    pods: Iterable[PodEntry],
    manufacturer: str,
    proc_root: Path,
    *,
    read_file: ReadFile = Path.read_bytes,
) -> dict[str, DeviceProcesses]:
    """The replay's answer with PIDs bound to live processes of the devices' holders.

    ``proc_root`` is scanned only when some held device has rows, and then once per call.
    """
    device_holders = holders(pods, manufacturer)
    wanted = [
        holder.identity
        for device, entry in processes.items()
        if entry.rows
        for holder in device_holders.get(device, ())
    ]
    if not wanted:
        return dict(processes)
    live = live_pids(proc_root, wanted, read_file=read_file)
    return bind_rows(processes, device_holders, live)


class PidBindingBackend:
    """A replay backend whose process rows are bound to live PIDs; everything else passes through.

    The node's Pods reach it through :meth:`watch`, which wraps the monitor's Pod source: the
    tick reads the Pods on the event loop, then calls :meth:`processes` in a worker thread, so
    binding sees exactly the Pods that the tick attributes against.
    """

    def __init__(
        self, inner: Backend, proc_root: Path, *, read_file: ReadFile = Path.read_bytes
    ) -> None:
        self.inner = inner
        self.manufacturer = inner.manufacturer
        self.proc_root = proc_root
        self._read_file = read_file
        self._pods: Sequence[PodEntry] | None = None

    def watch(self, source: PodsSource) -> PodsSource:
        """``source``, remembering each answer for the next :meth:`processes` call."""

        def watched() -> Sequence[PodEntry] | None:
            pods = source()
            self._pods = pods
            return pods

        return watched

    def detect(self) -> Detection:
        """The replay's detection, as is."""
        return self.inner.detect()

    def sample(self) -> list[CardSample]:
        """The replay's card figures, as is."""
        return self.inner.sample()

    def processes(self, device_ids: Sequence[str]) -> dict[str, DeviceProcesses]:
        """The replay's rows, bound to live PIDs once the node's Pods are known."""
        answered = self.inner.processes(device_ids)
        pods = self._pods
        if pods is None:
            return answered
        return bind_replayed_pids(
            answered, pods, self.manufacturer, self.proc_root, read_file=self._read_file
        )

    def partitions(self, partition_ids: Sequence[str]) -> dict[str, PartitionSample]:
        """The replay's partition figures, as is (they carry no PIDs)."""
        return self.inner.partitions(partition_ids)

    def close(self) -> None:
        """Close the replay."""
        self.inner.close()


def pid_binding(proc_root: Path) -> Callable[[Backend, PodsSource], tuple[Backend, PodsSource]]:
    """The Device Manager's monitor wrapper for ``--bind-replayed-pids``, over ``proc_root``.

    Given the replay backend and the monitor's Pod source, the pair the monitor reads instead:
    the backend bound through :class:`PidBindingBackend`, and the source it watches.
    """

    def wrap(backend: Backend, pods: PodsSource) -> tuple[Backend, PodsSource]:
        binding = PidBindingBackend(backend, proc_root)
        return binding, binding.watch(pods)

    return wrap
