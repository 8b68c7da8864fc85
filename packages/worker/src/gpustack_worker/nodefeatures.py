"""The worker's NodeFeature per node: ``gpustack.ai/managed`` and the node's CPU keys.

For every Node the worker publishes ``nfd.k8s-sigs.io/v1alpha1`` ``NodeFeature``
``<node>-gpustack-worker`` in the system namespace (labelled ``nfd.node.kubernetes.io/node-name``
and owned by the Node), whose ``spec.labels`` nfd-master copies onto the Node:
``gpustack.ai/managed: "true"``, ``general.feature.gpustack.ai/<vendor>``,
``general.feature.gpustack.ai/<gKey>`` and ``…/<gKey>.count`` (derived by
:func:`gpustack_core.features.general_labels`).

Where the CPU model comes from — the reference operator's choice, kept: the Node's
``feature.gpustack.ai/cpu-name`` annotation (which the reference's NFD ``NodeFeatureRule``
fills from NFD's CPU model), its vendor from NFD's
``feature.node.kubernetes.io/cpu-model.vendor_id`` label (``AMD`` → ``amd``; ``generic``
without NFD), and the count from the Node's
``status.capacity.cpu``. The Node is the one place every component can read without running on
that node, and NFD already reports the CPU there; ``status.nodeInfo`` states no CPU model at all.
A node without the annotation gets the vendor alone as its key (``amd``), never a guessed
model.

Nodes are read through an informer (list, then watch), and a NodeFeature is written only when
its labels differ from what is stored; every node is checked again every ``period`` seconds, so
one edited or deleted by hand is restored — all but ``gpustack.ai/managed``, which is the
administrator's switch (the walkthrough's §2 flips it to take a node out of every pool): it is
set ``"true"`` only where the NodeFeature does not state it yet (onboarding, the Setting
``node-management-manual`` false), never where it is stated, so a flip stays flipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import trio

from gpustack_core.features import (
    CPU_NAME_ANNOTATION,
    MANAGED_LABEL,
    NFD_CPU_VENDOR_LABEL,
    TRUE,
    general_labels,
    unknown_reason,
)
from gpustack_core.quantity import parse_quantity
from gpustack_kube.backoff import Backoff
from gpustack_kube.client import AlreadyExists, KubeClient, KubeError, NotFound, retry_on_conflict
from gpustack_kube.informer import Informer
from gpustack_kube.paths import NODE_FEATURES
from gpustack_worker.held import node_informer

log = logging.getLogger("gpustack.worker.nodefeatures")

NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
SUFFIX = "-gpustack-worker"
RETRY = Backoff(initial=1.0, maximum=30.0)


def nodefeature_name(node: str) -> str:
    """``node-a10g-gpustack-worker``."""
    return node + SUFFIX


def cpu_cores(node: Mapping[str, Any]) -> int | None:
    """Whole cores of the Node's CPU capacity; ``None`` when not stated or not a quantity."""
    text = ((node.get("status") or {}).get("capacity") or {}).get("cpu")
    if not isinstance(text, str):
        return None
    try:
        value = parse_quantity(text)
    except ValueError:
        return None
    return int(value) if value > 0 else None


def node_labels(node: Mapping[str, Any]) -> dict[str, str]:
    """The labels this node's worker NodeFeature carries."""
    meta = node.get("metadata") or {}
    name = (meta.get("annotations") or {}).get(CPU_NAME_ANNOTATION)
    if isinstance(name, str) and name.startswith("@"):
        name = None  # an NFD template left unresolved: no CPU name reported
    vendor = (meta.get("labels") or {}).get(NFD_CPU_VENDOR_LABEL)
    return general_labels(name, vendor, cpu_cores(node))


def onboarded(
    labels: Mapping[str, str], stored: Mapping[str, str] | None, *, manual: bool
) -> dict[str, str]:
    """``labels`` with ``gpustack.ai/managed`` as the stored NodeFeature states it.

    Stated: kept, whatever it says (an administrator's flip is not undone). Not stated (a new
    NodeFeature, or the label removed): ``"true"`` unless management is manual, where the node
    waits for an administrator to set it.
    """
    result = {k: v for k, v in labels.items() if k != MANAGED_LABEL}
    if stored is not None and isinstance(stored.get(MANAGED_LABEL), str):
        result[MANAGED_LABEL] = stored[MANAGED_LABEL]
    elif not manual:
        result[MANAGED_LABEL] = TRUE
    return result


