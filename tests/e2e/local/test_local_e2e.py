"""End to end on one machine: every daemon a real process, every request real HTTPS.

What the reference system's own e2e checks for this feature, against ``simulator up`` with the
demo scenario (an NVIDIA node with every allocation mode, an AMD RDNA3 node, and a node with
both an NVIDIA and an AMD Device Manager): the subresource's fields and totals, load rising,
a stopped Instance, RBAC through kubectl, the exporter agreeing with the subresource, one
Pod-level publisher per node, the slice pass, MIG, RDNA3 — and a real Prometheus scraping the
Device Managers with the spec's relabelling and answering its queries.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml
from e2e_system import CONTROL_PLANE, V1, System, cli
from kubernetes.utils.quantity import parse_quantity
from prometheus_client.parser import text_string_to_metric_families

from gpustack_core.allocation import ANNOTATION, grants, parse_allocation
from gpustack_core.modes import AllocationMode

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed here")
RUNNING = [
    ("team-a", "llama-70b"),
    ("team-a", "embed-a"),
    ("team-a", "qwen-a"),
    ("team-b", "qwen-b"),
    ("team-a", "mig-3g"),
]


def sample(system: System, namespace: str, name: str, user: str = "admin") -> dict[str, Any]:
    response = system.metrics(namespace, name, user)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["kind"] == "InstanceMetrics"
    assert body["metadata"]["name"] == name
    result: dict[str, Any] = body["sample"]
    return result


def pod(system: System, namespace: str, name: str) -> dict[str, Any]:
    with system.api() as client:
        found: dict[str, Any] = client.get(f"/api/v1/namespaces/{namespace}/pods/{name}").json()
    return found


# -- the subresource ----------------------------------------------------------------------


def test_all_six_figures_and_the_timestamp_are_present(system: System) -> None:
    for namespace, name in RUNNING:
        figures = sample(system, namespace, name)
        for key in (
            "timestamp",
            "cpuTotalMilliCores",
            "cpuUsedMilliCores",
            "memoryTotalMiB",
            "memoryUsedMiB",
            "storageTotalMiB",
            "storageUsedMiB",
        ):
            assert key in figures, (name, key)


def test_totals_are_the_pod_limit_sums_init_excluded(system: System) -> None:
    for namespace, name in RUNNING:
        spec = pod(system, namespace, name)["spec"]
        limits = [c.get("resources", {}).get("limits", {}) for c in spec["containers"]]

        def total(resource: str, limits: list[dict[str, str]] = limits) -> Any:
            return sum(parse_quantity(item[resource]) for item in limits if resource in item)

        figures = sample(system, namespace, name)
        assert figures["cpuTotalMilliCores"] == math.ceil(total("cpu") * 1000), name
        mib = 1024 * 1024
        assert figures["memoryTotalMiB"] == math.ceil(total("memory") / mib), name
        assert figures["storageTotalMiB"] == math.ceil(total("ephemeral-storage") / mib), name
    # llama-70b's init container declares 2 CPUs of its own: counted, they would show here.
    llama = pod(system, "team-a", "llama-70b")["spec"]
    assert llama["initContainers"], "the scenario's init container is what this test excludes"


LLAMA_LOAD_STEPS = (30.0, 90.0)
"""Scenario seconds at which nvidia-mixed's llama-70b uses more CPU (500m → 6 → 7.5 cores)."""


def test_cpu_used_rises_when_the_scenario_applies_load(system: System) -> None:
    now = system.control("GET", "state")["now"]
    step = next((t for t in LLAMA_LOAD_STEPS if t > now), None)
    assert step is not None, f"the scenario is already past its last load step ({now:.0f} s)"
    before = sample(system, "team-a", "llama-70b")["cpuUsedMilliCores"]
    system.control("POST", "clock", {"advanceSeconds": step - now + 1})
    deadline = time.monotonic() + 25  # the subresource's summary cache holds a node for 15 s
    after = before
    while time.monotonic() < deadline and after <= before:
        time.sleep(1)
        after = sample(system, "team-a", "llama-70b")["cpuUsedMilliCores"]
    assert after > before


def test_a_stopped_instance_answers_totals_and_zeros(system: System) -> None:
    figures = sample(system, "team-c", "archived-job")
    assert figures["cpuTotalMilliCores"] == 2000
    assert (figures["cpuUsedMilliCores"], figures["memoryUsedMiB"], figures["storageUsedMiB"]) == (
        0,
        0,
        0,
    )
    assert "accelerators" not in figures


