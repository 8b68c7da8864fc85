"""The cluster stand-in through real clients: the official kubernetes client and kubectl.

The stand-in runs in the test's trio nursery on a free loopback port; the blocking clients run
in worker threads, so a watch in one thread sees a Pod update the test makes through the handle.
"""

from __future__ import annotations

import json
import shutil
import signal
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import trio
import trustme
from hypercorn.config import Config
from hypercorn.trio import serve
from quart import request
from quart_trio import QuartTrio

from gpustack_simulator.cluster.server import RunningCluster
from gpustack_simulator.scenario import Fault
from gpustack_simulator.testing import cluster_standin
from patience import HANG

NODE = "gpu-node-1"
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed here")


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[RunningCluster]:
    async with cluster_standin("nvidia-mixed", tmp_path) as running:
        yield running


def client(cluster: RunningCluster, context: str = "admin") -> kubernetes.client.ApiClient:
    return kubernetes.config.new_client_from_config(
        config_file=str(cluster.kubeconfig), context=context
    )


async def in_thread(fn: Any, *args: Any) -> Any:
    return await trio.to_thread.run_sync(fn, *args)


def raw_get(api: kubernetes.client.ApiClient, path: str) -> tuple[int, Any]:
    """GET an arbitrary path through the client's own auth and TLS; (status, decoded body)."""
    serialized = api.param_serialize("GET", path, auth_settings=["BearerToken"])
    response = api.call_api(*serialized)
    return response.status, json.loads(response.read())


def kubectl(
    cluster: RunningCluster, *args: str, context: str = "admin"
) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    return subprocess.run(
        [KUBECTL, "--kubeconfig", str(cluster.kubeconfig), "--context", context, *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


# -- the kubernetes Python client -------------------------------------------------------------


async def test_list_pods_of_a_node(cluster: RunningCluster) -> None:
    v1 = kubernetes.client.CoreV1Api(client(cluster))
    pods = await in_thread(
        lambda: v1.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={NODE}")
    )
    names = {p.metadata.name for p in pods.items}
    assert {"llama-70b", "embed-a", "qwen-a", "mig-3g"} <= names
    assert all(p.spec.node_name == NODE for p in pods.items)
    other = await in_thread(
        lambda: v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=no-such-node")
    )
    assert other.items == []
    dms = await in_thread(
        lambda: v1.list_namespaced_pod(
            "gpustack-system", label_selector="app.kubernetes.io/component=device-manager"
        )
    )
    assert [p.metadata.labels["gpustack.ai/manufacturer"] for p in dms.items] == ["nvidia"]


async def test_summary_through_the_node_proxy(cluster: RunningCluster) -> None:
    v1 = kubernetes.client.CoreV1Api(client(cluster))
    # Read the body in the worker thread too: reading it here would block the event loop that
    # serves it.
    raw = await in_thread(
        lambda: (
            v1.connect_get_node_proxy_with_path(NODE, "stats/summary", _preload_content=False).data
        )
    )
    summary = json.loads(raw)
    assert summary["node"]["nodeName"] == NODE
    pods = {p["podRef"]["name"]: p for p in summary["pods"]}
    assert "llama-70b" in pods
    before = pods["llama-70b"]["cpu"]["usageNanoCores"]
    cluster.state.clock.advance(60)  # the scenario's load rises at t=30
    raw = await in_thread(
        lambda: (
            v1.connect_get_node_proxy_with_path(NODE, "stats/summary", _preload_content=False).data
        )
    )
    after = {p["podRef"]["name"]: p for p in json.loads(raw)["pods"]}
    assert after["llama-70b"]["cpu"]["usageNanoCores"] > before


async def test_kubelet_fault_answers_503(cluster: RunningCluster) -> None:
    v1 = kubernetes.client.CoreV1Api(client(cluster))
    cluster.state.add_fault(Fault("kubelet-unreachable", NODE, 0.0, None))
    with pytest.raises(kubernetes.client.ApiException) as excinfo:
        await in_thread(lambda: v1.connect_get_node_proxy_with_path(NODE, "stats/summary"))
    assert excinfo.value.status == 503
    assert "connection refused" in json.loads(excinfo.value.body)["message"]


async def test_metrics_api_and_its_absence(cluster: RunningCluster) -> None:
    custom = kubernetes.client.CustomObjectsApi(client(cluster))
    metrics = await in_thread(
        lambda: custom.get_namespaced_custom_object(
            "metrics.k8s.io", "v1beta1", "team-a", "pods", "llama-70b"
        )
    )
    assert metrics["kind"] == "PodMetrics"
    assert metrics["containers"][0]["usage"]["cpu"]
    cluster.state.add_fault(Fault("metrics-api-absent", None, 0.0, None))
    with pytest.raises(kubernetes.client.ApiException) as excinfo:
        await in_thread(
            lambda: custom.get_namespaced_custom_object(
                "metrics.k8s.io", "v1beta1", "team-a", "pods", "llama-70b"
            )
        )
    assert excinfo.value.status == 404


def _sar(user: str, subresource: str) -> kubernetes.client.V1SubjectAccessReview:
    return kubernetes.client.V1SubjectAccessReview(
        spec=kubernetes.client.V1SubjectAccessReviewSpec(
            user=user,
            groups=["system:authenticated"],
            resource_attributes=kubernetes.client.V1ResourceAttributes(
                verb="get",
                group="worker.gpustack.ai",
                resource="instances",
                subresource=subresource,
                namespace="team-a",
                name="llama-70b",
            ),
        )
    )


async def test_subject_access_review_allow_and_deny(cluster: RunningCluster) -> None:
    authz = kubernetes.client.AuthorizationV1Api(client(cluster, "worker"))
    allowed = await in_thread(lambda: authz.create_subject_access_review(_sar("admin", "metrics")))
    assert allowed.status.allowed is True
    plain = await in_thread(lambda: authz.create_subject_access_review(_sar("no-metrics", "")))
    assert plain.status.allowed is True
    denied = await in_thread(
        lambda: authz.create_subject_access_review(_sar("no-metrics", "metrics"))
    )
    assert denied.status.allowed is False


async def test_unknown_path_is_a_404_status(cluster: RunningCluster) -> None:
    code, status = await in_thread(raw_get, client(cluster), "/apis/nonexistent.example/v1/x")
    assert code == 404
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 404, "NotFound")


async def test_unauthenticated_is_401(cluster: RunningCluster) -> None:
    configuration = kubernetes.client.Configuration()
    configuration.host = cluster.url
    configuration.ssl_ca_cert = str(cluster.state.pki.ca)  # no token: the one thing missing
    v1 = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(configuration))
    with pytest.raises(kubernetes.client.ApiException) as excinfo:
        await in_thread(v1.list_node)
    assert excinfo.value.status == 401


