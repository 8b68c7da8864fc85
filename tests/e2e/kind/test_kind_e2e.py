"""End to end on a kind cluster: the chart installed in simulation mode, real kubelets.

One suite, two targets: the assertions are ``tests/e2e/local``'s, called with a
:class:`~kind_target.KindTarget` instead of the ``simulator up`` system (the local suite is
loaded by path and left as it is). What differs on a real cluster is said where it differs:

- the demo's Instances are created for real (Instance, Pod running ``sleep``), on the kind
  workers whose simulated recordings match the demo's nodes; CPU, memory and storage are the
  real kubelet's, so "load rises" runs a real busy loop instead of advancing a virtual clock;
- node names are the kind workers', so node-scoped checks use the target's node map;
- per-process attribution of a ``Sliced`` share runs for real: the chart starts the simulated
  Device Managers with ``--bind-replayed-pids``, which binds the recording's process rows on a
  device to live processes (the ``sleep``) of the Pod containers holding it, and attribution
  places those on the Pods through their real cgroups. The figures are the recording's, so the
  tests check that they are present, not what they measure.

``clusters/kind/e2e.sh`` (``just e2e-kind``) sets ``GPUSTACK_E2E_KIND_KUBECONFIG``; without it
every cluster test skips, saying so. The tests at the bottom need no cluster and always run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kind_target import (
    COMPONENT_SELECTOR,
    DEVICE_MANAGER_PORT,
    IMAGE_ENV,
    REPO,
    SYSTEM_NAMESPACE,
    KindTarget,
    bind,
    controller_instance,
    demo,
    eventually,
    grant_users,
    load_local_suite,
    new_target,
    place_demo,
    plan_demo,
    plugin_pod,
    relabel,
    simulated_recordings,
    skip_reason,
    wait_running,
)

from gpustack_core.allocation import ANNOTATION, grants, parse_allocation
from gpustack_core.modes import AllocationMode
from gpustack_core.pods import PART_OF_LABEL
from gpustack_core.tokens import parse_token_id

local = load_local_suite()
SKIP = skip_reason()
needs_cluster = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")
V1 = "/apis/worker.gpustack.ai/v1"


@pytest.fixture(scope="module")
def target() -> Iterator[KindTarget]:
    found, image = new_target()
    plan = place_demo(found, image)
    created = grant_users(found, "team-a")
    try:
        wait_running(found, plan)
        # Every running Instance is measured: the kubelet has CPU figures and the Device
        # Managers have indexed the Pods (an accelerator entry per grant).
        eventually(lambda: local.test_all_six_figures_and_the_timestamp_are_present(found), 180)
        eventually(lambda: _has_accelerators(found, "team-a", "llama-70b"), 120)
        yield found
    finally:
        for path in created:
            found.delete(path)
        for namespace in plan.namespaces:
            found.delete(f"/api/v1/namespaces/{namespace}")


def _has_accelerators(target: KindTarget, namespace: str, name: str) -> None:
    assert local.sample(target, namespace, name).get("accelerators"), f"{namespace}/{name}"


# -- the cluster itself ----------------------------------------------------------------------


@needs_cluster
def test_the_apiservice_is_available_and_serves_v1(target: KindTarget) -> None:
    with target.api() as client:
        service = client.get("/apis/apiregistration.k8s.io/v1/apiservices/v1.worker.gpustack.ai")
        resources = client.get(V1).json()
        group = client.get("/apis/worker.gpustack.ai").json()
    conditions = {c["type"]: c["status"] for c in service.json()["status"]["conditions"]}
    assert conditions["Available"] == "True"
    assert {r["name"] for r in resources["resources"]} == {"instances", "instances/metrics"}
    assert group["preferredVersion"]["version"] == "v1"  # versionPriority 200 beats v1alpha1
    # kubectl reads the preferred version, so a plain `get instances` goes through the worker.
    listed = target.kubectl("get", "instances.worker.gpustack.ai", "-A", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    items = json.loads(listed.stdout)["items"]
    assert items
    assert {item["apiVersion"] for item in items} == {"worker.gpustack.ai/v1"}


@needs_cluster
def test_a_device_manager_per_simulated_manufacturer_on_its_node(target: KindTarget) -> None:
    """One DaemonSet per simulated manufacturer (the kind values', plus Hygon when e2e.sh found
    a Hygon recording), one Pod on each node labelled for it, replaying that vendor's cards."""
    with target.api() as client:
        daemonsets = client.get(
            f"/apis/apps/v1/namespaces/{SYSTEM_NAMESPACE}/daemonsets",
            params={"labelSelector": COMPONENT_SELECTOR},
        ).json()["items"]
        pods = client.get(
            f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/pods",
            params={"labelSelector": COMPONENT_SELECTOR},
        ).json()["items"]
    deployed = {d["metadata"]["labels"]["gpustack.ai/manufacturer"] for d in daemonsets}
    assert deployed >= set(simulated_recordings())
    on_nodes = sorted(
        (p["spec"]["nodeName"], p["metadata"]["labels"]["gpustack.ai/manufacturer"]) for p in pods
    )
    expected = sorted((n, m) for n, m in target.manufacturers.items() if m in deployed)
    assert on_nodes == expected
    for pod in pods:
        manufacturer = pod["metadata"]["labels"]["gpustack.ai/manufacturer"]
        assert pod["spec"]["hostPID"] is True
        snapshot = target.proxied(pod["metadata"]["name"], "/monitor/snapshot").json()
        groups = snapshot["groups"]
        assert groups, f"{manufacturer}: no cards in the snapshot"
        assert {g["manufacturer"] for g in groups} == {manufacturer}
        assert all(g["accelerators"] for g in groups)


