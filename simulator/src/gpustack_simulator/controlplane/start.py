"""``simulator up --control-plane real``: the scenario on a real Kubernetes control plane.

The order is a cluster's: the network namespace, the PKI, etcd, kube-apiserver (ready), then
kube-controller-manager and kube-scheduler; the administrator's objects (the chart, the users'
RBAC, the scenario's namespaces); the node agent registering every scenario node; the scenario's
Pods and Instances as an administrator would create them; the Device Managers (inside the
namespace, on their Pods' addresses) and the worker (on loopback) with the ServiceAccount tokens
the TokenRequest API mints for the chart's ServiceAccounts. ``up`` returns once the worker
answers through the real aggregator and every Device Manager has sampled with its node's Pods
known. The state directory holds what the stand-in's ``up`` leaves (``kubeconfig`` with
contexts ``admin``, ``no-metrics``, ``worker``, ``device-manager``…, ``endpoints.json``,
``processes.json``, ``logs/``) plus ``netns.json``, which ``down`` reads to delete the network
namespace after the processes.
"""

from __future__ import annotations

import json
import logging
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgspec
import trustme

from gpustack_core import contract
from gpustack_kube.paths import POD_METRICS
from gpustack_simulator.controlplane import (
    binaries,
    bootstrap,
    components,
    kubeconfigs,
    kueue,
    metricsserver,
    nfd,
)
from gpustack_simulator.controlplane.netns import NETNS_FILE, Netns, NetnsError, record
from gpustack_simulator.controlplane.nodeagent import AgentConfig, NodeSpec
from gpustack_simulator.controlplane.pki import ControlPlanePKI, Pair
from gpustack_simulator.fleet_host import FleetSpec, Member
from gpustack_simulator.hints import self_command
from gpustack_simulator.scenario import RECORDINGS_DIR, expand, find_scenario, load_scenario
from gpustack_simulator.scenario.expanded import Expanded
from gpustack_simulator.scenario.rbac import builtin_users
from gpustack_simulator.scenario.schema import UserDoc
from gpustack_simulator.up import (
    FLEET_PROCESS,
    LOG_LEVEL,
    DeviceManagerEndpoint,
    Endpoints,
    UpError,
    _spawn,
    _Started,
    _stop,
    _wait,
    free_port,
    kubelet_root,
    node_sockets,
    write_processes,
)

log = logging.getLogger("gpustack.simulator.controlplane")

START_TIMEOUT = 300.0
"""A cold API server and the first CRDs take a while on two cores."""
DM_PORT = contract.DEVICE_MANAGER_PORT
REFUSED_FILE = "refused.json"
"""The scenario objects the real API server refused (its words), which the stand-in took."""
DAEMON_USERS = ("worker", "device-manager")
"""Scenario users replaced by the chart's ServiceAccounts on a real control plane."""
SERVICE_ACCOUNTS = {
    "worker": "gpustack-operator-worker",
    "device-manager": "gpustack-operator-device-manager",
}


