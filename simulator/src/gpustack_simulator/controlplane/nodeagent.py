"""The node agent: each scenario node's kubelet, against a real API server, without containers.

One process (inside the run's network namespace, :mod:`.netns`) plays every scenario node, each
with its own ``system:node:<name>`` client certificate, so the Node authorizer and the
NodeRestriction admission plugin decide what it may write, as for a kubelet:

- **Registration and heartbeats**: it creates its Node (labels, capacity, the InternalIP in the
  namespace, the kubelet port), keeps ``status`` current (conditions, every registered device
  plugin's resource in capacity and allocatable) and renews its Lease in ``kube-node-lease``.
- **The kubelet's HTTPS endpoints** on ``<address>:10250``, which the API server's node proxy
  reaches: ``/healthz``, ``/pods`` and ``/stats/summary`` (the scenario's usage series for its
  Pods, idle figures for the others, as :mod:`gpustack_simulator.cluster.podstats`), and
  ``/metrics/resource``, the same figures as metrics-server scrapes them
  (:mod:`gpustack_simulator.cluster.resourcemetrics`). Callers must present a certificate of the
  cluster CA (the API server's kubelet client, metrics-server's).
- **Device plugins**: a :class:`~gpustack_simulator.fakekubelet.FakeKubelet` per node serves
  Registration and PodResources on the node's sockets; a bound Pod requesting a registered
  resource is admitted by calling ``Allocate`` first (the same picking and calls as the stand-in's
  :mod:`gpustack_simulator.fakekubelet.admission`), and fails ``UnexpectedAdmissionError`` when a
  plugin refuses, as a kubelet does.
- **Pods**: a bound Pod is reported Running (:func:`gpustack_simulator.podstatus.running_status`);
  a deleted one is finished (its devices forgotten, then deleted with grace 0 and its UID as a
  precondition, which is how a kubelet ends a Pod). The node's fake ``/proc`` holds the scenario
  processes of the scenario Pods that run, their cgroups naming the Pods' real UIDs.

Scenario Pods listed in the config as *pre-admitted* are believed as a kubelet's checkpoint
would be: their annotation's device IDs seed PodResources instead of a new ``Allocate``. Nothing
else a Pod carries is believed.

    python -m gpustack_simulator.controlplane.nodeagent <config.json>
"""

from __future__ import annotations

import json
import logging
import signal
import ssl
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import msgspec
import trio
from hypercorn.config import Config
from quart import Response, request
from quart_trio import QuartTrio

from gpustack_core import contract
from gpustack_core.quantity import QuantityError, parse_quantity
from gpustack_kube.client import ApiError, KubeClient, NotFound
from gpustack_kube.config import load_config
from gpustack_kube.informer import Informer
from gpustack_serving.connections import bind, serve_connections, ssl_connections
from gpustack_simulator.cluster import resourcemetrics
from gpustack_simulator.cluster.podstats import running_pod_stats
from gpustack_simulator.cluster.state import ScenarioClock
from gpustack_simulator.fakekubelet import FakeKubelet
from gpustack_simulator.fakekubelet.admission import asks_of, pick, refusal
from gpustack_simulator.fakekubelet.nodes import node_resources, seed_assignments
from gpustack_simulator.podstatus import running_status
from gpustack_simulator.procfs import write_procfs
from gpustack_simulator.recording import ProcEntry
from gpustack_simulator.scenario import RECORDINGS_DIR, expand, load_scenario
from gpustack_simulator.scenario.expanded import Expanded

log = logging.getLogger("gpustack.simulator.nodeagent")

KUBELET_PORT = 10250
KUBELET_VERSION = "v1.37.2"
LEASE_DURATION = 40
LEASE_RENEW = 10.0
STATUS_PERIOD = 10.0
"""Seconds between Node status reports (the kubelet's ``nodeStatusUpdateFrequency``)."""
POD_RANGE = "10.244.{node}.{host}"
"""Pod IPs of ordinary Pods: never routed (nothing here dials a workload Pod)."""


