"""``gpustack-operator worker``: one nursery owns the secure port, the caches and the reloads.

The requestheader settings (who may assert an identity in ``X-Remote-User``) come from
``kube-system/extension-apiserver-authentication``, where the kube-apiserver publishes them;
flags override them field by field. They are re-read every minute, as a kube aggregated server
does, so a rotated front-proxy CA reaches the worker without a restart; a read that fails keeps
the settings in force. Without any requestheader CA the worker refuses to start: it could never
authenticate the aggregator, and serving every request a 401 would look like an RBAC problem.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from functools import partial
from pathlib import Path

import trio
from hypercorn.config import Config

from gpustack_core import contract
from gpustack_core.kubelet import Summary, parse_summary
from gpustack_core.resourceconfig import names_with
from gpustack_core.snapshot import Freshness
from gpustack_kube.certs import CA_FILE
from gpustack_kube.client import KubeClient, KubeError
from gpustack_kube.config import KubeConfig, KubeConfigError, load_config
from gpustack_kube.kubelet import KubeletAccess, SummaryReader
from gpustack_kube.paths import CONFIGMAPS
from gpustack_kube.reviews import (
    TOKEN_REVIEW_PATH,
    TokenReviewError,
    token_review,
    user_from_token_review,
)
from gpustack_serving.certs import CertReloader, serving_hosts, serving_pair
from gpustack_serving.config import hypercorn_config
from gpustack_serving.connections import bind
from gpustack_serving.signals import serve_until_signalled as until_signalled
from gpustack_worker.admissioncheck.controller import CheckOptions, NodeDevicesCheck
from gpustack_worker.admissioncheck.fitlabels import run_fit_labels
from gpustack_worker.api import Surface, build_app
from gpustack_worker.authn import (
    AuthenticationSettings,
    Authenticator,
    ConfigurationError,
    TokenReviewer,
    UserInfo,
    settings_from_configmap,
    with_overrides,
)
from gpustack_worker.authz import Authorizer
from gpustack_worker.held import node_informer
from gpustack_worker.instances.controller import ControllerOptions, InstanceController
from gpustack_worker.instancetypes.controller import LEASE as INSTANCE_TYPES_LEASE
from gpustack_worker.instancetypes.controller import InstanceTypeController
from gpustack_worker.nodecapacity import run_node_capacity
from gpustack_worker.nodefeatures import run_node_features
from gpustack_worker.settings import OperatorSettings
from gpustack_worker.subresource import Sources, device_manager_client
from gpustack_worker.summaries import SummaryCache
from gpustack_worker.tls import ContextHolder, serve_tls, server_context
from gpustack_worker.views import Views

log = logging.getLogger("gpustack.worker")

AUTH_CONFIGMAP = CONFIGMAPS.path("kube-system", "extension-apiserver-authentication")
SETTINGS_REFRESH = 60.0
SUMMARY_LIMIT = 32 << 20
"""A node's summary is read this far at most (10k Pods ≈ 25 MB)."""
TOKEN_CACHE_SECONDS = 10.0


class StartupError(Exception):
    """The worker cannot serve as configured; the message says what to fix."""