def _spawn_in(
    netns: Netns, name: str, command: list[str], logs: Path, env: dict[str, str] | None = None
) -> _Started:
    """``command`` started inside ``netns``; recorded as what runs once ``ip`` exec'd it.

    ``down`` proves a PID by its command line, which after ``ip netns exec`` is ``command``
    itself, not the wrapper's.
    """
    started = _spawn(name, [*netns.exec_prefix(), *command], logs, env)
    started.command = list(command)
    return started


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports."""
    held, ports = [], []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        held.append(sock)
        ports.append(int(sock.getsockname()[1]))
    for sock in held:
        sock.close()
    return ports


def _plain_ok(url: str) -> bool:
    """A loopback health endpoint (no TLS) answering 200."""
    try:
        return httpx.get(url, timeout=5, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def _ready(url: str, ca: Path, headers: Mapping[str, str] | None = None) -> bool:
    try:
        response = httpx.get(
            url, verify=str(ca), headers=dict(headers or {}), timeout=5, trust_env=False
        )
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def _module_source(folder: str, find: Callable[[Path], Path]) -> Path:
    """A component's source in Go's module cache, as ``clusters/controlplane/<folder>`` pins it."""
    root = binaries.repository_root()
    assert root is not None  # _chart_dir() found the checkout already
    try:
        return find(root / "clusters" / "controlplane" / folder)
    except binaries.BinariesError as exc:
        raise UpError(str(exc)) from exc


def _chart_dir() -> Path:
    root = binaries.repository_root()
    if root is None:
        raise UpError("the real control plane installs the chart from a repository checkout")
    return root / "clusters" / "chart"


def _helm() -> Path:
    root = binaries.repository_root()
    found = shutil.which("helm")
    cached = root / ".tools" / "helm" / "helm" if root is not None else None
    if cached is not None and cached.is_file():
        return cached
    if found:
        return Path(found)
    raise UpError("helm renders the chart: run `./dev tools-helm` (or put helm on PATH)")


def _kubectl(found: dict[str, Path]) -> Path:
    if "kubectl" in found:
        return found["kubectl"]
    system = shutil.which("kubectl")
    if system is None:
        raise UpError("kubectl is needed to install the chart")
    return Path(system)


def _scenario_objects(expanded: Expanded) -> tuple[list[dict[str, Any]], list[str]]:
    """The scenario's Pods as an administrator creates them (bound, no status).

    Also which are pre-admitted: those whose annotation names device IDs, believed as a
    kubelet's checkpoint would be.
    """
    pods, pre = [], []
    for pod in expanded.pods:
        meta = {
            k: v
            for k, v in pod["metadata"].items()
            if k not in {"uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
                         "deletionGracePeriodSeconds", "generation", "managedFields"}
        }  # fmt: skip
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": dict(pod["spec"])}
        pods.append(body)
        if contract.ALLOCATION_ANNOTATION in (meta.get("annotations") or {}):
            pre.append(f"{meta['namespace']}/{meta['name']}")
    return pods, pre


def _instances(expanded: Expanded) -> list[dict[str, Any]]:
    out = []
    for instance in expanded.instances:
        meta = {
            k: v
            for k, v in instance["metadata"].items()
            if k not in {"uid", "resourceVersion", "creationTimestamp", "generation"}
        }
        out.append({**{k: v for k, v in instance.items() if k != "status"}, "metadata": meta})
    return out


def up_real(
    scenario: str,
    state_dir: Path,
    *,
    monitor_period: str = "2s",
    timeout: float = START_TIMEOUT,
    log_level: str = LOG_LEVEL,
) -> Endpoints:
    """Start the scenario on a real control plane; return once every daemon answers.

    ``log_level``: the Device Managers' and the worker's, as ``up`` on the stand-in.
    """
    from gpustack_simulator.up import _fresh_state, _recorded  # noqa: PLC0415 — one module

    state_dir = state_dir.resolve()
    if _recorded(state_dir) or (state_dir / NETNS_FILE).exists():
        raise UpError(
            f"{state_dir} already runs something; "
            f"run `{self_command()} simulator down --state-dir {state_dir}` first"
        )
    path = find_scenario(scenario)
    expanded = expand(load_scenario(path), base=RECORDINGS_DIR)
    logs = _fresh_state(state_dir)
    for stale in ("controlplane", "agent"):
        shutil.rmtree(state_dir / stale, ignore_errors=True)
    try:
        found = binaries.locate()
    except binaries.BinariesError as exc:
        raise UpError(str(exc)) from exc

    nodes = [n["metadata"]["name"] for n in expanded.nodes]
    run_id = secrets.token_hex(3)
    pod_addresses = {f"{dm.namespace}/{dm.name}": "" for dm in expanded.device_managers}
    netns = Netns.plan(run_id, [*nodes, *pod_addresses])
    dm_addresses = {key: netns.node_addresses.pop(key) for key in pod_addresses}
    node_addresses = dict(netns.node_addresses)
    netns.node_addresses = {**node_addresses, **dm_addresses}
    try:
        netns.create()
    except NetnsError as exc:
        raise UpError(str(exc)) from exc
    record(state_dir, netns)

    started: list[_Started] = []
    deadline = time.monotonic() + timeout
    try:
        run = _Run(
            path, expanded, state_dir, logs, found, netns, node_addresses, dm_addresses,
            monitor_period, started, deadline, log_level,
        )  # fmt: skip
        endpoints = _start(run)
    except bootstrap.BootstrapError as exc:
        _stop([s.entry() for s in started])
        netns.delete()
        (state_dir / NETNS_FILE).unlink(missing_ok=True)
        raise UpError(str(exc)) from exc
    except BaseException:
        _stop([s.entry() for s in started])
        netns.delete()
        (state_dir / NETNS_FILE).unlink(missing_ok=True)
        raise
    finally:
        write_processes(state_dir, started)
    (state_dir / "endpoints.json").write_text(json.dumps(endpoints.to_json(), indent=2) + "\n")
    return endpoints


@dataclass
class _Run:
    """One ``up_real``: what each phase leaves for the next."""

    path: Path
    expanded: Expanded
    state_dir: Path
    logs: Path
    found: dict[str, Path]
    netns: Netns
    node_addresses: dict[str, str]
    dm_addresses: dict[str, str]
    monitor_period: str
    started: list[_Started]
    deadline: float
    log_level: str
    pki: ControlPlanePKI = field(init=False)
    server: str = field(init=False)
    users: list[UserDoc] = field(init=False)
    tokens: dict[str, str] = field(init=False)
    kubectl: bootstrap.Kubectl = field(init=False)
    kubeconfig: Path = field(init=False)
    kube_entries: dict[str, dict[str, str]] = field(init=False)
    """The kubeconfig's users by name (a context each): rewritten as identities are added."""
    worker_port: int = field(init=False)
    worker_tls: Path = field(init=False)
    after_scenario: list[dict[str, Any]] = field(init=False)
    """The chart's policies applied once the scenario's Pods exist (bootstrap.AFTER_SCENARIO)."""

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens['admin']}"}

    def control_plane(self) -> None:
        """PKI, users' tokens, etcd and kube-apiserver (ready), then the two controllers."""
        root = self.state_dir / "controlplane"
        self.pki = pki = ControlPlanePKI.create(root / "pki", [self.netns.host_address])
        ports = components.Ports(*_free_ports(5))
        self.server = f"https://{self.netns.host_address}:{ports.apiserver}"
        self.users = [u for u in _users(self.expanded) if u.name not in DAEMON_USERS]
        given = {u.name: u.token for u in self.expanded.users}
        self.tokens = {u.name: given.get(u.name) or secrets.token_urlsafe(24) for u in self.users}
        token_path = root / "tokens.csv"
        token_path.write_text(bootstrap.token_file(self.users, self.tokens))
        token_path.chmod(0o600)

        def config(name: str, pair: Pair) -> Path:
            users = {name: kubeconfigs.cert_user(pair.cert, pair.key)}
            document = kubeconfigs.kubeconfig(self.server, pki.ca, users, name)
            return kubeconfigs.write(root / f"{name}.kubeconfig", document)

        admin = config("admin", pki.admin)
        api_command = components.apiserver(
            self.found["kube-apiserver"], pki, ports, self.netns.host_address, token_path
        )
        self.started.append(
            _spawn("etcd", components.etcd(self.found["etcd"], root / "etcd", ports), self.logs)
        )
        api = _spawn("kube-apiserver", api_command, self.logs)
        self.started.append(api)
        ready = f"{self.server}/readyz"
        _wait(api, lambda: _ready(ready, pki.ca, self.admin_headers), self.deadline, "/readyz")
        kcm = components.controller_manager(
            self.found["kube-controller-manager"],
            pki,
            ports,
            config("controller-manager", pki.controller_manager),
        )
        self.started.append(_spawn("kube-controller-manager", kcm, self.logs))
        scheduler = components.scheduler(
            self.found["kube-scheduler"], ports, config("scheduler", pki.scheduler)
        )
        self.started.append(_spawn("kube-scheduler", scheduler, self.logs))
        self.kubectl = bootstrap.Kubectl(_kubectl(self.found), admin)

    def install(self) -> None:
        """Namespaces, the chart as rendered, users' RBAC; the daemons' tokens, the kubeconfig."""
        kubectl = self.kubectl
        self.worker_port = free_port(["127.0.0.1"])
        self.worker_tls = self.state_dir / "worker-tls"
        self.worker_tls.mkdir(exist_ok=True)
        worker_ca = _worker_pair(self.worker_tls)
        namespaces = sorted(
            {contract.SYSTEM_NAMESPACE}
            | {p["metadata"]["namespace"] for p in self.expanded.pods}
            | {i["metadata"]["namespace"] for i in self.expanded.instances}
            | {o["metadata"]["namespace"] for o in self.expanded.applied
               if o.get("metadata", {}).get("namespace")}
            | {ns for u in self.users for r in u.rules for ns in r.namespaces}
        )  # fmt: skip
        kubectl.apply([bootstrap.namespace(n) for n in namespaces])
        rendered = bootstrap.render_chart(_helm(), _chart_dir(), contract.SYSTEM_NAMESPACE)
        objects = bootstrap.for_this_machine(
            rendered, worker_port=self.worker_port, worker_ca=worker_ca
        )
        crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
        kubectl.apply(crds)
        names = [f"crd/{c['metadata']['name']}" for c in crds]
        kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
        now, self.after_scenario = bootstrap.after_scenario(
            o for o in objects if o["kind"] != "CustomResourceDefinition"
        )
        kubectl.apply(now)
        kubectl.apply(bootstrap.user_rbac(self.users, skip=("admin",)))
        daemon_tokens = {
            name: kubectl.create_token(contract.SYSTEM_NAMESPACE, account)
            for name, account in SERVICE_ACCOUNTS.items()
        }
        self.kube_entries = {
            **{u.name: {"token": self.tokens[u.name]} for u in self.users},
            **{name: {"token": token} for name, token in daemon_tokens.items()},
        }
        self.kubeconfig = kubeconfigs.write(
            self.state_dir / "kubeconfig",
            kubeconfigs.kubeconfig(self.server, self.pki.ca, self.kube_entries, "admin"),
        )

    def kueue(self) -> None:
        """Kueue's manifests from its module, then its manager; returns once it is ready.

        Before any Pod: its Pod webhook fails closed in every namespace but two.
        """
        source = _module_source("kueue", kueue.module_dir)
        webhook_port, health_port = _free_ports(2)
        certs = self.state_dir / "kueue" / "certs"
        objects = kueue.manifests(source, port=webhook_port)
        crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
        self.kubectl.apply([o for o in objects if o["kind"] == "Namespace"])
        self.kubectl.apply(crds)
        names = [f"crd/{c['metadata']['name']}" for c in crds]
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
        self.kubectl.apply([o for o in objects if o["kind"] not in {"CustomResourceDefinition"}])
        token = self.kubectl.create_token(kueue.NAMESPACE, kueue.SERVICE_ACCOUNT)
        config = kubeconfigs.write(
            self.state_dir / "kueue" / "kubeconfig",
            kubeconfigs.kubeconfig(self.server, self.pki.ca, {"kueue": {"token": token}}, "kueue"),
        )
        settings = kueue.write_configuration(
            self.state_dir / "kueue" / "config.yaml",
            kueue.configuration(webhook_port=webhook_port, health_port=health_port,
                                cert_dir=certs),
        )  # fmt: skip
        manager = _spawn("kueue", kueue.command(self.found["kueue"], settings, config), self.logs)
        self.started.append(manager)

        def mounted() -> bool:
            secret = json.loads(
                self.kubectl(
                    "get", "secret", "-n", kueue.NAMESPACE, kueue.WEBHOOK_SECRET, "-o", "json"
                )
            )
            return kueue.mount_secret(secret, certs)

        _wait(manager, mounted, self.deadline, "its webhook certificate", interval=0.5)
        ready = f"http://127.0.0.1:{health_port}/readyz"
        _wait(manager, lambda: _plain_ok(ready), self.deadline, "/readyz", interval=0.5)

    def nfd(self) -> None:
        """nfd-master from NFD's module: NodeFeatures become node labels, as on a cluster."""
        source = _module_source("nfd", nfd.module_dir)
        objects = nfd.manifests(source)
        crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
        self.kubectl.apply([o for o in objects if o["kind"] == "Namespace"])
        self.kubectl.apply(crds)
        names = [f"crd/{c['metadata']['name']}" for c in crds]
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
        self.kubectl.apply([o for o in objects if o["kind"] not in {"CustomResourceDefinition"}])
        token = self.kubectl.create_token(nfd.NAMESPACE, nfd.SERVICE_ACCOUNT)
        config = kubeconfigs.write(
            self.state_dir / "nfd" / "kubeconfig",
            kubeconfigs.kubeconfig(self.server, self.pki.ca, {"nfd": {"token": token}}, "nfd"),
        )
        (port,) = _free_ports(1)
        master = nfd.command(self.found["nfd-master"], config, port)
        # nfd-master annotates the node it runs on (NODE_NAME, the downward API's): here the
        # first scenario node stands for the control-plane node it would have run on.
        node = self.expanded.nodes[0]["metadata"]["name"]
        self.started.append(_spawn("nfd-master", master, self.logs, env={"NODE_NAME": node}))

    def metrics_server(self) -> Callable[[], None]:
        """metrics-server from its module, as its manifests install it; returns its wait.

        The wait (for the aggregator to reach it, as the worker's groups are waited for) is
        called once the rest is up: until then discovery through kubectl would report
        ``metrics.k8s.io`` unreachable.
        """
        source = _module_source("metricsserver", metricsserver.module_dir)
        (port,) = _free_ports(1)
        self.kubectl.apply(metricsserver.manifests(source, port=port))
        token = self.kubectl.create_token(metricsserver.NAMESPACE, metricsserver.SERVICE_ACCOUNT)
        directory = self.state_dir / "metrics-server"
        config = kubeconfigs.write(
            directory / "kubeconfig",
            kubeconfigs.kubeconfig(self.server, self.pki.ca, {"ms": {"token": token}}, "ms"),
        )
        client = self.pki.user_client("metrics-server")  # the kubelets take the cluster CA's
        (directory / "certs").mkdir(parents=True, exist_ok=True)
        server = _spawn(
            "metrics-server",
            metricsserver.command(
                self.found["metrics-server"], config, port=port, cert_dir=directory / "certs",
                ca=self.pki.ca, client_cert=client.cert, client_key=client.key,
            ),
            self.logs,
        )  # fmt: skip
        self.started.append(server)

        served = self.server + POD_METRICS.root  # answered once the aggregator reaches it
        return lambda: _wait(
            server, lambda: _ready(served, self.pki.ca, self.admin_headers), self.deadline,
            "the real aggregator reached metrics-server", interval=0.5,
        )  # fmt: skip

    def nodes(self) -> Path:
        """The node agent, inside the namespace; returns once every node is Ready."""
        kubelets = kubelet_root(self.state_dir)
        agent = _node_agent_config(
            self.expanded, self.path, self.state_dir, self.pki, self.server,
            self.node_addresses, self.dm_addresses, kubelets,
        )  # fmt: skip
        agent_file = self.state_dir / "agent.json"
        agent_file.write_bytes(msgspec.json.encode(agent))
        command = [sys.executable, "-m", "gpustack_simulator.controlplane.nodeagent"]
        node_agent = _spawn_in(self.netns, "node-agent", [*command, str(agent_file)], self.logs)
        self.started.append(node_agent)
        names = [n.name for n in agent.nodes]
        _wait(node_agent, lambda: _nodes_ready(self.kubectl, names), self.deadline,
              "every scenario node registered Ready", interval=0.5)  # fmt: skip
        return kubelets

    def worker(self) -> str:
        """The worker on loopback; returns its URL once the real aggregator reaches it."""
        worker = _spawn(
            "worker",
            [sys.executable, "-m", "gpustack_cli", "worker", "--kubeconfig", str(self.kubeconfig),
             "--context", "worker", "--secure-port", str(self.worker_port), "--bind-address",
             "127.0.0.1", "--cert-dir", str(self.worker_tls), "--device-manager-monitor-period",
             self.monitor_period, "--log-level", self.log_level],
            self.logs,
        )  # fmt: skip
        self.started.append(worker)
        url = f"https://127.0.0.1:{self.worker_port}"
        ca = self.worker_tls / "ca.crt"
        _wait(worker, lambda: _ready(f"{url}/readyz", ca), self.deadline, "/readyz")
        for group in (contract.API_GROUP, contract.SETTINGS_API_GROUP):  # the two APIServices
            served = f"{self.server}/apis/{group}/v1"
            _wait(worker, lambda at=served: _ready(at, self.pki.ca, self.admin_headers),
                  self.deadline, f"the real aggregator reached the worker for {group}",
                  interval=0.5)  # fmt: skip
        return url

    def device_managers(self, kubelets: Path) -> list[DeviceManagerEndpoint]:
        """Their Pods (bare: the scenario's DaemonSet does not run here), then the fleet host."""
        pods, _ = _scenario_objects(self.expanded)
        self.kubectl.apply([_without_owners(p) for p in pods if self._is_dm(p)])
        contexts = self._pod_identities()
        managers = _start_device_managers(
            self.expanded, self.state_dir, self.kubeconfig, self.monitor_period,
            self.dm_addresses, kubelets, self.netns, self.started, self.log_level,
            contexts=contexts,
        )  # fmt: skip
        nodes = {dm.node for dm in self.expanded.device_managers}
        _wait(self.started[-1], lambda: _devices_published(self.kubectl, nodes), self.deadline,
              "every Device Manager published its node's Devices", interval=0.5)  # fmt: skip
        return managers

    def _pod_identities(self) -> dict[tuple[str, str], str]:
        """Each Device Manager's own context: a token bound to its Pod, as the kubelet mounts.

        kube-apiserver puts the Pod's node into such a token's user, and the chart's own-node
        policy lets the Device Manager patch only its node's Pods by it: one shared unbound
        token would be refused every patch. ``(namespace, pod)`` → the context's name.
        """
        account = SERVICE_ACCOUNTS["device-manager"]
        contexts: dict[tuple[str, str], str] = {}
        for dm in self.expanded.device_managers:
            context = f"device-manager-{dm.name}"
            token = self.kubectl.create_token(dm.namespace, account, pod=dm.name)
            self.kube_entries[context] = {"token": token}
            contexts[dm.namespace, dm.name] = context
        kubeconfigs.write(
            self.kubeconfig,
            kubeconfigs.kubeconfig(self.server, self.pki.ca, self.kube_entries, "admin"),
        )
        return contexts

    def _is_dm(self, pod: Mapping[str, Any]) -> bool:
        meta = pod["metadata"]
        return any(
            (dm.namespace, dm.name) == (meta["namespace"], meta["name"])
            for dm in self.expanded.device_managers
        )

    def scenario(self) -> None:
        """The scenario's Instances and Pods, then its ``apply`` objects, as an admin would.

        After the Devices: the Pod webhook checks and folds partition profiles against them.
        Then the policies held back until the Pods with their grants exist (``after_scenario``).
        """
        pods, _ = _scenario_objects(self.expanded)
        refused = self.kubectl.apply_each(_instances(self.expanded))
        live = _instance_uids(self.kubectl)
        owned = [_admitted_already(_owned_by_live(p, live)) for p in pods if not self._is_dm(p)]
        refused.update(self.kubectl.apply_each(owned))
        refused.update(self.kubectl.apply_each(self.expanded.applied))
        (self.state_dir / REFUSED_FILE).write_text(json.dumps(refused, indent=1) + "\n")
        for key, why in refused.items():
            log.warning("the real API server refused the scenario's %s: %s", key, why)
        self.kubectl.apply(self.after_scenario)
        if self.after_scenario:
            self._enforced()

    def _enforced(self, patience: float = 60.0) -> None:
        """Returns once kube-apiserver enforces the allocation-record policy just applied.

        A new ValidatingAdmissionPolicy takes effect when the server's policy informer has
        compiled it, a moment after the write: until then a tenant's forged record would
        land. A server-side dry run of a Pod carrying the record is the probe (never stored).
        """
        probe = {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": "gpustack-policy-probe", "namespace": "default",
                              "annotations": {contract.ALLOCATION_ANNOTATION: "{}"}},
                 "spec": {"containers": [{"name": "probe", "image": "probe"}]}}  # fmt: skip
        deadline = time.monotonic() + patience
        names = {str(o["metadata"]["name"]) for o in self.after_scenario}
        while True:
            done = subprocess.run(
                [str(self.kubectl.binary), "--kubeconfig", str(self.kubectl.kubeconfig),
                 "create", "--dry-run=server", "-o", "name", "-f", "-"],
                input=json.dumps(probe), capture_output=True, text=True, check=False, timeout=60,
            )  # fmt: skip
            if done.returncode != 0 and any(name in done.stderr for name in names):
                return
            if time.monotonic() > deadline:
                said = done.stderr.strip() or "admitted"
                raise bootstrap.BootstrapError(
                    f"the allocation-record policy was not enforced within {patience:.0f} s: "
                    f"a dry-run Pod carrying the record was {said}"
                )
            time.sleep(0.2)