def test_a_mig_partition_reports_its_own_id_and_figures(system: System) -> None:
    [entry] = sample(system, "team-a", "mig-3g")["accelerators"]
    assert entry["id"].startswith("MIG-")
    assert entry["mode"] == "Partitioned"
    assert 39_000 < entry["memoryTotalMiB"] < 41_000  # a 3g.40gb, not the 80 GB card
    assert "memoryUsedMiB" in entry
    assert "coresUtilizationPercent" not in entry


def test_the_rdna3_node_reports_memory_and_no_compute(system: System) -> None:
    for namespace, name in (("team-a", "chat-a"), ("team-b", "chat-b")):
        [entry] = sample(system, namespace, name)["accelerators"]
        assert entry["memoryUsedMiB"] > 0, name
        assert "coresUtilizationPercent" not in entry, name
    snapshot = system.snapshot("rdna3-ws-1", "amd")
    reasons = {
        (device.get("memoryReason", ""), device.get("coresReason", ""))
        for device in snapshot["slices"]["devices"]
    }
    assert reasons == {("", "unsupported")}


def test_the_slice_pass_queries_only_carved_cards(system: System) -> None:
    snapshot = system.snapshot("gpu-node-1", "nvidia")
    queried = {device["deviceID"] for device in snapshot["slices"]["devices"]}
    carved = set()
    with system.api() as client:
        pods = client.get(
            "/api/v1/pods", params={"fieldSelector": "spec.nodeName=gpu-node-1"}
        ).json()
    for item in pods["items"]:
        annotation = item["metadata"].get("annotations", {}).get(ANNOTATION)
        if annotation is not None:
            for grant in grants(parse_allocation(annotation)):
                if grant.accelerator.mode == AllocationMode.SLICED:
                    carved.add(grant.accelerator.id)
    assert carved, "the scenario has sliced Pods on gpu-node-1"
    assert queried == carved


# -- every manufacturer -----------------------------------------------------------------------


def _poll(check: Any, timeout: float = 100.0, interval: float = 1.0) -> Any:
    """``check()`` until it returns something truthy (what it returns), or its last answer."""
    deadline = time.monotonic() + timeout
    answer = check()
    while not answer and time.monotonic() < deadline:
        time.sleep(interval)
        answer = check()
    return answer


def test_hygon_quarter_slice_reads_44_and_a_partition_its_own_compute(system: System) -> None:
    """The recordings run their kernels 30 s into each 60 s loop: wait for that phase."""

    def phase() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]] | None:
        [quarter] = sample(system, "team-a", "qwen-quarter")["accelerators"]
        [busy] = sample(system, "team-a", "mig-busy")["accelerators"]
        [idle] = sample(system, "team-b", "mig-idle")["accelerators"]
        working = quarter.get("coresUtilizationPercent") and busy.get("coresUtilizationPercent")
        return (quarter, busy, idle) if working else None

    found = _poll(phase)
    assert found is not None, "the Hygon kernels never showed"
    quarter, busy, idle = found
    assert quarter["mode"] == "Sliced"
    assert quarter["memoryUsedMiB"] == 4236
    assert quarter["coresUtilizationPercent"] == 44  # ceil(11 x 100 / 25)
    assert busy["mode"] == "Partitioned"
    assert busy["id"].startswith("MIG-")
    assert busy["coresUtilizationPercent"] == 85  # measured on the partition's own handle
    assert idle["id"] != busy["id"]
    assert idle["coresUtilizationPercent"] == 0


def test_an_ascend_slice_reports_memory_and_no_compute(system: System) -> None:
    for namespace, name in (("team-a", "embed-half"), ("team-b", "rerank-quarter")):
        [entry] = sample(system, namespace, name)["accelerators"]
        assert entry["mode"] == "Sliced", name
        assert entry["memoryUsedMiB"] > 0, name
        assert "coresUtilizationPercent" not in entry, name
    if system.real:
        # The scenario pre-renders a vNPU Pod asking huawei.com/npu.partitioned, which the
        # stand-in stores as given. Through a real API server it meets the Pod webhook, which
        # refuses it: Ascend has no partitioned resource kind (reference/operator-half.md).
        refused = json.loads((system.state_dir / "refused.json").read_text())
        assert "no hardware partitioning" in refused["Pod/team-b/vnpu-32g"]
        return
    [vnpu] = sample(system, "team-b", "vnpu-32g")["accelerators"]
    assert vnpu["mode"] == "Partitioned"
    assert "memoryTotalMiB" in vnpu
    assert "coresUtilizationPercent" not in vnpu


