"""What the Device Manager tells the cluster: its NodeFeature and its group of ``Devices``.

Detection becomes three writes, each only when its content changed:

- the ``nfd.k8s-sigs.io/v1alpha1`` ``NodeFeature`` ``<node>-gpustack-device-manager`` in the
  Device Manager's namespace, labelled ``nfd.node.kubernetes.io/node-name: <node>`` (nfd-master
  ignores a NodeFeature without it) and owned by the Node, whose ``spec.labels`` are the
  ``acceleratable.*`` labels nfd-master copies onto the Node;
- ``Devices/<node>.spec.groups``: this manufacturer's groups only. One Device Manager runs per
  manufacturer per node, so the object is shared: every write is a read-modify-``PUT`` carrying
  the ``resourceVersion`` it read, retried on ``Conflict``, that replaces only the groups of
  its own manufacturer and keeps every other one as it found it;
- ``Devices/<node>/status``: the ledger of its groups, rebuilt from the node's Pods
  (:mod:`gpustack_core.ledger`) whenever the Pod informer changes, written the same way.

All the deriving is pure (:mod:`gpustack_core.features`, :mod:`gpustack_core.ledger`); this
module only fetches, compares and writes. A failed write is logged and retried after a
backoff; it never stops the Device Manager's monitor or its secure port.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from gpustack_core.devices import GroupSpec, LedgerGroup
from gpustack_core.features import (
    ACCELERATABLE_PREFIX,
    CPU_NAME_ANNOTATION,
    GENERAL_PREFIX,
    MANAGED_LABEL,
    NFD_CPU_VENDOR_LABEL,
    NODE_ACCELERATABLE,
    Card,
    Grouped,
    Partition,
    acceleratable_labels,
    accelerator_key,
    general_key,
    groups_from_cards,
    unknown_reason,
)
from gpustack_core.ledger import Ledger, PodAllocation, build_ledger
from gpustack_devicemanager.podview import NodePod
from gpustack_kube.backoff import Backoff
from gpustack_kube.client import AlreadyExists, KubeClient, KubeError, NotFound, retry_on_conflict
from gpustack_kube.paths import DEVICES, NODE_FEATURES, NODES
from gpustack_vendors.model import Detection

log = logging.getLogger("gpustack.devicemanager.publish")

NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
"""The label nfd-master finds a NodeFeature's Node by."""
NODEFEATURE_SUFFIX = "-gpustack-device-manager"
OS_LABEL, ARCH_LABEL = "kubernetes.io/os", "kubernetes.io/arch"
RETRY = Backoff(initial=1.0, maximum=30.0)
"""Between failed publishing rounds: quick at first (the API server restarting), then calm."""


def cards_of(detection: Detection) -> list[Card]:
    """Detection's devices as the pure deriving code takes them."""
    return [
        Card(
            id=d.id,
            index=d.index,
            name=d.name,
            memory_mib=d.memory_mib,
            cores=d.cores,
            driver_version=d.driver_version,
            runtime_version=d.runtime_version,
            pci_bus_id=d.pci_bus_id,
            unhealthy=d.unhealthy,
            compute_capability=d.compute_capability,
            partitions=tuple(Partition(p.profile, p.memory_mib) for p in d.partitions),
        )
        for d in detection.devices
    ]


def detected_groups(detection: Detection) -> Grouped:
    """The groups a detection makes (all of one manufacturer: one Device Manager each)."""
    return groups_from_cards(detection.manufacturer, cards_of(detection))


def nodefeature_name(node: str) -> str:
    """``node-a10g-gpustack-device-manager``."""
    return node + NODEFEATURE_SUFFIX


