"""The node's Pods with only the grants the kubelet confirms (``gpustack_core.confirm``).

A tenant that may ``patch pods`` can write the allocation annotation itself and claim another
tenant's card. Where the kubelet's PodResources socket is reachable, the Device Manager reads
which device-plugin IDs the kubelet assigned to each container (one List per monitor period)
and hands the monitor and the exporter each Pod with the unconfirmed grants removed; the reason
is logged once per claim. The snapshot then lists the confirmed grants (``grants``), so the
worker drops the same claims from the subresource.

A grant the plugin has just written is in the annotation before the kubelet records it (the
kubelet records an assignment once ``Allocate`` answered), so a claim is reported only once it
stayed unconfirmed across :data:`PATIENCE` fresh Lists; it is withheld meanwhile all the same.

Until the first List answers, nothing is confirmed (figures of granted cards are absent, not
taken on trust); a List that fails later keeps the last assignments read (a kubelet restart is
brief, and its record outlives it).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc
import trio

from gpustack_core.confirm import Assigned, confirm
from gpustack_devicemanager.podview import NodePod
from gpustack_kube.kubeletapi.api import read_pod_resources

log = logging.getLogger("gpustack.devicemanager.confirmation")

LIST_TIMEOUT = 2.0
PATIENCE = 2
"""Fresh PodResources Lists a claim stays unconfirmed through before its reason is logged."""


def read_assignments(socket: Path) -> Assigned:
    """PodResources ``List``: every container's assigned device IDs (blocking; a thread)."""
    listed = read_pod_resources(socket, LIST_TIMEOUT)
    return {key: frozenset().union(*by_resource.values()) for key, by_resource in listed.items()}


class GrantConfirmation:
    """The latest kubelet assignments, and the node's Pods filtered by them."""

    def __init__(self, socket: Path, period: float) -> None:
        self.socket = socket
        self.period = period
        self.assigned: Assigned | None = None
        """``None`` until the first successful List."""
        self.reads = 0
        self.failures = 0
        self._told: set[str] = set()
        self._seen_at: dict[str, int] = {}
        """Reason → the List count when it was first met (a claim the kubelet may yet record)."""

    async def run(self) -> None:
        """Re-read the assignments every period, for ever."""
        while True:
            try:
                self.assigned = await trio.to_thread.run_sync(read_assignments, self.socket)
                self.reads += 1
            except grpc.RpcError as exc:
                self.failures += 1
                log.warning("PodResources at %s did not answer (%s); keeping the last record",
                            self.socket, exc.code() if hasattr(exc, "code") else exc)  # fmt: skip
            await trio.sleep(self.period)

    def filter(self, entries: Sequence[NodePod]) -> list[NodePod]:
        """Each Pod with its unconfirmed grants removed (each reason logged once)."""
        assigned = self.assigned or {}
        answer = []
        current: set[str] = set()
        for entry in entries:
            if not entry.grants:
                answer.append(entry)
                continue
            meta = entry.pod.metadata
            verdict = confirm(meta.namespace, meta.name, entry.grants, entry.device_ids, assigned)
            current.update(verdict.dropped)
            for reason in verdict.dropped:
                if self.assigned is None or reason in self._told:
                    continue
                first = self._seen_at.setdefault(reason, self.reads)
                if self.reads - first >= PATIENCE:
                    self._told.add(reason)
                    del self._seen_at[reason]
                    log.warning("%s", reason)
            if len(verdict.kept) == len(entry.grants):
                answer.append(entry)
            else:
                answer.append(dataclasses.replace(entry, grants=verdict.kept))
        for settled in self._seen_at.keys() - current:  # confirmed since, or the Pod gone
            del self._seen_at[settled]
        return answer

    def wrap(self, pods: Callable[[], list[NodePod] | None]) -> Callable[[], list[NodePod] | None]:
        """A Pod source yielding what ``pods`` yields, confirmed."""

        def confirmed() -> list[NodePod] | None:
            entries = pods()
            return None if entries is None else self.filter(entries)

        return confirmed