@dataclass(frozen=True)
class WorkerOptions:
    """The flags of ``gpustack-operator worker``."""

    secure_port: int = contract.WORKER_PORT
    bind_address: str = "0.0.0.0"
    cert_dir: Path | None = None
    kubeconfig: Path | None = None
    kube_context: str | None = None
    system_namespace: str = contract.SYSTEM_NAMESPACE
    """Where the Device Manager Pods run."""
    device_manager_period: float = 15.0
    """The Device Managers' configured monitor period, seconds: a snapshot older than three of
    these (or stamped in the future) is dropped, whatever period it states for itself."""
    requestheader_client_ca_file: Path | None = None
    requestheader_allowed_names: Sequence[str] | None = None
    requestheader_username_headers: Sequence[str] | None = None
    requestheader_group_headers: Sequence[str] | None = None
    requestheader_extra_headers_prefix: Sequence[str] | None = None
    client_ca_file: Path | None = None
    kubelet: KubeletAccess = field(default_factory=KubeletAccess)
    """Kubelet summaries through the API server's node proxy, or from each kubelet itself at
    the backing Pod's ``status.hostIP``."""
    authentication_skip_lookup: bool = False
    """Do not read the ConfigMap: flags only (a worker without RBAC to read it)."""
    hosts: Sequence[str] = field(default_factory=lambda: ("localhost", "127.0.0.1"))
    node_features: bool = True
    """Publish every Node's ``<node>-gpustack-worker`` NodeFeature (nodefeatures.py)."""
    resource_bases: Mapping[str, str] = field(default_factory=dict)
    """Manufacturer -> extended-resource base where the cluster moved ours off the default
    (``GPUSTACK_<MFR>_ACCELERATABLE_RESOURCE_NAME``, ``gpustack_core.resourceconfig``): the
    Pod webhook judges and node capacity patches the names the device plugins register."""
    node_capacity: bool = True
    """Patch each Node's companion extended resources (``.sliced.units`` …) from its
    ``Devices`` (nodecapacity.py), so Sliced and Partitioned Pods can be scheduled."""
    instance_controller: bool = False
    """Reconcile Instances into Pods and Services (instances/controller.py), leader-elected.
    Off here so an embedding (a test, a frozen scenario) opts in; the CLI turns it on."""
    instance_types: bool = False
    """Derive and report the InstanceType chain (instancetypes/controller.py: ResourceFlavors,
    InstanceTypes, ClusterQueues, LocalQueues, the catalog), leader-elected on a Lease of its
    own. Off here so an embedding opts in; the CLI turns it on."""
    node_devices_check: bool = False
    """Answer the gpustack-node-devices AdmissionCheck and keep the Nodes' per-card fit labels
    (admissioncheck/), leader-elected on a Lease of its own; the Pod webhook pins slices to the
    labels only then. Off here so an embedding opts in; the CLI turns it on."""
    identity: str = field(
        default_factory=lambda: os.environ.get("POD_NAME") or socket.gethostname()
    )
    """This replica's name in the controller's Lease: the Pod name where the chart sets it."""
    settings_environ: Mapping[str, str] | None = None
    """Where the Settings' ``GPUSTACK_<UPPER_SNAKE>`` seeds are read (``None``: the process's
    environment, as the chart sets it)."""
    settle_heap: bool = False
    """Once the informers have synced, collect once and freeze what is alive (``gc.freeze``):
    the caches, the imported modules and the startup state are then never traversed again
    by the collector, whose full passes over them stalled every request in flight (70–95 ms
    each, several a minute under load). The foreground mode sets it, as it owns the process;
    an embedding (a test) keeps its own collector as it is."""


@dataclass
class Running:
    """What a caller (a test, ``simulator up``) learns once the worker listens."""

    urls: list[str]
    shutdown: trio.Event
    surface: Surface
    summaries: SummaryCache
    certificate: Path
    """What verifies the serving certificate — the ``caBundle`` to pin: the self-signed one's
    CA, or ``--cert-dir``'s ``ca.crt`` (the certificate itself when there is none)."""


def _read(path: Path | None, flag: str) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise StartupError(f"{flag} {path}: {exc.strerror or exc}") from exc


class SettingsSource:
    """The ConfigMap's settings with the flags laid over them; keeps the last good ones."""

    def __init__(self, options: WorkerOptions, client: KubeClient) -> None:
        self.options = options
        self.client = client
        self.current: AuthenticationSettings | None = None
        self.error: str | None = None

    def _overlay(self, base: AuthenticationSettings) -> AuthenticationSettings:
        o = self.options
        return with_overrides(
            base,
            requestheader_client_ca=_read(
                o.requestheader_client_ca_file, "--requestheader-client-ca-file"
            ),
            allowed_names=o.requestheader_allowed_names,
            username_headers=o.requestheader_username_headers,
            group_headers=o.requestheader_group_headers,
            extra_prefixes=o.requestheader_extra_headers_prefix,
            client_ca=_read(o.client_ca_file, "--client-ca-file"),
        )

    async def refresh(self) -> AuthenticationSettings:
        """Read (unless skipped) and overlay; raises ``StartupError`` if unusable."""
        base = AuthenticationSettings(requestheader=None, client_ca=None)
        if not self.options.authentication_skip_lookup:
            try:
                base = settings_from_configmap(await self.client.get(AUTH_CONFIGMAP))
            except (KubeError, ConfigurationError) as exc:
                raise StartupError(
                    f"reading kube-system/extension-apiserver-authentication: {exc}"
                ) from exc
        try:
            settings = self._overlay(base)
        except ConfigurationError as exc:
            raise StartupError(str(exc)) from exc
        if settings.requestheader is None:
            raise StartupError(
                "no requestheader client CA: the ConfigMap kube-system/extension-apiserver-"
                "authentication has no requestheader-client-ca-file and "
                "--requestheader-client-ca-file was not given, so the aggregator could never "
                "be authenticated"
            )
        self.current, self.error = settings, None
        return settings

    async def run(self, on_change: Callable[[AuthenticationSettings], None]) -> None:
        """Re-read every minute; a failed read keeps the settings in force."""
        while True:
            await trio.sleep(SETTINGS_REFRESH)
            try:
                before = self.current
                settings = await self.refresh()
            except StartupError as exc:
                self.error = str(exc)
                log.warning("keeping the current authentication settings: %s", exc)
                continue
            if settings != before:
                log.info("authentication settings changed; new requests use them")
                on_change(settings)


