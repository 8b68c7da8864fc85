"""The single ``gpustack-operator`` console script.

Each daemon is a subcommand so one image serves every role, and the simulator's commands sit
beside them so the whole system can be run on one machine with the same entry point.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

if TYPE_CHECKING:
    from gpustack_kube.kubelet import KubeletAccess
    from gpustack_serving.access import AccessSettings

from gpustack_cli.errors import USAGE, OneLineErrors, fail, report, user_errors
from gpustack_core import contract
from gpustack_core.manufacturers import with_backend

app = typer.Typer(
    name="gpustack-operator",
    cls=OneLineErrors,
    help="Instance utilization for GPU clusters: Device Manager, worker API and simulator.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
device_manager = typer.Typer(
    help="Per-node, per-manufacturer accelerator sampler and exporter.", no_args_is_help=True
)
simulator = typer.Typer(
    help="Replay recorded vendor payloads, record new ones, validate recordings.",
    no_args_is_help=True,
)
app.add_typer(device_manager, name="device-manager")
app.add_typer(simulator, name="simulator")


def _version(value: bool) -> None:
    if value:
        # Imported here: importlib.metadata costs ~40 ms that no daemon start needs.
        from importlib.metadata import version as package_version

        typer.echo(f"gpustack-operator {package_version('gpustack-cli')}")
        raise typer.Exit


E = TypeVar("E", bound=BaseException)


def _namespace(value: str) -> str:
    """A release namespace as given (flag or ``$POD_NAMESPACE``), refused unless a DNS-1123 label.

    It becomes part of request paths (NodeFeatures, the Settings Secret, the peers' Pods), so
    it is checked before any request is built from it.
    """
    from gpustack_core.names import dns1123_label_problem

    if (problem := dns1123_label_problem(value)) is not None:
        raise typer.BadParameter(f"{value!r}: {problem}")
    return value


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Instance utilization for GPU clusters: Device Manager, worker API and simulator."""


@app.command()
def demo(
    once: Annotated[
        bool, typer.Option("--once", help="Print once, stop everything, exit.")
    ] = False,
    state_dir: Annotated[
        Path, typer.Option(help="Where the running system keeps kubeconfig, logs, endpoints.")
    ] = Path(".gpustack-demo"),
    scenario: Annotated[str, typer.Option(help="Scenario to bring up.")] = "demo",
    offline: Annotated[
        bool,
        typer.Option("--offline", help="No processes: the embedded demo node through the core."),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="With --offline: every InstanceMetrics as JSON.")
    ] = False,
) -> None:
    """Start the stand-in, a Device Manager per node and manufacturer, and the worker; show them."""
    if as_json and not offline:
        raise typer.BadParameter("--json needs --offline (the live demo shows tables)")
    if offline:
        from gpustack_cli.demo_view import run_demo

        run_demo(as_json=as_json)
        return
    from gpustack_cli.live_demo import run_live_demo

    raise typer.Exit(code=run_live_demo(state_dir, once=once, scenario=scenario))


@app.command("kueue-config")
def kueue_config() -> None:
    """Print the resources block Kueue's Configuration needs for the operator's queues.

    Paste it under ``resources:`` in Kueue's ``controller_manager_config.yaml`` (its config
    map): accelerator requests become credits.gpustack.ai/<manufacturer>, and what no queue of
    the operator declares is left out of Kueue's check (docs/instancetypes.md, "Kueue's
    configuration"). A base moved off its default with
    $GPUSTACK_<MANUFACTURER>_ACCELERATABLE_RESOURCE_NAME (the chart's resourceNames) is
    read from the environment, as the worker and the Device Managers read it.
    """
    import yaml

    from gpustack_core.kueueconfig import resources
    from gpustack_core.resourceconfig import names_with

    block = resources(names_with(_resource_bases()))
    typer.echo(yaml.safe_dump({"resources": block}, sort_keys=False), nl=False)


def _resource_bases() -> dict[str, str]:
    """The configured resource bases ($GPUSTACK_<MFR>_ACCELERATABLE_RESOURCE_NAME), or a refusal.

    Read once at start, before anything serves: a bad value is refused in one line naming the
    variable, never replaced by the default (which would fight another plugin for the name).
    """
    import os

    from gpustack_core.resourceconfig import configured_bases

    try:
        return configured_bases(os.environ)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _csv(value: str | None) -> list[str] | None:
    """A comma-separated flag; ``None`` (not given) stays distinct from an empty list."""
    if value is None:
        return None
    return [item.strip() for item in value.split(",") if item.strip()]