# -- the local suite's assertions, against the cluster ------------------------------------


@needs_cluster
def test_all_six_figures_and_the_timestamp_are_present(target: KindTarget) -> None:
    local.test_all_six_figures_and_the_timestamp_are_present(target)


@needs_cluster
def test_totals_are_the_pod_limit_sums_init_excluded(target: KindTarget) -> None:
    local.test_totals_are_the_pod_limit_sums_init_excluded(target)


@needs_cluster
def test_a_stopped_instance_answers_totals_and_zeros(target: KindTarget) -> None:
    local.test_a_stopped_instance_answers_totals_and_zeros(target)


@needs_cluster
def test_a_mig_partition_reports_its_own_id_and_figures(target: KindTarget) -> None:
    # A partition is read on its own handle, by the identifier its allocation recorded: no
    # process attribution is involved, so this holds on kind as it does locally.
    local.test_a_mig_partition_reports_its_own_id_and_figures(target)


@needs_cluster
def test_the_rdna3_node_reports_memory_and_no_compute(target: KindTarget) -> None:
    """Bound to the ``sleep`` of chat-a and chat-b; a tick or two after the Pods are indexed."""
    eventually(lambda: local.test_the_rdna3_node_reports_memory_and_no_compute(target), 60)


@needs_cluster
def test_a_sliced_share_reports_its_own_memory(target: KindTarget) -> None:
    """qwen-a's row is bound to its ``sleep``, so attribution finds it on the real cgroup."""

    def measured() -> None:
        [entry] = local.sample(target, "team-a", "qwen-a")["accelerators"]
        assert entry["mode"] == "Sliced"
        assert "memoryUsedMiB" in entry, entry

    eventually(measured, 60)


@needs_cluster
def test_the_slice_pass_queries_only_carved_cards(target: KindTarget) -> None:
    """The local test, with the kind node's name in the Pod query."""
    snapshot = target.snapshot("gpu-node-1", "nvidia")
    queried = {device["deviceID"] for device in snapshot["slices"]["devices"]}
    with target.api() as client:
        pods = client.get(
            "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={target.nodes['gpu-node-1']}"}
        ).json()
    carved = set()
    for item in pods["items"]:
        annotation = item["metadata"].get("annotations", {}).get(ANNOTATION)
        if annotation is not None:
            for grant in grants(parse_allocation(annotation)):
                if grant.accelerator.mode == AllocationMode.SLICED:
                    carved.add(grant.accelerator.id)
    assert carved, "the demo has sliced Pods on gpu-node-1"
    assert queried == carved