def test_metax_and_cambricon_figures(system: System) -> None:
    [maca] = sample(system, "team-a", "maca-sample")["accelerators"]
    assert maca["memoryUsedMiB"] == 16  # the C600-A process, as mx-smi reports it
    assert "coresUtilizationPercent" not in maca  # MXSML has no per-process compute
    [mlu] = sample(system, "team-a", "train-a")["accelerators"]
    assert mlu["memoryUsedMiB"] == 8193  # 8389120 KiB, rounded up to MiB
    assert "coresUtilizationPercent" in mlu


# Per manufacturer: whether the per-process compute query exists for a logical (whole or
# carved) card and for a partition — the spec's matrix, "—" as False. "driver" is the
# matrix's "driver-dependent": decided per node by what its hardware answered.
CORES = {
    "nvidia": (True, False),
    "amd": ("driver", None),
    "hygon": ("driver", True),
    "ascend": (False, False),
    "thead": (True, False),
    "cambricon": (True, None),
    "iluvatar": (False, None),
    "metax": (False, None),
}
DRIVER_MEASURES = {
    "gpu-hybrid-1": True,
    "rdna3-ws-1": False,
    "hygon-bw-1": True,
    "hygon-k100-1": False,
}


def test_the_capability_gauge_says_unsupported_exactly_where_the_matrix_has_a_dash(
    system: System,
) -> None:
    checked: set[str] = set()
    for dm in system.endpoints.device_managers:
        snapshot = system.snapshot(dm.node, dm.manufacturer)
        partitions = {p["id"] for p in snapshot["slices"].get("partitions", [])}
        logical, partitioned = CORES[dm.manufacturer]
        for family in text_string_to_metric_families(system.exposition(dm.node, dm.manufacturer)):
            if family.name != "gpustack_accelerator_process_capability":
                continue
            for item in family.samples:
                labels = item.labels
                unsupported = labels["reason"] == "unsupported"
                assert (item.value == 0) == bool(labels["reason"]), labels
                if labels["entry_point"] == "memory":
                    assert not unsupported, labels  # memory is "Yes" on every row
                    continue
                expected = partitioned if labels["id"] in partitions else logical
                if expected == "driver":
                    expected = DRIVER_MEASURES[dm.node]
                assert unsupported == (expected is False), (dm.manufacturer, labels)
                checked.add(dm.manufacturer)
    assert checked == set(CORES)


# -- the exporter ---------------------------------------------------------------------------


