"""What the worker keeps of each Pod and Node it follows: the fields its loops read, no more.

The Instance controller follows every Instance Pod of the cluster, and three loops follow
every Node. Held whole, a Pod is its full spec and status (and, on a real cluster, its
``managedFields`` and every annotation a tool left); a Node is that plus the node's image
list. At 1,000 nodes and 10,000 Instances that was most of the worker's memory, for fields no
loop reads. These decoders keep the raw shape (the loops still read dicts) minus everything
else; ``tests/unit/worker/test_held.py`` holds every status the controller derives from a held
Pod to the one it derives from the whole Pod.

Whoever starts reading another field of a followed Pod or Node adds it here.
"""

from __future__ import annotations

from typing import Any, Final

from gpustack_core import contract
from gpustack_core.decoding import ContractError
from gpustack_kube.client import KubeClient
from gpustack_kube.informer import Informer
from gpustack_kube.paths import NODES

TEMPLATE_HASH: Final = "worker.gpustack.ai/pod-template-hash"
"""On a rendered Pod: the digest of what it was rendered as. A Pod whose digest differs from
today's rendering is replaced; a Pod without one (created before the controller ran) is adopted
as it is, never recreated for lack of a digest."""

POD_METADATA: Final = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "deletionTimestamp",
)
"""Ownership is read from the part-of label (``belongs_to``), not ``ownerReferences``."""
POD_ANNOTATIONS: Final = (TEMPLATE_HASH, contract.ALLOCATION_ANNOTATION)
"""The annotations read: the rendering's digest and the Device Manager's grant."""
POD_STATUS: Final = ("phase", "reason", "message", "podIPs")
NODE_STATUS: Final = ("capacity", "allocatable", "addresses")


def held_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """An Instance Pod as the controller holds it (``ContractError`` without a name)."""
    metadata = _metadata(obj, "Pod")
    kept: dict[str, Any] = {k: metadata[k] for k in POD_METADATA if k in metadata}
    annotations = metadata.get("annotations")
    if isinstance(annotations, dict):
        kept["annotations"] = {k: annotations[k] for k in POD_ANNOTATIONS if k in annotations}
    held: dict[str, Any] = {"metadata": kept}
    spec = obj.get("spec")
    if isinstance(spec, dict):
        held["spec"] = {"nodeName": spec["nodeName"]} if "nodeName" in spec else {}
    status = obj.get("status")
    if isinstance(status, dict):
        part = {k: status[k] for k in POD_STATUS if k in status}
        conditions = status.get("conditions")
        if isinstance(conditions, list):
            part["conditions"] = [
                {k: c[k] for k in ("type", "status") if k in c}
                for c in conditions
                if isinstance(c, dict) and c.get("type") == "Ready"
            ]
        statuses = status.get("containerStatuses")
        if isinstance(statuses, list):
            part["containerStatuses"] = _waiting(statuses)
        held["status"] = part
    return held


def _waiting(statuses: list[Any]) -> list[dict[str, Any]]:
    """The containers waiting with a reason, each as its name and waiting state.

    The status shows the first of them (``ImagePullBackOff: …``); a running or terminated
    container says nothing there, and is not kept.
    """
    kept: list[dict[str, Any]] = []
    for entry in statuses:
        state = entry.get("state") if isinstance(entry, dict) else None
        waiting = state.get("waiting") if isinstance(state, dict) else None
        if isinstance(waiting, dict) and waiting.get("reason"):
            named = {k: entry[k] for k in ("name",) if k in entry}
            kept.append({**named, "state": {"waiting": waiting}})
    return kept


def held_node(obj: dict[str, Any]) -> dict[str, Any]:
    """A Node as the worker's loops hold it: its metadata and the status they read."""
    metadata = _metadata(obj, "Node")
    held: dict[str, Any] = {"metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}
    status = obj.get("status")
    if isinstance(status, dict):
        held["status"] = {k: status[k] for k in NODE_STATUS if k in status}
    return held


def node_informer(client: KubeClient) -> Informer[dict[str, Any]]:
    """Every Node, as ``held_node``: the one view the daemon shares among the loops."""
    return Informer(client, NODES.path(), decode=held_node)


def _metadata(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
        raise ContractError(f"{kind} without metadata.name")
    return metadata
