"""A loop that keeps something on every Node in step with the Nodes' ``Devices``, for ever.

Node capacity (``nodecapacity``) and the per-card fit labels (``admissioncheck.fitlabels``) both
follow the same two lists: the Nodes (an informer the caller may share) and the ``Devices``
objects. Each writes what differs whenever either list changes, and at least every ``period``
seconds (a hand edit is put back); a failed write waits the backoff's delay and tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from gpustack_kube.backoff import Backoff
from gpustack_kube.client import KubeClient, KubeError
from gpustack_kube.informer import Informer
from gpustack_kube.paths import DEVICES
from gpustack_worker.held import node_informer

Objects = Informer[dict[str, Any]]


async def follow_nodes_and_devices(
    client: KubeClient,
    sync: Callable[[Objects, Objects], Awaitable[object]],
    *,
    failed: str,
    log: logging.Logger,
    period: float,
    backoff: Backoff,
    nodes: Objects | None = None,
) -> None:
    """``sync(nodes, devices)`` on every change and every ``period``; ``failed`` names a failure.

    ``nodes``: a Node informer the caller runs and shares; without one this runs its own.
    """
    owned = nodes is None
    if nodes is None:
        nodes = node_informer(client)
    devices: Objects = Informer(client, DEVICES.path())
    async with trio.open_nursery() as nursery:
        if owned:
            nursery.start_soon(nodes.run)
        nursery.start_soon(devices.run)
        failures = 0
        while True:
            if nodes.synced and devices.synced:
                try:
                    await sync(nodes, devices)
                    failures = 0
                except KubeError as exc:
                    failures += 1
                    log.warning("%s failed (%s)", failed, exc)
                    await trio.sleep(backoff.delay(failures))
                    continue
            with trio.move_on_after(period):
                async with trio.open_nursery() as waiting:

                    async def changed(informer: Objects) -> None:
                        await informer.wait_changed()
                        waiting.cancel_scope.cancel()

                    waiting.start_soon(changed, nodes)
                    waiting.start_soon(changed, devices)
