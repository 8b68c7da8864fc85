"""Run one gRPC server per mode on a unix socket beside the kubelet's, and keep them registered.

Each server is grpcio's synchronous server on its own thread pool; the trio task that owns
them only starts, watches and stops them. A kubelet restart wipes its device-plugin directory
and forgets every plugin, so the task checks each period that its sockets still exist and
that ``kubelet.sock`` is the one it registered with (same inode); when either changed it
serves afresh on a new socket and registers again. ``Allocate`` crosses into the trio loop with
``trio.from_thread.run``, where :class:`~.allocate.Allocator` does its I/O.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import trio

from gpustack_core.modes import AllocationMode
from gpustack_core.tokens import pool
from gpustack_devicemanager.deviceplugin.allocate import Allocator
from gpustack_devicemanager.deviceplugin.coexist import Conflict, conflict
from gpustack_devicemanager.deviceplugin.plugin import (
    PREFERRING,
    AllocationRefusedError,
    ResourcePlugin,
)
from gpustack_kube.kubeletapi import deviceplugin_v1beta1_pb2 as dp
from gpustack_kube.kubeletapi.api import VERSION, add_device_plugin, register, unix_target

log = logging.getLogger("gpustack.devicemanager.deviceplugin")

KUBELET_SOCKET = Path("/var/lib/kubelet/device-plugins/kubelet.sock")
POD_RESOURCES_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
WORKERS = 8
"""Threads per server: one is held by the kubelet's ListAndWatch stream for good."""
REGISTER_TIMEOUT = 5.0
SOCKET_MODE = 0o600
"""A plugin socket is the kubelet's alone (it runs as root, as this daemon does): whoever can
connect can ``Allocate``. gRPC binds it with the process umask, so the mode is set explicitly."""
RECHECK_SECONDS = 5.0
"""How often PodResources is read again when no Pod changed (it records an assignment once
``Allocate`` answered, which no Pod event announces)."""


def socket_name(manufacturer: str, mode: AllocationMode) -> str:
    """``gpustack-nvidia-sliced.sock``: one socket per (manufacturer, mode)."""
    return f"gpustack-{manufacturer}-{mode.api_name.lower()}.sock"


@dataclass(frozen=True)
class PluginOptions:
    """Where the kubelet is and which modes to serve."""

    kubelet_socket: Path = KUBELET_SOCKET
    pod_resources_socket: Path = POD_RESOURCES_SOCKET
    modes: frozenset[AllocationMode] = frozenset(AllocationMode)
    watch_period: float = 1.0
    confirm_grants: bool = True
    """Count a Pod's annotation as held only where PodResources (or this process) backs it
    (``holdings.py``); ``--no-confirm-grants`` turns it off with the monitor's check."""
    force: bool = False
    """Register even where another device plugin holds one of our names (``coexist.py``)."""
    conflict_recheck: float = 30.0
    """While another plugin holds a name, how often to look whether it is gone."""


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


@dataclass
class _Served:
    plugin: ResourcePlugin
    socket: Path
    server: grpc.Server | None = None
    registered_with: tuple[int, int] | None = None
    serving: tuple[int, int] | None = None

    def start(self) -> None:
        self.stop()
        self.socket.unlink(missing_ok=True)
        server = grpc.server(ThreadPoolExecutor(max_workers=WORKERS))
        add_device_plugin(server, self.plugin)
        server.add_insecure_port(unix_target(self.socket))
        server.start()
        os.chmod(self.socket, SOCKET_MODE)  # bound with the umask's mode; the kubelet's only
        self.server = server
        self.serving = _identity(self.socket)
        self.registered_with = None

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(grace=None)
            self.server = None


@dataclass
class DevicePlugins:
    """What a caller learns once the servers listen (tests, ``/debug``)."""

    sockets: dict[AllocationMode, Path]
    registrations: int = 0
    """Successful ``Register`` calls so far, re-registrations included."""
    blocked: Conflict | None = None
    """While set, another plugin holds one of our names and nothing is registered."""
    checked_at: float = 0.0
    """When the plugin directory was last looked at for another plugin (trio's clock)."""
    _served: list[_Served] = field(default_factory=list, repr=False)


def _register(kubelet_socket: Path, served: _Served) -> None:
    request = dp.RegisterRequest(
        version=VERSION,
        endpoint=served.socket.name,
        resource_name=served.plugin.resource,
        options=dp.DevicePluginOptions(
            get_preferred_allocation_available=served.plugin.mode in PREFERRING
        ),
    )
    with grpc.insecure_channel(unix_target(kubelet_socket)) as channel:
        register(channel, request, REGISTER_TIMEOUT)


def offered_modes(allocator: Allocator, wanted: Iterable[AllocationMode]) -> list[AllocationMode]:
    """The wanted modes some detected card offers tokens for, in mode order."""
    inventory, _, _ = allocator.state.read()
    return [
        mode for mode in sorted(set(wanted)) if any(pool(group, mode) for group in inventory.groups)
    ]


