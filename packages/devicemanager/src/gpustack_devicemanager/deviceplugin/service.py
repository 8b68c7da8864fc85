"""The device-plugin half of ``device-manager serve``, as one task the daemon's nursery starts.

Detection becomes the inventory (the daemon hands over the one it made before the monitor
started, so the vendor library is never asked twice at once; a ``redetect`` period repeats it
for a backend that tolerates that), the Pod informer feeds the holdings, and the plugin servers
run until the daemon stops. The resource base can be overridden per manufacturer with
``GPUSTACK_<MFR>_ACCELERATABLE_RESOURCE_NAME`` (or the older ``GPUSTACK_<MFR>_RESOURCE_NAME``),
as the reference operator allows (``gpustack_core.resourceconfig``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping

import trio

from gpustack_core.resourceconfig import configured_bases
from gpustack_core.resources import ResourceNames
from gpustack_devicemanager.deviceplugin.allocate import Allocator
from gpustack_devicemanager.deviceplugin.inventory import inventory_of
from gpustack_devicemanager.deviceplugin.manager import (
    DevicePlugins,
    PluginOptions,
    follow_pods,
    run_device_plugins,
)
from gpustack_devicemanager.deviceplugin.state import PluginState
from gpustack_devicemanager.podview import NodePod
from gpustack_kube.client import KubeClient
from gpustack_vendors.model import Detection
from gpustack_vendors.protocol import Backend

log = logging.getLogger("gpustack.devicemanager.deviceplugin")


def resource_names(manufacturer: str, environ: Mapping[str, str] | None = None) -> ResourceNames:
    """The manufacturer's names, with its configured base if one is set.

    Raises ``ValueError`` (one line naming the variable) for a bad configuration;
    ``device-manager serve`` checks it before starting, so it never surfaces here.
    """
    bases = configured_bases(os.environ if environ is None else environ)
    return ResourceNames.of(manufacturer, bases.get(manufacturer))


async def serve_device_plugins(
    *,
    manufacturer: str,
    node_name: str,
    backend: Backend,
    limiter: trio.CapacityLimiter,
    client: KubeClient | None,
    pods: Callable[[], list[NodePod] | None],
    pods_changed: Callable[[], Awaitable[None]] | None,
    options: PluginOptions,
    detection: Detection | None = None,
    redetect: float | None = None,
    task_status: trio.TaskStatus[DevicePlugins] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve, register and allocate until cancelled (detecting first unless handed one)."""
    if detection is None:
        detection = await trio.to_thread.run_sync(backend.detect, limiter=limiter)
    state = PluginState(inventory_of(detection))
    allocator = Allocator(
        manufacturer,
        node_name,
        resource_names(manufacturer),
        state,
        client,
        pods,
        pod_resources_socket=options.pod_resources_socket,
        confirm_grants=options.confirm_grants,
    )
    if client is None:
        log.warning("no Kubernetes configuration: allocations are served but not recorded")
    try:
        async with trio.open_nursery() as nursery:
            if pods_changed is not None:
                nursery.start_soon(follow_pods, pods_changed, allocator)
            if redetect is not None:
                nursery.start_soon(_redetect, backend, limiter, state, redetect)
            plugins = await nursery.start(run_device_plugins, options, allocator)
            task_status.started(plugins)
    finally:
        state.close()


async def _redetect(
    backend: Backend, limiter: trio.CapacityLimiter, state: PluginState, period: float
) -> None:
    while True:
        await trio.sleep(period)
        try:
            detection = await trio.to_thread.run_sync(backend.detect, limiter=limiter)
        except Exception as exc:  # any library failure: keep the last inventory, try again
            log.warning("re-detection failed, keeping the last inventory: %s", exc)
            continue
        state.update(inventory=inventory_of(detection))