def owner_reference(node: Mapping[str, Any]) -> dict[str, Any]:
    """An ownerReference to the Node: the objects go when the Node does."""
    meta = node["metadata"]
    return {"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta["uid"]}


def nodefeature_body(
    node: str, namespace: str, labels: Mapping[str, str], owner: Mapping[str, Any]
) -> dict[str, Any]:
    """The whole NodeFeature this Device Manager wants to exist."""
    return {
        "apiVersion": NODE_FEATURES.group + "/" + NODE_FEATURES.version,
        "kind": "NodeFeature",
        "metadata": {
            "name": nodefeature_name(node),
            "namespace": namespace,
            "labels": {NODE_NAME_LABEL: node},
            "ownerReferences": [dict(owner)],
        },
        "spec": {"labels": dict(labels)},
    }


def _wire(items: Iterable[msgspec.Struct]) -> list[Any]:
    return [msgspec.to_builtins(item) for item in items]


def merged_groups(
    existing: Sequence[Mapping[str, Any]], manufacturer: str, mine: Sequence[Any]
) -> list[Any]:
    """``existing`` with every group of ``manufacturer`` replaced by ``mine``.

    Other manufacturers' groups are kept exactly as read (their Device Manager owns them);
    the result is ordered by manufacturer then id, so the same content is always the same list
    and an unchanged node compares equal without a write.
    """
    kept = [g for g in existing if g.get("manufacturer") != manufacturer]
    merged = [*kept, *mine]
    return sorted(merged, key=lambda g: (str(g.get("manufacturer", "")), str(g.get("id", ""))))


def merged_labels(
    stored: Mapping[str, str], manufacturer: str, mine: Mapping[str, str]
) -> dict[str, str]:
    """The shared NodeFeature's labels with this manufacturer's replaced by ``mine``.

    This manufacturer's keys are ``…/<mfr>``, ``…/<mfr>.*`` and ``…/<mfr>-*``; another
    Device Manager's keys are kept as stored. ``feature.gpustack.ai/acceleratable`` stays
    while any manufacturer's key does.
    """
    own = ACCELERATABLE_PREFIX + manufacturer

    def owned(key: str) -> bool:
        return key == own or key.startswith((own + ".", own + "-"))

    merged = {k: v for k, v in stored.items() if not owned(k) and k != NODE_ACCELERATABLE}
    merged.update(mine)
    if any(k.startswith(ACCELERATABLE_PREFIX) for k in merged):
        merged[NODE_ACCELERATABLE] = "true"
    return merged


def devices_labels(
    current: Mapping[str, str],
    manufacturer: str,
    groups: Sequence[GroupSpec],
    node: Mapping[str, Any],
) -> dict[str, str]:
    """The Devices object's labels, as the walkthrough shows them.

    This manufacturer's accelerator keys (one no longer detected is dropped), and from the
    Node: ``kubernetes.io/os|arch``, the worker's ``gpustack.ai/managed`` and its CPU key
    ``general.feature.gpustack.ai/<gKey>`` (derived as the worker derives it, copied only while
    the Node carries it) — so a node taken out of management loses ``managed`` here too. Every
    other label is kept.
    """
    meta = node.get("metadata") or {}
    node_labels = meta.get("labels") or {}
    gkey = GENERAL_PREFIX + general_key(
        (meta.get("annotations") or {}).get(CPU_NAME_ANNOTATION),
        node_labels.get(NFD_CPU_VENDOR_LABEL),
    )
    own = ACCELERATABLE_PREFIX + manufacturer + "-"
    copied = (OS_LABEL, ARCH_LABEL, MANAGED_LABEL, gkey)

    def from_node(key: str) -> bool:
        return key in copied or key.startswith(GENERAL_PREFIX)

    labels = {k: v for k, v in current.items() if not k.startswith(own) and not from_node(k)}
    labels.update({k: node_labels[k] for k in copied if k in node_labels})
    for group in groups:
        labels[ACCELERATABLE_PREFIX + accelerator_key(group)] = "true"
    return labels


def pod_allocations(pods: Iterable[NodePod]) -> list[PodAllocation]:
    """What the ledger reads of each Pod: identity, phase, and the grants the Pod view read.

    The grants are the annotation as written, not as the kubelet confirms it: the ledger
    charges every claim, so a claim the kubelet has not recorded yet (the plugin writes the
    annotation before the kubelet records its answer) still holds its card.
    """
    return [
        PodAllocation(
            entry.pod.metadata.namespace,
            entry.pod.metadata.name,
            entry.pod.status.phase,
            entry.grants,
            entry.grant_error,
        )
        for entry in pods
    ]


@dataclass
class Publisher:
    """One Device Manager's writes for one node; holds what it last wrote, to skip repeats."""

    client: KubeClient
    node: str
    manufacturer: str
    namespace: str
    groups: tuple[GroupSpec, ...]
    owner: dict[str, Any] | None = None
    node_object: dict[str, Any] = field(default_factory=dict)
    """The Node as last read: its labels and annotations feed the Devices labels."""
    written_status: list[Any] | None = None
    reported: set[str] = field(default_factory=set)
    writes: int = 0
    """Writes sent (creates, updates); tests and ``/debug`` read it to prove "no write"."""
    nodefeature_error: str | None = None
    """Why the NodeFeature was last not written (no NFD CRD, no permission); ``None`` once it
    is. It never holds up the ``Devices``: each publication stands alone."""

    async def read_node(self) -> None:
        """The Node's UID (for ownerReferences) and the labels its Devices copies."""
        node = await self.client.get(NODES.path(name=self.node))
        self.owner = owner_reference(node)
        self.node_object = node

    def _owner(self) -> dict[str, Any]:
        if self.owner is None:
            raise RuntimeError("publisher: read_node() must run before a write")
        return self.owner

    async def publish_nodefeature(self) -> bool:
        """Create or update the NodeFeature; ``False`` when it already says the same."""
        labels = acceleratable_labels(self.groups)
        if (reason := unknown_reason(labels)) is not None:
            raise ValueError(f"NodeFeature {nodefeature_name(self.node)}: {reason}")
        body = nodefeature_body(self.node, self.namespace, labels, self._owner())
        path = NODE_FEATURES.path(self.namespace, nodefeature_name(self.node))

        async def attempt() -> bool:
            try:
                current = await self.client.get(path)
            except NotFound:
                await self.client.create(NODE_FEATURES.path(self.namespace), body)
                self.writes += 1
                return True
            meta = current.get("metadata") or {}
            stored = (current.get("spec") or {}).get("labels") or {}
            merged = merged_labels(stored, self.manufacturer, labels)
            if stored == merged and (meta.get("labels") or {}).get(NODE_NAME_LABEL) == self.node:
                return False
            updated = dict(current)
            updated["metadata"] = {
                **meta,
                "labels": {**(meta.get("labels") or {}), NODE_NAME_LABEL: self.node},
                "ownerReferences": meta.get("ownerReferences") or [self._owner()],
            }
            updated["spec"] = {**(current.get("spec") or {}), "labels": merged}
            await self.client.update(path, updated)
            self.writes += 1
            return True

        return await _retrying(attempt)

    async def publish_spec(self) -> bool:
        """Upsert this manufacturer's groups into ``Devices/<node>.spec``; others untouched."""
        mine = _wire(self.groups)
        path = DEVICES.path(name=self.node)

        async def attempt() -> bool:
            try:
                current = await self.client.get(path)
            except NotFound:
                if not mine:
                    return False  # a node without accelerators gets no Devices object
                body = {
                    "apiVersion": DEVICES.group + "/" + DEVICES.version,
                    "kind": "Devices",
                    "metadata": {
                        "name": self.node,
                        "labels": devices_labels(
                            {}, self.manufacturer, self.groups, self.node_object
                        ),
                        "ownerReferences": [self._owner()],
                    },
                    "spec": {"groups": merged_groups([], self.manufacturer, mine)},
                }
                await self.client.create(DEVICES.path(), body)
                self.writes += 1
                return True
            meta = current.get("metadata") or {}
            spec = current.get("spec") or {}
            groups = merged_groups(spec.get("groups") or [], self.manufacturer, mine)
            labels = devices_labels(
                meta.get("labels") or {}, self.manufacturer, self.groups, self.node_object
            )
            if groups == spec.get("groups") and labels == (meta.get("labels") or {}):
                return False
            updated = {
                **current,
                "metadata": {**meta, "labels": labels},
                "spec": {**spec, "groups": groups},
            }
            await self.client.update(path, updated)
            self.writes += 1
            return True

        return await _retrying(attempt)

    def ledger(self, pods: Iterable[NodePod]) -> Ledger:
        """The ledger of these groups from the node's Pods; each new skip reason is logged once."""
        ledger = build_ledger(self.groups, pod_allocations(pods))
        for reason in ledger.skipped:
            if reason not in self.reported:
                log.warning("ledger: %s", reason)
        self.reported = set(ledger.skipped)
        return ledger

    async def publish_status(self, groups: Sequence[LedgerGroup]) -> bool:
        """Write this manufacturer's ledger groups to ``/status``; others untouched."""
        mine = _wire(groups)
        if mine == self.written_status:
            return False
        path = DEVICES.path(name=self.node)

        async def attempt() -> bool:
            try:
                current = await self.client.get(path)
            except NotFound:
                return False  # the spec write creates the object; the next round writes status
            status = current.get("status") or {}
            merged = merged_groups(status.get("groups") or [], self.manufacturer, mine)
            if merged != status.get("groups"):
                body = {**current, "status": {**status, "groups": merged}}
                await self.client.update(DEVICES.path(name=self.node, subresource="status"), body)
                self.writes += 1
            self.written_status = mine
            return True

        return await _retrying(attempt)


async def _retrying(attempt: Callable[[], Any]) -> bool:
    """``attempt`` under ``retry_on_conflict``; a create that lost a race is retried as well."""

    async def once() -> bool:
        try:
            result: bool = await attempt()
        except AlreadyExists:
            # Another writer created it between our read and our create: read it and merge.
            result = await attempt()
        return result

    return await retry_on_conflict(once)


PodsView = Callable[[], list[NodePod] | None]
"""The node's Pods once the informer has synced; ``None`` before."""


async def _nodefeature_alone(publisher: Publisher) -> None:
    """Write the NodeFeature; a failure is logged when it changes and stops nothing else.

    Without Node Feature Discovery the ``nfd.k8s-sigs.io`` API is not served (404 for the
    whole group). The ``Devices`` (what node capacity and the Pod webhook read) must be
    published all the same, so this failure is kept apart from theirs.
    """
    try:
        await publisher.publish_nodefeature()
    except (KubeError, ValueError) as exc:
        message = str(exc)
        if message != publisher.nodefeature_error:
            log.warning(
                "publishing %s's NodeFeature failed (%s); its Devices are published without "
                "it, and the NodeFeature is retried every period",
                publisher.node,
                message,
            )
        publisher.nodefeature_error = message
        return
    if publisher.nodefeature_error is not None:
        log.info("published %s's NodeFeature", publisher.node)
    publisher.nodefeature_error = None


async def run_publisher(
    publisher: Publisher,
    pods: PodsView,
    wait_pods_changed: Callable[[], Any],
    *,
    period: float,
    backoff: Backoff = RETRY,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Keep the NodeFeature, the spec and the ledger current, for ever.

    The Node, the NodeFeature and the spec are read every ``period`` seconds (a write
    only when someone changed or deleted them); the ledger is rebuilt every time the Pod
    informer changes. A failed round is retried after a backoff. ``task_status`` is reported
    after the first round, written or failed, so a caller is never held up by the API server.
    """
    started = False
    failures = 0
    checked_at: float | None = None
    while True:
        try:
            now = trio.current_time()
            if checked_at is None or now - checked_at >= period:
                await publisher.read_node()  # its labels change: the worker's CPU keys
                await _nodefeature_alone(publisher)
                await publisher.publish_spec()
                publisher.written_status = None  # re-read the status too, once a period
                checked_at = now
            view = pods()
            if view is not None:
                await publisher.publish_status(publisher.ledger(view).groups)
            failures = 0
        except (KubeError, ValueError) as exc:
            failures += 1
            log.warning("publishing %s's devices failed (%s); retrying", publisher.node, exc)
            publisher.written_status = None
            if not started:
                started = True
                task_status.started()
            await trio.sleep(backoff.delay(failures))
            continue
        if not started:
            started = True
            task_status.started()
        wait = period if checked_at is None else max(checked_at + period - trio.current_time(), 0)
        with trio.move_on_after(wait):
            await wait_pods_changed()
