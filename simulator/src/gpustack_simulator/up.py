"""``simulator up`` / ``down``: the whole system on one machine, as separate real processes.

``up`` starts the cluster stand-in, one Device Manager per scenario Device Manager (replaying its
recording, reading the scenario's fake ``/proc``) and the worker, each a ``gpustack-operator``
process of its own in its own session, so they outlive the command and a Ctrl-C in the terminal
that ran ``up`` does not reach them. It returns once every one answers, and leaves in the state
directory what a user or a test needs: ``kubeconfig`` (contexts ``admin``, ``no-metrics``, …),
``endpoints.json`` (every URL), ``processes.json`` (what ``down`` stops) and ``logs/``.

Device Managers share one port and differ by loopback address (127.0.0.2, .3, …): a Pod IP
plus the Service's ``prometheus.io/port`` is how Prometheus' relabelling addresses them, and
loopback has a whole /8 to give out. The worker's serving certificate is minted here, before
anything starts, so the stand-in's aggregator can verify it (the ``APIService``'s ``caBundle``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gpustack_core import webhooks
from gpustack_core.decoding import ContractError
from gpustack_core.podmatch import match_conditions
from gpustack_core.units import seconds_of
from gpustack_kube.certs import self_signed
from gpustack_kube.paths import Resource
from gpustack_simulator import processes
from gpustack_simulator.fleet_host import FleetSpec, Member
from gpustack_simulator.hints import self_command
from gpustack_simulator.procfs import write_procfs
from gpustack_simulator.scenario import (
    APPLY_KINDS,
    RECORDINGS_DIR,
    DeviceManagerSpec,
    Expanded,
    expand,
    find_scenario,
    load_scenario,
)

log = logging.getLogger("gpustack.simulator.up")

START_TIMEOUT = 150.0
"""Generous: six to ten Python processes start at once, and a 2-core CI runner is slow."""
STOP_TIMEOUT = 10.0
WORKER_GROUP_VERSION = "/apis/worker.gpustack.ai/v1"
FLEET_PUBLISH_LIMIT = 100
"""Above this many Device Managers, ``--fleet`` members neither publish NodeFeatures and
``Devices`` nor start all at once: the stand-in is one Python process whose every request
scans all objects, and a few hundred publishers plus first Pod lists at once saturate it (see
docs/performance.md). The metrics path a fleet measures reads neither."""


FLEET_PROCESS = "device-managers"
"""The fleet host's process name (``processes.json``) and log file stem."""


FLEET_PLUGIN_LIMIT = 20
"""Up to this many Device Managers in one fleet process, each is its node's device plugin with
a fake kubelet (the demo has 13). Every plugin is a gRPC server per mode with its own thread
pool: at 100 members the fleet host ran 849 threads and a 100-node ``up`` took 109 s instead
of 26 s, so larger fleets, which measure the metrics path, serve none."""


def serves_plugins(members: int, *, fleet: bool) -> bool:
    """Whether the Device Managers are their nodes' device plugins, with a fake kubelet each.

    Always when each runs as its own process; in one fleet process up to
    :data:`FLEET_PLUGIN_LIMIT` members.
    """
    return not fleet or members <= FLEET_PLUGIN_LIMIT


def _start_interval(members: int) -> float:
    """Seconds between two fleet members' starts: none up to 100, 0.1 up to 300, 0.2 beyond.

    Each start is a Pod list the stand-in answers by scanning every Pod, on top of the kubelet
    summaries of the members already running; pacing keeps the sum under one core.
    """
    if members <= FLEET_PUBLISH_LIMIT:
        return 0.0
    return 0.1 if members <= 300 else 0.2


class UpError(Exception):
    """The system did not come up (or down); the message names the component and its log."""


@dataclass(frozen=True)
class DeviceManagerEndpoint:
    """One Device Manager process: its Pod, its address and its two URLs."""

    node: str
    manufacturer: str
    namespace: str
    pod: str
    address: str
    metrics: str
    snapshot: str
    log: str = ""
    """The file its log goes to: its own, or the fleet host's, which all members share."""