def _start(run: _Run) -> Endpoints:
    run.control_plane()
    run.install()
    run.kueue()
    kubelets = run.nodes()
    run.nfd()  # after the nodes: it annotates the one it stands on
    metrics_available = run.metrics_server()
    worker_url = run.worker()  # the webhooks fail closed: it serves before any Pod is made
    managers = run.device_managers(kubelets)
    run.scenario()
    metrics_available()
    return Endpoints(
        scenario=str(run.path),
        cluster=run.server,
        worker=worker_url,
        kubeconfig=str(run.kubeconfig),
        device_managers=managers,
    )


def _users(expanded: Expanded) -> list[UserDoc]:
    """The scenario's users as documents (rules included), built-ins first."""
    by_name = {u.name: u for u in builtin_users()}
    for user in expanded.users:
        by_name[user.name] = UserDoc(
            name=user.name, groups=user.groups, token=user.token,
            rules=expanded.rules.get(user.name, ()),
        )  # fmt: skip
    return list(by_name.values())


def _worker_pair(directory: Path) -> bytes:
    """The worker's serving pair for ``<service>.<namespace>.svc`` and loopback; its CA's PEM."""
    ca = trustme.CA(organization_name="gpustack worker CA")
    service = f"{bootstrap.WORKER_SERVICE}.{contract.SYSTEM_NAMESPACE}.svc"
    leaf = ca.issue_cert(service, "127.0.0.1", "localhost", common_name=service)
    (directory / "tls.crt").write_bytes(b"".join(b.bytes() for b in leaf.cert_chain_pems))
    leaf.private_key_pem.write_to_path(str(directory / "tls.key"))
    (directory / "tls.key").chmod(0o600)
    ca.cert_pem.write_to_path(str(directory / "ca.crt"))
    return ca.cert_pem.bytes()