def _exported(text: str) -> dict[tuple[str, str, str], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for item in family.samples:
            if "instance_name" in item.labels:
                key = (item.name, item.labels["instance_name"], item.labels.get("id", ""))
                found[key] = item.value
    return found


POD_FIGURES = {
    "gpustack_instance_cpu_total_millicores": "cpuTotalMilliCores",
    "gpustack_instance_memory_total_mib": "memoryTotalMiB",
    "gpustack_instance_memory_used_mib": "memoryUsedMiB",
    "gpustack_instance_storage_total_mib": "storageTotalMiB",
    "gpustack_instance_storage_used_mib": "storageUsedMiB",
    "gpustack_instance_cpu_used_millicores": "cpuUsedMilliCores",
}
ACCELERATOR_FIGURES = {
    "gpustack_instance_accelerator_memory_total_mib": "memoryTotalMiB",
    "gpustack_instance_accelerator_memory_used_mib": "memoryUsedMiB",
    "gpustack_instance_accelerator_memory_utilization_percent": "memoryUtilizationPercent",
    "gpustack_instance_accelerator_cores_utilization_percent": "coresUtilizationPercent",
}


def _disagreements(system: System) -> list[str]:
    exported = _exported(system.exposition("gpu-node-1", "nvidia"))
    problems = []
    for namespace, name in RUNNING:
        figures = sample(system, namespace, name)
        for family, field in POD_FIGURES.items():
            if exported.get((family, name, "")) != figures.get(field):
                problems.append(
                    f"{name} {family}: {exported.get((family, name, ''))} vs {figures.get(field)}"
                )
        exported_ids = {
            key[2]
            for key in exported
            if key[1] == name and key[0] in ACCELERATOR_FIGURES and key[2]
        }
        served_ids = {entry["id"] for entry in figures.get("accelerators", [])}
        if exported_ids != served_ids:  # an entry only one surface has
            problems.append(f"{name}: exported ids {exported_ids} vs served {served_ids}")
        for entry in figures.get("accelerators", []):
            for family, field in ACCELERATOR_FIGURES.items():
                value = exported.get((family, name, entry["id"]))
                if (value is None) != (field not in entry) or (
                    value is not None and value != float(entry[field])
                ):
                    problems.append(f"{name} {entry['id']} {family}: {value} vs {entry.get(field)}")
    return problems


def test_the_exporters_gauges_agree_with_the_subresource(system: System) -> None:
    """The two surfaces sample at different instants; agreement in one of a few tries is the
    proof (a broken surface never agrees), disagreement every time is a failure."""
    attempts = [_disagreements(system) for _ in range(1)]
    for _ in range(6):
        if not attempts[-1]:
            break
        time.sleep(1.5)
        attempts.append(_disagreements(system))
    assert not attempts[-1], attempts


def test_exactly_one_pod_level_publisher_per_node(system: System) -> None:
    publishers: dict[str, list[str]] = {}
    for dm in system.endpoints.device_managers:
        text = system.exposition(dm.node, dm.manufacturer)
        if "gpustack_instance_cpu_total_millicores{" in text:
            publishers.setdefault(dm.node, []).append(dm.manufacturer)
    assert publishers.get("gpu-hybrid-1") == ["amd"]  # the label that sorts first publishes
    assert all(len(found) == 1 for found in publishers.values()), publishers
    assert set(publishers) == {dm.node for dm in system.endpoints.device_managers}


# -- kubectl -------------------------------------------------------------------------------


@needs_kubectl
def test_kubectl_get_raw_returns_instance_metrics(system: System) -> None:
    done = system.kubectl("get", "--raw", f"{V1}/namespaces/team-a/instances/qwen-a/metrics")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["kind"] == "InstanceMetrics"
    assert body["sample"]["accelerators"][0]["mode"] == "Sliced"


@needs_kubectl
def test_a_caller_without_get_instances_metrics_is_denied_through_kubectl(system: System) -> None:
    path = f"{V1}/namespaces/team-a/instances/qwen-a"
    allowed = system.kubectl("get", "--raw", path, context="no-metrics")
    assert allowed.returncode == 0, allowed.stderr  # it may read the Instance itself
    denied = system.kubectl("get", "--raw", path + "/metrics", context="no-metrics")
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()
    can_i = system.kubectl(
        "auth",
        "can-i",
        "get",
        "instances.worker.gpustack.ai",
        "--subresource=metrics",
        "-n",
        "team-a",
        context="no-metrics",
    )
    assert can_i.stdout.startswith("no")  # kubectl appends the review's reason


# -- a real Prometheus, discovering the Device Managers as the spec configures it --------------

PROMETHEUS = shutil.which("prometheus")
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="Debian's `prometheus` package is not installed; .ci/run installs it",
)
SPEC_RELABELLING = [
    {
        "source_labels": ["__meta_kubernetes_service_annotation_prometheus_io_scrape"],
        "action": "keep",
        "regex": "true",
    },
    {
        "source_labels": ["__meta_kubernetes_service_annotation_prometheus_io_scheme"],
        "target_label": "__scheme__",
        "regex": "(https?)",
    },
    {
        "source_labels": ["__meta_kubernetes_service_annotation_prometheus_io_path"],
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
]


def _meta(name: str) -> str:
    """A Kubernetes name as Prometheus' discovery spells it in a label (``prometheus.io/port``
    → ``prometheus_io_port``)."""
    return "".join(c if c.isalnum() else "_" for c in name)


def endpoints_targets(system: System) -> list[dict[str, Any]]:
    """What ``role: endpoints`` yields for the Device Managers, built from the same objects.

    Debian's Prometheus is built without Kubernetes discovery (the package removed client-go),
    so it cannot read the spec's ``kubernetes_sd_configs`` block; VictoriaMetrics' scraper does
    (tests/integration/test_standin_service_discovery.py). Here the stand-in's ``Endpoints``
    and ``Service`` are turned into exactly the ``__address__`` and ``__meta_kubernetes_*``
    labels discovery would produce, and the spec's relabelling runs on them unchanged.
    """
    with system.api("prometheus") as client:
        service = client.get(
            "/api/v1/namespaces/gpustack-system/services/gpustack-operator-device-manager"
        ).json()
        endpoints = client.get(
            "/api/v1/namespaces/gpustack-system/endpoints/gpustack-operator-device-manager"
        ).json()
    common = {
        "__meta_kubernetes_namespace": "gpustack-system",
        "__meta_kubernetes_service_name": service["metadata"]["name"],
        "__meta_kubernetes_endpoints_name": endpoints["metadata"]["name"],
    }
    for key, value in service["metadata"].get("annotations", {}).items():
        common[f"__meta_kubernetes_service_annotation_{_meta(key)}"] = value
    targets = []
    for subset in endpoints.get("subsets", []):
        for port in subset["ports"]:
            for address in subset.get("addresses", []):
                labels = {
                    **common,
                    "__meta_kubernetes_endpoint_ready": "true",
                    "__meta_kubernetes_endpoint_port_name": port.get("name", ""),
                    "__meta_kubernetes_endpoint_node_name": address.get("nodeName", ""),
                    "__meta_kubernetes_pod_name": address["targetRef"]["name"],
                }
                targets.append({"targets": [f"{address['ip']}:{port['port']}"], "labels": labels})
    return targets


@pytest.fixture(scope="module")
def prometheus(system: System, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Prometheus scraping the Device Managers with the spec's relabelling."""
    assert PROMETHEUS is not None
    folder = tmp_path_factory.mktemp("prometheus")
    (folder / "targets.json").write_text(json.dumps(endpoints_targets(system)))
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "gpustack-instances",
                "file_sd_configs": [{"files": [str(folder / "targets.json")]}],
                "tls_config": {"insecure_skip_verify": True},
                "relabel_configs": SPEC_RELABELLING,
            }
        ],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = folder / "prometheus.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wanted = {dm.address for dm in system.endpoints.device_managers}
        deadline = time.monotonic() + 60
        seen: Any = None
        while time.monotonic() < deadline:
            try:
                up = {
                    r["metric"]["instance"]
                    for r in promql(base, 'up{job="gpustack-instances"} == 1')
                }
                if up == wanted and promql(base, "count(gpustack_instance_cpu_total_millicores)"):
                    break
                seen = httpx.get(f"{base}/api/v1/targets", timeout=5).json()
            except (httpx.HTTPError, AssertionError) as exc:
                seen = repr(exc)
            time.sleep(0.5)
        else:
            raise AssertionError(
                f"Prometheus never scraped {sorted(wanted)}: {json.dumps(seen)[:3000]}\n"
                + log.read_text(errors="replace")[-3000:]
            )
        yield base
    finally:
        process.kill()
        process.wait()