@dataclass(frozen=True)
class Endpoints:
    """``endpoints.json``: where everything listens."""

    scenario: str
    cluster: str
    worker: str
    kubeconfig: str
    device_managers: list[DeviceManagerEndpoint] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The file's JSON, keys spelled as the rest of the project's wire formats."""
        return {
            "scenario": self.scenario,
            "cluster": self.cluster,
            "worker": self.worker,
            "kubeconfig": self.kubeconfig,
            "deviceManagers": [asdict(dm) for dm in self.device_managers],
        }

    @classmethod
    def load(cls, state_dir: Path) -> Endpoints:
        """Read ``endpoints.json`` back (tests, the demo)."""
        data = json.loads((state_dir / "endpoints.json").read_text())
        return cls(
            scenario=data["scenario"],
            cluster=data["cluster"],
            worker=data["worker"],
            kubeconfig=data["kubeconfig"],
            device_managers=[DeviceManagerEndpoint(**dm) for dm in data["deviceManagers"]],
        )


@dataclass
class _Started:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    command: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    token: str = ""
    """The :data:`~.processes.MARKER` value in its environment: what ``down`` checks."""
    start_time: int | None = None

    def entry(self) -> processes.Entry:
        """Its ``processes.json`` entry."""
        return processes.Entry(
            name=self.name,
            pid=self.process.pid,
            log=str(self.log),
            start_time=self.start_time,
            command=tuple(self.command),
            token=self.token,
        )


def free_port(hosts: Sequence[str]) -> int:
    """A port free on every one of ``hosts`` (Device Managers share one across addresses)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((hosts[0], 0))
            port = int(probe.getsockname()[1])
        try:
            for host in hosts[1:]:
                with socket.socket() as other:
                    other.bind((host, port))
        except OSError:
            continue
        return port
    raise UpError(f"no port is free on all of {', '.join(hosts)}")


def loopback_address(index: int) -> str:
    """The ``index``-th Device Manager's address: 127.0.0.2 … 127.0.0.254, then 127.0.1.1 ….

    ``.0`` and ``.255`` of each /24 are skipped (some tools refuse them as host addresses), so
    a fleet of thousands still gets one address each on Linux's loopback /8.
    """
    block, host = divmod(index + 1, 254)
    return f"127.{(block >> 8) & 255}.{block & 255}.{host + 1}"


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpustack_cli", *args]


def _spawn(
    name: str, command: list[str], logs: Path, env: dict[str, str] | None = None
) -> _Started:
    log = logs / f"{name}.log"
    token = processes.new_token()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            # A native crash (a vendor library, a ctypes fake) leaves its Python stack in the log.
            env={
                **os.environ,
                "PYTHONFAULTHANDLER": "1",
                **(env or {}),
                processes.MARKER: token,  # what down checks before it signals (processes.py)
            },
            start_new_session=True,  # its own process group: down signals it whole
        )
    # Fixed at fork, so readable at once (the child may not have exec'd yet: no command line).
    started = processes.start_time(process.pid)
    return _Started(name, process, log, command, dict(env or {}), token, started)


def _restart_if_crashed(started: _Started, logs: Path) -> _Started | None:
    """Start a Device Manager that a signal killed while starting once more.

    The kubelet restarts a crashed container the same way; the crashed attempt's log (with the
    fault handler's Python stack) is kept beside the new one.
    """
    code = started.process.poll()
    if code is None or code >= 0:
        return None
    crashed = started.log.with_name(f"{started.name}.crashed.log")
    started.log.replace(crashed)
    log.warning(
        "%s died of signal %d while starting (log: %s); restarting it", started.name, -code, crashed
    )
    return _spawn(started.name, started.command, logs, started.env)


def _tail(log: Path, lines: int = 25) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _failed(started: _Started, why: str) -> UpError:
    return UpError(f"{started.name} {why}; last lines of {started.log}:\n{_tail(started.log)}")


def _wait(started: _Started, check: Any, deadline: float, what: str, interval: float = 0.1) -> None:
    while True:
        code = started.process.poll()
        if code is not None:
            raise _failed(started, f"exited with status {code} before {what}")
        try:
            if check():
                return
        except (httpx.HTTPError, OSError):
            pass
        if time.monotonic() > deadline:
            raise _failed(started, f"did not become ready ({what}) in time")
        time.sleep(interval)