def _instance_uids(kubectl: bootstrap.Kubectl) -> dict[tuple[str, str], str]:
    listed = json.loads(kubectl("get", "instances.worker.gpustack.ai", "-A", "-o", "json"))
    return {
        (i["metadata"]["namespace"], i["metadata"]["name"]): i["metadata"]["uid"]
        for i in listed.get("items", [])
    }


def _owned_by_live(pod: Mapping[str, Any], live: Mapping[tuple[str, str], str]) -> dict[str, Any]:
    """``pod`` with each Instance owner's UID the live Instance's (the server assigned it).

    A reference to a UID that does not exist is garbage: the real garbage collector deletes
    the Pod at once (the stand-in did not), so the scenario's UIDs cannot be kept.
    """
    meta = dict(pod["metadata"])
    owners = []
    for ref in meta.get("ownerReferences") or ():
        key = (meta["namespace"], ref.get("name", ""))
        uid = live.get(key) if ref.get("kind") == "Instance" else None
        if uid is not None:
            owners.append({**ref, "uid": uid})
    meta["ownerReferences"] = owners
    labels = dict(meta.get("labels") or {})
    if contract.PART_OF_LABEL in labels and owners:
        labels[contract.PART_OF_LABEL] = owners[0]["uid"]  # the Instance's UID, as rendered
    meta["labels"] = labels
    return {**pod, "metadata": meta}


