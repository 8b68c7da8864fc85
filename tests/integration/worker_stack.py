"""A scenario's stand-in, its Device Managers as real processes, and the worker over HTTPS.

The Device Managers run exactly as a node runs them — ``gpustack-operator device-manager serve
--simulate <recording>`` in their own processes, reading the scenario's fake ``/proc`` — and the
stand-in learns their addresses as the kubelet would report Pod IPs. The worker runs in the
test's own trio loop (so a test can read its caches), serving on its own TLS listener. A test
talks to the worker either as the kube-aggregator (``as_aggregator``: the front-proxy client
certificate plus identity headers) or through the stand-in's aggregator proxy with a user's
bearer token (``through_cluster``), the path ``kubectl get --raw`` takes.
"""

from __future__ import annotations

import os
import shutil
import ssl
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import standin_kueue_crds
import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve
from quart import Response
from quart_trio import QuartTrio

from gpustack_kube.certs import self_signed
from gpustack_kube.client import KubeClient
from gpustack_kube.config import load_config
from gpustack_simulator.cluster.server import RunningCluster
from gpustack_simulator.fakekubelet import FakeKubelet
from gpustack_simulator.fakekubelet.admission import DeviceAdmission
from gpustack_simulator.procfs import write_procfs
from gpustack_simulator.testing import cluster_standin
from gpustack_simulator.up import device_manager_command, free_port
from gpustack_worker.daemon import Running, WorkerOptions, serve
from patience import HANG

RECORDINGS = Path(__file__).resolve().parents[2] / "recordings"
DM_PERIOD = "1s"


@dataclass
class DeviceManagerProcess:
    node: str
    manufacturer: str
    url: str
    process: trio.Process
    log: Path


@dataclass
class WorkerStack:
    cluster: RunningCluster
    worker: Running
    device_managers: list[DeviceManagerProcess]
    tmp: Path
    clients: list[httpx.AsyncClient] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.worker.urls[0]

    def tls(self, *, cert: Path | None = None, trust_worker: bool = True) -> ssl.SSLContext:
        """A client context trusting the worker's certificate, presenting ``cert`` if given."""
        context = ssl.create_default_context(
            cafile=str(self.worker.certificate) if trust_worker else None
        )
        if cert is not None:
            context.load_cert_chain(str(cert))
        return context

    async def request(
        self,
        path: str,
        *,
        cert: Path | None = None,
        headers: Sequence[tuple[str, str]] = (),
        method: str = "GET",
        json: Any = None,
    ) -> httpx.Response:
        async with httpx.AsyncClient(verify=self.tls(cert=cert), trust_env=False) as client:
            return await client.request(method, self.url + path, headers=list(headers), json=json)

    async def as_aggregator(
        self,
        path: str,
        user: str = "admin",
        groups: Sequence[str] = ("system:masters",),
        *,
        method: str = "GET",
        json: Any = None,
        headers: Sequence[tuple[str, str]] = (),
    ) -> httpx.Response:
        """What the kube-aggregator sends: its client certificate and the caller's identity."""
        identity = [("X-Remote-User", user)] + [("X-Remote-Group", g) for g in groups]
        return await self.request(
            path,
            cert=self.cluster.state.pki.front_proxy_client,
            headers=[*identity, *headers],
            method=method,
            json=json,
        )

    async def through_cluster(self, path: str, user: str = "admin") -> httpx.Response:
        """``kubectl get --raw path`` as ``user``: the stand-in's aggregator proxies it."""
        token = next(u.token for u in self.cluster.state.expanded.users if u.name == user)
        context = ssl.create_default_context(cafile=str(self.cluster.state.pki.ca))
        async with httpx.AsyncClient(verify=context, trust_env=False, timeout=30) as client:
            return await client.get(
                self.cluster.url + path, headers={"Authorization": f"Bearer {token}"}
            )

    async def metrics(self, namespace: str, name: str, **kwargs: Any) -> httpx.Response:
        return await self.as_aggregator(
            f"/apis/worker.gpustack.ai/v1/namespaces/{namespace}/instances/{name}/metrics",
            **kwargs,
        )