def _settle_device_managers(
    started: list[_Started],
    managers: list[DeviceManagerEndpoint],
    logs: Path,
    deadline: float,
) -> None:
    """Wait for every Device Manager (``started[1:]``, in ``managers``' order) to settle."""
    for index, endpoint in enumerate(managers, start=1):
        try:
            _wait_settled(started[index], endpoint, deadline)
        except UpError:
            restarted = _restart_if_crashed(started[index], logs)
            if restarted is None:
                raise
            started[index] = restarted
            _wait_settled(restarted, endpoint, deadline)


def _wait_settled(process: _Started, endpoint: DeviceManagerEndpoint, deadline: float) -> None:
    """Wait until ready and serving a sample with the node's Pods known.

    Ready alone means any first sample; one with the slice section present is what a user
    should be shown.
    """
    base = endpoint.metrics.removesuffix("/metrics")
    _wait(process, lambda: _ok(f"{base}/readyz"), deadline, "/readyz answered 200")
    _wait(
        process,
        lambda: _has_slices(endpoint.snapshot),
        deadline,
        "a sample with the node's Pods known",
    )


LOG_LEVEL = "info"
"""The stack's default log level: the daemons' own (warning hid the Device Managers' reasons)."""


def webhook_configurations(worker_url: str, worker_ca: bytes) -> list[dict[str, Any]]:
    """The worker's admission webhooks, as the chart registers them, pointed at ``worker_url``.

    Both come from :mod:`gpustack_core.webhooks`. The chart reaches the worker through its
    Service; here the worker listens on loopback, so the configurations name it by ``url`` and
    pin its CA. The stand-in does not evaluate ``matchConditions`` (it sends every Pod, which
    the webhook answers untouched when it asks for nothing); a real kube-apiserver does.
    """
    bundle = base64.b64encode(worker_ca).decode()

    def client(hook: webhooks.Webhook) -> dict[str, str]:
        return {"url": f"{worker_url}{hook.path}", "caBundle": bundle}

    return webhooks.configurations(client, match_conditions=match_conditions())


def register_webhooks(
    cluster_url: str, cluster_ca: Path, token: str, worker_url: str, worker_ca: bytes
) -> None:
    """Register the worker's webhooks: Pods and Instances made through the stand-in are judged."""
    _create_all(
        cluster_ca,
        token,
        [
            (
                cluster_url + WEBHOOK_CONFIGURATIONS[body["kind"]].path(),
                body,
                f"registering the {body['kind']}",
            )
            for body in webhook_configurations(worker_url, worker_ca)
        ],
    )


WEBHOOK_CONFIGURATIONS: dict[str, Resource] = {
    kind: Resource("admissionregistration.k8s.io", "v1", kind.lower() + "s", namespaced=False)
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
}
"""Where each gate-1 configuration kind is created (cluster-scoped, built by ``Resource``)."""


def _admin_client(cluster_ca: Path, token: str, timeout: float) -> httpx.Client:
    """A client of the stand-in's API as ``token``, its CA verified."""
    return httpx.Client(
        verify=str(cluster_ca),
        headers={"Authorization": f"Bearer {token}"},
        timeout=timeout,
        trust_env=False,
    )


def _create_all(cluster_ca: Path, token: str, posts: Sequence[tuple[str, Any, str]]) -> None:
    """POST each ``(url, body, what)`` as ``token``, in order; a refusal is an ``UpError``."""
    with _admin_client(cluster_ca, token, 15) as client:
        for url, body, what in posts:
            response = client.post(url, json=body)
            if response.status_code not in (200, 201):
                raise UpError(
                    f"{what} with the stand-in answered "
                    f"{response.status_code}: {response.text[:300]}"
                )


def applied_resource(obj: dict[str, Any]) -> Resource:
    """The resource a scenario's ``apply`` object (already validated) is created as."""
    api_version, plural, namespaced = APPLY_KINDS[obj["kind"]]
    group, _, version = api_version.rpartition("/")
    return Resource(group, version, plural, namespaced)