def promql(base: str, query: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{base}/api/v1/query", params={"query": query}, timeout=10)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


@needs_prometheus
def test_the_spec_relabelling_addresses_every_device_manager(
    system: System, prometheus: str
) -> None:
    targets = httpx.get(f"{prometheus}/api/v1/targets", timeout=10).json()["data"]
    active = {
        t["labels"]["instance"]: (t["scrapeUrl"], t["health"])
        for t in targets["activeTargets"]
        if t["labels"]["job"] == "gpustack-instances"
    }
    assert active == {
        dm.address: (f"https://{dm.address}/metrics", "up")
        for dm in system.endpoints.device_managers
    }


@needs_prometheus
def test_the_specs_queries_through_prometheus(system: System, prometheus: str) -> None:
    used = promql(prometheus, "gpustack_instance_accelerator_memory_used_mib")
    modes = {r["metric"]["mode"] for r in used}
    assert modes == {"Exclusive", "Shared", "Sliced", "Partitioned"}
    # One metric name in every mode: the RDNA3 slices have memory, and no compute series at all.
    names_with_memory = {r["metric"]["instance_name"] for r in used}
    assert {"chat-a", "chat-b", "qwen-a", "mig-3g", "llama-70b"} <= names_with_memory
    cores = promql(prometheus, "gpustack_instance_accelerator_cores_utilization_percent")
    with_cores = {r["metric"]["instance_name"] for r in cores}
    assert not {"chat-a", "chat-b", "mig-3g"} & with_cores  # absent is not zero
    assert promql(prometheus, "gpustack_instance_accelerator_memory_utilization_percent")
    busiest = promql(
        prometheus,
        'topk(10, gpustack_instance_accelerator_cores_utilization_percent{mode="Sliced"})',
    )
    assert busiest
    assert {r["metric"]["mode"] for r in busiest} == {"Sliced"}
    # A slice above its cap is what the spec's second query finds: whatever it returns must be
    # Sliced and above 100 (the hybrid node's MI300X slice, capped at 50 %, bursts past it in
    # its recording), and no slice at or under its cap may appear.
    escaping = promql(
        prometheus, 'gpustack_instance_accelerator_cores_utilization_percent{mode="Sliced"} > 100'
    )
    assert all(r["metric"]["mode"] == "Sliced" for r in escaping)
    assert all(float(r["value"][1]) > 100 for r in escaping)
    by_mode = {
        r["metric"]["mode"]
        for r in promql(prometheus, "sum by (mode) (gpustack_instance_accelerator_memory_used_mib)")
    }
    assert by_mode == modes
    # And Prometheus holds the subresource's figure for a steady Instance.
    [series] = promql(
        prometheus, 'gpustack_instance_memory_total_mib{instance_name="chat-a",namespace="team-a"}'
    )
    assert float(series["value"][1]) == sample(system, "team-a", "chat-a")["memoryTotalMiB"]


# -- README command 1 ------------------------------------------------------------------------


@pytest.mark.skipif(
    CONTROL_PLANE == "real",
    reason="the demo always runs on the stand-in (README command 1); the main suite runs it, and "
    "a second whole system beside the real control plane only starves both on two cores",
)
def test_the_demo_shows_live_figures_once_and_stops_everything(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    state_dir = tmp_path_factory.mktemp("demo")
    shown = cli("demo", "--once", "--state-dir", str(state_dir))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "InstanceMetrics through the aggregator" in shown.stdout
    assert "team-a/qwen-a" in shown.stdout
    assert "Partitioned" in shown.stdout
    assert "gpustack_instance_cpu_used_millicores{" in shown.stdout  # the /metrics excerpt
    assert f"kubectl --kubeconfig {state_dir / 'kubeconfig'}" in shown.stdout
    assert "stopped worker" in shown.stdout
    assert not (state_dir / "processes.json").exists()


# -- gate 1: the Pod admission webhook, registered by `simulator up` ---------------------------


def _pod_manifest(name: str, limits: dict[str, str]) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"containers": [{"name": "main", "image": "busybox",
                                     "resources": {"limits": limits}}]},
        }
    )  # fmt: skip