async def _wait_ready(url: str, process: trio.Process, log: Path) -> None:
    async with httpx.AsyncClient(verify=False, trust_env=False, timeout=2) as client:
        with trio.fail_after(HANG):
            while True:
                if process.returncode is not None:
                    raise RuntimeError(
                        f"device manager exited {process.returncode}:\n{log.read_text()[-3000:]}"
                    )
                try:
                    if (await client.get(url + "/readyz")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await trio.sleep(0.1)


def _plugin_flags(kubelets: dict[str, FakeKubelet], sockets: Path, node: str) -> list[str]:
    """The node's fake kubelet (started once per node) and the flags pointing a manager at it."""
    kubelet = kubelets.get(node)
    if kubelet is None:
        here = sockets / node
        kubelet = kubelets[node] = FakeKubelet(here / "device-plugins", here / "pod-resources")
        kubelet.start()
    return [
        "--device-plugin",
        "--kube-socket",
        str(kubelet.socket),
        "--pod-resources-socket",
        str(kubelet.pod_resources_socket),
    ]


@asynccontextmanager
async def open_device_managers(
    cluster: RunningCluster, tmp: Path, *, device_plugins: bool = False
) -> AsyncIterator[list[DeviceManagerProcess]]:
    """Every Device Manager of the scenario, as processes, with their Pods' addresses bound.

    With ``device_plugins`` each node gets a fake kubelet the managers register their plugins
    with, and the stand-in's node simulator admits Pods that ask for a registered resource
    through it (Allocate before start), as a kubelet would.
    """
    state = cluster.state
    expanded = state.expanded
    started: list[DeviceManagerProcess] = []
    kubelets: dict[str, FakeKubelet] = {}
    sockets = Path(tempfile.mkdtemp(prefix="ws-", dir="/tmp"))  # unix paths: 108 bytes at most
    try:
        for dm in expanded.device_managers:
            proc_root = tmp / f"proc-{dm.node}"
            if not proc_root.exists():
                write_procfs(proc_root, dict(expanded.procs(dm.node)))
            port = free_port(["127.0.0.1"])
            log = tmp / f"dm-{dm.node}-{dm.manufacturer}.log"
            command = device_manager_command(
                dm,
                kubeconfig=cluster.kubeconfig,
                proc_root=proc_root,
                address="127.0.0.1",
                port=port,
                monitor_period=DM_PERIOD,
            )
            command += (
                _plugin_flags(kubelets, sockets, dm.node)
                if device_plugins
                else ["--no-device-plugin"]
            )
            env = {**os.environ, "POD_NAME": dm.name, "POD_NAMESPACE": dm.namespace}
            with log.open("wb") as sink:
                process = await trio.lowlevel.open_process(
                    command, stdout=sink, stderr=sink, env=env
                )
            started.append(
                DeviceManagerProcess(
                    dm.node, dm.manufacturer, f"https://127.0.0.1:{port}", process, log
                )
            )
        for dm, running in zip(expanded.device_managers, started, strict=True):
            await _wait_ready(running.url, running.process, running.log)
            state.bind_pod_address(
                dm.namespace, dm.name, "127.0.0.1", int(running.url.rsplit(":", 1)[1])
            )
        async with trio.open_nursery() as nursery:
            if kubelets:
                state.device_admission = DeviceAdmission(state, kubelets, nursery)
            try:
                yield started
            finally:
                state.device_admission = None
                nursery.cancel_scope.cancel()
    finally:
        for kubelet in kubelets.values():
            await trio.to_thread.run_sync(kubelet.stop)
        shutil.rmtree(sockets, ignore_errors=True)
        await _stop_all(started)


async def _stop_all(started: list[DeviceManagerProcess]) -> None:
    """Terminate, wait up to 10 s (shielded: also when the caller is cancelled), then kill."""
    for running in started:
        if running.process.returncode is None:
            running.process.terminate()
    with trio.move_on_after(10) as waiting:
        waiting.shield = True
        for running in started:
            await running.process.wait()
    for running in started:
        if running.process.returncode is None:
            running.process.kill()


@asynccontextmanager
async def open_worker_stack(
    scenario: str,
    tmp: Path,
    *,
    instance_controller: bool = False,
    device_plugins: bool = False,
    instance_types: bool = False,
    node_devices_check: bool = False,
) -> AsyncIterator[WorkerStack]:
    """Stand-in + Device Manager processes + the worker, the aggregator pointed at it.

    With ``instance_controller`` the worker reconciles Instances too; the InstanceTypes the
    scenario's Instances name are created first, as an administrator would have (a missing
    type would stop them). With ``instance_types`` it derives the InstanceType chain, and with
    ``node_devices_check`` it answers the node-devices AdmissionCheck and writes the fit labels;
    for either, Kueue's CRDs are installed first as storage-only stand-in copies
    (``standin_kueue_crds``).
    """
    async with (
        cluster_standin(scenario, tmp / "cluster") as cluster,
        open_device_managers(cluster, tmp, device_plugins=device_plugins) as managers,
        trio.open_nursery() as nursery,
    ):
        kube = load_config(cluster.kubeconfig, context="worker")
        if instance_controller:
            for name in sorted({i["spec"].get("type") for i in cluster.state.expanded.instances}
                               - {None}):  # fmt: skip
                cluster.state.store.put("InstanceType", {
                    "apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "InstanceType",
                    "metadata": {"name": name},
                    "spec": {"acceleratable": True, "manufacturer": "nvidia"},
                })  # fmt: skip
        if instance_types or node_devices_check:
            admin = load_config(cluster.kubeconfig, context="admin")
            assert admin is not None
            async with KubeClient(admin) as client:
                await standin_kueue_crds.install(client)
        options = WorkerOptions(
            secure_port=0,
            bind_address="127.0.0.1",
            instance_controller=instance_controller,
            instance_types=instance_types,
            node_devices_check=node_devices_check,
        )
        running: Running = await nursery.start(
            lambda task_status: serve(options, kube=kube, task_status=task_status)
        )
        cluster.state.set_worker(running.urls[0], str(running.certificate))
        try:
            yield WorkerStack(cluster, running, managers, tmp)
        finally:
            cluster.state.set_worker(None)
            running.shutdown.set()


@asynccontextmanager
async def serving_snapshot(body: bytes, folder: Path) -> AsyncIterator[int]:
    """A Device Manager double serving one fixed snapshot over HTTPS; yields its port."""
    app = QuartTrio(__name__)

    @app.route("/monitor/snapshot")
    async def snapshot() -> Response:
        return Response(body, content_type="application/json")

    folder.mkdir(exist_ok=True)
    cert, key = self_signed(["127.0.0.1"], folder)
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.certfile, config.keyfile = str(cert), str(key)
    config.accesslog = config.errorlog = None
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            lambda task_status: hypercorn_serve(
                app, config, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        try:
            yield int(binds[0].rsplit(":", 1)[1])
        finally:
            stop.set()