def applied_path(obj: dict[str, Any], *, named: bool = False) -> str:
    """Its collection's path (or, ``named``, its own), from escaped segments."""
    resource = applied_resource(obj)
    meta = obj["metadata"]
    namespace = meta["namespace"] if resource.namespaced else None
    return resource.path(namespace, meta["name"] if named else None)


def apply_objects(
    cluster_url: str, cluster_ca: Path, token: str, objects: Sequence[dict[str, Any]]
) -> None:
    """Create the scenario's ``apply`` objects through the API, in order, as a user would.

    Each goes through what a ``kubectl create`` meets: authentication, the admission webhooks,
    the CRD schema. A refusal stops ``up`` with the server's message. A Secret or ConfigMap
    that exists already gets the scenario's ``data`` merged in, as ``kubectl apply`` would: the
    worker seeds the Secret ``gpustack-settings`` as soon as it starts, and a scenario sets a
    Setting there the way the walkthrough does (``kubectl patch secret … --type=merge``).
    """

    def what(obj: dict[str, Any]) -> str:
        meta = obj["metadata"]
        where = f"{meta['namespace']}/" if meta.get("namespace") else ""
        return f"applying {obj['kind']} {where}{meta['name']}"

    with _admin_client(cluster_ca, token, 15) as client:
        for obj in objects:
            response = client.post(cluster_url + applied_path(obj), json=obj)
            if response.status_code == 409 and obj["kind"] in MERGED_ON_APPLY:
                response = client.patch(
                    cluster_url + applied_path(obj, named=True),
                    json={"data": obj.get("data") or {}},
                    headers={"Content-Type": "application/merge-patch+json"},
                )
            if response.status_code not in (200, 201):
                raise UpError(
                    f"{what(obj)} with the stand-in answered "
                    f"{response.status_code}: {response.text[:300]}"
                )


MERGED_ON_APPLY = frozenset({"Secret", "ConfigMap"})
"""Kinds whose ``data`` a scenario's ``apply`` merges into an existing object."""


def _instances_ready(
    cluster_url: str, cluster_ca: Path, token: str, objects: Sequence[dict[str, Any]]
) -> bool:
    """Whether every applied Instance that is not stopped reports phase ``Ready``."""
    wanted = [o for o in objects if o["kind"] == "Instance" and not o["spec"].get("stop")]
    with _admin_client(cluster_ca, token, 5) as client:
        for obj in wanted:
            found = client.get(cluster_url + applied_path(obj, named=True))
            if found.status_code != 200 or found.json().get("status", {}).get("phase") != "Ready":
                return False
    return True


def _ok(url: str, *, verify: Any = False, headers: dict[str, str] | None = None) -> bool:
    response = httpx.get(url, verify=verify, headers=headers, timeout=2, trust_env=False)
    return response.status_code == 200


def _has_slices(url: str) -> bool:
    response = httpx.get(url, verify=False, timeout=2, trust_env=False)
    return response.status_code == 200 and "slices" in response.json()


def _recorded(state_dir: Path) -> list[processes.Entry]:
    """``processes.json``'s entries; a file that does not decode is an :class:`UpError`."""
    try:
        return processes.load(state_dir)
    except ContractError as exc:
        raise UpError(str(exc)) from exc


def write_processes(state_dir: Path, started: Sequence[_Started]) -> None:
    """Record the started processes still running, for ``down``."""
    entries = [s.entry() for s in started if s.process.poll() is None]
    (state_dir / processes.FILE).write_text(processes.dump(entries))


def kubelet_root(state_dir: Path) -> Path:
    """Where the fake kubelets' sockets live for ``state_dir``: short, and the same for ``down``.

    A unix socket's path holds at most 107 bytes, and a plugin's
    (``<root>/<node>/device-plugins/gpustack-nvidia-partitioned.sock``) must fit whatever the
    state directory's own length, so the root is a short folder under the temp directory
    named after the state directory.
    """
    digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"gpustack-kubelets-{digest}"