def _admitted_already(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A pre-bound scenario Pod without Kueue's queue label.

    The scenario renders its Pods as running: already admitted, the gate lifted. A Pod that
    names its node cannot pass through Kueue's webhook again (it would be gated, and a gated Pod
    may not name a node: kube-apiserver refuses it), so the label that sends it there goes.
    """
    meta = dict(pod["metadata"])
    labels = {
        k: v for k, v in (meta.get("labels") or {}).items() if k != contract.KUEUE_QUEUE_LABEL
    }
    return {**pod, "metadata": {**meta, "labels": labels}}


def _without_owners(pod: Mapping[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in pod["metadata"].items() if k != "ownerReferences"}
    return {**pod, "metadata": meta}


def _devices_published(kubectl: bootstrap.Kubectl, nodes: set[str]) -> bool:
    listed = json.loads(kubectl("get", "devices.worker.gpustack.ai", "-o", "json"))
    return nodes <= {d["metadata"]["name"] for d in listed.get("items", [])}


def _nodes_ready(kubectl: bootstrap.Kubectl, names: list[str]) -> bool:
    listed = json.loads(kubectl("get", "nodes", "-o", "json"))
    ready = {
        n["metadata"]["name"]
        for n in listed.get("items", [])
        if any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (n.get("status") or {}).get("conditions") or ()
        )
    }
    return set(names) <= ready


def _node_agent_config(
    expanded: Expanded,
    scenario: Path,
    state_dir: Path,
    pki: ControlPlanePKI,
    server: str,
    node_addresses: dict[str, str],
    dm_addresses: dict[str, str],
    kubelets: Path,
) -> AgentConfig:
    _pods, pre_admitted = _scenario_objects(expanded)
    plugin_nodes = {dm.node for dm in expanded.device_managers}
    specs = []
    for index, node in enumerate(expanded.nodes):
        name = node["metadata"]["name"]
        client = pki.node_client(name)
        serving = pki.kubelet_serving(name, node_addresses[name])
        config = kubeconfigs.write(
            state_dir / "controlplane" / f"node-{name}.kubeconfig",
            kubeconfigs.kubeconfig(server, pki.ca, {name: kubeconfigs.cert_user(
                client.cert, client.key)}, name),
        )  # fmt: skip
        socket_path, pod_resources = node_sockets(kubelets, name)
        capacity = {
            k: str(v)
            for k, v in ((node.get("status") or {}).get("capacity") or {}).items()
            if "/" not in k
        }
        specs.append(
            NodeSpec(
                name=name,
                index=index + 1,
                address=node_addresses[name],
                kubeconfig=str(config),
                serving_cert=str(serving.cert),
                serving_key=str(serving.key),
                labels=dict(node["metadata"].get("labels") or {}),
                annotations=dict(node["metadata"].get("annotations") or {}),
                capacity=capacity,
                plugin_dir=str(socket_path.parent) if name in plugin_nodes else None,
                pod_resources_dir=str(pod_resources.parent) if name in plugin_nodes else None,
                proc_root=str(state_dir / "proc" / name),
            )
        )
    return AgentConfig(
        ca=str(pki.ca),
        scenario=str(scenario),
        nodes=tuple(specs),
        pod_addresses=dm_addresses,
        pre_admitted=tuple(pre_admitted),
        ready_file=str(state_dir / "agent.ready"),
    )


def _start_device_managers(
    expanded: Expanded,
    state_dir: Path,
    kubeconfig: Path,
    monitor_period: str,
    dm_addresses: dict[str, str],
    kubelets: Path,
    netns: Netns,
    started: list[_Started],
    log_level: str = LOG_LEVEL,
    *,
    contexts: Mapping[tuple[str, str], str] | None = None,
) -> list[DeviceManagerEndpoint]:
    """Every Device Manager in one fleet host inside the namespace, on its Pod's address.

    ``contexts``: each Device Manager's own kubeconfig context by ``(namespace, pod)``; one
    not named uses the shared ``device-manager`` context.
    """
    from gpustack_core.units import seconds_of  # noqa: PLC0415

    members, managers = [], []
    for dm in expanded.device_managers:
        address = dm_addresses[f"{dm.namespace}/{dm.name}"]
        socket_path, pod_resources = node_sockets(kubelets, dm.node)
        members.append(
            Member(
                dm.node, dm.manufacturer, str(dm.recording), str(state_dir / "proc" / dm.node),
                address, DM_PORT, kube_socket=str(socket_path),
                pod_resources_socket=str(pod_resources),
                context=(contexts or {}).get((dm.namespace, dm.name)),
            )
        )  # fmt: skip
        base = f"https://{address}:{DM_PORT}"
        managers.append(
            DeviceManagerEndpoint(
                node=dm.node, manufacturer=dm.manufacturer, namespace=dm.namespace, pod=dm.name,
                address=f"{address}:{DM_PORT}", metrics=f"{base}/metrics",
                snapshot=f"{base}/monitor/snapshot",
                log=str(state_dir / "logs" / f"{FLEET_PROCESS}.log"),
            )
        )  # fmt: skip
    spec = FleetSpec(
        tuple(members),
        monitor_period=seconds_of(monitor_period),
        kubeconfig=str(kubeconfig),
        context="device-manager",
    )
    spec_file = state_dir / "fleet.json"
    spec_file.write_text(json.dumps(spec.to_json(), indent=1) + "\n")
    started.append(
        _spawn_in(
            netns,
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
            env={"POD_NAMESPACE": contract.SYSTEM_NAMESPACE},
        )
    )
    return managers