async def test_watch_delivers_a_pod_update(cluster: RunningCluster) -> None:
    v1 = kubernetes.client.CoreV1Api(client(cluster))
    listed = await in_thread(
        lambda: v1.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={NODE}")
    )
    version = listed.metadata.resource_version
    seen: list[tuple[str, str, str]] = []
    ready = trio.Event()

    def watch() -> None:
        watcher = kubernetes.watch.Watch()
        for event in watcher.stream(
            v1.list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={NODE}",
            resource_version=version,
            timeout_seconds=10,
        ):
            obj = event["object"]
            seen.append(
                (event["type"], obj.metadata.name, (obj.metadata.labels or {}).get("tier", ""))
            )
            if event["type"] == "MODIFIED":
                watcher.stop()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(in_thread, watch)
        ready.set()
        await trio.sleep(0.5)
        cluster.state.update_pod(
            "team-a", "llama-70b", lambda pod: pod["metadata"]["labels"].update(tier="gold")
        )
    assert ("MODIFIED", "llama-70b", "gold") in seen
    assert not any(kind == "ADDED" for kind, _, _ in seen)  # resumed after the listed version


async def test_configmap_publishes_the_front_proxy_ca(cluster: RunningCluster) -> None:
    v1 = kubernetes.client.CoreV1Api(client(cluster, "worker"))
    cm = await in_thread(
        lambda: v1.read_namespaced_config_map("extension-apiserver-authentication", "kube-system")
    )
    assert cm.data["requestheader-client-ca-file"] == cluster.state.pki.front_proxy_ca.read_text()
    assert json.loads(cm.data["requestheader-allowed-names"]) == ["front-proxy-client"]


# -- the aggregator ---------------------------------------------------------------------------