def node_sockets(root: Path, node: str) -> tuple[Path, Path]:
    """``kubelet.sock`` and the PodResources socket of ``node``'s fake kubelet under ``root``.

    The same layout :class:`gpustack_simulator.fakekubelet.nodes.NodeKubelets` serves.
    """
    here = root / node
    return here / "device-plugins" / "kubelet.sock", here / "pod-resources" / "kubelet.sock"


def _cluster_args(
    path: Path,
    state_dir: Path,
    worker_url: str,
    worker_tls: Path,
    expanded: Expanded,
    addresses: list[str],
    dm_port: int,
    kubelets: Path | None,
) -> list[str]:
    """``simulator cluster``'s flags: where each Device Manager Pod listens, where the worker."""
    cluster_args = [
        "simulator",
        "cluster",
        "--scenario",
        str(path),
        "--state-dir",
        str(state_dir / "cluster"),
        "--port",
        "0",
        "--ready-file",
        str(state_dir / "cluster.ready"),
        "--worker-url",
        worker_url,
        "--worker-ca",
        str(worker_tls / "ca.crt"),
    ]
    for dm, address in zip(expanded.device_managers, addresses, strict=True):
        cluster_args += ["--pod-address", f"{dm.namespace}/{dm.name}={address}:{dm_port}"]
    if kubelets is not None:
        cluster_args += ["--kubelet-dir", str(kubelets)]
    return cluster_args


def device_manager_command(
    dm: DeviceManagerSpec,
    *,
    kubeconfig: Path,
    proc_root: Path,
    address: str,
    port: int,
    monitor_period: str,
    kubelets: Path | None = None,
    log_level: str | None = None,
) -> list[str]:
    """``device-manager serve --simulate`` for one scenario Device Manager, as a node runs it.

    ``kubelets``: the fake kubelets' root; the manager is then its node's device plugin (and
    confirms grants against that kubelet's PodResources). Without it, no plugin.
    ``log_level``: ``--log-level`` (``None``: the daemon's default, info).
    """
    if kubelets is None:
        plugin = ["--no-device-plugin"]
    else:
        socket, pod_resources = node_sockets(kubelets, dm.node)
        plugin = [
            "--device-plugin",
            "--kube-socket",
            str(socket),
            "--pod-resources-socket",
            str(pod_resources),
        ]
    return _command(
        "device-manager",
        "serve",
        "--simulate",
        str(dm.recording),
        "--manufacturer",
        dm.manufacturer,
        "--node-name",
        dm.node,
        "--kubeconfig",
        str(kubeconfig),
        "--context",
        "device-manager",
        "--proc-root",
        str(proc_root),
        "--secure-port",
        str(port),
        "--bind-address",
        address,
        "--monitor-period",
        monitor_period,
        *plugin,
        *([] if log_level is None else ["--log-level", log_level]),
    )


def _start_device_managers(
    expanded: Expanded,
    addresses: list[str],
    dm_port: int,
    state_dir: Path,
    kubeconfig: Path,
    monitor_period: str,
    started: list[_Started],
    kubelets: Path | None,
    log_level: str = LOG_LEVEL,
) -> list[DeviceManagerEndpoint]:
    """One ``device-manager serve --simulate`` per scenario Device Manager, on its address.

    With ``kubelets`` (the fake kubelets' root), each is its node's device plugin, registered
    with the node's fake kubelet in the stand-in.
    """
    logs = state_dir / "logs"
    managers: list[DeviceManagerEndpoint] = []
    for dm, address in zip(expanded.device_managers, addresses, strict=True):
        proc_root = state_dir / "proc" / dm.node
        if not proc_root.exists():
            write_procfs(proc_root, dict(expanded.procs(dm.node)))
        name = f"device-manager-{dm.node}-{dm.manufacturer}"
        started.append(
            _spawn(
                name,
                device_manager_command(
                    dm,
                    kubeconfig=kubeconfig,
                    proc_root=proc_root,
                    address=address,
                    port=dm_port,
                    monitor_period=monitor_period,
                    kubelets=kubelets,
                    log_level=log_level,
                ),
                logs,
                env={"KUBERNETES_NODE_NAME": dm.node},
            )
        )
        base = f"https://{address}:{dm_port}"
        managers.append(
            DeviceManagerEndpoint(
                node=dm.node,
                manufacturer=dm.manufacturer,
                namespace=dm.namespace,
                pod=dm.name,
                address=f"{address}:{dm_port}",
                metrics=f"{base}/metrics",
                snapshot=f"{base}/monitor/snapshot",
                log=str(started[-1].log),
            )
        )
    return managers


