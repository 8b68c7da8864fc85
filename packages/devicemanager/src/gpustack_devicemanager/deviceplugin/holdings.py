"""What the node's Pods hold, as far as the system itself recorded it.

Every plugin's health answer and every ``Allocate`` decision counts the node's live grants. They
are read from the Pods' allocation annotations, but anyone who may ``patch pods`` in a namespace
can write that annotation on their own Pod: a claim on a card the kubelet never gave them would
turn that card's tokens Unhealthy for every other tenant (the kubelet then admits nothing there),
and a claimed sibling would make a sidecar's Visibility grant show a card the Pod does not hold.

So an annotation's grant counts only where one of two records the tenant cannot write backs it:

* this process's own **ledger** of what it granted (the Pod's UID, the container, the mode and
  the accelerator entries decided), kept while the Pod exists — it covers the moments between
  ``Allocate`` answering and the kubelet recording the assignment, and a Pod the informer has
  not shown yet; and
* the kubelet's **PodResources** record, through :func:`gpustack_core.confirm.confirm` (the IDs
  the annotation names were assigned to that very container, and name its card) — it covers
  every grant made before this process started.

Where this process granted a (container, mode) itself, its own entries replace the annotation's
for it, so an edited annotation can neither inflate nor release a real grant.

Until PodResources has answered once (or where the node has no PodResources socket) there is
nothing to check against, and annotations are taken as written, as before: counting a claim
nobody made costs availability, while ignoring a real grant would hand one card to two Pods.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpustack_core.allocation import AllocatedAccelerator, Grant
from gpustack_core.allocator import Holding, live
from gpustack_core.confirm import Assigned, confirm
from gpustack_core.modes import TERMINATED_PHASES, AllocationMode
from gpustack_core.pods import Pod
from gpustack_devicemanager.podview import NodePod

log = logging.getLogger("gpustack.devicemanager.deviceplugin")

GRANT_SECONDS = 120.0
"""A grant whose Pod the informer never shows (deleted meanwhile) is forgotten after this."""
MAX_TOLD = 4096
"""Distinct disbelieved claims logged before the memory of what was logged starts afresh."""


@dataclass
class Granted:
    """What this process granted one Pod: (container, mode) → the accelerator entries."""

    key: str
    """``namespace/name``, for refusal messages."""
    held: dict[tuple[str, AllocationMode], tuple[AllocatedAccelerator, ...]]
    written_at: float
    seen: bool = False
    """The informer has shown the Pod: once it no longer does, the Pod is gone."""

    def holdings(self, manufacturer: str, terminated: bool) -> list[Holding]:
        """The grants as holdings, containers in name order."""
        return [
            Holding(self.key, container, manufacturer, accelerator, terminated)
            for (container, _), accelerators in sorted(self.held.items())
            for accelerator in accelerators
        ]


@dataclass
class Ledger:
    """The grants of this process and the kubelet's last PodResources record (one manufacturer)."""

    manufacturer: str
    granted: dict[str, Granted] = field(default_factory=dict)
    """By Pod UID."""
    assigned: Assigned | None = None
    """The last PodResources List that answered; ``None`` until one has."""
    _told: set[str] = field(default_factory=set)

    def record(
        self,
        uid: str,
        key: str,
        container: str,
        mode: AllocationMode,
        accelerators: tuple[AllocatedAccelerator, ...],
    ) -> None:
        """Note a grant just written to the Pod's annotation."""
        entry = self.granted.setdefault(uid, Granted(key, {}, time.monotonic()))
        entry.held[(container, mode)] = accelerators
        entry.written_at = time.monotonic()

    def released(self, namespace: str, name: str) -> bool:
        """Whether the kubelet freed a Pod's devices: PodResources lists no container of it.

        Asked only of a Pod being deleted: a kubelet keeps a terminating Pod's devices
        assigned until its containers are gone, then drops them, and may hand them to the
        next Pod at once — before this process's informer has seen the old Pod go (found on
        the real control plane: a restarted Instance's new Pod was refused the card its
        stopped predecessor had held).
        """
        if self.assigned is None:
            return False
        return not any(k[0] == namespace and k[1] == name for k in self.assigned)

    def holds(self, uid: str, container: str, mode: AllocationMode) -> bool:
        """Whether this process granted the container ``mode`` already."""
        entry = self.granted.get(uid)
        return entry is not None and (container, mode) in entry.held

    def pod(
        self,
        pod: Pod,
        grants: Sequence[Grant],
        device_ids: Mapping[str, Sequence[str]],
    ) -> list[Holding]:
        """One Pod's holdings of this manufacturer that a record backs (see the module)."""
        meta = pod.metadata
        key = f"{meta.namespace}/{meta.name}"
        if meta.deletion_timestamp is not None and self.released(meta.namespace, meta.name):
            return []
        terminated = pod.status.phase in TERMINATED_PHASES
        own = self.granted.get(meta.uid)
        mine = [  # another manufacturer's grants count against nothing here
            g
            for g in grants
            if g.manufacturer == self.manufacturer
            and (own is None or (g.container, g.accelerator.mode) not in own.held)
        ]
        held = [
            Holding(key, g.container, g.manufacturer, g.accelerator, terminated)
            for g in self._believed(meta.namespace, meta.name, mine, device_ids)
        ]
        if own is not None:
            held.extend(own.holdings(self.manufacturer, terminated))
        return held

    def node(self, entries: Iterable[NodePod] | None, *, exclude_uid: str = "") -> list[Holding]:
        """Every live holding of this manufacturer on the node, ``exclude_uid``'s Pod left out.

        ``entries`` are the informer's Pods (``None`` while it is not synced: then nothing is
        forgotten). The grants of a Pod the informer showed and no longer shows are forgotten
        (it is gone; a Pod recreated under its name is another UID); those of a Pod it has not
        shown yet count until :data:`GRANT_SECONDS` after they were made.
        """
        shown: set[str] = set()
        held: list[Holding] = []
        for entry in entries or ():
            uid = entry.pod.metadata.uid
            shown.add(uid)
            own = self.granted.get(uid)
            if own is not None:
                own.seen = True
            if uid != exclude_uid:
                held.extend(self.pod(entry.pod, entry.grants, entry.device_ids))
        now = time.monotonic()
        for uid, granted in list(self.granted.items()):
            if uid in shown:
                continue
            if entries is not None and (granted.seen or now - granted.written_at > GRANT_SECONDS):
                del self.granted[uid]
            elif uid != exclude_uid:
                held.extend(granted.holdings(self.manufacturer, False))
        return live(held, self.manufacturer)

    def _believed(
        self, namespace: str, name: str, grants: Sequence[Grant], ids: Mapping[str, Sequence[str]]
    ) -> Sequence[Grant]:
        if self.assigned is None or not grants:
            return grants
        verdict = confirm(namespace, name, grants, ids, self.assigned)
        for reason in verdict.dropped:
            if reason not in self._told:
                if len(self._told) >= MAX_TOLD:
                    self._told.clear()
                self._told.add(reason)
                log.warning("not counted as held: %s", reason)
        return verdict.kept
