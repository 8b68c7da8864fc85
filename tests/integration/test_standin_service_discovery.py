"""The stand-in as Prometheus' Kubernetes service discovery meets it, and as its own process.

Prometheus finds the Device Managers through the ``gpustack-operator-device-manager``
``Service`` and its ``Endpoints`` (``role: endpoints``), relabelled by the spec's annotation
rules to ``<Pod IP>:<prometheus.io/port>``. The stand-in derives that ``Endpoints`` from the
Device Manager Pods, so these tests drive the Pods and watch the derived objects follow.

Two real scrapers read the spec's scrape configuration unchanged:

- **Prometheus**, from ``$GPUSTACK_PROMETHEUS`` or ``prometheus`` on the path. Debian's package
  (2.42, what ``.ci/run`` installs) is **built without Kubernetes service discovery** (Debian
  removed it for client-go's dependencies), so with it the test skips and says so; an upstream
  build runs it.
- **VictoriaMetrics** (Debian's ``victoria-metrics``), whose Prometheus-compatible scraper has
  its own Kubernetes discovery and the same ``/api/v1/targets``.

The last tests run ``simulator cluster`` as a process, as ``simulator up`` does, and reach it
only over HTTPS: its flags, its control endpoints and a clean SIGTERM.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import kubernetes
import pytest
import trio
import trustme
import yaml
from hypercorn.config import Config
from hypercorn.trio import serve
from quart_trio import QuartTrio

from gpustack_kube.certs import self_signed
from gpustack_simulator.cluster.server import RunningCluster
from gpustack_simulator.scenario import DeviceManagerSpec, token_for
from gpustack_simulator.testing import cluster_standin
from patience import HANG

NAMESPACE = "gpustack-system"
SERVICE = "gpustack-operator-device-manager"
MANIFEST = Path(__file__).resolve().parents[2] / "clusters" / "device-manager-service.yaml"
CONTROL = "/simulator/v1"
JOB = "gpustack-instances"
KUBECTL = shutil.which("kubectl")
PROMETHEUS = os.environ.get("GPUSTACK_PROMETHEUS") or shutil.which("prometheus")
VICTORIA = shutil.which("victoria-metrics")
DISCOVERY_BUDGET = HANG
"""Prometheus batches discovery updates every 5 s and scrapes ~6 s after start."""


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[RunningCluster]:
    async with cluster_standin("nvidia-mixed", tmp_path / "cluster") as running:
        yield running


def http(cluster: RunningCluster, user: str = "admin") -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=cluster.url,
        verify=ssl.create_default_context(cafile=cluster.state.pki.ca),
        headers={"Authorization": f"Bearer {token_for(user)}"},
        trust_env=False,
        timeout=10,
    )


def the_dm(cluster: RunningCluster) -> DeviceManagerSpec:
    [dm] = cluster.state.expanded.device_managers
    return dm


def set_ready(ready: bool) -> Any:
    def mutate(pod: dict[str, Any]) -> None:
        for condition in pod["status"]["conditions"]:
            if condition["type"] in {"Ready", "ContainersReady"}:
                condition["status"] = "True" if ready else "False"

    return mutate


# -- shapes -----------------------------------------------------------------------------------


async def test_the_service_is_the_committed_manifest(cluster: RunningCluster) -> None:
    """What the stand-in serves is what the chart ships, down to the annotations."""
    manifest = yaml.safe_load(MANIFEST.read_text())
    async with http(cluster) as client:
        response = await client.get(f"/api/v1/namespaces/{NAMESPACE}/services/{SERVICE}")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    service = response.json()
    assert (service["apiVersion"], service["kind"]) == ("v1", "Service")
    for key in ("name", "namespace", "labels", "annotations"):
        assert service["metadata"][key] == manifest["metadata"][key], key
    for key, value in manifest["spec"].items():
        assert service["spec"][key] == value, key
    # The typed client accepts it, as client-go's decoder in Prometheus must.
    api = kubernetes.config.new_client_from_config(str(cluster.kubeconfig), context="prometheus")
    typed = await trio.to_thread.run_sync(
        lambda: kubernetes.client.CoreV1Api(api).read_namespaced_service(SERVICE, NAMESPACE)
    )
    assert typed.spec.ports[0].target_port == "https"


async def test_endpoints_list_nothing_until_a_dm_pod_has_an_address(
    cluster: RunningCluster,
) -> None:
    async with http(cluster) as client:
        response = await client.get(f"/api/v1/namespaces/{NAMESPACE}/endpoints")
        assert response.status_code == 200
        assert "Endpoints is deprecated" in response.headers["warning"]
        [endpoints] = response.json()["items"]
        assert endpoints["metadata"]["name"] == SERVICE
        assert "subsets" not in endpoints  # the expansion leaves podIP empty

        dm = the_dm(cluster)
        cluster.state.bind_pod_address(dm.namespace, dm.name, "127.0.0.3", 40123)
        one = (await client.get(f"/api/v1/namespaces/{NAMESPACE}/endpoints/{SERVICE}")).json()
        pod = cluster.state.pod(dm.namespace, dm.name)
        assert pod is not None
    assert one["subsets"] == [
        {
            "addresses": [
                {
                    "ip": "127.0.0.3",
                    "nodeName": dm.node,
                    "targetRef": {
                        "kind": "Pod",
                        "namespace": NAMESPACE,
                        "name": dm.name,
                        "uid": pod["metadata"]["uid"],
                    },
                }
            ],
            "ports": [{"name": "https", "port": 40123, "protocol": "TCP"}],
        }
    ]


async def test_a_watch_sees_endpoints_follow_the_dm_pod(cluster: RunningCluster) -> None:
    """Bind, unready, gone: each Pod change is one MODIFIED ``Endpoints`` on the watch."""
    dm = the_dm(cluster)
    async with http(cluster, "prometheus") as client:
        listed = await client.get(f"/api/v1/namespaces/{NAMESPACE}/endpoints")
        version = listed.json()["metadata"]["resourceVersion"]
        events: list[dict[str, Any]] = []

        async def watch(task_status: trio.TaskStatus[None]) -> None:
            # Read to the server's end of the watch: leaving httpx's line iterator early
            # leaves its inner generators to the garbage collector, which -W error refuses.
            query = f"watch=true&timeoutSeconds=2&resourceVersion={version}"
            async with client.stream(
                "GET", f"/api/v1/namespaces/{NAMESPACE}/endpoints?{query}"
            ) as stream:
                assert stream.status_code == 200
                task_status.started()
                events.extend([json.loads(line) async for line in stream.aiter_lines()])

        with trio.fail_after(HANG):
            async with trio.open_nursery() as nursery:
                await nursery.start(watch)
                cluster.state.bind_pod_address(dm.namespace, dm.name, "127.0.0.3", 40123)
                # An unrelated Pod's change must not touch the Endpoints.
                cluster.state.update_pod("team-a", "llama-70b", lambda pod: None)
                cluster.state.update_pod(dm.namespace, dm.name, set_ready(False))
                cluster.state.delete_pod(dm.namespace, dm.name)

    assert [e["type"] for e in events] == ["MODIFIED"] * 3
    bound, unready, gone = (e["object"] for e in events)
    assert [a["ip"] for a in bound["subsets"][0]["addresses"]] == ["127.0.0.3"]
    assert "notReadyAddresses" not in bound["subsets"][0]
    assert "addresses" not in unready["subsets"][0]
    assert [a["targetRef"]["name"] for a in unready["subsets"][0]["notReadyAddresses"]] == [dm.name]
    assert "subsets" not in gone
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions)


async def test_the_port_annotation_follows_the_bound_port(cluster: RunningCluster) -> None:
    """Prometheus scrapes ``<Pod IP>:<prometheus.io/port>``: it must be where the DM listens."""
    dm = the_dm(cluster)
    path = f"/api/v1/namespaces/{NAMESPACE}/services/{SERVICE}"
    async with http(cluster) as client:
        before = (await client.get(path)).json()["metadata"]["annotations"]
        cluster.state.bind_pod_address(dm.namespace, dm.name, "127.0.0.3", 40123)
        after = (await client.get(path)).json()["metadata"]["annotations"]
    assert before["prometheus.io/port"] == "32443"
    assert after["prometheus.io/port"] == "40123"


# -- RBAC and discovery -----------------------------------------------------------------------


async def test_prometheus_reads_what_its_discovery_needs_and_nothing_else(
    cluster: RunningCluster,
) -> None:
    async with http(cluster, "prometheus") as client:
        for resource in ("endpoints", "services", "pods"):
            listed = await client.get(f"/api/v1/namespaces/{NAMESPACE}/{resource}")
            assert listed.status_code == 200, (resource, listed.text)
            watched = await client.get(
                f"/api/v1/namespaces/{NAMESPACE}/{resource}?watch=1&timeoutSeconds=0"
            )
            assert watched.status_code == 200, resource
        denied = await client.get("/apis/worker.gpustack.ai/v1alpha1/instances")
        nodes = await client.get("/api/v1/nodes")
    assert denied.status_code == 403
    assert 'User "prometheus" cannot list resource "instances"' in denied.json()["message"]
    assert nodes.status_code == 403
    async with http(cluster, "no-metrics") as client:
        refused = await client.get(f"/api/v1/namespaces/{NAMESPACE}/endpoints")
    assert refused.status_code == 403
    assert refused.json()["reason"] == "Forbidden"


async def test_discovery_lists_services_and_endpoints_and_hides_the_control_surface(
    cluster: RunningCluster,
) -> None:
    async with http(cluster) as client:
        core = (await client.get("/api/v1")).json()
        groups = (await client.get("/apis")).text
    by_name = {r["name"]: r for r in core["resources"]}
    # The verbs a kube-apiserver lists for services (kubectl api-resources -o wide).
    assert sorted(by_name["services"]["verbs"]) == [
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ]
    assert by_name["endpoints"]["kind"] == "Endpoints"
    assert by_name["services"]["shortNames"] == ["svc"]
    assert "simulator" not in json.dumps(core) + groups


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed here")
async def test_kubectl_gets_services_and_endpoints(cluster: RunningCluster) -> None:
    assert KUBECTL is not None
    dm = the_dm(cluster)
    cluster.state.bind_pod_address(dm.namespace, dm.name, "127.0.0.3", 40123)
    command = [KUBECTL, "--kubeconfig", str(cluster.kubeconfig), "--context", "prometheus"]
    result = await trio.to_thread.run_sync(
        lambda: subprocess.run(
            [*command, "get", "svc,ep", "-n", NAMESPACE, "-o", "json"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    )
    assert result.returncode == 0, result.stderr
    items = {(i["kind"], i["metadata"]["name"]) for i in json.loads(result.stdout)["items"]}
    assert items == {("Service", SERVICE), ("Endpoints", SERVICE)}
    assert "v1 Endpoints is deprecated" in result.stderr  # the server's Warning, as 1.33+ sends


# -- the control surface ----------------------------------------------------------------------


async def test_control_endpoints_move_time_and_inject_faults(cluster: RunningCluster) -> None:
    async with http(cluster) as client:
        before = (await client.get(f"{CONTROL}/state")).json()
        advanced = await client.post(f"{CONTROL}/clock", json={"advanceSeconds": 125})
        fault = {"kind": "kubelet-unreachable", "node": "gpu-node-1", "from": 0, "to": 10_000}
        added = await client.post(f"{CONTROL}/faults", json=fault)
        summary = await client.get("/api/v1/nodes/gpu-node-1/proxy/stats/summary")
        state = (await client.get(f"{CONTROL}/state")).json()
        cleared = await client.delete(f"{CONTROL}/faults")
        after = await client.get("/api/v1/nodes/gpu-node-1/proxy/stats/summary")
    assert advanced.status_code == 200
    assert advanced.json()["now"] >= before["now"] + 125
    assert added.status_code == 200
    assert fault in added.json()["faults"]
    assert summary.status_code == 503
    assert state["now"] >= advanced.json()["now"]
    assert fault in state["faults"]
    assert state["worker"] is None
    assert cleared.json() == {"faults": []}
    assert after.status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body", "message"),
    [
        ("POST", "clock", {"advanceSeconds": "soon"}, "Expected `float`, got `str`"),
        ("POST", "clock", {}, "missing required field `advanceSeconds`"),
        ("POST", "clock", {"advanceSeconds": -5}, "scenario time only moves forward"),
        ("POST", "clock", {"advanceSecs": 5}, "unknown field `advanceSecs`"),
        ("POST", "faults", {"kind": "disk-full"}, "Invalid enum value 'disk-full' - at `$.kind`"),
        ("POST", "faults", {"kind": "kubelet-unreachable", "node": "nope"}, "unknown node"),
        ("POST", "faults", {"kind": "metrics-api-absent", "node": "gpu-node-1"}, "no node"),
        ("POST", "faults", {"kind": "kubelet-unreachable", "from": 9, "to": 3}, "must be after"),
    ],
)
async def test_control_endpoints_reject_malformed_bodies(
    cluster: RunningCluster, method: str, path: str, body: Any, message: str
) -> None:
    async with http(cluster) as client:
        response = await client.request(method, f"{CONTROL}/{path}", json=body)
        raw = await client.post(f"{CONTROL}/clock", content=b"{not json")
    assert response.status_code == 400, response.text
    assert response.json()["kind"] == "Status"
    assert message in response.json()["message"]
    assert raw.status_code == 400
    assert "not JSON" in raw.json()["message"]


async def test_control_endpoints_are_for_system_masters_only(cluster: RunningCluster) -> None:
    async with http(cluster, "worker") as client:
        state = await client.get(f"{CONTROL}/state")
        clock = await client.post(f"{CONTROL}/clock", json={"advanceSeconds": 1})
    assert (state.status_code, clock.status_code) == (403, 403)
    assert 'group "system:masters"' in state.json()["message"]


# -- real scrapers over the spec's configuration ----------------------------------------------


def spec_scrape_config(cluster: RunningCluster) -> dict[str, Any]:
    """The reference configuration ("Scraping the exporter"), pointed at the stand-in."""
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": JOB,
                "kubernetes_sd_configs": [
                    {
                        "role": "endpoints",
                        "namespaces": {"names": [NAMESPACE]},
                        # Out of cluster: where the API server is and how to trust and
                        # authenticate to it, instead of the Pod's service account.
                        "api_server": cluster.url,
                        "tls_config": {"ca_file": str(cluster.state.pki.ca)},
                        "authorization": {"credentials": token_for("prometheus")},
                    }
                ],
                "tls_config": {"insecure_skip_verify": True},
                "relabel_configs": [
                    {
                        "source_labels": [
                            "__meta_kubernetes_service_annotation_prometheus_io_scrape"
                        ],
                        "action": "keep",
                        "regex": "true",
                    },
                    {
                        "source_labels": [
                            "__meta_kubernetes_service_annotation_prometheus_io_scheme"
                        ],
                        "target_label": "__scheme__",
                        "regex": "(https?)",
                    },
                    {
                        "source_labels": [
                            "__meta_kubernetes_service_annotation_prometheus_io_path"
                        ],
                        "target_label": "__metrics_path__",
                        "regex": "(.+)",
                    },
                    {
                        "source_labels": [
                            "__address__",
                            "__meta_kubernetes_service_annotation_prometheus_io_port",
                        ],
                        "target_label": "__address__",
                        "regex": r"([^:]+)(?::\d+)?;(\d+)",
                        "replacement": "$1:$2",
                    },
                ],
            }
        ],
    }


def _port_free_on(hosts: Sequence[str]) -> int:
    """One port free on every host: the Device Managers share one and differ by address."""
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
    raise AssertionError(f"no port free on all of {hosts}")


@asynccontextmanager
async def metrics_servers(hosts: Sequence[str], folder: Path) -> AsyncIterator[int]:
    """A trivial HTTPS ``/metrics`` on each host at one shared port, self-signed."""
    app = QuartTrio("fake-device-manager")

    @app.route("/metrics")
    async def metrics() -> tuple[str, int, dict[str, str]]:
        return "fake_device_manager_up 1\n", 200, {"Content-Type": "text/plain; version=0.0.4"}

    folder.mkdir(parents=True)
    cert, key = self_signed(list(hosts), folder)
    port = _port_free_on(hosts)
    config = Config()
    config.bind = [f"{host}:{port}" for host in hosts]
    config.certfile, config.keyfile = str(cert), str(key)
    config.accesslog = config.errorlog = None
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: serve(
                app, config, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        try:
            yield port
        finally:
            stop.set()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


NO_KUBERNETES_SD = "field kubernetes_sd_configs not found"


def lacks_kubernetes_sd(binary: str, folder: Path) -> bool:
    """Whether this Prometheus refuses ``kubernetes_sd_configs`` as an unknown field.

    Prometheus has no check-only mode and promtool need not match the server, so the server
    itself is started on a configuration with the field: a build without the discovery exits
    at once naming it, any other keeps running and is stopped after two seconds.
    """
    probe = {
        "scrape_configs": [
            {
                "job_name": "probe",
                "kubernetes_sd_configs": [
                    {"role": "endpoints", "api_server": "https://127.0.0.1:1"}
                ],
            }
        ]
    }
    (folder / "probe.yml").write_text(yaml.safe_dump(probe))
    command = _command("prometheus", folder / "probe.yml", folder / "data", _free_port())
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=2, check=False)
    except subprocess.TimeoutExpired:
        return False
    return NO_KUBERNETES_SD in result.stdout + result.stderr


def _command(scraper: str, config: Path, data: Path, port: int) -> list[str]:
    if scraper == "prometheus":
        assert PROMETHEUS is not None
        return [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
    assert VICTORIA is not None
    return [
        VICTORIA,
        f"-promscrape.config={config}",
        f"-storageDataPath={data}",
        f"-httpListenAddr=127.0.0.1:{port}",
        "-promscrape.kubernetesSDCheckInterval=1s",  # default 30 s
    ]


@asynccontextmanager
async def running_scraper(scraper: str, folder: Path, config: dict[str, Any]) -> AsyncIterator[str]:
    """The scraper on ``config``; its base URL. Killed and reaped however the block ends."""
    folder.mkdir(parents=True)
    (folder / "config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    port = _free_port()
    log = folder / "scraper.log"
    with log.open("wb") as sink:
        process = await trio.lowlevel.open_process(
            _command(scraper, folder / "config.yml", folder / "data", port),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()


async def wait_for_targets(
    client: httpx.AsyncClient, base: str, want: dict[str, str], log: Path
) -> None:
    """Poll ``/api/v1/targets`` until the job's targets are exactly ``want`` (URL → health)."""
    seen: Any = None
    with trio.move_on_after(DISCOVERY_BUDGET):
        while True:
            try:
                response = await client.get(f"{base}/api/v1/targets")
                if response.status_code == 200:
                    active = response.json()["data"]["activeTargets"]
                    seen = {
                        t["scrapeUrl"]: t["health"] for t in active if t["labels"]["job"] == JOB
                    }
                    if seen == want:
                        return
            except httpx.TransportError as exc:  # still starting
                seen = repr(exc)
            await trio.sleep(0.5)
    raise AssertionError(
        f"targets never became {want}; last seen {seen}\n" + log.read_text(errors="replace")[-3000:]
    )