def _start_fleet(
    expanded: Expanded,
    addresses: list[str],
    dm_port: int,
    state_dir: Path,
    kubeconfig: Path,
    monitor_period: str,
    started: list[_Started],
    kubelets: Path | None,
    log_level: str = LOG_LEVEL,
) -> list[DeviceManagerEndpoint]:
    """Every scenario Device Manager in one fleet-host process (gpustack_cli.fleet_host).

    The members are the same daemon with the same flags as the one-process-each path; only
    the interpreter, the imports and the parsed recordings are shared, so a thousand nodes fit.
    With ``kubelets`` (up to :data:`FLEET_PLUGIN_LIMIT` members, see :func:`serves_plugins`),
    each member is its node's device plugin, as in the one-process-each path.
    """
    members: list[Member] = []
    managers: list[DeviceManagerEndpoint] = []
    for dm, address in zip(expanded.device_managers, addresses, strict=True):
        proc_root = state_dir / "proc" / dm.node
        if not proc_root.exists():
            write_procfs(proc_root, dict(expanded.procs(dm.node)))
        sockets = (None, None) if kubelets is None else node_sockets(kubelets, dm.node)
        members.append(
            Member(
                dm.node,
                dm.manufacturer,
                str(dm.recording),
                str(proc_root),
                address,
                dm_port,
                kube_socket=None if sockets[0] is None else str(sockets[0]),
                pod_resources_socket=None if sockets[1] is None else str(sockets[1]),
            )
        )
        base = f"https://{address}:{dm_port}"
        managers.append(
            DeviceManagerEndpoint(
                node=dm.node,
                manufacturer=dm.manufacturer,
                namespace=dm.namespace,
                pod=dm.name,
                address=f"{address}:{dm_port}",
                metrics=f"{base}/metrics",
                snapshot=f"{base}/monitor/snapshot",
                log=str(state_dir / "logs" / f"{FLEET_PROCESS}.log"),
            )
        )
    spec = FleetSpec(
        tuple(members),
        monitor_period=seconds_of(monitor_period),
        kubeconfig=str(kubeconfig),
        context="device-manager",
        publish=len(members) <= FLEET_PUBLISH_LIMIT,
        start_interval=_start_interval(len(members)),
    )
    spec_file = state_dir / "fleet.json"
    spec_file.write_text(json.dumps(spec.to_json(), indent=1) + "\n")
    started.append(
        _spawn(
            FLEET_PROCESS,
            [
                sys.executable,
                "-m",
                "gpustack_cli.fleet_host",
                str(spec_file),
                "--log-level",
                log_level,
            ],
            state_dir / "logs",
        )
    )
    return managers


def _settle_fleet(host: _Started, managers: list[DeviceManagerEndpoint], deadline: float) -> None:
    """Wait until every member serves a sample with its node's Pods known (one process)."""
    with httpx.Client(verify=False, timeout=5, trust_env=False) as client:

        def settled(url: str) -> bool:
            response = client.get(url)
            return response.status_code == 200 and "slices" in response.json()

        for endpoint in managers:
            _wait(
                host,
                lambda url=endpoint.snapshot: settled(url),
                deadline,
                f"{endpoint.node}'s sample with the node's Pods known",
                interval=0.25,
            )


def _start_worker(
    kubeconfig: Path,
    port: int,
    tls: Path,
    monitor_period: str,
    logs: Path,
    log_level: str = LOG_LEVEL,
) -> _Started:
    """The worker, as the chart runs it, on loopback with the certificate minted for it."""
    return _spawn(
        "worker",
        _command(
            "worker",
            "--kubeconfig",
            str(kubeconfig),
            "--context",
            "worker",
            "--secure-port",
            str(port),
            "--bind-address",
            "127.0.0.1",
            "--cert-dir",
            str(tls),
            "--device-manager-monitor-period",
            monitor_period,
            "--log-level",
            log_level,
            # The Instance controller is on (the CLI's default): it renders the Instances a
            # scenario applies and leaves the scenario's own (worker.gpustack.ai/managed-by).
        ),
        logs,
    )


