"""The companion extended resources in each Node's status, from its ``Devices`` object.

A Sliced request carries ``nvidia.com/gpu.sliced.units`` and ``.sliced.cores-percentage``, a
Partitioned one ``.partitioned.units`` and ``.partitioned.mig-1g.10gb``; no device plugin
advertises those, so without them in ``status.capacity`` the scheduler finds no node for such a
Pod. The reference operator's worker patches them in (Kubernetes' "advertise extended resources
for a node": a JSON merge patch of ``nodes/<name>/status``); the figures are
:func:`gpustack_core.capacity.node_capacity` of the node's ``Devices`` spec, which its Device
Manager publishes.

Level-triggered: Nodes and Devices come from informers; a node whose companion entries differ
from the derived ones is patched — entries set, entries no longer offered removed (``null``),
every other resource left alone (the kubelet owns the plugins' own and the core resources).
``allocatable`` is written with the same figures, which is what the kubelet copies for a
node-level extended resource anyway, so a scheduler reading either sees them at once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gpustack_core.capacity import is_companion, node_capacity
from gpustack_core.decoding import ContractError, convert
from gpustack_core.devices import DevicesSpec
from gpustack_core.modes import Manufacturer
from gpustack_core.resources import ResourceNames
from gpustack_kube.backoff import Backoff
from gpustack_kube.client import KubeClient, NotFound, PatchType
from gpustack_kube.informer import Informer
from gpustack_kube.paths import NODES
from gpustack_worker.nodedevicesloop import follow_nodes_and_devices

log = logging.getLogger("gpustack.worker.nodecapacity")

RETRY = Backoff(initial=1.0, maximum=30.0)


def _names(bases: Mapping[str, str]) -> list[ResourceNames]:
    return [ResourceNames.of(m.value, bases.get(m.value)) for m in Manufacturer]


def wanted(devices: Mapping[str, Any], bases: Mapping[str, str]) -> dict[str, str]:
    """The companion entries one ``Devices`` object implies, as quantity strings.

    Raises :class:`ContractError` naming the object when its spec does not decode.
    """
    name = (devices.get("metadata") or {}).get("name", "?")
    spec = convert(devices.get("spec") or {}, DevicesSpec, what=f"Devices {name} spec")
    return {k: str(v) for k, v in sorted(node_capacity(spec.groups, bases).items())}


def status_patch(
    node: Mapping[str, Any], offered: Mapping[str, str], bases: Mapping[str, str]
) -> dict[str, Any] | None:
    """The merge patch bringing ``node``'s companion entries to ``offered``; ``None``: in step."""
    status = node.get("status") or {}
    names = _names(bases)
    patch: dict[str, Any] = {}
    for field in ("capacity", "allocatable"):
        current = status.get(field) or {}
        change: dict[str, str | None] = {
            key: None
            for key in current
            if key not in offered and any(is_companion(key, n) for n in names)
        }
        change.update({k: v for k, v in offered.items() if current.get(k) != v})
        if change:
            patch[field] = change
    return {"status": patch} if patch else None


async def run_node_capacity(
    client: KubeClient,
    *,
    bases: Mapping[str, str] | None = None,
    period: float = 60.0,
    backoff: Backoff = RETRY,
    nodes: Informer[dict[str, Any]] | None = None,
) -> None:
    """Keep every Node's companion resources in step with its ``Devices``, for ever.

    A node without a ``Devices`` object has no accelerators the operator knows of, and keeps
    whatever companion entries it has (a Device Manager restarting must not make its Pods
    unschedulable for the seconds until it publishes again). ``nodes``: a Node informer the
    caller runs and shares; without one this runs its own.
    """
    bases = dict(bases or {})

    async def step(nodes: Informer[dict[str, Any]], devices: Informer[dict[str, Any]]) -> None:
        await _sync(client, nodes, devices, bases)

    await follow_nodes_and_devices(
        client,
        step,
        failed="patching the nodes' accelerator capacity",
        log=log,
        period=period,
        backoff=backoff,
        nodes=nodes,
    )


async def _sync(
    client: KubeClient,
    nodes: Informer[dict[str, Any]],
    devices: Informer[dict[str, Any]],
    bases: Mapping[str, str],
) -> None:
    by_name = {str(n["metadata"]["name"]): n for n in nodes.objects()}
    for item in devices.objects():
        name = str(item["metadata"]["name"])
        node = by_name.get(name)
        if node is None:
            continue  # the Devices object outlived its Node: garbage collection's job
        try:
            offered = wanted(item, bases)
        except ContractError as exc:
            log.warning("node %s keeps its capacity: %s", name, exc)
            continue
        patch = status_patch(node, offered, bases)
        if patch is None:
            continue
        try:
            await client.patch(NODES.path(name=name, subresource="status"), patch, PatchType.MERGE)
        except NotFound:
            continue
        log.info("node %s: accelerator capacity %s", name, patch["status"].get("capacity", {}))