@pytest.fixture(params=["prometheus", "victoria-metrics"])
def scraper(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A scraper able to discover from Kubernetes, or a skip saying why there is none.

    A plain fixture, so the skip keeps its reason (raised inside a trio test it is lost).
    """
    name: str = request.param
    if name == "victoria-metrics":
        if VICTORIA is None:
            pytest.skip("Debian's victoria-metrics package is not installed")
        return name
    if PROMETHEUS is None:
        pytest.skip("prometheus is not installed (nor GPUSTACK_PROMETHEUS set)")
    if lacks_kubernetes_sd(PROMETHEUS, tmp_path_factory.mktemp("probe")):
        pytest.skip(
            f"{PROMETHEUS} is built without Kubernetes service discovery (Debian's prometheus "
            "package removes it); set GPUSTACK_PROMETHEUS to an upstream build to run this"
        )
    return name


async def test_a_real_scraper_finds_the_device_managers(scraper: str, tmp_path: Path) -> None:
    """Two Device Managers on one node, one port, two loopback IPs: as ``simulator up`` runs."""
    hosts = ["127.0.0.2", "127.0.0.3"]
    async with (
        cluster_standin("nvidia-amd", tmp_path / "cluster") as cluster,
        metrics_servers(hosts, tmp_path / "tls") as port,
        httpx.AsyncClient(trust_env=False, timeout=5) as client,
    ):
        dms = cluster.state.expanded.device_managers
        assert len(dms) == len(hosts)
        for dm, host in zip(dms, hosts, strict=True):
            cluster.state.bind_pod_address(dm.namespace, dm.name, host, port)
        async with running_scraper(
            scraper, tmp_path / scraper, spec_scrape_config(cluster)
        ) as base:
            log = tmp_path / scraper / "scraper.log"
            urls = [f"https://{host}:{port}/metrics" for host in hosts]
            await wait_for_targets(client, base, dict.fromkeys(urls, "up"), log)

            # The watch path: the second Device Manager's Pod goes, and so does its target.
            cluster.state.delete_pod(dms[1].namespace, dms[1].name)
            await wait_for_targets(client, base, {urls[0]: "up"}, log)


# -- `simulator cluster` as its own process ---------------------------------------------------


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpustack_cli", "simulator", "cluster", *args]


async def test_the_command_takes_addresses_and_the_worker_from_its_flags(tmp_path: Path) -> None:
    dm_name = "gpustack-operator-device-manager-nvidia-4e7f7"
    worker_ca = tmp_path / "worker-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(worker_ca))
    ready = tmp_path / "cluster.ready"
    state_dir = tmp_path / "cluster"
    log = tmp_path / "cluster.log"
    with log.open("wb") as sink:
        process = await trio.lowlevel.open_process(
            _cli(
                "--state-dir",
                str(state_dir),
                "--scenario",
                "nvidia-mixed",
                "--port",
                "0",
                "--ready-file",
                str(ready),
                "--pod-address",
                f"{NAMESPACE}/{dm_name}=127.0.0.3:40123",
                "--worker-url",
                "https://127.0.0.1:1",
                "--worker-ca",
                str(worker_ca),
            ),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        with trio.fail_after(HANG):
            while not ready.exists():
                assert process.returncode is None, log.read_text()
                await trio.sleep(0.1)
        url = ready.read_text().strip()
        assert url.startswith("https://127.0.0.1:")
        assert (state_dir / "kubeconfig").exists()  # written before the ready file

        def client(user: str) -> httpx.AsyncClient:
            return httpx.AsyncClient(
                base_url=url,
                verify=ssl.create_default_context(cafile=state_dir / "pki" / "ca.crt"),
                headers={"Authorization": f"Bearer {token_for(user)}"},
                trust_env=False,
                timeout=10,
            )

        async with client("admin") as admin:
            pod = (await admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{dm_name}")).json()
            endpoints = await admin.get(f"/api/v1/namespaces/{NAMESPACE}/endpoints/{SERVICE}")
            aggregated = await admin.get("/apis/worker.gpustack.ai/v1")
            advanced = await admin.post(f"{CONTROL}/clock", json={"advanceSeconds": 3600})
            state = (await admin.get(f"{CONTROL}/state")).json()
        async with client("no-metrics") as other:
            refused = await other.post(f"{CONTROL}/clock", json={"advanceSeconds": 1})
    finally:
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(HANG):
            code = await process.wait()

    assert pod["status"]["podIP"] == "127.0.0.3"
    [port] = [p for c in pod["spec"]["containers"] for p in c["ports"] if p["name"] == "https"]
    assert port["containerPort"] == 40123
    [subset] = endpoints.json()["subsets"]
    assert [a["ip"] for a in subset["addresses"]] == ["127.0.0.3"]
    # The worker's address is known but nothing listens there: an unavailable APIService.
    assert aggregated.status_code == 503
    assert aggregated.json()["reason"] == "ServiceUnavailable"
    assert advanced.status_code == 200
    assert state["now"] >= 3600
    assert state["worker"] == "https://127.0.0.1:1"
    assert refused.status_code == 403
    assert code == 0, log.read_text()
    assert not ready.exists()  # "listening now" no longer holds
    assert url in log.read_text()  # still printed, as before


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (f"{NAMESPACE}/no-such-dm=127.0.0.3:40123", "the scenario has no Pod gpustack-system/"),
        ("team-a/llama-70b=127.0.0.3:40123", "has no container port named https"),
        (f"{NAMESPACE}/x=localhost:40123", "'localhost' is not an IP address"),
        (f"{NAMESPACE}/x=127.0.0.3", "expected NAMESPACE/NAME=IP:PORT"),
        (f"{NAMESPACE}/x=127.0.0.3:0", "is not a port"),
    ],
)
async def test_a_bad_pod_address_fails_before_serving(
    tmp_path: Path, flag: str, message: str
) -> None:
    ready = tmp_path / "ready"
    result = await trio.run_process(
        _cli(
            "--state-dir",
            str(tmp_path / "cluster"),
            "--ready-file",
            str(ready),
            "--pod-address",
            flag,
        ),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    assert message in stderr
    assert "Traceback" not in stderr
    assert not ready.exists()
