"""The per-card fit labels on each Node, from its ``Devices`` ledger.

``sliced-max-free-units.fit.gpustack.ai/<aKey>`` and ``shared-free-cards.fit.gpustack.ai/<aKey>``
say how much *one* card of a model can still give (:func:`gpustack_core.fit.fit_labels`); the
Pod webhook's fit affinity pins a slice to the nodes whose label holds it, so kube-scheduler skips
a node whose free room is spread over cards none of which fits.

Level-triggered, as the node capacity loop is: Nodes and Devices come from informers; a node
whose fit labels differ from what its ledger implies is patched (``metadata.labels``, a merge
patch: values set, labels of a model or population the node no longer has removed with
``null``); no label outside the fit domain is written or removed. A node without a ``Devices``
object loses its fit labels (it has no cards this operator serves). The labels are published
whether or not Kueue runs: they only filter, and only a Pod the webhook pinned reads them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gpustack_core.decoding import ContractError
from gpustack_core.fit import fit_labels, is_fit_label
from gpustack_kube.backoff import Backoff
from gpustack_kube.client import KubeClient, NotFound, PatchType
from gpustack_kube.informer import Informer
from gpustack_kube.paths import NODES
from gpustack_worker.instancetypes.observed import node_devices
from gpustack_worker.nodedevicesloop import follow_nodes_and_devices

log = logging.getLogger("gpustack.worker.fitlabels")

RETRY = Backoff(initial=1.0, maximum=30.0)


def labels_patch(node: Mapping[str, Any], wanted: Mapping[str, str]) -> dict[str, Any] | None:
    """The merge patch bringing ``node``'s fit labels to ``wanted``; ``None``: in step."""
    current = (node.get("metadata") or {}).get("labels") or {}
    change: dict[str, str | None] = {
        k: None for k in current if is_fit_label(k) and k not in wanted
    }
    change.update({k: v for k, v in wanted.items() if current.get(k) != v})
    return {"metadata": {"labels": change}} if change else None


async def run_fit_labels(
    client: KubeClient,
    *,
    period: float = 60.0,
    backoff: Backoff = RETRY,
    nodes: Informer[dict[str, Any]] | None = None,
) -> None:
    """Keep every Node's fit labels in step with its ``Devices`` ledger, for ever.

    ``nodes``: a Node informer the caller runs and shares; without one this runs its own.
    """

    async def step(nodes: Informer[dict[str, Any]], devices: Informer[dict[str, Any]]) -> None:
        await sync(client, nodes.objects(), devices.objects())

    await follow_nodes_and_devices(
        client,
        step,
        failed="writing the nodes' fit labels",
        log=log,
        period=period,
        backoff=backoff,
        nodes=nodes,
    )


async def sync(
    client: KubeClient,
    nodes: list[dict[str, Any]],
    devices: list[dict[str, Any]],
) -> int:
    """Patch every node whose fit labels are out of step; how many were patched."""
    wanted: dict[str, dict[str, str]] = {}
    for item in devices:
        try:
            read = node_devices(item)
        except ContractError as exc:
            log.warning("a node's fit labels stay as they are: %s", exc)
            continue
        wanted[read.node] = fit_labels(read)
    patched = 0
    for node in nodes:
        name = str(node["metadata"]["name"])
        if name not in wanted and not any(
            is_fit_label(k) for k in (node["metadata"].get("labels") or {})
        ):
            continue
        if name not in wanted and any(str((d.get("metadata") or {}).get("name")) == name
                                      for d in devices):  # fmt: skip
            continue  # its Devices did not decode: keep the labels it has
        patch = labels_patch(node, wanted.get(name, {}))
        if patch is None:
            continue
        try:
            await client.patch(NODES.path(name=name), patch, PatchType.MERGE)
        except NotFound:
            continue
        patched += 1
        log.info("node %s: fit labels %s", name, patch["metadata"]["labels"])
    return patched