def _open_to_users(
    cluster: _Started,
    cluster_url: str,
    state_dir: Path,
    expanded: Expanded,
    worker_url: str,
    deadline: float,
) -> None:
    """Once the worker serves: the aggregator reaches it, gate 1 registered, the objects applied."""
    token = next(u.token for u in expanded.users if u.name == "admin")
    cluster_ca = state_dir / "cluster" / "pki" / "ca.crt"
    _wait(
        cluster,
        lambda: _ok(
            cluster_url + WORKER_GROUP_VERSION,
            verify=str(cluster_ca),
            headers={"Authorization": f"Bearer {token}"},
        ),
        deadline,
        "the aggregator reached the worker",
    )
    register_webhooks(
        cluster_url,
        cluster_ca,
        token,
        worker_url,
        (state_dir / "worker-tls" / "ca.crt").read_bytes(),
    )
    apply_objects(cluster_url, cluster_ca, token, expanded.applied)
    _wait(
        cluster,
        lambda: _instances_ready(cluster_url, cluster_ca, token, expanded.applied),
        deadline,
        "the applied Instances were Ready",
        interval=0.25,
    )


def _fresh_state(state_dir: Path) -> Path:
    """Delete what a previous run left (logs, PKI, fake /proc, files); the new logs folder."""
    for stale in ("cluster", "proc", "logs", "worker-tls"):
        shutil.rmtree(state_dir / stale, ignore_errors=True)
    logs = state_dir / "logs"
    logs.mkdir(parents=True)
    for leftover in ("endpoints.json", "kubeconfig", "cluster.ready", "fleet.json"):
        (state_dir / leftover).unlink(missing_ok=True)
    return logs


def up(
    scenario: str,
    state_dir: Path,
    *,
    monitor_period: str = "2s",
    timeout: float = START_TIMEOUT,
    fleet: bool = True,
    log_level: str = LOG_LEVEL,
) -> Endpoints:
    """Start everything for ``scenario``; return once all answer. ``UpError`` otherwise.

    ``log_level``: the Device Managers' and the worker's (their logs under ``logs/``; the
    Device Manager says there why a figure is absent).

    ``fleet``: every Device Manager in one process (:mod:`gpustack_simulator.fleet_host`), the
    default; ``False``: one ``device-manager serve`` process each, as nodes run them. Each
    process imports the whole daemon (about a second of CPU) before it serves, so on two cores
    thirteen of them took most of the demo's start-up, where one host imports it once and
    serves every member from one nursery with the same flags.
    """
    state_dir = state_dir.resolve()
    running = [p for p in _recorded(state_dir) if processes.disproof(p) is None]
    if running:
        raise UpError(
            f"{state_dir} already runs {', '.join(p.name for p in running)}; "
            f"run `{self_command()} simulator down --state-dir {state_dir}` first"
        )
    try:
        path = find_scenario(scenario)
        expanded = expand(load_scenario(path), base=RECORDINGS_DIR)
    except (FileNotFoundError, ContractError) as exc:
        raise UpError(str(exc)) from exc
    logs = _fresh_state(state_dir)

    addresses = [loopback_address(index) for index in range(len(expanded.device_managers))]
    dm_port = free_port(addresses or ["127.0.0.1"])
    worker_port = free_port(["127.0.0.1"])
    worker_url = f"https://127.0.0.1:{worker_port}"
    worker_tls = state_dir / "worker-tls"
    worker_tls.mkdir()
    self_signed(["127.0.0.1", "localhost"], worker_tls, organization="gpustack worker")

    started: list[_Started] = []
    deadline = time.monotonic() + timeout
    try:
        plugins = serves_plugins(len(expanded.device_managers), fleet=fleet)
        kubelets = kubelet_root(state_dir) if plugins else None
        cluster_args = _cluster_args(
            path, state_dir, worker_url, worker_tls, expanded, addresses, dm_port, kubelets
        )
        cluster = _spawn("cluster", _command(*cluster_args), logs)
        started.append(cluster)
        ready_file = state_dir / "cluster.ready"
        _wait(cluster, ready_file.exists, deadline, "its URL was written")
        cluster_url = ready_file.read_text().strip()
        kubeconfig = state_dir / "cluster" / "kubeconfig"
        shutil.copyfile(kubeconfig, state_dir / "kubeconfig")
        (state_dir / "kubeconfig").chmod(0o600)

        start_managers = _start_fleet if fleet else _start_device_managers
        managers = start_managers(
            expanded,
            addresses,
            dm_port,
            state_dir,
            kubeconfig,
            monitor_period,
            started,
            kubelets,
            log_level,
        )
        worker = _start_worker(kubeconfig, worker_port, worker_tls, monitor_period, logs, log_level)
        started.append(worker)

        if fleet:
            _settle_fleet(started[1], managers, deadline)
        else:
            _settle_device_managers(started, managers, logs, deadline)
        _wait(worker, lambda: _ok(f"{worker_url}/readyz", verify=False), deadline, "/readyz")
        _open_to_users(cluster, cluster_url, state_dir, expanded, worker_url, deadline)
    except BaseException:
        # Our own children, not yet reaped: their PIDs cannot have been reused, and one that
        # has not exec'd yet would not show its recorded command line.
        _stop([s.entry() for s in started], children=True)
        raise
    finally:
        write_processes(state_dir, started)

    endpoints = Endpoints(
        scenario=str(path),
        cluster=cluster_url,
        worker=worker_url,
        kubeconfig=str(state_dir / "kubeconfig"),
        device_managers=managers,
    )
    (state_dir / "endpoints.json").write_text(json.dumps(endpoints.to_json(), indent=2) + "\n")
    return endpoints