# The options every daemon takes alike, declared once.
KubeconfigOption = Annotated[
    Path | None, typer.Option(help="Kubeconfig (default: $KUBECONFIG, else in-cluster).")
]
ContextOption = Annotated[str | None, typer.Option(help="Kubeconfig context.")]
BindAddressOption = Annotated[str, typer.Option(help="Address to listen on.")]


@app.command()
def worker(
    secure_port: Annotated[
        int, typer.Option(min=0, max=65535, help="HTTPS port.")
    ] = contract.WORKER_PORT,
    bind_address: BindAddressOption = "0.0.0.0",
    cert_dir: Annotated[
        Path | None, typer.Option(help="tls.crt/tls.key, hot-reloaded (default: self-signed).")
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    system_namespace: Annotated[
        str,
        typer.Option(
            envvar="POD_NAMESPACE",
            callback=_namespace,
            help=(
                "The release namespace: the Device Manager Pods', the Settings Secret's, the"
                " NodeFeatures' ($POD_NAMESPACE, the worker's own, else gpustack-system)."
            ),
        ),
    ] = contract.SYSTEM_NAMESPACE,
    device_manager_monitor_period: Annotated[
        str,
        typer.Option(help="The Device Managers' monitor period; 3 of these bound freshness."),
    ] = "15s",
    requestheader_client_ca_file: Annotated[
        Path | None,
        typer.Option(help="Front-proxy CA (default: from extension-apiserver-authentication)."),
    ] = None,
    requestheader_allowed_names: Annotated[
        str | None, typer.Option(help="Allowed front-proxy CNs, comma-separated (empty: any).")
    ] = None,
    requestheader_username_headers: Annotated[
        str | None, typer.Option(help="User headers, comma-separated (X-Remote-User).")
    ] = None,
    requestheader_group_headers: Annotated[
        str | None, typer.Option(help="Group headers, comma-separated (X-Remote-Group).")
    ] = None,
    requestheader_extra_headers_prefix: Annotated[
        str | None, typer.Option(help="Extra header prefixes, comma-separated (X-Remote-Extra-).")
    ] = None,
    client_ca_file: Annotated[
        Path | None, typer.Option(help="CA of direct client certificates (default: ConfigMap).")
    ] = None,
    authentication_skip_lookup: Annotated[
        bool, typer.Option(help="Do not read extension-apiserver-authentication; flags only.")
    ] = False,
    node_features: Annotated[
        bool,
        typer.Option(
            help=(
                "Publish each Node's <node>-gpustack-worker NodeFeature (gpustack.ai/managed and"
                " the general.* CPU keys)."
            )
        ),
    ] = True,
    node_capacity: Annotated[
        bool,
        typer.Option(
            help=(
                "Patch each Node's companion accelerator resources (<base>.sliced.units,"
                " .partitioned.<kind>-<profile>, …) from its Devices object."
            )
        ),
    ] = True,
    instance_controller: Annotated[
        bool,
        typer.Option(
            help=(
                "Reconcile Instances into Pods, NodePort Services and isolation policies"
                " (leader-elected among replicas)."
            )
        ),
    ] = True,
    node_devices_check: Annotated[
        bool,
        typer.Option(
            help=(
                "Answer Kueue's gpustack-node-devices AdmissionCheck from the Devices ledgers and"
                " keep the Nodes' per-card fit labels (leader-elected among replicas)."
            )
        ),
    ] = True,
    instance_types: Annotated[
        bool,
        typer.Option(
            help=(
                "Derive the InstanceType chain from the nodes: ResourceFlavors, InstanceTypes,"
                " ClusterQueues, entrance LocalQueues and the InstanceTypeFlavor catalog, and"
                " report every InstanceType's status (leader-elected among replicas)."
            )
        ),
    ] = True,
    kubelet_access: KubeletAccessMode = "proxy",
    kubelet_port: KubeletPort = 10250,
    kubelet_certificate_authority: KubeletCA = None,
    kubelet_insecure_tls: KubeletInsecure = False,
    log_level: LogLevel = "info",
    log_json: Annotated[bool, typer.Option(help="Log JSON lines.")] = False,
) -> None:
    """Serve the worker.gpustack.ai/v1 aggregated API (instances and instances/metrics)."""
    import trio

    from gpustack_cli import logs
    from gpustack_cli.dm_cmds import parse_duration
    from gpustack_core.snapshot import MAX_MONITOR_PERIOD
    from gpustack_worker.daemon import StartupError, WorkerOptions, serve_until_signalled

    logs.configure(log_level, json_logs=log_json)
    dm_period = parse_duration(device_manager_monitor_period)
    if dm_period > MAX_MONITOR_PERIOD.total_seconds():
        fail(
            "gpustack-operator worker",
            f"--device-manager-monitor-period {device_manager_monitor_period} is longer than"
            f" {MAX_MONITOR_PERIOD}",
            json_logs=log_json,
        )
    options = WorkerOptions(
        secure_port=secure_port,
        bind_address=bind_address,
        cert_dir=cert_dir,
        kubeconfig=kubeconfig,
        kube_context=context,
        system_namespace=system_namespace,
        device_manager_period=dm_period,
        requestheader_client_ca_file=requestheader_client_ca_file,
        requestheader_allowed_names=_csv(requestheader_allowed_names),
        requestheader_username_headers=_csv(requestheader_username_headers),
        requestheader_group_headers=_csv(requestheader_group_headers),
        requestheader_extra_headers_prefix=_csv(requestheader_extra_headers_prefix),
        client_ca_file=client_ca_file,
        authentication_skip_lookup=authentication_skip_lookup,
        node_features=node_features,
        resource_bases=_resource_bases(),
        node_capacity=node_capacity,
        instance_controller=instance_controller,
        node_devices_check=node_devices_check,
        instance_types=instance_types,
        kubelet=_kubelet(
            kubelet_access, kubelet_port, kubelet_certificate_authority, kubelet_insecure_tls
        ),
    )
    try:
        trio.run(serve_until_signalled, options)
    except (StartupError, BaseExceptionGroup) as exc:
        found = _first(exc, StartupError)
        if found is None:
            raise
        fail("gpustack-operator worker", found, json_logs=log_json)


@app.command("metrics-gateway")
def metrics_gateway(
    secure_port: Annotated[int, typer.Option(min=0, max=65535, help="HTTPS port.")] = 8443,
    bind_address: BindAddressOption = "0.0.0.0",
    cert_dir: Annotated[
        Path | None, typer.Option(help="tls.crt/tls.key (default: self-signed).")
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    system_namespace: Annotated[
        str,
        typer.Option(
            envvar="POD_NAMESPACE",
            callback=_namespace,
            help="The release namespace, where the controller's Lease lives ($POD_NAMESPACE).",
        ),
    ] = contract.SYSTEM_NAMESPACE,
    label_proxy_url: Annotated[
        str,
        typer.Option(
            help="prom-label-proxy (-label namespace) in front of the cluster Prometheus."
        ),
    ] = "http://127.0.0.1:9091",
    cluster_prometheus_url: Annotated[
        str | None,
        typer.Option(help="The cluster Prometheus, for metricIsolation: false (default: refused)."),
    ] = None,
    gateway: Annotated[
        bool, typer.Option(help="Serve the tenants' query gateway (every replica).")
    ] = True,
    metricaccess_controller: Annotated[
        bool,
        typer.Option(help="Deliver MetricAccess slices by remote write (leader-elected)."),
    ] = True,
    log_level: LogLevel = "info",
    log_json: Annotated[bool, typer.Option(help="Log JSON lines.")] = False,
) -> None:
    """Serve the per-tenant metrics gateway and run the MetricAccess controller."""
    import trio

    from gpustack_cli import logs
    from gpustack_worker.metricsdaemon import (
        MetricsDaemonOptions,
        StartupError,
        serve_until_signalled,
    )

    logs.configure(log_level, json_logs=log_json)
    if not (gateway or metricaccess_controller):
        fail(
            "gpustack-operator metrics-gateway",
            "--no-gateway and --no-metricaccess-controller leave nothing to run",
            json_logs=log_json,
        )
    options = MetricsDaemonOptions(
        secure_port=secure_port,
        bind_address=bind_address,
        cert_dir=cert_dir,
        kubeconfig=kubeconfig,
        kube_context=context,
        label_proxy_url=label_proxy_url,
        cluster_url=cluster_prometheus_url,
        gateway=gateway,
        controller=metricaccess_controller,
        system_namespace=system_namespace,
    )
    try:
        trio.run(serve_until_signalled, options)
    except (StartupError, BaseExceptionGroup) as exc:
        found = _first(exc, StartupError)
        if found is None:
            raise
        fail("gpustack-operator metrics-gateway", found, json_logs=log_json)


KubeletAccessMode = Annotated[
    str,
    typer.Option(
        help=(
            "proxy: kubelet summaries through the API server's node proxy (RBAC nodes/proxy"
            " get); direct: from the kubelet itself at the node's address (nodes/stats get)."
        )
    ),
]
KubeletPort = Annotated[
    int, typer.Option(min=1, max=65535, help="The kubelet's port for --kubelet-access direct.")
]
KubeletCA = Annotated[
    Path | None,
    typer.Option(help="CA of the kubelets' serving certificates (default: system roots)."),
]
KubeletInsecure = Annotated[
    bool, typer.Option(help="Do not verify kubelet serving certificates (self-signed ones).")
]


def _kubelet(mode: str, port: int, ca: Path | None, insecure: bool) -> KubeletAccess:
    """The ``--kubelet-*`` flags as one value; a mode other than the two is a usage error."""
    from gpustack_kube.kubelet import KubeletAccess

    if mode not in {"proxy", "direct"}:
        raise typer.BadParameter(f"--kubelet-access must be proxy or direct, not {mode!r}")
    return KubeletAccess(direct=mode == "direct", port=port, ca_file=ca, insecure_tls=insecure)


@contextlib.contextmanager
def refusing_bad_recordings(command: str, *, json_logs: bool = False) -> Iterator[None]:
    """A bad recording, or a library that does not open: one line on stderr, exit 1.

    No traceback; a JSON line with ``--log-json``.
    """
    with user_errors(f"gpustack-operator {command}", json_logs=json_logs):
        yield


def _log_level(value: str) -> str:
    """``--log-level``: one of the levels :mod:`gpustack_cli.logs` knows (a usage error if not)."""
    from gpustack_cli.logs import LEVELS

    if value not in LEVELS:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(LEVELS)}")
    return value


LogLevel = Annotated[str, typer.Option(callback=_log_level, help="debug, info, warning or error.")]


def _first(error: BaseException, kind: type[E]) -> E | None:
    """The first ``kind`` in ``error`` or the exception groups trio wrapped it in."""
    if isinstance(error, kind):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _first(inner, kind)
            if found is not None:
                return found
    return None


def _access(paths: list[str], ttl: float) -> AccessSettings | None:
    """``--authorize-path``/``--authorization-cache-ttl`` as the guard's settings (none: off)."""
    from gpustack_serving.access import AccessSettings

    if not paths:
        return None
    try:
        return AccessSettings(
            paths=frozenset(paths), allowed_ttl=ttl, denied_ttl=ttl, token_ttl=ttl
        )
    except ValueError as exc:
        raise typer.BadParameter(f"--authorize-path: {exc}") from exc


@device_manager.command("serve")
def dm_serve(
    manufacturer: Annotated[
        str | None, typer.Option(help="The one manufacturer this process samples.")
    ] = None,
    monitor_period: Annotated[str, typer.Option(help="Sampling period (15s, 1m).")] = "15s",
    secure_port: Annotated[
        int, typer.Option(min=0, max=65535, help="HTTPS port.")
    ] = contract.DEVICE_MANAGER_PORT,
    bind_address: BindAddressOption = "0.0.0.0",
    cert_dir: Annotated[
        Path | None, typer.Option(help="tls.crt/tls.key, hot-reloaded (default: self-signed).")
    ] = None,
    node_name: Annotated[
        str | None, typer.Option(help="This node (default: $KUBERNETES_NODE_NAME).")
    ] = None,
    namespace: Annotated[
        str,
        typer.Option(
            envvar="POD_NAMESPACE",
            callback=_namespace,
            help=(
                "The release namespace: where the NodeFeature is published and the peer Device"
                " Managers run ($POD_NAMESPACE, this Pod's own, else gpustack-system)."
            ),
        ),
    ] = contract.SYSTEM_NAMESPACE,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    proc_root: Annotated[
        Path | None, typer.Option(help="Where host /proc is mounted (default /proc).")
    ] = None,
    simulate: Annotated[
        Path | None, typer.Option(help="Replay this recording instead of the real library.")
    ] = None,
    bind_replayed_pids: Annotated[
        bool,
        typer.Option(
            help=(
                "With --simulate: bind each replayed process row to a live process of the Pod"
                " container holding its device, read from the real /proc (--proc-root's"
                " default becomes /proc)."
            )
        ),
    ] = False,
    node_address: Annotated[
        str | None,
        typer.Option(
            envvar="KUBERNETES_NODE_IP",
            help="This node's address, for --kubelet-access direct ($KUBERNETES_NODE_IP).",
        ),
    ] = None,
    kubelet_access: KubeletAccessMode = "proxy",
    kubelet_port: KubeletPort = 10250,
    kubelet_certificate_authority: KubeletCA = None,
    kubelet_insecure_tls: KubeletInsecure = False,
    publish: Annotated[
        bool,
        typer.Option(
            help=(
                "Publish the node's NodeFeature (acceleratable.* labels) and this manufacturer's"
                " group and ledger of the node's Devices object."
            )
        ),
    ] = True,
    device_plugin: Annotated[
        bool | None,
        typer.Option(
            "--device-plugin/--no-device-plugin",
            help=(
                "Serve the kubelet device plugin (default: when --kube-socket's directory exists)."
            ),
            show_default=False,
        ),
    ] = None,
    kube_socket: Annotated[
        Path,
        typer.Option(help="The kubelet's registration socket; plugin sockets go beside it."),
    ] = Path("/var/lib/kubelet/device-plugins/kubelet.sock"),
    pod_resources_socket: Annotated[
        Path, typer.Option(help="The kubelet's PodResources socket.")
    ] = Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
    confirm_grants: Annotated[
        bool | None,
        typer.Option(
            "--confirm-grants/--no-confirm-grants",
            help=(
                "Believe allocation annotations only as far as the kubelet's PodResources"
                " confirms them (default: when the PodResources socket exists)."
            ),
            show_default=False,
        ),
    ] = None,
    force_device_plugin: Annotated[
        bool,
        typer.Option(
            help=(
                "Register the device plugin even where another plugin already holds one of its"
                " resource names on this kubelet (default: log it and wait until it is gone)."
            )
        ),
    ] = False,
    shared: Annotated[bool, typer.Option(help="Serve the <base>.shared resource.")] = True,
    sliced: Annotated[bool, typer.Option(help="Serve the <base>.sliced resource.")] = True,
    partitioned: Annotated[
        bool, typer.Option(help="Serve the <base>.partitioned resource.")
    ] = True,
    authorize_path: Annotated[
        list[str] | None,
        typer.Option(
            help=(
                "A path (repeatable, e.g. /metrics) answered only to a caller whose bearer token"
                " the API server authenticates (TokenReview) and whose RBAC allows `get` on it"
                " (SubjectAccessReview, nonResourceURLs); others get 401 or 403, and 503 while"
                " the API server cannot say. Default: every path open."
            )
        ),
    ] = None,
    authorization_cache_ttl: Annotated[
        str, typer.Option(help="How long a token's or a decision's review is reused (10s).")
    ] = "10s",
    log_level: LogLevel = "info",
    log_json: Annotated[bool, typer.Option(help="Log JSON lines.")] = False,
) -> None:
    """Sample accelerators every monitor period and serve /monitor/snapshot over HTTPS.

    On a node with a kubelet it is also the kubelet device plugin: one resource per mode,
    allocating and writing each Pod's allocation annotation.
    """
    import trio

    from gpustack_cli import logs
    from gpustack_cli.dm_cmds import default_node_name, monitor_wrapper, open_for, parse_duration
    from gpustack_core.modes import AllocationMode

    dropped = {
        mode
        for mode, wanted in (
            (AllocationMode.SHARED, shared),
            (AllocationMode.SLICED, sliced),
            (AllocationMode.PARTITIONED, partitioned),
        )
        if not wanted
    }
    if bind_replayed_pids and simulate is None:
        raise typer.BadParameter(
            "--bind-replayed-pids needs --simulate: a real library's PIDs are never rebound"
        )
    if bind_replayed_pids and proc_root is None:
        proc_root = Path("/proc")  # the live processes, not the recording's own /proc
    _resource_bases()
    logs.configure(log_level, json_logs=log_json)
    period = parse_duration(monitor_period)
    access = _access(authorize_path or [], parse_duration(authorization_cache_ttl))
    with refusing_bad_recordings("device-manager serve", json_logs=log_json):
        vendor, backend, root = open_for(manufacturer, simulate, proc_root)
    # The daemon after the refusals: a bad recording or an absent library is reported first.
    from gpustack_devicemanager.daemon import ServeOptions, serve_until_signalled

    options = ServeOptions(
        manufacturer=vendor,
        node_name=node_name or default_node_name(),
        namespace=namespace,
        monitor_period=period,
        secure_port=secure_port,
        bind_address=bind_address,
        cert_dir=cert_dir,
        kubeconfig=kubeconfig,
        kube_context=context,
        proc_root=root,
        monitor_wrapper=monitor_wrapper(bind_replayed_pids, root),
        kubelet=_kubelet(
            kubelet_access, kubelet_port, kubelet_certificate_authority, kubelet_insecure_tls
        ),
        node_address=node_address,
        publish=publish,
        device_plugin=device_plugin,
        kube_socket=kube_socket,
        pod_resources_socket=pod_resources_socket,
        confirm_grants=confirm_grants,
        plugin_modes=frozenset(AllocationMode) - dropped,
        force_device_plugin=force_device_plugin,
        access=access,
    )
    from gpustack_kube.config import KubeConfigError

    try:
        trio.run(serve_until_signalled, options, backend)
    except (KubeConfigError, OSError, BaseExceptionGroup) as exc:
        # A kubeconfig that does not load or a port that cannot be bound: one line, exit 1.
        found = _first(exc, KubeConfigError) or _first(exc, OSError)
        if found is None:
            raise
        fail("gpustack-operator device-manager serve", found, json_logs=log_json)


@device_manager.command("detect")
def dm_detect(
    manufacturer: Annotated[
        str | None,
        typer.Option(
            help=(
                "The manufacturer whose library to open ("
                + ", ".join(row.name for row in with_backend())
                + ")."
            )
        ),
    ] = None,
    simulate: Annotated[
        Path | None, typer.Option(help="Replay this recording instead of the real library.")
    ] = None,
    output: OutputFormat = "yaml",
) -> None:
    """Print the accelerators this node's library reports (YAML, or JSON with -o json)."""
    from gpustack_cli.simulator_cmds import detect
    from gpustack_vendors.calling import CallError
    from gpustack_vendors.loading import LibraryUnavailableError

    try:
        with user_errors("gpustack-operator device-manager detect", library_errors=False):
            typer.echo(detect(manufacturer, simulate, output), nl=False)
    except (LibraryUnavailableError, CallError) as exc:
        # This prefix (no program name) is what the vendor tests have always read.
        fail("device-manager detect", exc)


@device_manager.command("monitor")
def dm_monitor(
    manufacturer: Annotated[str | None, typer.Option(help="Manufacturer to sample.")] = None,
    simulate: Annotated[Path | None, typer.Option(help="Replay this recording.")] = None,
    proc_root: Annotated[Path | None, typer.Option(help="Host /proc mount.")] = None,
    monitor_period: Annotated[str, typer.Option(help="Period written into the sample.")] = "15s",
    output: OutputFormat = "yaml",
) -> None:
    """Take one monitor sample (card figures) and print it (YAML, or JSON with -o json)."""
    from gpustack_cli.dm_cmds import monitor_once, parse_duration

    period = parse_duration(monitor_period)
    with refusing_bad_recordings("device-manager monitor"):
        sample = monitor_once(manufacturer, simulate, proc_root, period, output)
    typer.echo(sample, nl=False)


def _output_format(value: str) -> str:
    """``-o``: yaml or json (a usage error otherwise)."""
    if value not in ("yaml", "json"):
        raise typer.BadParameter(f"{value!r} is not yaml or json")
    return value


OutputFormat = Annotated[
    str,
    typer.Option(
        "-o",
        "--output",
        metavar="yaml|json",
        callback=_output_format,
        help="yaml (the default) or json: one object, its shape in docs/cli.md.",
    ),
]


def _either(choices: Iterable[str]) -> str:
    """``a, b or c``: the choices as a sentence says them."""
    listed = list(choices)
    return ", ".join(listed[:-1]) + (" or " if len(listed) > 1 else "") + listed[-1]


@simulator.command("record")
def sim_record(
    output: Annotated[Path, typer.Option("-o", "--output", help="Recording file to write.")],
    vendor: Annotated[
        str,
        typer.Option(
            help="Which manufacturer's libraries to record: "
            + _either(f"{row.name} ({row.library})" for row in with_backend())
            + ".",
        ),
    ],
    samples: Annotated[int, typer.Option(min=1, help="Monitor-style passes to record.")] = 4,
    interval: Annotated[float, typer.Option(min=0, help="Seconds between passes.")] = 15.0,
    description: Annotated[str, typer.Option(help="What the recording shows.")] = "recorded",
) -> None:
    """Record this node's vendor library answers into a recording (PIDs, serials, host redacted)."""
    from rich.console import Console

    from gpustack_cli.simulator_cmds import record, recordable

    known = recordable()
    if vendor not in known:
        fail(
            "gpustack-operator simulator record",
            f"--vendor {vendor}: not a manufacturer with a backend ({', '.join(known)})",
            code=USAGE,
        )

    record(vendor, samples, interval, output, description, Console(stderr=True))


@simulator.command("replay")
def sim_replay(
    recording: Annotated[Path, typer.Argument(help="The recording to replay.")],
    samples: Annotated[int, typer.Option(min=1, help="Monitor passes to print.")] = 4,
    interval: Annotated[float, typer.Option(min=0, help="Virtual seconds between passes.")] = 15.0,
) -> None:
    """Replay a recording through the backend and print each pass's card figures."""
    from rich.console import Console

    from gpustack_cli.simulator_cmds import replay

    with refusing_bad_recordings("simulator replay"):
        replay(recording, samples, interval, Console())


@simulator.command("cluster")
def sim_cluster(
    state_dir: Annotated[Path, typer.Option(help="Where the kubeconfig and PKI are written.")],
    scenario: Annotated[
        str, typer.Option(help="Scenario name (recordings/scenarios/NAME.yaml) or file.")
    ] = "nvidia-mixed",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free one).")] = 0,
    pod_address: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAMESPACE/NAME=IP:PORT",
            help="Where a Pod's process listens: its podIP and https port (repeatable).",
        ),
    ] = None,
    worker_url: Annotated[
        str | None, typer.Option(help="The worker, for the worker.gpustack.ai/v1 aggregator.")
    ] = None,
    worker_ca: Annotated[
        Path | None,
        typer.Option(exists=True, dir_okay=False, help="CA verifying the worker (caBundle)."),
    ] = None,
    ready_file: Annotated[
        Path | None, typer.Option(help="Write the URL here once serving (removed on exit).")
    ] = None,
    kubelet_dir: Annotated[
        Path | None,
        typer.Option(
            help=(
                "Run a fake kubelet per Device Manager node, its sockets under DIR/<node>/"
                " (device-plugins/kubelet.sock, pod-resources/kubelet.sock): Pods requesting a"
                " registered resource are allocated through the node's device plugins."
            )
        ),
    ] = None,
) -> None:
    """Serve the Kubernetes endpoints the daemons use, from a scenario, until interrupted."""
    import trio

    from gpustack_core.decoding import ContractError
    from gpustack_simulator.cluster.server import PodAddress, StandinError, run_until_signalled

    try:
        addresses = [PodAddress.parse(text) for text in pod_address or ()]
        trio.run(
            lambda: run_until_signalled(
                scenario,
                state_dir,
                port,
                pod_addresses=addresses,
                worker_url=worker_url,
                worker_ca=worker_ca,
                ready_file=ready_file,
                kubelet_dir=kubelet_dir,
            )
        )
    except (StandinError, ContractError, OSError, BaseExceptionGroup) as exc:
        # A bad flag, scenario or state directory is a one-line error, not a traceback;
        # anything else is a bug.
        found: Exception | None = None
        for kind in (StandinError, ContractError, OSError):
            found = found or _first(exc, kind)
        if found is None:
            raise
        typer.echo(f"gpustack-operator simulator cluster: {found}", err=True)
        raise typer.Exit(code=1) from exc