@needs_cluster
def test_cpu_used_rises_under_real_load(target: KindTarget) -> None:
    """The local test advances the stand-in's clock; here a real busy loop runs in the Pod."""
    before = local.sample(target, "team-a", "llama-70b")["cpuUsedMilliCores"]
    kubectl = shutil.which("kubectl")
    assert kubectl is not None
    busy = subprocess.Popen(
        [
            kubectl,
            "--kubeconfig",
            str(target.kubeconfig),
            "exec",
            "-n",
            "team-a",
            "llama-70b",
            "-c",
            "main",
            "--",
            "timeout",
            "90",
            "sh",
            "-c",
            "while :; do :; done",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def risen() -> int:
            after = local.sample(target, "team-a", "llama-70b")["cpuUsedMilliCores"]
            assert after >= max(before + 300, 300), (before, after)
            return int(after)

        # The kubelet averages over its housekeeping window; the worker caches 15 s per node.
        eventually(risen, 80, interval=3)
    finally:
        busy.kill()
        busy.wait()


@needs_cluster
def test_the_exporters_gauges_agree_with_the_subresource(target: KindTarget) -> None:
    """Live kubelet figures move between the two reads (the worker caches 15 s, the exporter
    samples each period), so agreement is awaited over a longer window than locally."""
    attempts: list[list[str]] = []

    def agree() -> None:
        attempts.append(local._disagreements(target))
        assert not attempts[-1], attempts[-1]

    eventually(agree, 60, interval=2)


@needs_cluster
def test_exactly_one_pod_level_publisher_per_node(target: KindTarget) -> None:
    publishers: dict[str, list[str]] = {}
    for node, kind_node in target.nodes.items():
        manufacturer = target.manufacturers[kind_node]
        text = target.exposition(node, manufacturer)
        if "gpustack_instance_cpu_total_millicores{" in text:
            publishers.setdefault(node, []).append(manufacturer)
    assert set(publishers) == set(target.nodes)
    assert all(len(found) == 1 for found in publishers.values()), publishers


@needs_cluster
def test_kubectl_get_raw_returns_instance_metrics(target: KindTarget) -> None:
    local.test_kubectl_get_raw_returns_instance_metrics(target)


@needs_cluster
def test_a_caller_without_get_instances_metrics_is_denied_through_kubectl(
    target: KindTarget,
) -> None:
    local.test_a_caller_without_get_instances_metrics_is_denied_through_kubectl(target)


@needs_cluster
def test_the_view_role_reads_metrics_through_the_charts_aggregated_role(
    target: KindTarget,
) -> None:
    """``team-a-viewer`` holds only ``view`` in team-a; the chart's role adds the subresource."""
    path = f"{V1}/namespaces/team-a/instances/qwen-a/metrics"
    read = eventually(
        lambda: _succeeds(target.kubectl("get", "--raw", path, context="team-a-viewer")), 30
    )
    assert json.loads(read.stdout)["kind"] == "InstanceMetrics"
    elsewhere = target.kubectl(
        "get", "--raw", f"{V1}/namespaces/team-b/instances/qwen-b/metrics", context="team-a-viewer"
    )
    assert elsewhere.returncode != 0
    assert "forbidden" in elsewhere.stderr.lower()


def _succeeds(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, done.stderr
    return done


@needs_cluster
def test_the_spec_relabelling_addresses_every_device_manager(target: KindTarget) -> None:
    """The spec's ``kubernetes_sd_configs`` relabelling on the cluster's real Endpoints.

    The Pod network is not reachable from the runner, so no Prometheus scrapes here (the local
    suite and tests/integration run a real one); this applies the spec's rules, as Prometheus
    applies them, to the targets ``role: endpoints`` yields as the ``prometheus`` user sees them.
    """
    targets = local.endpoints_targets(target)
    with target.api() as client:
        pods = client.get(
            f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/pods",
            params={"labelSelector": COMPONENT_SELECTOR},
        ).json()["items"]
    expected = {f"https://{p['status']['podIP']}:{DEVICE_MANAGER_PORT}/metrics" for p in pods}
    urls = set()
    for group in targets:
        for address in group["targets"]:
            labels = relabel({**group["labels"], "__address__": address}, local.SPEC_RELABELLING)
            assert labels is not None, group
            urls.add(
                f"{labels['__scheme__']}://{labels['__address__']}{labels['__metrics_path__']}"
            )
    assert urls == expected


# -- no cluster needed: the plan and the helpers the cluster run relies on ------------------


KIND_NODES = {"nvidia": "gpustack-e2e-worker", "amd": "gpustack-e2e-worker2"}


def test_the_plan_places_the_local_suites_instances_on_the_simulated_nodes() -> None:
    plan = plan_demo(demo(), KIND_NODES, "gpustack-operator:e2e")
    assert plan.nodes == {"gpu-node-1": KIND_NODES["nvidia"], "rdna3-ws-1": KIND_NODES["amd"]}
    assert set(local.RUNNING) <= set(plan.running)
    assert ("team-a", "chat-a") in plan.running  # the RDNA3 checks
    assert plan.stopped == [("team-c", "archived-job")]
    # Terminating, pending, re-created and unmapped-node Pods are the stand-in's business.
    names = {name for _, name in plan.running}
    assert not names & {"embed-b", "qwen-pending", "notebook", "hybrid", "rocm-slice"}


def test_the_planned_pods_schedule_on_a_kind_node_and_keep_the_scenarios_figures() -> None:
    plan = plan_demo(demo(), KIND_NODES, "gpustack-operator:e2e")
    scenario = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in demo().pods}
    for instance, pod in plan.objects:
        if pod is None:
            continue
        source = scenario[(pod["metadata"]["namespace"], pod["metadata"]["name"])]
        assert pod["metadata"]["annotations"] == {
            ANNOTATION: source["metadata"]["annotations"][ANNOTATION]
        }
        assert pod["spec"]["nodeSelector"]["gpustack.ai/simulate"] in KIND_NODES
        for container, original in zip(
            pod["spec"]["containers"], source["spec"]["containers"], strict=True
        ):
            limits = container["resources"]["limits"]
            assert all("/" not in key for key in limits)  # no device plugin on kind
            core = {k: v for k, v in original["resources"]["limits"].items() if "/" not in k}
            assert limits == core  # the totals the subresource reports
            assert set(container["resources"]["requests"]) == set(limits)
        bound = bind(pod, {**instance, "metadata": {**instance["metadata"], "uid": "u-1"}})
        [owner] = bound["metadata"]["ownerReferences"]
        assert owner["uid"] == "u-1"
        assert owner["controller"] is True
        assert owner["kind"] == "Instance"
        assert bound["metadata"]["labels"][PART_OF_LABEL] == "u-1"


def test_the_relabelling_helper_matches_the_specs_example() -> None:
    labels = {
        "__address__": "10.244.1.7:443",
        "__meta_kubernetes_service_annotation_prometheus_io_scrape": "true",
        "__meta_kubernetes_service_annotation_prometheus_io_scheme": "https",
        "__meta_kubernetes_service_annotation_prometheus_io_path": "/metrics",
        "__meta_kubernetes_service_annotation_prometheus_io_port": "32443",
    }
    out = relabel(labels, local.SPEC_RELABELLING)
    assert out is not None
    assert (out["__scheme__"], out["__address__"], out["__metrics_path__"]) == (
        "https",
        "10.244.1.7:32443",
        "/metrics",
    )
    dropped = {**labels, "__meta_kubernetes_service_annotation_prometheus_io_scrape": "false"}
    assert relabel(dropped, local.SPEC_RELABELLING) is None


def test_the_kind_values_simulate_what_the_kind_config_labels() -> None:
    config = yaml.safe_load((REPO / "clusters" / "kind" / "cluster.yaml").read_text())
    labelled = {n["labels"]["gpustack.ai/simulate"] for n in config["nodes"] if "labels" in n}
    assert set(simulated_recordings()) <= labelled


def test_without_a_cluster_the_reason_names_the_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUSTACK_E2E_KIND_KUBECONFIG", raising=False)
    reason = skip_reason()
    assert reason is not None
    assert "just e2e-kind" in reason
    assert "GPUSTACK_E2E_KIND_KUBECONFIG" in reason
    monkeypatch.setenv("GPUSTACK_E2E_KIND_KUBECONFIG", "/x")
    assert skip_reason() is None


def test_the_wait_helper_returns_once_the_check_holds() -> None:
    calls = []

    def check() -> int:
        calls.append(time.monotonic())
        assert len(calls) >= 3
        return len(calls)

    assert eventually(check, 5, interval=0.01) == 3
    with pytest.raises(AssertionError):
        eventually(_never, 0.05, interval=0.01)


def _never() -> Any:
    raise AssertionError("never holds")


def test_the_planned_objects_are_valid_for_the_api_server() -> None:
    """What the cluster run will POST: Pods strictly against Kubernetes' schema, Instances
    against the CRD's own ``openAPIV3Schema``."""
    validate, jsonschema, version, instance_schema = _validators()
    plan = plan_demo(demo(), KIND_NODES, "gpustack-operator:e2e")
    for instance, pod in plan.objects:
        assert instance["apiVersion"] == f"worker.gpustack.ai/{version['name']}"
        jsonschema.validate(instance, instance_schema)
        if pod is not None:
            created = {**instance, "metadata": {**instance["metadata"], "uid": "u-1"}}
            validate(bind(pod, created), "1.30", strict=True)


# -- the operator half with the real kubelet ------------------------------------------------


def _image() -> str:
    return os.environ.get(IMAGE_ENV, "gpustack-operator:e2e")


@needs_cluster
def test_a_pod_without_an_annotation_is_allocated_by_the_plugin(target: KindTarget) -> None:
    """The real kubelet schedules a share by the plugin's advertised tokens and calls Allocate;
    the Device Manager writes the annotation (nobody else does)."""
    node = target.nodes["gpu-node-1"]
    path = "/api/v1/namespaces/team-a/pods"
    target.create(path, plugin_pod("plugin-share", "team-a", node, _image()))
    try:

        def allocated() -> dict[str, Any]:
            with target.api() as client:
                pod: dict[str, Any] = client.get(f"{path}/plugin-share").json()
            assert pod["status"].get("phase") == "Running", pod["status"]
            assert ANNOTATION in pod["metadata"].get("annotations", {}), "not annotated yet"
            return pod

        pod = eventually(allocated, 180)
        allocation = parse_allocation(pod["metadata"]["annotations"][ANNOTATION])
        (grant,) = grants(allocation)
        assert (grant.container, grant.manufacturer) == ("main", "nvidia")
        assert grant.accelerator.mode is AllocationMode.SHARED
        (device_id,) = allocation["main"].device_ids
        assert parse_token_id(device_id).accelerator == grant.accelerator.id
    finally:
        target.delete(f"{path}/plugin-share")


@needs_cluster
def test_the_charts_controller_runs_an_instance_across_stop_and_start(
    target: KindTarget,
) -> None:
    node = target.nodes["gpu-node-1"]
    base = "/apis/worker.gpustack.ai/v1alpha1/namespaces/team-a/instances"
    target.create(base, controller_instance("kind-life", "team-a", node, _image()))
    try:

        def phase(wanted: str) -> dict[str, Any]:
            with target.api() as client:
                found: dict[str, Any] = client.get(f"{base}/kind-life").json()
            assert found.get("status", {}).get("phase") == wanted, found.get("status")
            return found

        ready = eventually(lambda: phase("Ready"), 180)
        uid = ready["metadata"]["uid"]
        with target.api() as client:
            pod = client.get("/api/v1/namespaces/team-a/pods/kind-life").json()
            service = client.get("/api/v1/namespaces/team-a/services/kind-life").json()
        assert pod["metadata"]["labels"][PART_OF_LABEL] == uid
        assert pod["spec"]["nodeName"] == node
        ports = {p["port"]: p["nodePort"] for p in service["spec"]["ports"]}
        assert set(ports) == {22, 8888}
        with target.api() as client:
            client.patch(
                f"{base}/kind-life",
                json={"spec": {"stop": True}},
                headers={"Content-Type": "application/merge-patch+json"},
            )
        eventually(lambda: phase("Stopped"), 120)
        with target.api() as client:
            assert client.get("/api/v1/namespaces/team-a/pods/kind-life").status_code == 404
            kept = client.get("/api/v1/namespaces/team-a/services/kind-life").json()
            client.patch(
                f"{base}/kind-life",
                json={"spec": {"stop": False}},
                headers={"Content-Type": "application/merge-patch+json"},
            )
        assert {p["port"]: p["nodePort"] for p in kept["spec"]["ports"]} == ports
        again = eventually(lambda: phase("Ready"), 180)
        assert {p["port"]: p["nodePort"] for p in again["status"]["ports"]} == ports
    finally:
        target.delete(f"{base}/kind-life")


def test_the_operator_half_objects_are_valid_for_the_api_server() -> None:
    """What the two tests above POST: the Pod against Kubernetes' schema, the Instance against
    the CRD's, so a typo fails here and not only on kind."""
    validate, jsonschema, _, instance_schema = _validators()
    validate(plugin_pod("p", "team-a", "n", "img"), "1.30", strict=True)
    jsonschema.validate(controller_instance("i", "team-a", "n", "img"), instance_schema)


def _validators() -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """kubernetes_validate's ``validate``, jsonschema, the CRD's version and its schema."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        validate = pytest.importorskip("kubernetes_validate").validate
    jsonschema = pytest.importorskip("jsonschema")
    crd = yaml.safe_load(
        (REPO / "clusters" / "crds" / "instances.worker.gpustack.ai.yaml").read_text()
    )
    [version] = crd["spec"]["versions"]
    return validate, jsonschema, version, version["schema"]["openAPIV3Schema"]
