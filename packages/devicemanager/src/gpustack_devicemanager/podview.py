"""The node's Pods as the Device Manager reads them: decoded once, allocation parsed once.

The informer hands each watch event's object to :func:`node_pod` and keeps the result, so the
monitor, the exporter and the PID binding all read the same decoded Pod and the same parsed
grants until that Pod next changes — instead of each decoding every Pod and re-parsing its
annotation on every round.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpustack_core.allocation import Grant, read_allocation
from gpustack_core.decoding import ContractError
from gpustack_core.pods import Pod, pod_from_object


@dataclass(frozen=True)
class NodePod:
    """One Pod and what its allocation annotation grants.

    ``grant_error`` is set (and ``grants`` empty) when the annotation does not parse: the
    Pod still counts for attribution and readiness, it just claims nothing (the policy of
    :func:`~gpustack_core.allocation.read_allocation`); the monitor and the ledger log it.
    ``device_ids`` are the annotation's ``deviceIDs`` per container: what the kubelet's
    record is checked against.
    """

    pod: Pod
    grants: tuple[Grant, ...]
    grant_error: str | None = None
    device_ids: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def node_pod(obj: dict[str, Any]) -> NodePod:
    """Decode one API object; raises ``ContractError`` when it is not a usable Pod.

    ``managedFields`` and everything else the project does not read are dropped by the
    decode (the structs name only what is read), so the cache holds the small typed form.
    """
    pod = pod_from_object(obj)
    meta = pod.metadata
    try:
        read = read_allocation(meta.annotations, pod=f"{meta.namespace}/{meta.name}")
    except ContractError as exc:
        return NodePod(pod, (), str(exc))
    return NodePod(pod, read.grants, device_ids=read.device_ids)


PodEntry = dict[str, Any] | NodePod
"""What a Pod source yields: decoded entries from the informer, or raw API objects (tests and
callers without an informer), which are decoded on the spot."""


def decoded(entries: Iterable[PodEntry], skipped: list[str] | None = None) -> list[NodePod]:
    """Every entry as a :class:`NodePod`; a raw object that does not decode is left out.

    The reason for each left-out object is appended to ``skipped`` when given, for the
    caller's log.
    """
    answer: list[NodePod] = []
    for entry in entries:
        if isinstance(entry, NodePod):
            answer.append(entry)
            continue
        try:
            answer.append(node_pod(entry))
        except ContractError as exc:
            if skipped is not None:
                skipped.append(str(exc))
    return answer


def node_name_index(entry: NodePod) -> Sequence[str]:
    """Index function: the node a Pod is bound to (none while it is Pending)."""
    node = entry.pod.spec.node_name
    return (node,) if node else ()
