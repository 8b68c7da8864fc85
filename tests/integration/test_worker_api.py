"""The worker's aggregated API over real HTTPS, with Device Managers running as processes.

Requests arrive two ways: as the kube-aggregator sends them (front-proxy client certificate and
``X-Remote-*`` headers) and through the stand-in's aggregator proxy with a user's token, which
is what ``kubectl get --raw`` does. Every degradation rule of the spec is provoked for real:
a stopped and a never-started Instance, a kubelet that cannot be reached, no metrics API, a
Device Manager that is gone or not Ready, a recreated Instance and a recreated Pod.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trustme
from worker_stack import WorkerStack, open_worker_stack, serving_snapshot

from gpustack_simulator.cluster.state import INSTANCE
from gpustack_simulator.scenario import Fault
from patience import HANG

V1 = "/apis/worker.gpustack.ai/v1"
NODE = "gpu-node-1"


def metrics_path(namespace: str, name: str) -> str:
    return f"{V1}/namespaces/{namespace}/instances/{name}/metrics"


@pytest.fixture
async def mixed(tmp_path: Path) -> AsyncIterator[WorkerStack]:
    async with open_worker_stack("nvidia-mixed", tmp_path) as stack:
        yield stack


def sample_of(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["kind"] == "InstanceMetrics"
    assert body["apiVersion"] == "worker.gpustack.ai/v1"
    sample: dict[str, Any] = body["sample"]
    return sample


# -- discovery, OpenAPI, health ----------------------------------------------------------------


async def test_discovery_openapi_and_health(mixed: WorkerStack) -> None:
    for path in ("/healthz", "/livez", "/readyz"):
        assert (await mixed.request(path)).status_code == 200  # probes need no identity
    resources = (await mixed.as_aggregator(V1)).json()
    assert resources["kind"] == "APIResourceList"
    names = {r["name"]: r for r in resources["resources"]}
    assert set(names) == {"instances", "instances/metrics"}
    assert names["instances/metrics"]["verbs"] == ["get"]
    groups = (await mixed.as_aggregator("/apis")).json()
    assert groups["kind"] == "APIGroupList"
    assert groups["groups"][0]["preferredVersion"]["groupVersion"] == "worker.gpustack.ai/v1"
    swagger = (await mixed.as_aggregator("/openapi/v2")).json()
    assert f"{V1}/namespaces/{{namespace}}/instances/{{name}}/metrics" in swagger["paths"]
    index = (await mixed.as_aggregator("/openapi/v3")).json()
    [(group_path, entry)] = index["paths"].items()
    assert group_path == "apis/worker.gpustack.ai/v1"
    document = await mixed.as_aggregator(entry["serverRelativeURL"])
    assert document.status_code == 200
    assert document.json()["openapi"].startswith("3.")
    # Through the cluster, as kubectl discovers it: the aggregator proxies the group version.
    proxied = await mixed.through_cluster(V1)
    assert proxied.status_code == 200
    assert proxied.json() == resources


# -- figures: five modes, agreement with the Device Manager's exporter -------------------------


async def test_five_modes_each_as_its_grant_reads(mixed: WorkerStack) -> None:
    seen: dict[str, list[dict[str, Any]]] = {}
    for namespace, name in (
        ("team-a", "llama-70b"),
        ("team-a", "embed-a"),
        ("team-b", "embed-b"),  # terminating, still running: measured
        ("team-a", "qwen-a"),
        ("team-b", "qwen-b"),
        ("team-a", "mig-3g"),
    ):
        sample = sample_of(await mixed.through_cluster(metrics_path(namespace, name)))
        for key in ("cpuUsedMilliCores", "memoryUsedMiB", "storageUsedMiB"):
            assert key in sample, (name, key)
        seen[name] = sample.get("accelerators", [])
    modes = {entry["mode"] for entries in seen.values() for entry in entries}
    assert modes == {"Exclusive", "Shared", "Sliced", "Partitioned"}
    # qwen-b's sidecar holds a Visibility grant on the same card: it adds no entry of its own.
    assert [entry["mode"] for entry in seen["qwen-b"]] == ["Sliced"]
    [mig] = seen["mig-3g"]
    assert mig["id"].startswith("MIG-")
    assert "coresUtilizationPercent" not in mig
    [card] = seen["llama-70b"]
    assert card["mode"] == "Exclusive"
    assert card["memoryTotalMiB"] > 80_000
    # Two Instances Shared on one card report that card's own figures, identically.
    assert seen["embed-a"] == seen["embed-b"]
    # A slice's memory total is its share of the card, never the card.
    [slice_a] = seen["qwen-a"]
    assert slice_a["memoryTotalMiB"] < card["memoryTotalMiB"]


# -- degradation rules ---------------------------------------------------------------------


async def test_never_started_and_stopped_answer_totals_and_zeros(mixed: WorkerStack) -> None:
    reads_before = mixed.worker.summaries.statistics().reads
    stopped = sample_of(await mixed.metrics("team-c", "archived-job"))
    assert (stopped["cpuTotalMilliCores"], stopped["memoryTotalMiB"]) == (2000, 4096)
    assert (stopped["cpuUsedMilliCores"], stopped["memoryUsedMiB"], stopped["storageUsedMiB"]) == (
        0,
        0,
        0,
    )
    assert "accelerators" not in stopped
    pending = sample_of(await mixed.metrics("team-b", "qwen-pending"))
    assert (pending["cpuUsedMilliCores"], pending["memoryUsedMiB"]) == (0, 0)
    assert mixed.worker.summaries.statistics().reads == reads_before  # no upstream I/O


async def test_started_but_not_ready_is_still_measured(mixed: WorkerStack) -> None:
    def unready(pod: dict[str, Any]) -> None:
        for condition in pod["status"].get("conditions", []):
            if condition["type"] in {"Ready", "ContainersReady"}:
                condition["status"] = "False"
        for status in pod["status"].get("containerStatuses", []):
            status["ready"] = False

    mixed.cluster.state.update_pod("team-a", "llama-70b", unready)
    sample = sample_of(await mixed.metrics("team-a", "llama-70b"))
    assert sample["cpuUsedMilliCores"] > 0  # the gate is "has started", not "is ready"
    assert sample["accelerators"][0]["memoryUsedMiB"] > 0


async def test_kubelet_down_falls_back_then_both_down_is_503(mixed: WorkerStack) -> None:
    state = mixed.cluster.state
    state.add_fault(Fault("kubelet-unreachable", NODE, 0.0, None))
    sample = sample_of(await mixed.metrics("team-a", "llama-70b"))
    assert sample["cpuUsedMilliCores"] > 0
    assert sample["memoryUsedMiB"] > 0
    assert "storageUsedMiB" not in sample  # which has no storage figure
    assert sample["accelerators"]  # the Device Manager still answers
    state.add_fault(Fault("metrics-api-absent", None, 0.0, None))
    failed = await mixed.through_cluster(metrics_path("team-a", "embed-a"))
    assert failed.status_code == 503
    status = failed.json()
    assert status["kind"] == "Status"
    assert status["reason"] == "ServiceUnavailable"
    assert "kubelet summary of node gpu-node-1" in status["message"]
    assert "metrics.k8s.io" in status["message"]
    # A stopped Instance still answers: nothing started, nothing to measure.
    assert (await mixed.metrics("team-c", "archived-job")).status_code == 200


async def test_kubelet_failures_are_not_cached(mixed: WorkerStack) -> None:
    state = mixed.cluster.state
    state.add_fault(Fault("kubelet-unreachable", NODE, 0.0, None))
    assert "storageUsedMiB" not in sample_of(await mixed.metrics("team-a", "qwen-a"))
    state.clear_faults()
    assert "storageUsedMiB" in sample_of(await mixed.metrics("team-a", "qwen-a"))


async def test_no_ready_device_manager_leaves_accelerators_absent(mixed: WorkerStack) -> None:
    [dm] = mixed.cluster.state.expanded.device_managers

    def unready(pod: dict[str, Any]) -> None:
        for condition in pod["status"]["conditions"]:
            if condition["type"] == "Ready":
                condition["status"] = "False"

    mixed.cluster.state.update_pod(dm.namespace, dm.name, unready)
    sample = sample_of(await mixed.metrics("team-a", "llama-70b"))
    assert "accelerators" not in sample
    assert sample["cpuUsedMilliCores"] > 0  # the rest of the sample is unaffected


async def test_a_device_manager_that_is_gone_leaves_accelerators_absent(
    mixed: WorkerStack,
) -> None:
    [running] = mixed.device_managers
    running.process.send_signal(signal.SIGKILL)
    await running.process.wait()
    sample = sample_of(await mixed.metrics("team-a", "mig-3g"))
    assert "accelerators" not in sample
    assert sample["memoryUsedMiB"] > 0


async def test_a_stale_snapshot_is_dropped_and_logged(
    mixed: WorkerStack, caplog: pytest.LogCaptureFixture
) -> None:
    [running] = mixed.device_managers
    [dm] = mixed.cluster.state.expanded.device_managers
    async with httpx.AsyncClient(verify=False, trust_env=False) as client:
        live = (await client.get(running.url + "/monitor/snapshot")).json()
    live["timestamp"] = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    folder = mixed.tmp / "stale-dm"
    folder.mkdir()
    async with serving_snapshot(json.dumps(live).encode(), folder) as port:
        mixed.cluster.state.bind_pod_address(dm.namespace, dm.name, "127.0.0.1", port)
        with caplog.at_level(logging.INFO, logger="instance-metrics"):
            sample = sample_of(await mixed.metrics("team-a", "llama-70b"))
    assert "accelerators" not in sample
    assert sample["cpuUsedMilliCores"] > 0
    assert any("stale" in r.getMessage() for r in caplog.records if r.name == "instance-metrics")


async def test_a_recreated_instance_never_reads_the_old_pods_figures(mixed: WorkerStack) -> None:
    def recreated(instance: dict[str, Any]) -> None:
        instance["metadata"]["uid"] = "5a0e7c1e-0000-4000-8000-0000000000aa"

    mixed.cluster.state.store.update(INSTANCE, "team-a", "llama-70b", recreated)
    body = (await mixed.metrics("team-a", "llama-70b")).json()
    assert body["metadata"]["uid"] == "5a0e7c1e-0000-4000-8000-0000000000aa"
    sample = body["sample"]
    assert (sample["cpuUsedMilliCores"], sample["memoryUsedMiB"]) == (0, 0)
    assert "accelerators" not in sample


async def test_a_recreated_pod_never_reads_its_predecessors_usage(mixed: WorkerStack) -> None:
    instance = mixed.cluster.state.store.get(INSTANCE, "team-a", "qwen-a")
    assert instance is not None
    now = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)

    def recreated(pod: dict[str, Any]) -> None:
        pod["metadata"]["uid"] = "0c0ffee0-0000-4000-8000-0000000000bb"
        pod["metadata"]["creationTimestamp"] = now.strftime("%Y-%m-%dT%H:%M:%SZ")

    mixed.cluster.state.update_pod("team-a", "qwen-a", recreated)
    answer = await mixed.metrics("team-a", "qwen-a")
    # The kubelet lists the old UID and metrics.k8s.io's entry predates the new Pod: neither
    # is this Pod's, so no source measured it.
    assert answer.status_code == 503, answer.text
    assert "qwen-a" in answer.json()["message"]


async def test_two_manufacturers_in_one_allocation(tmp_path: Path) -> None:
    async with open_worker_stack("nvidia-amd", tmp_path) as stack:
        sample = sample_of(await stack.through_cluster(metrics_path("team-a", "hybrid")))
        ids = {entry["id"]: entry for entry in sample["accelerators"]}
        assert set(ids) == {"MIG-1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f", "0000:66:00.0"}
        assert ids["0000:66:00.0"]["mode"] == "Sliced"
        assert ids["MIG-1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"]["mode"] == "Partitioned"
        # The AMD Device Manager stops: its card goes, the NVIDIA one stays — never substituted.
        amd = next(dm for dm in stack.device_managers if dm.manufacturer == "amd")
        amd.process.send_signal(signal.SIGKILL)
        await amd.process.wait()
        # The worker holds a snapshot until its producer's next tick (at most one period, 1 s
        # here) and asks again only then: the card goes. On a loaded machine that second can
        # stretch to many, so the deadline here only catches a hang.
        with trio.fail_after(HANG):
            while True:
                after = sample_of(await stack.metrics("team-a", "hybrid"))
                if len(after["accelerators"]) == 1:
                    break
                await trio.sleep(0.2)
        assert [entry["id"] for entry in after["accelerators"]] == [
            "MIG-1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
        ]
        assert after["cpuUsedMilliCores"] > 0


# -- Instances through v1 --------------------------------------------------------------------


async def test_instances_are_served_as_v1(mixed: WorkerStack) -> None:
    one = await mixed.through_cluster(f"{V1}/namespaces/team-a/instances/llama-70b")
    assert one.status_code == 200
    assert (one.json()["apiVersion"], one.json()["kind"]) == ("worker.gpustack.ai/v1", "Instance")
    listed = (await mixed.through_cluster(f"{V1}/namespaces/team-a/instances")).json()
    assert listed["kind"] == "InstanceList"
    assert "llama-70b" in {item["metadata"]["name"] for item in listed["items"]}
    everywhere = (await mixed.as_aggregator(f"{V1}/instances")).json()
    assert {"team-a", "team-b", "team-c"} <= {
        i["metadata"]["namespace"] for i in everywhere["items"]
    }
    missing = await mixed.through_cluster(f"{V1}/namespaces/team-a/instances/nope")
    assert missing.status_code == 404
    assert missing.json()["reason"] == "NotFound"
    assert '"nope" not found' in missing.json()["message"]
    missing_metrics = await mixed.metrics("team-a", "nope")
    assert missing_metrics.status_code == 404
    # The subresource takes no write; an Instance write without a body is a 400 naming it.
    posted = await mixed.as_aggregator(
        f"{V1}/namespaces/team-a/instances/llama-70b/metrics", method="POST"
    )
    assert posted.status_code == 405
    assert posted.json()["reason"] == "MethodNotAllowed"
    empty = await mixed.as_aggregator(f"{V1}/namespaces/team-a/instances", method="POST")
    assert empty.status_code == 400
    assert "not a JSON object" in empty.json()["message"]
    for method in ("OPTIONS", "DELETE", "POST"):  # never an unauthenticated empty 200
        anonymous = await mixed.request(f"{V1}/namespaces/team-a/instances", method=method)
        assert anonymous.status_code == 401, method


# -- authentication and authorization --------------------------------------------------------


def _client_cert(tmp: Path, ca: trustme.CA, cn: str, name: str) -> Path:
    path = tmp / f"{name}.pem"
    ca.issue_cert(f"{name}.invalid", common_name=cn).private_key_and_cert_chain_pem.write_to_path(
        str(path)
    )
    return path


async def test_401_unless_the_front_proxy_certificate_verifies(mixed: WorkerStack) -> None:
    path = metrics_path("team-a", "llama-70b")
    identity = [("X-Remote-User", "admin"), ("X-Remote-Group", "system:masters")]
    pki = mixed.cluster.state.pki
    foreign = _client_cert(mixed.tmp, trustme.CA(), "front-proxy-client", "foreign")
    front_proxy_ca = trustme.CA.from_pem(
        pki.front_proxy_ca.read_bytes(), pki.front_proxy_ca_key.read_bytes()
    )
    intruder = _client_cert(mixed.tmp, front_proxy_ca, "intruder", "intruder")
    cases = {
        "no certificate, identity headers": (None, identity),
        "certificate from another CA": (foreign, identity),
        "right CA, CN not in requestheader-allowed-names": (intruder, identity),
        "no certificate, no headers": (None, []),
        "front-proxy certificate without X-Remote-User": (pki.front_proxy_client, []),
    }
    for case, (cert, headers) in cases.items():
        answer = await mixed.request(path, cert=cert, headers=headers)
        assert answer.status_code == 401, case
        status = answer.json()
        assert (status["kind"], status["reason"], status["code"]) == ("Status", "Unauthorized", 401)
    ok = await mixed.request(
        path, cert=mixed.cluster.state.pki.front_proxy_client, headers=identity
    )
    assert ok.status_code == 200


async def test_403_for_get_instances_without_get_instances_metrics(mixed: WorkerStack) -> None:
    instance = f"{V1}/namespaces/team-a/instances/llama-70b"
    assert (await mixed.through_cluster(instance, user="no-metrics")).status_code == 200
    denied = await mixed.through_cluster(metrics_path("team-a", "llama-70b"), user="no-metrics")
    assert denied.status_code == 403
    status = denied.json()
    assert status["reason"] == "Forbidden"
    assert (
        'cannot get resource "instances/metrics" in API group "worker.gpustack.ai"'
        in (status["message"])
    )
    # The review's own reason rides along, as kube-apiserver appends it.
    assert 'has no rule allowing "get" on "instances/metrics"' in status["message"]
    assert status["details"]["kind"] == "instances"
    # Namespace-scoped permission: allowed in team-a, denied in team-b.
    viewer = "team-a-viewer"
    assert (
        await mixed.through_cluster(metrics_path("team-a", "qwen-a"), viewer)
    ).status_code == 200
    assert (
        await mixed.through_cluster(metrics_path("team-b", "qwen-b"), viewer)
    ).status_code == 403
    # The same decisions hold as the aggregator asserts them directly.
    direct = await mixed.as_aggregator(
        metrics_path("team-a", "llama-70b"), user="no-metrics", groups=("system:authenticated",)
    )
    assert direct.status_code == 403


async def test_concurrent_readers_of_one_node_cost_one_kubelet_read(mixed: WorkerStack) -> None:
    """The aggregator multiplexes over HTTP/2: 100 concurrent reads of five Instances, one node."""
    names = [
        ("team-a", "llama-70b"),
        ("team-a", "embed-a"),
        ("team-a", "qwen-a"),
        ("team-b", "qwen-b"),
        ("team-a", "mig-3g"),
    ]
    before = mixed.worker.summaries.statistics().reads
    codes: list[int] = []
    context = mixed.tls(cert=mixed.cluster.state.pki.front_proxy_client)
    headers = {"X-Remote-User": "admin", "X-Remote-Group": "system:masters"}
    async with httpx.AsyncClient(
        verify=context, http2=True, headers=headers, timeout=60, trust_env=False
    ) as client:

        async def one(namespace: str, name: str) -> None:
            response = await client.get(mixed.url + metrics_path(namespace, name))
            codes.append(response.status_code)

        async with trio.open_nursery() as nursery:
            for index in range(100):
                nursery.start_soon(one, *names[index % len(names)])
    assert codes.count(200) == 100
    assert mixed.worker.summaries.statistics().reads - before == 1