async def test_aggregator_proxies_with_the_front_proxy_identity(
    cluster: RunningCluster, tmp_path: Path
) -> None:
    """A worker requiring the front-proxy client certificate sees the caller's identity."""
    seen: dict[str, Any] = {}
    worker = QuartTrio("fake-worker")

    @worker.route("/apis/worker.gpustack.ai/v1/<path:rest>")
    async def echo(rest: str) -> Any:
        seen["path"] = rest
        seen["user"] = request.headers.get("X-Remote-User")
        seen["groups"] = request.headers.getlist("X-Remote-Group")
        return {"kind": "InstanceMetrics", "ok": True}

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    pem = tmp_path / "worker.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(pem))
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.certfile = config.keyfile = str(pem)
    config.ca_certs = str(cluster.state.pki.front_proxy_ca)
    config.verify_mode = ssl.CERT_REQUIRED  # only the aggregator's client cert gets in
    config.accesslog = config.errorlog = None
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            lambda task_status: serve(
                worker, config, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        url = binds[0].replace("http://", "https://")
        ca_file = tmp_path / "worker-ca.pem"
        ca.cert_pem.write_to_path(str(ca_file))
        cluster.state.set_worker(url, str(ca_file))
        code, body = await in_thread(
            raw_get,
            client(cluster, "no-metrics"),
            "/apis/worker.gpustack.ai/v1/namespaces/team-a/instances/llama-70b/metrics",
        )
        stop.set()
    assert code == 200
    assert body == {"kind": "InstanceMetrics", "ok": True}
    assert seen["path"] == "namespaces/team-a/instances/llama-70b/metrics"
    assert seen["user"] == "no-metrics"
    assert "system:authenticated" in seen["groups"]


# -- kubectl ----------------------------------------------------------------------------------


@needs_kubectl
async def test_kubectl_reads_the_summary_and_lists_pods(cluster: RunningCluster) -> None:
    raw = await in_thread(
        kubectl, cluster, "get", "--raw", f"/api/v1/nodes/{NODE}/proxy/stats/summary"
    )
    assert raw.returncode == 0, raw.stderr
    assert json.loads(raw.stdout)["node"]["nodeName"] == NODE
    listed = await in_thread(
        kubectl,
        cluster,
        "get",
        "pods",
        "-A",
        "-o",
        "json",
        f"--field-selector=spec.nodeName={NODE}",
    )
    assert listed.returncode == 0, listed.stderr
    assert "llama-70b" in {p["metadata"]["name"] for p in json.loads(listed.stdout)["items"]}


@needs_kubectl
async def test_kubectl_can_i_per_subresource(cluster: RunningCluster) -> None:
    base = ("auth", "can-i", "get", "instances.worker.gpustack.ai", "-n", "team-a")
    plain = await in_thread(lambda: kubectl(cluster, *base, context="no-metrics"))
    assert (plain.returncode, plain.stdout.strip()) == (0, "yes")
    metrics = await in_thread(
        lambda: kubectl(cluster, *base, "--subresource=metrics", context="no-metrics")
    )
    assert metrics.returncode == 1
    assert metrics.stdout.strip().startswith("no")
    admin = await in_thread(lambda: kubectl(cluster, *base, "--subresource=metrics"))
    assert admin.stdout.strip() == "yes"


@needs_kubectl
async def test_kubectl_sees_404_and_an_unavailable_aggregated_api(cluster: RunningCluster) -> None:
    missing = await in_thread(kubectl, cluster, "get", "--raw", "/apis/nope.example/v1/x")
    assert missing.returncode == 1
    assert "NotFound" in missing.stderr
    aggregated = await in_thread(
        kubectl,
        cluster,
        "get",
        "--raw",
        "/apis/worker.gpustack.ai/v1/namespaces/team-a/instances/llama-70b/metrics",
    )
    assert aggregated.returncode == 1
    assert "ServiceUnavailable" in aggregated.stderr


@needs_kubectl
async def test_simulator_cluster_command_serves_until_sigterm(tmp_path: Path) -> None:
    """The foreground command: kubeconfig once listening, clean exit on SIGTERM."""
    command = [
        str(Path(sys.executable).parent / "gpustack-operator"),
        "simulator",
        "cluster",
        "--scenario",
        "amd-rdna3",
        "--state-dir",
        str(tmp_path),
    ]
    process = await trio.lowlevel.open_process(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        config = tmp_path / "kubeconfig"
        with trio.fail_after(HANG):
            while not config.exists():
                await trio.sleep(0.1)
        nodes = await in_thread(
            lambda: subprocess.run(
                [KUBECTL, "--kubeconfig", str(config), "get", "nodes", "-o", "json"],  # type: ignore[list-item]
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        )
        assert nodes.returncode == 0, nodes.stderr
        assert len(json.loads(nodes.stdout)["items"]) >= 1
    finally:
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(HANG):
            code = await process.wait()
    assert code == 0