class NodeSpec(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One node the agent plays."""

    name: str
    index: int
    address: str
    kubeconfig: str
    serving_cert: str
    serving_key: str
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    capacity: dict[str, str] = {}
    plugin_dir: str | None = None
    pod_resources_dir: str | None = None
    proc_root: str | None = None


class AgentConfig(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What ``simulator up --control-plane real`` hands the agent."""

    ca: str
    scenario: str
    nodes: tuple[NodeSpec, ...]
    pod_addresses: dict[str, str] = {}
    """``namespace/name`` → the Pod IP a process of ours listens on (the Device Managers)."""
    pre_admitted: tuple[str, ...] = ()
    """``namespace/name`` of the scenario Pods admitted before the agent started."""
    ready_file: str | None = None


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Node:
    """One node's agent: its client, its plugins' kubelet and its Pods."""

    spec: NodeSpec
    config: AgentConfig
    expanded: Expanded
    clock: ScenarioClock
    client: KubeClient
    kubelet: FakeKubelet | None
    pods: Informer[dict[str, Any]]
    started: set[str] = field(default_factory=set)
    """UIDs of Pods reported Running."""
    failed: set[str] = field(default_factory=set)
    admitted: set[str] = field(default_factory=set)
    """UIDs of Pods whose devices were allocated (whether or not Running was reported yet)."""
    admitting: set[str] = field(default_factory=set)
    ips: dict[str, str] = field(default_factory=dict)
    """Pod UID → the IP it was given."""
    lock: trio.Lock = field(default_factory=trio.Lock)
    changed: trio.Event = field(default_factory=trio.Event)
    """Set to report status now (a plugin's devices changed) instead of at the next period."""
    _wake: trio.Event = field(default_factory=trio.Event)

    # -- registration ----------------------------------------------------------------------

    def _status(self) -> dict[str, Any]:
        capacity = {"pods": "110", **self.spec.capacity}
        allocatable = dict(capacity)
        if self.kubelet is not None:
            plugins, healthy = node_resources(self.kubelet)
            capacity.update(plugins)
            allocatable.update(healthy)
        now = _now()
        return {
            "capacity": capacity,
            "allocatable": allocatable,
            "addresses": [
                {"type": "InternalIP", "address": self.spec.address},
                {"type": "Hostname", "address": self.spec.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": KUBELET_PORT}},
            "nodeInfo": {
                "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                "osImage": "gpustack node agent", "containerRuntimeVersion": "none://0",
                "kubeletVersion": KUBELET_VERSION, "kubeProxyVersion": "",
                "operatingSystem": "linux", "architecture": "amd64",
            },
            "conditions": [
                _condition("MemoryPressure", "False", "KubeletHasSufficientMemory", now),
                _condition("DiskPressure", "False", "KubeletHasNoDiskPressure", now),
                _condition("PIDPressure", "False", "KubeletHasSufficientPID", now),
                _condition("Ready", "True", "KubeletReady", now),
            ],
        }  # fmt: skip

    async def register(self) -> None:
        """Create the Node (a kubelet registers itself), then report its status."""
        labels = {
            "kubernetes.io/hostname": self.spec.name,
            contract.OS_LABEL: "linux",
            contract.ARCH_LABEL: "amd64",
            **self.spec.labels,
        }
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.spec.name,
                "labels": labels,
                "annotations": dict(self.spec.annotations),
            },
            "spec": {},
        }
        try:
            await self.client.create("/api/v1/nodes", node)
        except ApiError as exc:
            if exc.status != 409:
                raise
        await self.report()

    async def report(self) -> None:
        """Node status as the kubelet patches it (strategic merge on ``/status``)."""
        await self.client.patch(
            f"/api/v1/nodes/{self.spec.name}/status",
            {"status": self._status()},
        )

    async def heartbeat(self) -> None:
        """Renew the Lease every 10 s and report status every 10 s, forever."""
        leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        lease_path = f"{leases}/{self.spec.name}"
        while True:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.spec.name, "namespace": "kube-node-lease"},
                "spec": {
                    "holderIdentity": self.spec.name,
                    "leaseDurationSeconds": LEASE_DURATION,
                    "renewTime": _micro_now(),
                },
            }
            try:
                try:
                    await self.client.patch(lease_path, {"spec": body["spec"]})
                except NotFound:
                    await self.client.create(leases, body)
                await self.report()
            except (ApiError, OSError) as exc:
                log.warning("node %s: heartbeat failed: %s", self.spec.name, exc)
            with trio.move_on_after(LEASE_RENEW):
                await self.changed.wait()
            self.changed = trio.Event()

    async def watch_plugins(self) -> None:
        """Report status as soon as a plugin's devices change (the kubelet does, too)."""
        if self.kubelet is None:
            return
        seen: tuple[dict[str, str], dict[str, str]] | None = None
        while True:
            now = node_resources(self.kubelet)
            if now != seen:
                seen = now
                self.changed.set()
                self.pods_changed()
            await trio.sleep(0.5)

    def pods_changed(self) -> None:
        """Wake the Pod loop (an informer handler, or a plugin that just registered)."""
        self._wake.set()

    # -- Pods ------------------------------------------------------------------------------

    async def run_pods(self, nursery: trio.Nursery) -> None:
        """Level-triggered: every change to this node's Pods, reconcile every Pod."""
        self.pods.add_handler(lambda _key: self.pods_changed())
        while True:
            self._wake = trio.Event()
            for pod in self.pods.objects():
                await self.reconcile(pod, nursery)
            self.write_procs()
            with trio.move_on_after(5.0):
                await self._wake.wait()

    async def reconcile(self, pod: dict[str, Any], nursery: trio.Nursery) -> None:
        """One Pod, level-triggered: finish it if deleted, admit and start it if new."""
        meta, status = pod["metadata"], pod.get("status") or {}
        uid, key = meta["uid"], f"{meta['namespace']}/{meta['name']}"
        if meta.get("deletionTimestamp"):
            await self.finish(pod)
            return
        if status.get("phase") in {"Succeeded", "Failed"} or uid in self.failed:
            return
        if uid in self.started or uid in self.admitting:
            return  # reported once: the informer may not show our Running status yet
        self.admitting.add(uid)
        if uid in self.admitted:  # its devices are allocated: only the report is owed
            nursery.start_soon(self.report_started, pod)
        else:
            nursery.start_soon(self.admit, pod, key in self.config.pre_admitted)

    async def admit(self, pod: dict[str, Any], pre_admitted: bool) -> None:
        """Allocate every plugin resource the Pod asks for, then report it Running."""
        meta = pod["metadata"]
        name = (meta["namespace"], meta["name"])
        try:
            async with self.lock:  # one admission at a time, as a kubelet admits Pods
                kubelet = self.kubelet
                if kubelet is not None:
                    kubelet.adopt(*name, meta["uid"])
                    if pre_admitted:
                        kubelet.assigned.update(seed_assignments([pod], self.spec.name))
                    else:
                        for container, resource, count in asks_of(pod, set(kubelet.plugins)):
                            ids = await trio.to_thread.run_sync(pick, kubelet, resource, count)
                            await trio.to_thread.run_sync(
                                kubelet.allocate, resource, ids, name, container
                            )
            # A kubelet admits a Pod once; a failed status write is retried, never Allocate.
            self.admitted.add(meta["uid"])
            await self.start(pod)
        except (grpc.RpcError, ValueError) as exc:
            message = refusal(exc)
            log.warning("node %s: Pod %s/%s not admitted: %s", self.spec.name, *name, message)
            self.failed.add(meta["uid"])
            await self._patch_status(
                pod,
                {
                    "phase": "Failed",
                    "reason": "UnexpectedAdmissionError",
                    "message": f"Allocate failed due to {message}, which is unexpected",
                },
            )
        except ApiError as exc:
            log.warning("node %s: Pod %s/%s: %s", self.spec.name, *name, exc)
        finally:
            self.admitting.discard(meta["uid"])
            self.pods_changed()

    async def report_started(self, pod: dict[str, Any]) -> None:
        """Retry the Running report of an admitted Pod."""
        try:
            await self.start(pod)
        except ApiError as exc:
            meta = pod["metadata"]
            log.warning("node %s: Pod %s/%s: %s", self.spec.name, meta["namespace"],
                        meta["name"], exc)  # fmt: skip
        finally:
            self.admitting.discard(pod["metadata"]["uid"])

    def _pod_ip(self, pod: Mapping[str, Any]) -> str:
        meta = pod["metadata"]
        mine = self.config.pod_addresses.get(f"{meta['namespace']}/{meta['name']}")
        if mine:
            return mine
        if (pod.get("spec") or {}).get("hostNetwork"):
            return self.spec.address
        uid = meta["uid"]
        if uid not in self.ips:
            taken = set(self.ips.values())
            self.ips[uid] = next(
                ip
                for host in range(2, 255)
                if (ip := POD_RANGE.format(node=100 + self.spec.index, host=host)) not in taken
            )
        return self.ips[uid]

    async def start(self, pod: dict[str, Any]) -> None:
        """Report the Pod Running (a scenario Pod keeps its containers' IDs: its cgroups)."""
        meta = pod["metadata"]
        scenario = self._scenario_pod(meta["namespace"], meta["name"])
        ids = _container_ids(scenario) if scenario is not None else None
        status = running_status(
            pod, host_ip=self.spec.address, pod_ip=self._pod_ip(pod), now=_now(), container_ids=ids
        )
        await self._patch_status(pod, status)
        self.started.add(meta["uid"])

    async def _patch_status(self, pod: Mapping[str, Any], status: dict[str, Any]) -> None:
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
        try:
            await self.client.patch(path, {"metadata": {"uid": meta["uid"]}, "status": status})
        except NotFound:
            return

    async def finish(self, pod: dict[str, Any]) -> None:
        """A deleted Pod: its devices freed, then gone (grace 0, its UID a precondition)."""
        meta = pod["metadata"]
        if self.kubelet is not None:
            self.kubelet.forget(meta["namespace"], meta["name"])
        self.started.discard(meta["uid"])
        self.ips.pop(meta["uid"], None)
        try:
            await self.client.delete(
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                grace_period_seconds=0,
                preconditions={"uid": meta["uid"]},
            )
        except (NotFound, ApiError) as exc:
            if not isinstance(exc, NotFound) and exc.status != 409:
                log.warning("node %s: finishing %s: %s", self.spec.name, meta["name"], exc)

    # -- what runs: /proc and the summary --------------------------------------------------

    def _scenario_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        for pod in self.expanded.pods:
            meta = pod["metadata"]
            if (meta.get("namespace"), meta["name"]) == (namespace, name):
                return pod
        return None

    def _live_uids(self) -> dict[str, str]:
        """Scenario Pod UID → the live Pod's UID, for the scenario Pods running here."""
        mapping: dict[str, str] = {}
        for pod in self.pods.objects():
            meta = pod["metadata"]
            if meta["uid"] not in self.started:
                continue
            scenario = self._scenario_pod(meta["namespace"], meta["name"])
            if scenario is not None:
                mapping[scenario["metadata"]["uid"]] = meta["uid"]
        return mapping

    def write_procs(self) -> None:
        """The node's fake ``/proc``: scenario processes of running scenario Pods only."""
        if self.spec.proc_root is None:
            return
        try:
            procs = self.expanded.procs(self.spec.name)
        except KeyError:
            procs = {}
        live = self._live_uids()
        table: dict[str, ProcEntry] = {}
        for pid, entry in procs.items():
            for old, new in live.items():
                if old in entry.cgroup or old.replace("-", "_") in entry.cgroup:
                    cgroup = entry.cgroup.replace(old, new).replace(
                        old.replace("-", "_"), new.replace("-", "_")
                    )
                    table[pid] = msgspec.structs.replace(entry, cgroup=cgroup)
                    break
        write_procfs(Path(self.spec.proc_root), table)

    def summary(self) -> dict[str, Any]:
        """``/stats/summary``: the scenario's series (live UIDs), idle figures for the rest."""
        t = self.clock()
        try:
            summary = self.expanded.summary(self.spec.name, t)
        except KeyError:
            summary = {"node": {"nodeName": self.spec.name}, "pods": []}
        live = self._live_uids()
        scenario_pods = []
        covered: set[str] = set()
        for entry in summary.get("pods") or ():
            ref = entry.get("podRef") or {}
            uid = live.get(str(ref.get("uid")))
            if uid is None:
                continue  # the scenario Pod does not run in this cluster (yet)
            entry["podRef"] = {**ref, "uid": uid}
            covered.add(uid)
            scenario_pods.append(entry)
        block = summary["node"]
        others = [p for p in self.pods.objects() if p["metadata"]["uid"] not in covered]
        capacity = 0
        raw = self.spec.capacity.get("ephemeral-storage")
        if raw:
            try:
                capacity = int(parse_quantity(raw))
            except (QuantityError, ValueError):
                capacity = 0
        time = str((block.get("cpu") or {}).get("time") or _now())
        summary["pods"] = [
            *scenario_pods,
            *running_pod_stats(others, self.spec.name, self.started, time=time, capacity=capacity),
        ]
        return summary