def _create(system: System, manifest: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", system.endpoints.kubeconfig, "--context", "admin",
         "create", "--validate=false", "-f", "-", "-o", "json"],
        input=manifest, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "KUBECONFIG": ""},
    )  # fmt: skip


@needs_kubectl
def test_kubectl_created_pods_go_through_the_workers_webhook(system: System) -> None:
    slice_of_20 = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "20"}
    folded = _create(system, _pod_manifest("gate-slice", slice_of_20))
    assert folded.returncode == 0, folded.stderr
    limits = json.loads(folded.stdout)["spec"]["containers"][0]["resources"]["limits"]
    # 20 % × 16,000, as the server stores it (kube-apiserver writes 320000 as "320k").
    assert limits["nvidia.com/gpu.sliced.units"] == "320k"
    assert limits["nvidia.com/gpu.sliced.cores-percentage"] == "100"  # the default
    refused = _create(system, _pod_manifest("gate-bad", {"nvidia.com/gpu.sliced": "1"}))
    assert refused.returncode != 0
    assert 'admission webhook "pods.' in refused.stderr
    assert "nvidia.com/gpu.sliced.memory-percentage or" in refused.stderr
    plain = _create(system, _pod_manifest("gate-plain", {"cpu": "100m"}))
    assert plain.returncode == 0, plain.stderr  # no accelerator: admitted untouched
    for made in ("gate-slice", "gate-plain"):  # the slice's card back for later tests
        system.kubectl("delete", "pod", "-n", "team-a", made, "--wait=false")