@simulator.command("validate")
def sim_validate(
    files: Annotated[list[Path], typer.Argument(help="Recordings to check.")],
) -> None:
    """Validate recordings, naming the file, path and field of every problem."""
    from rich.console import Console

    from gpustack_cli.simulator_cmds import validate

    raise typer.Exit(code=validate(files, Console(width=200)))


@simulator.command("list")
def sim_list(
    root: Annotated[
        Path | None, typer.Argument(help="Folder to search (default: ./recordings).")
    ] = None,
) -> None:
    """List recordings with their vendor, card count and provenance."""
    from rich.console import Console

    from gpustack_cli.simulator_cmds import DEFAULT_RECORDINGS, list_recordings

    raise typer.Exit(code=list_recordings(root or DEFAULT_RECORDINGS, Console(width=200)))


@simulator.command("up")
def sim_up(
    state_dir: Annotated[
        Path, typer.Option(help="Where kubeconfig, endpoints.json and logs/ are written.")
    ],
    scenario: Annotated[
        str, typer.Option(help="Scenario name (recordings/scenarios/NAME.yaml) or file.")
    ] = "demo",
    monitor_period: Annotated[str, typer.Option(help="Device Managers' period.")] = "2s",
    fleet: Annotated[
        bool,
        typer.Option(
            "--fleet/--process-each",
            help="Every Device Manager in one process (the default: it imports the daemon "
            "once), or one process each, as nodes run them.",
        ),
    ] = True,
    control_plane: Annotated[
        str,
        typer.Option(
            help="standin: the project's cluster stand-in (the default, no Go needed); real: "
            "etcd, kube-apiserver, kube-controller-manager and kube-scheduler built from their "
            "Go modules (clusters/controlplane), with a node agent per scenario node in a "
            "network namespace (needs root, Go and helm).",
        ),
    ] = "standin",
    log_level: Annotated[
        str,
        typer.Option(
            callback=_log_level,
            help="The Device Managers' and the worker's log level (debug, info, warning or"
            " error); their logs are under --state-dir's logs/.",
        ),
    ] = "info",
) -> None:
    """Start the stand-in, its Device Managers and the worker in the background; wait for all."""
    from gpustack_simulator.up import UpError, up

    if control_plane not in {"standin", "real"}:
        fail(
            "gpustack-operator simulator up", f"--control-plane {control_plane!r}: standin or real"
        )
    try:
        if control_plane == "real":
            from gpustack_simulator.controlplane.start import up_real

            endpoints = up_real(
                scenario, state_dir, monitor_period=monitor_period, log_level=log_level
            )
        else:
            endpoints = up(
                scenario,
                state_dir,
                monitor_period=monitor_period,
                fleet=fleet,
                log_level=log_level,
            )
    except (UpError, OSError) as exc:  # OSError: a state directory that cannot be written
        fail("gpustack-operator simulator up", exc)
    typer.echo(f"cluster     {endpoints.cluster}")
    typer.echo(f"worker      {endpoints.worker}")
    shown = endpoints.device_managers[:20]
    for dm in shown:
        typer.echo(f"{dm.manufacturer:<11} {dm.node}  {dm.metrics}")
    if len(endpoints.device_managers) > len(shown):
        more = len(endpoints.device_managers) - len(shown)
        typer.echo(f"…           and {more} more Device Managers (endpoints.json lists all)")
    typer.echo(f"kubeconfig  {endpoints.kubeconfig}  (contexts admin, no-metrics, prometheus, …)")
    from gpustack_simulator.hints import self_command

    typer.echo(f"logs        {state_dir / 'logs'}  (--log-level {log_level})")
    typer.echo(f"stop with   {self_command()} simulator down --state-dir {state_dir}")