def _condition(kind: str, status: str, reason: str, now: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": f"node agent: {reason}",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def _container_ids(pod: Mapping[str, Any]) -> dict[str, str]:
    return {
        str(c["name"]): str(c["containerID"])
        for c in (pod.get("status") or {}).get("containerStatuses") or ()
        if c.get("containerID")
    }


def kubelet_app(node: Node) -> QuartTrio:
    """The kubelet's read endpoints the API server's node proxy reaches."""
    app = QuartTrio(f"kubelet-{node.spec.name}")

    @app.route("/healthz")
    async def healthz() -> Response:
        return Response("ok", content_type="text/plain")

    @app.route("/stats/summary")
    async def stats_summary() -> Response:
        if request.args.get("only_cpu_and_memory") not in (None, "true", "false"):
            return Response("bad only_cpu_and_memory", status=400)
        return Response(json.dumps(node.summary()), content_type="application/json")

    @app.route("/metrics/resource")
    async def metrics_resource() -> Response:
        body = resourcemetrics.render(node.summary())
        return Response(body, content_type=resourcemetrics.CONTENT_TYPE)

    @app.route("/pods")
    async def pods() -> Response:
        items = [p for p in node.pods.objects() if p["metadata"]["uid"] in node.started]
        body = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
        return Response(json.dumps(body), content_type="application/json")

    return app


async def serve_kubelet(node: Node, ca: Path, shutdown: trio.Event) -> None:
    """HTTPS on the node's address; only clients with a cluster-CA certificate get in."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca))
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(node.spec.serving_cert, node.spec.serving_key)
    context.set_alpn_protocols(["h2", "http/1.1"])
    config = Config()
    config.accesslog = None
    config.errorlog = logging.getLogger("gpustack.simulator.nodeagent.http")
    config.graceful_timeout = 1.0
    app = kubelet_app(node)
    with bind(node.spec.address, KUBELET_PORT) as sock:
        await serve_connections(
            app, config, [sock], ssl_connections(app, config, context), shutdown=shutdown
        )


async def run_node(
    spec: NodeSpec, config: AgentConfig, expanded: Expanded, clock: ScenarioClock
) -> None:
    """Everything one node does, until cancelled."""
    kube = load_config(Path(spec.kubeconfig), context=None, environ={})
    if kube is None:
        raise SystemExit(f"node {spec.name}: no kubeconfig at {spec.kubeconfig}")
    kubelet = None
    if spec.plugin_dir is not None and spec.pod_resources_dir is not None:
        kubelet = FakeKubelet(Path(spec.plugin_dir), Path(spec.pod_resources_dir))
        await trio.to_thread.run_sync(kubelet.start)
    shutdown = trio.Event()
    try:
        async with KubeClient(kube) as client, trio.open_nursery() as nursery:
            pods: Informer[dict[str, Any]] = Informer(
                client, "/api/v1/pods", field_selector=f"spec.nodeName={spec.name}"
            )
            node = Node(spec, config, expanded, clock, client, kubelet, pods)
            await node.register()
            await nursery.start(pods.run)
            nursery.start_soon(node.heartbeat)
            nursery.start_soon(node.watch_plugins)
            nursery.start_soon(node.run_pods, nursery)
            nursery.start_soon(serve_kubelet, node, Path(config.ca), shutdown)
            log.info("node %s registered at %s", spec.name, spec.address)
    finally:
        shutdown.set()
        if kubelet is not None:
            await trio.to_thread.run_sync(kubelet.stop)


async def main(config: AgentConfig) -> None:
    """Every node's agent in one nursery; the ready file is written once all registered."""
    expanded = expand(load_scenario(Path(config.scenario)), base=RECORDINGS_DIR)
    clock = ScenarioClock()
    async with trio.open_nursery() as nursery:
        for spec in config.nodes:
            nursery.start_soon(run_node, spec, config, expanded, clock)
        if config.ready_file is not None:
            Path(config.ready_file).write_text("ok\n")
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break


def cli(argv: list[str]) -> int:
    """``python -m gpustack_simulator.controlplane.nodeagent <config.json>``."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if len(argv) != 1:
        print("usage: python -m gpustack_simulator.controlplane.nodeagent CONFIG", file=sys.stderr)
        return 2
    config = msgspec.json.decode(Path(argv[0]).read_bytes(), type=AgentConfig)
    trio.run(main, config)
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