def body(node: Mapping[str, Any], namespace: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """The whole NodeFeature the worker wants for ``node``."""
    meta = node["metadata"]
    return {
        "apiVersion": f"{NODE_FEATURES.group}/{NODE_FEATURES.version}",
        "kind": "NodeFeature",
        "metadata": {
            "name": nodefeature_name(meta["name"]),
            "namespace": namespace,
            "labels": {NODE_NAME_LABEL: meta["name"]},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta["uid"]}
            ],
        },
        "spec": {"labels": dict(labels)},
    }


async def publish(
    client: KubeClient, node: Mapping[str, Any], namespace: str, *, manual: bool = False
) -> bool:
    """Create or update one node's NodeFeature; ``False`` when it already says the same.

    ``manual``: the Setting ``node-management-manual`` (see :func:`onboarded`).
    """
    derived = node_labels(node)
    name = nodefeature_name(node["metadata"]["name"])
    if (reason := unknown_reason(derived)) is not None:
        raise ValueError(f"NodeFeature {name}: {reason}")
    path = NODE_FEATURES.path(namespace, name)

    async def attempt() -> bool:
        try:
            current = await client.get(path)
        except NotFound:
            labels = onboarded(derived, None, manual=manual)
            try:
                await client.create(NODE_FEATURES.path(namespace), body(node, namespace, labels))
            except AlreadyExists:
                return await attempt()
            return True
        meta = current.get("metadata") or {}
        spec = current.get("spec") or {}
        stored = spec.get("labels")
        labels = onboarded(derived, stored if isinstance(stored, dict) else None, manual=manual)
        node_name = node["metadata"]["name"]
        if (
            spec.get("labels") == labels
            and (meta.get("labels") or {}).get(NODE_NAME_LABEL) == node_name
        ):
            return False
        wanted = body(node, namespace, labels)["metadata"]
        updated = {
            **current,
            "metadata": {
                **meta,
                "labels": {**(meta.get("labels") or {}), NODE_NAME_LABEL: node_name},
                "ownerReferences": meta.get("ownerReferences") or wanted["ownerReferences"],
            },
            "spec": {**spec, "labels": labels},
        }
        await client.update(path, updated)
        return True

    return await retry_on_conflict(attempt)


async def run_node_features(
    client: KubeClient,
    namespace: str,
    *,
    period: float = 60.0,
    backoff: Backoff = RETRY,
    nodes: Informer[dict[str, Any]] | None = None,
    manual: Callable[[], bool] = lambda: False,
) -> None:
    """Keep every Node's worker NodeFeature current, for ever (the worker daemon's task).

    A node whose derived labels are what was last published is not read again until the next
    ``period`` check, so the Node updates nfd-master makes after each write cost nothing.
    ``nodes``: a Node informer the caller runs and shares; without one this runs its own.
    ``manual``: reads the Setting ``node-management-manual`` now (it applies to NodeFeatures
    written from then on).
    """
    owned = nodes is None
    if nodes is None:
        nodes = node_informer(client)
    published: dict[str, dict[str, str]] = {}
    checked_at: float | None = None
    async with trio.open_nursery() as nursery:
        if owned:
            nursery.start_soon(nodes.run)
        failures = 0
        while True:
            if nodes.synced:
                if checked_at is None or trio.current_time() - checked_at >= period:
                    published.clear()
                    checked_at = trio.current_time()
                try:
                    for node in nodes.objects():
                        name = str(node["metadata"]["name"])
                        labels = node_labels(node)
                        if published.get(name) != labels:
                            await publish(client, node, namespace, manual=manual())
                            published[name] = labels
                    failures = 0
                except (KubeError, ValueError) as exc:
                    failures += 1
                    log.warning("publishing the worker's node features failed (%s)", exc)
                    await trio.sleep(backoff.delay(failures))
                    continue
            with trio.move_on_after(period):
                await nodes.wait_changed()
