"""``device-manager serve``: one nursery owns the secure port, the monitor and the Pod index.

With no Kubernetes configuration at all the daemon still runs, standalone: card figures only,
``slices`` absent (could not measure), one warning — so it can be tried on a workstation.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import trio

from gpustack_core import contract
from gpustack_core.modes import AllocationMode
from gpustack_core.pods import Pod
from gpustack_devicemanager.confirmation import GrantConfirmation
from gpustack_devicemanager.deviceplugin.manager import (
    KUBELET_SOCKET,
    POD_RESOURCES_SOCKET,
    DevicePlugins,
    PluginOptions,
)
from gpustack_devicemanager.deviceplugin.service import serve_device_plugins
from gpustack_devicemanager.exporter import ExporterSource, InstanceUids, run_exporter
from gpustack_devicemanager.exposition import ExpositionHolder
from gpustack_devicemanager.health import Liveness
from gpustack_devicemanager.holder import SnapshotHolder
from gpustack_devicemanager.incarnations import InstanceIncarnations
from gpustack_devicemanager.monitor import PodsSource, TickContext, run_monitor
from gpustack_devicemanager.podview import NodePod, node_pod
from gpustack_devicemanager.publish import Publisher, detected_groups, run_publisher
from gpustack_devicemanager.server import build_app
from gpustack_devicemanager.tls import ReloadableConfig
from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig, KubeConfigError, load_config
from gpustack_kube.informer import Informer
from gpustack_kube.kubelet import KubeletAccess
from gpustack_kube.paths import PODS
from gpustack_serving.access import AccessReviewer, AccessSettings
from gpustack_serving.certs import CertReloader, serving_hosts, serving_pair
from gpustack_serving.config import hypercorn_config, terminate_tls
from gpustack_serving.connections import (
    ConnectionFailures,
    bind,
    serve_connections,
    ssl_connections,
)
from gpustack_serving.signals import serve_until_signalled as until_signalled
from gpustack_vendors.model import Detection
from gpustack_vendors.protocol import Backend

log = logging.getLogger("gpustack.devicemanager")

LIBRARY_THREADS = 2
"""Vendor libraries are not assumed thread-safe beyond this; ticks never overlap anyway."""

MonitorWrapper = Callable[[Backend, PodsSource], tuple[Backend, PodsSource]]
"""What may stand between the monitor and what it reads: given the backend and the node's Pods
(as far as the kubelet confirms their grants), the pair the monitor reads instead. The publisher,
the device plugin and the exporter keep reading the originals. A composition root plugs one in
(the CLI's ``--bind-replayed-pids``); the Device Manager knows none of them."""


@dataclass(frozen=True)
class ServeOptions:
    """The flags of ``device-manager serve``."""

    manufacturer: str
    node_name: str
    monitor_period: float = 15.0
    secure_port: int = contract.DEVICE_MANAGER_PORT
    bind_address: str = "0.0.0.0"
    cert_dir: Path | None = None
    kubeconfig: Path | None = None
    kube_context: str | None = None
    proc_root: Path = Path("/proc")
    namespace: str = contract.SYSTEM_NAMESPACE
    """The Device Manager Pods' namespace, where the exporter's role rule looks for peers."""
    hosts: Sequence[str] = field(default_factory=lambda: ("localhost", "127.0.0.1"))
    kubelet: KubeletAccess = field(default_factory=KubeletAccess)
    """Through the API server's node proxy (``nodes/proxy``) or the kubelet itself
    (``nodes/stats``)."""
    node_address: str | None = None
    """This node's address (the downward API's ``status.hostIP``), for direct kubelet reads."""
    monitor_wrapper: MonitorWrapper | None = None
    """Wraps what the monitor reads (:data:`MonitorWrapper`); ``None``: the backend and the Pods
    as they are."""
    publish: bool = True
    """Publish the node's NodeFeature and its ``Devices`` group and ledger (publish.py);
    ``--no-publish`` turns it off (a second, observing Device Manager; a read-only account)."""
    device_plugin: bool | None = None
    """Serve the kubelet device plugin (deviceplugin/); ``None``: when the directory of
    ``kube_socket`` exists, i.e. on a node whose kubelet is reachable."""
    kube_socket: Path = KUBELET_SOCKET
    """The kubelet's registration socket; the plugin sockets are created beside it."""
    pod_resources_socket: Path = POD_RESOURCES_SOCKET
    plugin_modes: frozenset[AllocationMode] = frozenset(AllocationMode)
    force_device_plugin: bool = False
    """Register even where another device plugin holds one of our names (``coexist.py``)."""
    """The modes to serve (``--no-shared``, ``--no-sliced``, ``--no-partitioned`` remove one)."""

    access: AccessSettings | None = None
    """The paths (``/metrics``) only a caller the API server authenticates and authorizes may
    read (``--authorize-path``; :mod:`gpustack_serving.access`); ``None``: open, as before."""

    confirm_grants: bool | None = None
    """Believe a Pod's allocation annotation only where the kubelet's PodResources record
    confirms it (confirmation.py); ``None``: when ``pod_resources_socket`` exists."""

    @property
    def confirms_grants(self) -> bool:
        """Whether grants are cross-checked (resolving the automatic default)."""
        if self.confirm_grants is not None:
            return self.confirm_grants
        return self.pod_resources_socket.exists()

    @property
    def serves_device_plugin(self) -> bool:
        """Whether ``serve`` runs the device plugin (resolving the automatic default)."""
        if self.device_plugin is not None:
            return self.device_plugin
        return self.kube_socket.parent.is_dir()


@dataclass
class Running:
    """What a caller (a test, ``simulator up``) learns once the daemon listens."""

    urls: list[str]
    holder: SnapshotHolder
    shutdown: trio.Event
    informer: Informer[NodePod] | None
    plugins: DevicePlugins | None = None
    """The device-plugin servers, when ``serve`` runs them."""


def _hosts(options: ServeOptions) -> list[str]:
    """The self-signed certificate's names, the Pod IP among them.

    ``POD_IP`` (the downward API's ``status.podIP``) is the address Prometheus and the worker
    dial.
    """
    return serving_hosts([*options.hosts, options.node_name], options.bind_address)


def _watch_cluster(
    nursery: trio.Nursery, options: ServeOptions, kube: KubeConfig | None
) -> tuple[KubeClient | None, Informer[NodePod] | None, InstanceIncarnations | None]:
    """The client, the node's Pod informer, and the reader of those Pods' Instances' UIDs.

    Only the node's Pods are listed and watched (``spec.nodeName``). The Instances are not:
    the exporter asks only whether each of the node's Instance Pods belongs to its Instance's
    current incarnation, and :class:`~gpustack_devicemanager.incarnations.InstanceIncarnations`
    answers that with GETs of the Instances those Pods name, cached per UID (its docstring says
    why that, and not an informer of every Instance in every node's daemon).
    """
    if kube is None:
        log.warning(
            "no Kubernetes configuration (not in a cluster, no --kubeconfig, no "
            "KUBECONFIG): running standalone, card figures only, no slices"
        )
        return None, None, None
    client = KubeClient(kube)
    informer = Informer(
        client,
        PODS.path(),
        decode=node_pod,
        field_selector=f"spec.nodeName={options.node_name}",
    )
    nursery.start_soon(informer.run)
    incarnations = InstanceIncarnations(client)

    def pods() -> list[Pod] | None:
        return [entry.pod for entry in informer.objects()] if informer.synced else None

    nursery.start_soon(incarnations.follow, pods, informer.wait_changed)
    return client, informer, incarnations


def _reviewer(options: ServeOptions, client: KubeClient | None) -> AccessReviewer | None:
    """The guard's reviewer; guarding without an API server to ask would lock everyone out."""
    if options.access is None:
        return None
    if client is None:
        raise KubeConfigError(
            "--authorize-path needs a Kubernetes configuration: callers are authenticated and "
            "authorized by the API server (TokenReview, SubjectAccessReview)"
        )
    return AccessReviewer(client.post, options.access, trio.current_time)


def _current_uids(instances: InstanceIncarnations | None) -> InstanceUids:
    """The exporter's view of its Pods' Instances' current UIDs (``None``: no API access)."""

    async def uids(pods: Sequence[Pod]) -> Mapping[tuple[str, str], str] | None:
        if instances is None:
            return None
        return await instances.current_uids(pods)

    return uids


def _confirmed_pods(
    nursery: trio.Nursery,
    options: ServeOptions,
    context: TickContext,
    informer: Informer[NodePod] | None,
    node_pods: Callable[[], list[NodePod] | None],
) -> Callable[[], list[NodePod] | None]:
    """``node_pods`` with the kubelet check applied, when it is on (``confirms_grants``)."""
    if informer is None or not options.confirms_grants:
        return node_pods
    confirmation = GrantConfirmation(options.pod_resources_socket, options.monitor_period)
    nursery.start_soon(confirmation.run)
    context.confirming = True
    return confirmation.wrap(node_pods)


async def serve(
    options: ServeOptions,
    backend: Backend,
    *,
    kube: KubeConfig | None = None,
    task_status: trio.TaskStatus[Running] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run until ``Running.shutdown`` is set (SIGTERM does that in the CLI)."""
    if kube is None:
        kube = load_config(options.kubeconfig, context=options.kube_context)
    holder = SnapshotHolder(math.ceil(options.monitor_period))
    liveness = Liveness(options.monitor_period, trio.current_time())
    context = TickContext(options.manufacturer, options.monitor_period, options.proc_root)
    limiter = trio.CapacityLimiter(LIBRARY_THREADS)
    shutdown = trio.Event()

    cert, key = serving_pair(
        options.cert_dir, lambda: _hosts(options), organization="gpustack device-manager"
    )
    config = terminate_tls(
        hypercorn_config(ReloadableConfig(), "gpustack.devicemanager.http"),
        options.bind_address,
        options.secure_port,
        cert,
        key,
    )
    reloader = CertReloader(config.load, cert, key)
    tls = config.create_ssl_context()  # kept by the config: a rotation reloads it in place
    assert tls is not None  # terminate_tls set the pair
    sock = bind(options.bind_address, options.secure_port)
    failures = ConnectionFailures()

    with sock:  # closed however serving ends
        async with trio.open_nursery() as nursery:
            client, informer, instances = _watch_cluster(nursery, options, kube)
            reviewer = _reviewer(options, client)
            instance_uids = _current_uids(instances)

            def node_pods() -> list[NodePod] | None:
                if informer is None or not informer.synced:
                    return None
                return informer.objects()

            def debug_state() -> dict[str, Any]:
                published = holder.current
                return {
                    "manufacturer": options.manufacturer,
                    "node": options.node_name,
                    "lastTick": published.completed_at,
                    "podsSynced": informer.synced if informer is not None else None,
                    "podsError": informer.last_error if informer is not None else None,
                    "certificateReloads": reloader.reloads,
                    "connectionFailures": failures.count,
                    "lastConnectionFailure": failures.last,
                    "access": None if reviewer is None else vars(reviewer.statistics),
                }

            plugins = await _start_node_tasks(
                nursery, options, backend, limiter, client, informer, node_pods
            )

            # What the monitor and the exporter read: each Pod's grants as far as the kubelet's
            # record confirms them (the plugin and the publisher see the annotations as written).
            measured_pods = _confirmed_pods(nursery, options, context, informer, node_pods)

            monitored: Backend = backend
            monitor_pods: PodsSource = measured_pods
            if options.monitor_wrapper is not None:
                monitored, monitor_pods = options.monitor_wrapper(backend, measured_pods)

            await nursery.start(
                lambda task_status: run_monitor(
                    monitored,
                    holder,
                    monitor_pods,
                    context,
                    limiter=limiter,
                    task_status=task_status,
                )
            )
            exposition = ExpositionHolder()
            nursery.start_soon(
                lambda: run_exporter(
                    ExporterSource(
                        options.node_name,
                        options.manufacturer,
                        options.namespace,
                        measured_pods,
                        client,
                        holder,
                        kubelet=options.kubelet,
                        node_address=options.node_address,
                        instance_uids=instance_uids,
                    ),
                    exposition,
                    period=options.monitor_period,
                )
            )
            app = build_app(
                holder, liveness, trio.current_time, debug_state, exposition, access=reviewer
            )
            urls = await nursery.start(
                lambda task_status: serve_connections(
                    app,
                    config,
                    [sock],
                    ssl_connections(app, config, tls),
                    shutdown=shutdown,
                    failures=failures,
                    task_status=task_status,
                )
            )
            if options.cert_dir is not None:
                nursery.start_soon(reloader.run)
            task_status.started(Running(list(urls), holder, shutdown, informer, plugins))
            await shutdown.wait()
            nursery.cancel_scope.cancel()
    if client is not None:
        await client.aclose()
    await trio.to_thread.run_sync(backend.close)


async def _start_node_tasks(
    nursery: trio.Nursery,
    options: ServeOptions,
    backend: Backend,
    limiter: trio.CapacityLimiter,
    client: KubeClient | None,
    informer: Informer[NodePod] | None,
    node_pods: Callable[[], list[NodePod] | None],
) -> DevicePlugins | None:
    """Start the publisher and the device plugin, both from one detection.

    Detection runs here, before the monitor starts, so the library is never asked twice at
    once; the device plugin is listening (and registering) when this returns.
    """
    publishing = options.publish and client is not None and informer is not None
    if not (publishing or options.serves_device_plugin):
        return None
    detection = await trio.to_thread.run_sync(backend.detect, limiter=limiter)
    if publishing and client is not None and informer is not None:
        nursery.start_soon(start_publisher, options, client, informer, node_pods, detection)
    if not options.serves_device_plugin:
        return None
    plugins: DevicePlugins = await nursery.start(
        partial(
            serve_device_plugins,
            manufacturer=options.manufacturer,
            node_name=options.node_name,
            backend=backend,
            limiter=limiter,
            client=client,
            pods=node_pods,
            pods_changed=informer.wait_changed if informer is not None else None,
            options=PluginOptions(
                kubelet_socket=options.kube_socket,
                pod_resources_socket=options.pod_resources_socket,
                modes=options.plugin_modes,
                confirm_grants=options.confirms_grants,
                force=options.force_device_plugin,
            ),
            detection=detection,
        )
    )
    return plugins


async def start_publisher(
    options: ServeOptions,
    client: KubeClient,
    informer: Informer[NodePod],
    node_pods: Callable[[], list[NodePod] | None],
    detection: Detection,
) -> None:
    """The publisher task: this manufacturer's groups from one detection, kept published."""
    grouped = detected_groups(detection)
    for reason in grouped.skipped:
        log.warning("features: %s", reason)
    publisher = Publisher(
        client, options.node_name, options.manufacturer, options.namespace, grouped.groups
    )
    await run_publisher(publisher, node_pods, informer.wait_changed, period=options.monitor_period)


async def serve_until_signalled(options: ServeOptions, backend: Backend) -> None:
    """The CLI's foreground mode: SIGTERM or SIGINT stops the daemon gracefully."""

    def announce(running: Running) -> None:
        log.info(
            "device manager for %s on %s at %s",
            options.manufacturer,
            options.node_name,
            ", ".join(running.urls),
        )

    await until_signalled(
        lambda task_status: serve(options, backend, task_status=task_status), announce, log
    )