def token_reviewer(client: KubeClient) -> TokenReviewer:
    """Bearer tokens checked by TokenReview, answers cached briefly (as the apiserver's)."""
    cache: dict[str, tuple[float, UserInfo | None]] = {}

    async def review(token: str) -> UserInfo | None:
        now = trio.current_time()
        hit = cache.get(token)
        if hit is not None and now - hit[0] < TOKEN_CACHE_SECONDS:
            return hit[1]
        answer = await client.post(TOKEN_REVIEW_PATH, token_review(token))
        try:
            user = user_from_token_review(answer)
        except TokenReviewError as exc:  # authenticated as nobody: not an identity
            log.warning("token review answer unusable: %s", exc)
            user = None
        if len(cache) > 4096:
            cache.clear()
        cache[token] = (now, user)
        return user

    return review


SERVICE = "gpustack-operator-worker"
"""The worker's Service (the chart's name): the host the aggregator dials and verifies."""


def _hosts(options: WorkerOptions) -> list[str]:
    service = f"{SERVICE}.{options.system_namespace}"
    names = [*options.hosts, service, f"{service}.svc", f"{service}.svc.cluster.local"]
    return serving_hosts(names, options.bind_address)  # + this host, POD_IP (downward API)


async def serve(
    options: WorkerOptions,
    *,
    kube: KubeConfig | None = None,
    task_status: trio.TaskStatus[Running] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run until ``Running.shutdown`` is set; ``StartupError`` if it cannot serve."""
    if kube is None:
        try:
            kube = load_config(options.kubeconfig, context=options.kube_context)
        except KubeConfigError as exc:
            raise StartupError(str(exc)) from exc
    if kube is None:
        raise StartupError(
            "no Kubernetes configuration: not in a cluster, no --kubeconfig, no KUBECONFIG; "
            "the worker reads everything it serves from the API server"
        )
    cert, key = serving_pair(
        options.cert_dir, lambda: _hosts(options), organization="gpustack worker"
    )
    try:
        holder = ContextHolder(server_context(cert, key))
    except Exception as exc:  # pyOpenSSL's errors name the OpenSSL failure
        raise StartupError(f"serving certificate {cert} / {key} does not load: {exc}") from exc

    def reload(new_cert: Path, new_key: Path) -> None:
        holder.current = server_context(new_cert, new_key)

    reloader = CertReloader(reload, cert, key)
    config = _hypercorn_config()
    shutdown = trio.Event()

    async with (
        KubeClient(kube) as client,
        device_manager_client() as device_managers,
        trio.open_nursery() as nursery,
    ):
        settings = SettingsSource(options, client)
        authenticator = Authenticator(await settings.refresh(), token_reviewer(client))
        try:
            sock = bind(options.bind_address, options.secure_port)
        except OSError as exc:
            raise StartupError(
                f"cannot listen on {options.bind_address}:{options.secure_port}: {exc}"
            ) from exc

        def replace(new: AuthenticationSettings) -> None:
            nonlocal authenticator
            authenticator = Authenticator(new, token_reviewer(client))

        kubelets, addresses, read_summary = _summary_reader(client, options.kubelet)
        operator_settings = _operator_settings(nursery, client, options)

        try:
            summaries = SummaryCache(read_summary, nursery)
            views = Views.of(client, options.system_namespace)
            nursery.start_soon(views.run)  # consulted once synced; until then reads go live
            surface = Surface(
                sources=Sources(
                    client,
                    summaries,
                    system_namespace=options.system_namespace,
                    device_managers=device_managers,
                    freshness=Freshness(timedelta(seconds=options.device_manager_period)),
                    node_addresses=addresses,
                    views=views,
                    background=nursery,
                ),
                authenticator=lambda: authenticator,
                authorizer=Authorizer(client.post, nursery=nursery, namespace_wide_first=True),
                ready=lambda: None,
                settings=lambda: operator_settings.current,
                setting_texts=operator_settings.texts,
                fit_labels=options.node_devices_check,
                names=names_with(options.resource_bases),
            )
            app = build_app(surface)
            controllers = _start_tasks(
                nursery, options, client, lambda: settings.run(replace), views, operator_settings
            )
            if options.cert_dir is not None:
                nursery.start_soon(reloader.run)
            async with trio.open_nursery() as serving:  # ends after shutdown's graceful close
                urls = await serving.start(
                    lambda task_status: serve_tls(
                        app, config, [sock], holder, shutdown=shutdown, task_status=task_status
                    )
                )
                trust = cert.parent / CA_FILE
                task_status.started(
                    Running(
                        list(urls), shutdown, surface, summaries, trust if trust.exists() else cert
                    )
                )
        finally:
            sock.close()  # also when startup fails after binding
            await kubelets.aclose()
        for controller in controllers:
            await controller.drain(timeout=2.0)  # no write left half-sent by the cancel below
        nursery.cancel_scope.cancel()


def _operator_settings(
    nursery: trio.Nursery, client: KubeClient, options: WorkerOptions
) -> OperatorSettings:
    """The operator Settings (the Secret ``gpustack-settings``), followed and seeded.

    Started before anything serves: the Instance webhook reads the gates at every review, the
    controller the rest.
    """
    settings = OperatorSettings(client, options.system_namespace, environ=options.settings_environ)
    nursery.start_soon(settings.run)
    return settings


HEAP_SETTLE_WAIT = 30.0
"""How long the heap waits for the informers to sync before it is frozen anyway."""


async def _settle_heap(views: Views) -> None:
    """Freeze the long-lived heap once the caches hold what they will hold.

    What the worker allocates per request dies young (or by reference count); what lives
    long was loaded at startup. A frozen object is still freed when its last reference goes,
    only no longer scanned for cycles, so a cache entry replaced later is not held by this.
    """
    with trio.move_on_after(HEAP_SETTLE_WAIT):
        while not views.synced:
            await trio.sleep(0.1)
    gc.collect()
    gc.freeze()
    log.debug("heap settled: %d objects frozen", gc.get_freeze_count())


def _hypercorn_config() -> Config:
    """No access log; hypercorn's own messages through our logging; a 2 s graceful close."""
    return hypercorn_config(Config(), "gpustack.worker.http")


def _start_tasks(
    nursery: trio.Nursery,
    options: WorkerOptions,
    client: KubeClient,
    settings: Callable[[], Awaitable[None]],
    views: Views,
    operator_settings: OperatorSettings,
) -> list[InstanceController | InstanceTypeController | NodeDevicesCheck]:
    """The worker's background loops: settings, NodeFeatures, node capacity, the controllers."""
    nursery.start_soon(settings)
    if options.settle_heap:
        nursery.start_soon(_settle_heap, views)
    nodes = None
    controllers: list[InstanceController | InstanceTypeController | NodeDevicesCheck] = []
    if (
        options.node_features
        or options.node_capacity
        or options.instance_controller
        or options.instance_types
        or options.node_devices_check
    ):
        # One view of the Nodes for the loops that follow them, held as they read it.
        nodes = node_informer(client)
        nursery.start_soon(nodes.run)
    if options.node_features:
        nursery.start_soon(
            partial(
                run_node_features,
                client,
                options.system_namespace,
                nodes=nodes,
                manual=lambda: operator_settings.current.node_management_manual,
            )
        )
    if options.node_capacity:
        nursery.start_soon(
            partial(run_node_capacity, client, nodes=nodes, bases=options.resource_bases)
        )
    if options.instance_controller:
        controller = InstanceController(
            client,
            ControllerOptions(
                system_namespace=options.system_namespace,
                identity=options.identity,
                resource_bases=options.resource_bases,
            ),
            nodes=nodes,
            settings=operator_settings,
        )
        nursery.start_soon(controller.run)
        controllers.append(controller)
    if options.instance_types:
        chain = InstanceTypeController(
            client,
            ControllerOptions(
                system_namespace=options.system_namespace,
                identity=options.identity,
                lease_name=INSTANCE_TYPES_LEASE,
            ),
            nodes=nodes,
            settings=operator_settings,
        )
        nursery.start_soon(chain.run)
        controllers.append(chain)
    if options.node_devices_check:
        nursery.start_soon(partial(run_fit_labels, client, nodes=nodes))
        check = NodeDevicesCheck(
            client,
            CheckOptions(system_namespace=options.system_namespace, identity=options.identity),
            nodes=nodes,
        )
        nursery.start_soon(check.run)
        controllers.append(check)
    return controllers


def _summary_reader(
    client: KubeClient, access: KubeletAccess
) -> tuple[SummaryReader, dict[str, str], Callable[[str], Awaitable[Summary]]]:
    """The summary cache's reader, and the node addresses the subresource fills for it."""
    kubelets = SummaryReader(client, access)
    addresses: dict[str, str] = {}

    async def read_summary(node: str) -> Summary:
        body = await kubelets.read(node, addresses.get(node), limit=SUMMARY_LIMIT)
        return parse_summary(body)

    return kubelets, addresses, read_summary


async def serve_until_signalled(options: WorkerOptions) -> None:
    """The CLI's foreground mode: SIGTERM or SIGINT stops the worker gracefully."""

    def announce(running: Running) -> None:
        log.info("worker serving worker.gpustack.ai/v1 at %s", ", ".join(running.urls))

    owned = replace(options, settle_heap=True)  # the process is the worker's alone
    await until_signalled(lambda task_status: serve(owned, task_status=task_status), announce, log)