async def run_device_plugins(
    options: PluginOptions,
    allocator: Allocator,
    *,
    task_status: trio.TaskStatus[DevicePlugins] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve, register, and re-register after a kubelet restart, until cancelled."""
    token = trio.lowlevel.current_trio_token()

    def allocating(mode: AllocationMode, request: dp.AllocateRequest) -> dp.AllocateResponse:
        try:
            return trio.from_thread.run(allocator.allocate, mode, request, trio_token=token)
        except (trio.RunFinishedError, trio.Cancelled) as exc:
            raise AllocationRefusedError(
                grpc.StatusCode.UNAVAILABLE, "the Device Manager is stopping"
            ) from exc

    directory = options.kubelet_socket.parent
    served = [
        _Served(
            ResourcePlugin(
                allocator.names.plugin_resource(mode), mode, allocator.state, allocating
            ),
            directory / socket_name(allocator.manufacturer, mode),
        )
        for mode in offered_modes(allocator, options.modes)
    ]
    handle = DevicePlugins({s.plugin.mode: s.socket for s in served}, _served=served)
    if not served:
        log.warning("no device-plugin resource to serve: no detected card offers any mode")
    try:
        for s in served:
            await trio.to_thread.run_sync(s.start)
        await _keep_registered(options, served, handle)
        task_status.started(handle)  # registered, or held off by another plugin: never waits
        while True:
            await trio.sleep(options.watch_period)
            await _keep_registered(options, served, handle)
    finally:
        for s in served:
            s.stop()
            s.socket.unlink(missing_ok=True)


async def _held_off(options: PluginOptions, served: list[_Served], handle: DevicePlugins) -> bool:
    """Whether another plugin holds one of our names now (``coexist.py``); said once a change.

    Asked before every registration: at start, and after a kubelet restart, when the other
    plugin re-registers too and whichever registers last would take the name. While held off,
    looked at again every ``conflict_recheck`` seconds, not every watch period.
    """
    if options.force:
        return False
    now = trio.current_time()
    if handle.blocked is not None and now - handle.checked_at < options.conflict_recheck:
        return True
    handle.checked_at = now
    resources = [s.plugin.resource for s in served]
    found = await trio.to_thread.run_sync(conflict, options.kubelet_socket.parent, resources)
    if found is not None and found != handle.blocked:
        log.error("%s", found.line())
    elif found is None and handle.blocked is not None:
        log.warning("no other device plugin holds %s any more: registering", ", ".join(resources))
    handle.blocked = found
    return found is not None


async def _keep_registered(
    options: PluginOptions, served: list[_Served], handle: DevicePlugins
) -> None:
    kubelet = _identity(options.kubelet_socket)
    for s in served:
        if not os.path.exists(s.socket) or _identity(s.socket) != s.serving:
            log.info(
                "%s: socket %s is gone (kubelet restart?); serving afresh",
                s.plugin.resource,
                s.socket,
            )
            await trio.to_thread.run_sync(s.start)
    pending = kubelet is not None and any(s.registered_with != kubelet for s in served)
    if pending and await _held_off(options, served, handle):
        return  # not one mode: a slice of a card the other plugin granted whole is a double grant
    for s in served:
        if kubelet is None or s.registered_with == kubelet:
            continue
        try:
            await trio.to_thread.run_sync(_register, options.kubelet_socket, s)
        except grpc.RpcError as exc:
            log.warning(
                "%s: registration with %s failed: %s",
                s.plugin.resource,
                options.kubelet_socket,
                _details(exc),
            )
            continue
        s.registered_with = kubelet
        handle.registrations += 1
        log.info("%s: registered with the kubelet (endpoint %s)", s.plugin.resource, s.socket.name)


def _details(exc: grpc.RpcError) -> str:
    """The status line of a failed call (grpcio's errors are also ``grpc.Call`` objects)."""
    code = getattr(exc, "code", None)
    details = getattr(exc, "details", None)
    if callable(code) and callable(details):
        return f"{code()}: {details()}"
    return str(exc)


async def follow_pods(
    wait_changed: Callable[[], Awaitable[None]],
    allocator: Allocator,
    *,
    recheck: float = RECHECK_SECONDS,
) -> None:
    """Recompute the node's holdings whenever the Pod informer changes, until cancelled.

    Every plugin's ListAndWatch reads those holdings, so a grant seen here (written by this
    Device Manager or released by a Pod finishing) reaches the kubelet as a health update.
    The kubelet's PodResources record, which the holdings are checked against, is read again
    first, and every ``recheck`` seconds when no Pod changed.
    """
    await allocator.reread()
    allocator.refresh()
    while True:
        with trio.move_on_after(recheck):
            await wait_changed()
        await allocator.reread()
        allocator.refresh()