@simulator.command("fleet")
def sim_fleet(
    nodes: Annotated[int, typer.Option(min=1, help="Nodes, one Device Manager each.")] = 10,
    instances: Annotated[int, typer.Option(min=0, help="Instances, dealt over the nodes.")] = 100,
    mix: Annotated[
        str,
        typer.Option(help="Weights of exclusive, shared and none (no accelerator) Instances."),
    ] = "exclusive=1,shared=3,none=1",
    recording: Annotated[
        list[str] | None,
        typer.Option(help="Recording (under recordings/) the nodes replay, round-robin; repeat."),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here (default: stdout).")
    ] = None,
) -> None:
    """Generate a cluster-scenario/v1 fleet (for `simulator up --fleet --scenario FILE`)."""
    from gpustack_simulator.fleet import DEFAULT_RECORDING, FleetError, generate, to_yaml

    try:
        text = to_yaml(
            generate(
                nodes=nodes,
                instances=instances,
                mix=mix,
                recordings=tuple(recording or (DEFAULT_RECORDING,)),
            )
        )
    except FleetError as exc:
        typer.echo(f"gpustack-operator simulator fleet: {exc}", err=True)
        raise typer.Exit(code=2) from exc
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text)


@simulator.command("down")
def sim_down(
    state_dir: Annotated[Path, typer.Option(help="The state directory `up` was given.")],
) -> None:
    """Stop everything `simulator up` started in that state directory."""
    from gpustack_simulator.controlplane.netns import delete_recorded
    from gpustack_simulator.up import UpError, down

    skipped: list[str] = []
    try:
        with user_errors("gpustack-operator simulator down"):
            stopped = down(state_dir, skipped=skipped)
            netns = delete_recorded(state_dir.resolve())
    except UpError as exc:  # a processes.json that does not decode
        fail("gpustack-operator simulator down", exc)
    for entry in skipped:  # recorded, but not provably what up started: never signalled
        report("gpustack-operator simulator down", f"not stopped: {entry}")
    if netns is not None:
        stopped = [*stopped, f"network namespace {netns}"]
    typer.echo(f"stopped {', '.join(stopped)}" if stopped else "nothing was running")


def main() -> None:
    """Console-script entry point."""
    app()