def _stop(
    entries: Sequence[processes.Entry],
    skipped: list[str] | None = None,
    *,
    children: bool = False,
) -> list[str]:
    """SIGTERM each proven process group, wait, SIGKILL what is left; the names stopped.

    An entry whose PID is not (or no longer) the process ``up`` started is never signalled
    (:func:`~.processes.disproof`); it is named in ``skipped`` with the reason. ``children``:
    the entries are this process's own unreaped children, which need no proof.
    """
    proven: list[processes.Entry] = []
    for entry in entries:
        why = None if children else processes.disproof(entry)
        if why is None:
            proven.append(entry)
        elif skipped is not None and why != "no such process":
            skipped.append(f"{entry.name} (pid {entry.pid}): {why}")
    stopped = []
    for entry in reversed(proven):  # the worker first, the stand-in last
        try:
            os.killpg(entry.pid, signal.SIGTERM)
            stopped.append(entry.name)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_TIMEOUT
    for entry in proven:
        while _same(entry) and time.monotonic() < deadline:
            try:
                waited, _ = os.waitpid(entry.pid, os.WNOHANG)
            except ChildProcessError:
                waited = 0  # not our child (down from another shell): poll until gone
            if waited == entry.pid:
                break
            time.sleep(0.05)
        if _same(entry):
            try:
                os.killpg(entry.pid, signal.SIGKILL)
                os.waitpid(entry.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
    return stopped


def _same(entry: processes.Entry) -> bool:
    """The PID is still the process that was proven (a zombie counts until it is reaped)."""
    return processes.start_time(entry.pid) == entry.start_time


def down(state_dir: Path, *, skipped: list[str] | None = None) -> list[str]:
    """Stop what ``up`` started in ``state_dir``; the names of the processes it stopped.

    Only processes that prove to be the ones ``up`` started are signalled; the others are
    appended to ``skipped`` (name, PID and why), when given. A ``processes.json`` that does
    not decode is an :class:`UpError` naming it.
    """
    state_dir = state_dir.resolve()
    stopped = _stop(_recorded(state_dir), skipped)
    (state_dir / processes.FILE).unlink(missing_ok=True)
    shutil.rmtree(kubelet_root(state_dir), ignore_errors=True)
    return stopped
