"""Cluster scenarios: committed ones expand into objects the core's parsers accept, broken ones
are named precisely, and each scenario shows what its documentation says it shows."""

from __future__ import annotations

import contextlib
import functools
import json
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpustack_cli.main import app
from gpustack_core.allocation import ANNOTATION, grants, parse_allocation
from gpustack_core.decoding import ContractError
from gpustack_core.kubelet import parse_summary, usage_from_summary
from gpustack_core.modes import AllocationMode
from gpustack_core.podmetrics import parse_pod_metrics, usage_from_pod_metrics
from gpustack_core.pods import (
    container_ids,
    declared_totals,
    has_started,
    is_instance_pod,
    is_ready,
    pod_from_object,
)
from gpustack_simulator.recording import load_recording
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.scenario import (
    RECORDINGS_DIR,
    SCENARIOS_DIR,
    SCHEMA,
    Expanded,
    Fault,
    Rule,
    allowed,
    expand,
    find_scenario,
    is_scenario,
    load_scenario,
    parse_scenario,
    token_for,
)
from gpustack_simulator.scenario import loading as scenario_loading

COMMITTED = sorted(SCENARIOS_DIR.glob("*.yaml"))
NAMES = [p.stem for p in COMMITTED]
INITIAL_STATE = {"walkthrough"}
"""Scenarios of a cluster before any Instance (the walkthrough's section 1): no Instances, no
process of any Pod on a card, so the checks below that need one are vacuous there."""
TIMES = (0.0, 15.0, 29.9, 30.0, 45.5, 90.0, 150.0, 600.0)
WORKER_GROUP = "worker.gpustack.ai"


@functools.cache
def expanded(name: str) -> Expanded:
    return expand(load_scenario(find_scenario(name)), base=RECORDINGS_DIR)


def document(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(find_scenario(name).read_text())
    return loaded


def pod_named(ex: Expanded, namespace: str, name: str) -> dict[str, Any] | None:
    return next(
        (
            p
            for p in ex.pods
            if p["metadata"]["namespace"] == namespace and p["metadata"]["name"] == name
        ),
        None,
    )


def instance_named(ex: Expanded, namespace: str, name: str) -> dict[str, Any]:
    return next(
        i
        for i in ex.instances
        if i["metadata"]["namespace"] == namespace and i["metadata"]["name"] == name
    )


def devices_of(recording: Path) -> dict[str, Any]:
    """What the Device Manager detects on a recording: card id → DeviceInfo."""
    backend = replay_backend(load_recording(recording))
    try:
        return {d.id: d for d in backend.detect().devices}
    finally:
        backend.close()


# -- every committed scenario ------------------------------------------------------------------


def test_the_three_scenarios_the_issue_asks_for_are_committed() -> None:
    assert {"nvidia-mixed", "nvidia-amd", "amd-rdna3"} <= set(NAMES)
    assert all(is_scenario(p) for p in COMMITTED)


@pytest.mark.parametrize("name", NAMES)
def test_every_generated_object_passes_the_core_parsers(name: str) -> None:
    ex = expanded(name)
    assert ex.nodes
    assert bool(ex.instances) is (name not in INITIAL_STATE)
    node_names = {n["metadata"]["name"] for n in ex.nodes}
    for node in ex.nodes:
        assert "resourceVersion" not in node["metadata"]
        assert any(a["type"] == "InternalIP" for a in node["status"]["addresses"])
    for obj in ex.pods:
        pod = pod_from_object(obj)
        assert pod.spec.node_name in node_names
        assert "resourceVersion" not in obj["metadata"]
        annotation = pod.metadata.annotations.get(ANNOTATION)
        if annotation is not None:
            allocation = parse_allocation(annotation)
            assert grants(allocation)
            assert set(allocation) <= {c.name for c in pod.spec.containers}
    for t in TIMES:
        for node in node_names:
            summary = parse_summary(json.dumps(ex.summary(node, t)))
            assert summary.node.node_name == node
        for obj in ex.pods:
            meta = obj["metadata"]
            metrics = ex.pod_metrics(meta["namespace"], meta["name"], t)
            if metrics is None:
                continue
            parsed = parse_pod_metrics(json.dumps(metrics))
            created = datetime.fromisoformat(meta["creationTimestamp"])
            usage = usage_from_pod_metrics(parsed, pod_created=created)
            assert usage is not None


@pytest.mark.parametrize("name", NAMES)
def test_every_grant_names_a_device_of_its_recording_by_its_detected_index(name: str) -> None:
    ex = expanded(name)
    detected = {(dm.node, dm.manufacturer): devices_of(dm.recording) for dm in ex.device_managers}
    for obj in ex.pods:
        pod = pod_from_object(obj)
        annotation = pod.metadata.annotations.get(ANNOTATION)
        if annotation is None:
            continue
        for grant in grants(parse_allocation(annotation)):
            devices = detected[(pod.spec.node_name, grant.manufacturer)]
            card = devices[grant.accelerator.id]
            assert grant.accelerator.index == card.index
            if grant.accelerator.mode is AllocationMode.PARTITIONED:
                partition_ids = {p.id for p in card.partitions}
                assert grant.accelerator.allocated_physical_id in partition_ids


@pytest.mark.parametrize("name", NAMES)
def test_device_manager_pods_are_findable_as_the_worker_finds_them(name: str) -> None:
    ex = expanded(name)
    assert ex.device_managers
    for dm in ex.device_managers:
        obj = pod_named(ex, dm.namespace, dm.name)
        assert obj is not None
        assert dm.namespace == "gpustack-system"
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/component"] == "device-manager"
        assert labels["gpustack.ai/manufacturer"] == dm.manufacturer
        assert obj["spec"]["nodeName"] == dm.node
        assert obj["status"]["podIP"] == ""
        [container] = obj["spec"]["containers"]
        assert {"name": "https", "containerPort": 32443, "protocol": "TCP"} in container["ports"]
        assert is_ready(pod_from_object(obj)) is dm.ready
        assert dm.recording.is_file()
        assert load_recording(dm.recording).vendor == dm.manufacturer


@pytest.mark.parametrize("name", NAMES)
def test_expansion_is_deterministic(name: str) -> None:
    again = expand(load_scenario(find_scenario(name)), base=RECORDINGS_DIR)
    first = expanded(name)
    assert json.dumps(again.pods) == json.dumps(first.pods)
    assert json.dumps(again.instances) == json.dumps(first.instances)
    assert json.dumps(again.summary(again.nodes[0]["metadata"]["name"], 42.0)) == json.dumps(
        first.summary(first.nodes[0]["metadata"]["name"], 42.0)
    )


@pytest.mark.parametrize("name", NAMES)
def test_instance_pods_belong_to_their_instances(name: str) -> None:
    ex = expanded(name)
    for instance in ex.instances:
        meta = instance["metadata"]
        assert instance["apiVersion"] == "worker.gpustack.ai/v1alpha1"
        assert set(instance["spec"]["resources"]) <= {"cpu", "ram", "localStorage"}  # API names
        obj = pod_named(ex, meta["namespace"], meta["name"])
        if obj is None:
            continue
        pod = pod_from_object(obj)
        expected = obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == meta["uid"]
        assert is_instance_pod(pod, meta["uid"]) is expected


# -- the NVIDIA scenario -----------------------------------------------------------------------


def modes_by_instance(ex: Expanded) -> dict[str, set[AllocationMode]]:
    out: dict[str, set[AllocationMode]] = {}
    for instance in ex.instances:
        meta = instance["metadata"]
        obj = pod_named(ex, meta["namespace"], meta["name"])
        if obj is None or ANNOTATION not in obj["metadata"]["annotations"]:
            continue
        allocation = parse_allocation(obj["metadata"]["annotations"][ANNOTATION])
        out[meta["name"]] = {g.accelerator.mode for g in grants(allocation)}
    return out


def test_nvidia_scenario_has_one_instance_per_mode() -> None:
    modes = modes_by_instance(expanded("nvidia-mixed"))
    for mode in (
        AllocationMode.EXCLUSIVE,
        AllocationMode.SHARED,
        AllocationMode.SLICED,
        AllocationMode.PARTITIONED,
    ):
        assert any(held == {mode} for held in modes.values()), mode


def test_nvidia_partition_is_addressed_by_the_recordings_mig_uuid() -> None:
    ex = expanded("nvidia-mixed")
    [dm] = ex.device_managers
    cards = devices_of(dm.recording)
    mig_ids = {p.id: (card.id, p) for card in cards.values() for p in card.partitions}
    obj = pod_named(ex, "team-a", "mig-3g")
    assert obj is not None
    [grant] = grants(parse_allocation(obj["metadata"]["annotations"][ANNOTATION]))
    accelerator = grant.accelerator
    assert accelerator.mode is AllocationMode.PARTITIONED
    parent, partition = mig_ids[accelerator.allocated_physical_id]
    assert accelerator.id == parent
    assert accelerator.allocated_physical_profile == partition.profile == "3g.40gb"
    assert accelerator.allocated_physical_id.startswith("MIG-")
    limits = obj["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu.partitioned"] == "1"
    assert limits["nvidia.com/gpu.partitioned.mig-3g.40gb"] == "1"


def test_nvidia_stopped_instance_has_no_pod() -> None:
    ex = expanded("nvidia-mixed")
    stopped = [i for i in ex.instances if i["spec"]["stop"]]
    assert stopped
    for instance in stopped:
        meta = instance["metadata"]
        assert pod_named(ex, meta["namespace"], meta["name"]) is None
        assert instance["status"]["phase"] == "Stopped"
        assert "nodeName" not in instance["status"]
        assert instance["spec"]["resources"] == {
            "cpu": "2",
            "ram": "4Gi",
            "localStorage": "10Gi",
        }


def test_nvidia_slices_carry_their_caps_and_units() -> None:
    ex = expanded("nvidia-mixed")
    obj = pod_named(ex, "team-a", "qwen-a")
    assert obj is not None
    limits = obj["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu.sliced"] == "1"
    assert limits["nvidia.com/gpu.sliced.cores-percentage"] == "50"
    assert limits["nvidia.com/gpu.sliced.memory-percentage"] == "50"
    [grant] = grants(parse_allocation(obj["metadata"]["annotations"][ANNOTATION]))
    assert grant.accelerator.allocated == 800_000
    # 50 + 25 + 25 % of the card is granted, so nothing remains.
    assert grant.accelerator.remaining == 0
    # The sshd sidecar's Visibility grant is not a second charge on the card.
    obj_b = pod_named(ex, "team-b", "qwen-b")
    assert obj_b is not None
    by_container = {
        g.container: g.accelerator
        for g in grants(parse_allocation(obj_b["metadata"]["annotations"][ANNOTATION]))
    }
    assert by_container["sshd"].mode is AllocationMode.VISIBILITY
    assert by_container["sshd"].allocated == 0
    sshd = obj_b["spec"]["containers"][1]["resources"]["limits"]
    assert sshd == {"device.gpustack.ai/nvidia.visibility": "1"}


def test_nvidia_pending_and_terminating_pods() -> None:
    ex = expanded("nvidia-mixed")
    pending = pod_named(ex, "team-b", "qwen-pending")
    assert pending is not None
    assert not has_started(pod_from_object(pending))
    assert pending["status"]["podIP"] == ""
    terminating = pod_named(ex, "team-b", "embed-b")
    assert terminating is not None
    assert pod_from_object(terminating).metadata.deletion_timestamp is not None
    summary = parse_summary(json.dumps(ex.summary("gpu-node-1", 0.0)))
    measured = {entry.pod_ref.name for entry in summary.pods or ()}
    assert "qwen-pending" not in measured
    assert "embed-b" in measured
    assert ex.pod_metrics("team-b", "qwen-pending", 0.0) is None
    assert ex.pod_metrics("team-b", "no-such-pod", 0.0) is None


def usage_at(ex: Expanded, node: str, namespace: str, name: str, t: float) -> Any:
    obj = pod_named(ex, namespace, name)
    assert obj is not None
    summary = parse_summary(json.dumps(ex.summary(node, t)))
    return usage_from_summary(summary, namespace=namespace, name=name, uid=obj["metadata"]["uid"])


def test_summaries_change_over_time_as_declared() -> None:
    ex = expanded("nvidia-mixed")
    before = usage_at(ex, "gpu-node-1", "team-a", "llama-70b", 0.0)
    held = usage_at(ex, "gpu-node-1", "team-a", "llama-70b", 29.0)
    after = usage_at(ex, "gpu-node-1", "team-a", "llama-70b", 30.0)
    later = usage_at(ex, "gpu-node-1", "team-a", "llama-70b", 95.0)
    assert (before.cpu_millicores, before.memory_mib, before.storage_mib) == (
        500,
        40 * 1024,
        12 * 1024,
    )
    assert held.cpu_millicores == 500
    assert after.cpu_millicores == 6000
    assert later.cpu_millicores == 7500
    assert later.memory_mib == 42 * 1024
    assert after.timestamp == datetime(2026, 11, 29, 8, 0, 30, tzinfo=UTC)


def test_cumulative_cpu_integrates_the_declared_rates() -> None:
    ex = expanded("nvidia-mixed")
    entry = next(
        p for p in ex.summary("gpu-node-1", 40.0)["pods"] if p["podRef"]["name"] == "llama-70b"
    )
    # 0.5 cores for 30 s, then 6 cores for 10 s.
    assert entry["cpu"]["usageCoreNanoSeconds"] == 500_000_000 * 30 + 6_000_000_000 * 10
    containers = entry["containers"]
    assert [c["name"] for c in containers] == ["main"]
    assert containers[0]["cpu"]["usageNanoCores"] == entry["cpu"]["usageNanoCores"]
    assert entry["memory"]["rssBytes"] <= entry["memory"]["workingSetBytes"]
    storage = entry["ephemeral-storage"]
    assert storage["usedBytes"] + storage["availableBytes"] == storage["capacityBytes"]


def test_an_omitted_figure_is_unmeasured_not_zero() -> None:
    ex = expanded("amd-rdna3")
    first = usage_at(ex, "rdna3-ws-1", "team-b", "chat-b", 0.0)
    assert first.cpu_millicores is None
    assert first.memory_mib == 1536
    second = usage_at(ex, "rdna3-ws-1", "team-b", "chat-b", 15.0)
    assert second.cpu_millicores == 450


def test_pod_metrics_split_exactly_across_containers() -> None:
    ex = expanded("nvidia-amd")
    metrics = ex.pod_metrics("team-a", "hybrid", 31.0)
    assert metrics is not None
    parsed = parse_pod_metrics(json.dumps(metrics))
    assert [c.name for c in parsed.containers or ()] == ["main", "rocm"]
    usage = usage_from_pod_metrics(parsed, pod_created=datetime(2026, 11, 29, 7, 0, tzinfo=UTC))
    assert usage is not None
    assert usage.cpu_millicores == 9800
    assert usage.memory_mib == 74 * 1024
    assert usage.storage_mib is None


def test_kubelet_fault_window_is_reported() -> None:
    ex = expanded("nvidia-mixed")
    assert Fault("kubelet-unreachable", "gpu-node-1", 120.0, 180.0) in ex.faults
    assert not ex.fault_active("kubelet-unreachable", "gpu-node-1", 119.9)
    assert ex.fault_active("kubelet-unreachable", "gpu-node-1", 120.0)
    assert ex.fault_active("kubelet-unreachable", "gpu-node-1", 179.9)
    assert not ex.fault_active("kubelet-unreachable", "gpu-node-1", 180.0)
    assert not ex.fault_active("kubelet-unreachable", "other-node", 150.0)
    assert not ex.fault_active("metrics-api-absent", None, 150.0)


def test_metrics_api_absence_without_an_end_lasts_forever() -> None:
    ex = expanded("nvidia-amd")
    assert Fault("metrics-api-absent", None, 0.0, None) in ex.faults
    assert ex.fault_active("metrics-api-absent", None, 1e9)
    assert ex.fault_active("kubelet-unreachable", "gpu-hybrid-1", 75.0)


def test_two_manufacturer_scenario_has_an_instance_spanning_both() -> None:
    ex = expanded("nvidia-amd")
    assert {dm.manufacturer for dm in ex.device_managers} == {"nvidia", "amd"}
    assert len({dm.node for dm in ex.device_managers}) == 1
    obj = pod_named(ex, "team-a", "hybrid")
    assert obj is not None
    allocation = parse_allocation(obj["metadata"]["annotations"][ANNOTATION])
    by_container = {g.container: g for g in grants(allocation)}
    assert {g.manufacturer for g in by_container.values()} == {"nvidia", "amd"}
    assert by_container["main"].accelerator.mode is AllocationMode.PARTITIONED
    assert by_container["rocm"].accelerator.mode is AllocationMode.SLICED
    assert by_container["rocm"].accelerator.id == "0000:66:00.0"
    rocm = obj["spec"]["containers"][1]["resources"]["limits"]
    assert rocm["amd.com/gpu.sliced.cores-percentage"] == "50"
    node = ex.nodes[0]
    assert node["status"]["capacity"]["amd.com/gpu"] == "8"
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "1"
    # Totals count both containers' limits.
    assert declared_totals(pod_from_object(obj)).cpu_millicores == 12_000


def test_previous_incarnations_pod_is_not_the_instances() -> None:
    ex = expanded("amd-rdna3")
    instance = instance_named(ex, "team-b", "notebook")
    obj = pod_named(ex, "team-b", "notebook")
    assert obj is not None
    pod = pod_from_object(obj)
    assert not is_instance_pod(pod, instance["metadata"]["uid"])
    assert is_instance_pod(pod)
    assert ex.pod_metrics("team-b", "notebook", 0.0) is not None


# -- the process tables ------------------------------------------------------------------------

CGROUP = re.compile(
    r"^0::/kubepods\.slice/"
    r"(?:kubepods-(?P<qos>burstable|besteffort)\.slice/kubepods-(?P=qos)-|kubepods-)"
    r"pod(?P<uid>[0-9a-f_]{36})\.slice/cri-containerd-(?P<id>[0-9a-f]{64})\.scope$"
)


def claims(name: str) -> list[tuple[str, str, str, int]]:
    """(namespace, pod name, container, pid) for every PID the scenario file claims."""
    out = []
    doc = document(name)
    for instance in doc.get("instances", []):
        pod = instance.get("pod") or {}
        for container in pod.get("containers", []):
            for pid in container.get("pids", []):
                namespace = instance.get("namespace", "default")
                out.append((namespace, instance["name"], container["name"], pid))
    return out


@pytest.mark.parametrize("name", NAMES)
def test_claimed_pids_name_their_pod_and_container(name: str) -> None:
    ex = expanded(name)
    claimed = claims(name)
    assert bool(claimed) is (name not in INITIAL_STATE)
    for namespace, pod_name, container, pid in claimed:
        obj = pod_named(ex, namespace, pod_name)
        assert obj is not None
        pod = pod_from_object(obj)
        table = ex.procs(pod.spec.node_name)
        match = CGROUP.match(table[str(pid)].cgroup)
        assert match is not None, table[str(pid)].cgroup
        assert match["uid"].replace("_", "-") == pod.metadata.uid
        assert container_ids(pod)[match["id"]] == container
        qos = obj["status"]["qosClass"]
        assert (match["qos"] or "guaranteed") == qos.lower()


@pytest.mark.parametrize("name", NAMES)
def test_unclaimed_pids_keep_the_recordings_lines(name: str) -> None:
    ex = expanded(name)
    claimed = {pid for *_, pid in claims(name)}
    for dm in ex.device_managers:
        table = ex.procs(dm.node)
        for pid, entry in load_recording(dm.recording).context.procs.items():
            assert pid in table
            if int(pid) not in claimed:
                assert table[pid] == entry


def test_stray_processes_are_left_for_attribution_to_reject() -> None:
    mixed = expanded("nvidia-mixed").procs("gpu-node-1")
    hybrid = expanded("nvidia-amd").procs("gpu-hybrid-1")
    pod_uids = {
        p["metadata"]["uid"].replace("-", "_")
        for name in ("nvidia-mixed", "nvidia-amd")
        for p in expanded(name).pods
    }
    for stray in (mixed["8203"], hybrid["5150"]):
        match = CGROUP.match(stray.cgroup)
        assert match is not None
        assert match["uid"] not in pod_uids
    assert set(hybrid) == {"4242", "5150", "5151", "6001", "6002"}


def test_guaranteed_and_burstable_pods_get_the_kubelets_two_slice_shapes() -> None:
    ex = expanded("nvidia-mixed")
    table = ex.procs("gpu-node-1")
    assert table["8101"].cgroup.startswith("0::/kubepods.slice/kubepods-pod")
    assert table["8201"].cgroup.startswith(
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
    )
    rdna = expanded("amd-rdna3").procs("rdna3-ws-1")
    assert rdna["7001"].comm == "llama-server"
    assert rdna["7002"].comm == "python"


def test_procs_of_an_unknown_node_is_an_error() -> None:
    with pytest.raises(KeyError, match="no-such-node"):
        expanded("amd-rdna3").procs("no-such-node")
    with pytest.raises(KeyError, match="no-such-node"):
        expanded("amd-rdna3").summary("no-such-node", 0.0)


# -- RBAC --------------------------------------------------------------------------------------

REQUESTS = [
    ("get", WORKER_GROUP, "instances", "", "team-a"),
    ("get", WORKER_GROUP, "instances", "metrics", "team-a"),
    ("list", "", "pods", "", ""),
    ("delete", "", "pods", "", "team-b"),
    ("get", "", "nodes", "proxy", ""),
    ("create", "authorization.k8s.io", "subjectaccessreviews", "", ""),
    ("escalate", "rbac.authorization.k8s.io", "clusterroles", "", ""),
]


@pytest.mark.parametrize("request_", REQUESTS)
def test_admin_is_allowed_everything(request_: tuple[str, str, str, str, str]) -> None:
    verb, group, resource, sub, ns = request_
    ok, reason = expanded("nvidia-mixed").allowed(
        "admin", verb=verb, group=group, resource=resource, subresource=sub, namespace=ns
    )
    assert ok
    assert "system:masters" in reason


def test_admin_is_allowed_even_when_a_review_omits_its_groups() -> None:
    ex = expanded("nvidia-mixed")
    ok, _ = allowed(
        ex.rules,
        "admin",
        [],
        verb="get",
        group=WORKER_GROUP,
        resource="instances",
        subresource="metrics",
        namespace="team-a",
    )
    assert ok
    denied, _ = allowed(
        ex.rules,
        "no-metrics",
        [],
        verb="get",
        group=WORKER_GROUP,
        resource="instances",
        subresource="metrics",
        namespace="team-a",
    )
    assert not denied


def test_no_metrics_reads_instances_but_not_their_metrics() -> None:
    ex = expanded("nvidia-mixed")
    for verb in ("get", "list", "watch"):
        assert ex.allowed(
            "no-metrics", verb=verb, group=WORKER_GROUP, resource="instances", namespace="x"
        )[0]
    ok, reason = ex.allowed(
        "no-metrics",
        verb="get",
        group=WORKER_GROUP,
        resource="instances",
        subresource="metrics",
        namespace="team-a",
        name="llama-70b",
    )
    assert not ok
    assert '"instances/metrics"' in reason
    assert '"no-metrics"' in reason


DAEMON_NEEDS = [
    ("get", "", "pods", "", "team-a"),
    ("list", "", "pods", "", ""),
    ("watch", "", "pods", "", ""),
    ("get", "", "nodes", "proxy", ""),
    ("get", "", "nodes", "", ""),
    ("list", "", "nodes", "", ""),
    ("create", "authorization.k8s.io", "subjectaccessreviews", "", ""),
    ("create", "authentication.k8s.io", "tokenreviews", "", ""),
    ("get", "", "configmaps", "", "kube-system"),
    ("get", "metrics.k8s.io", "pods", "", "team-a"),
    ("get", WORKER_GROUP, "instances", "", "team-a"),
    ("list", WORKER_GROUP, "instances", "", ""),
    ("watch", WORKER_GROUP, "instances", "", ""),
    ("get", WORKER_GROUP, "instances", "metrics", "team-a"),
]
WORKER_ONLY = [
    ("delete", "", "pods", "", "team-a"),
    ("create", "", "pods", "", "team-a"),
    ("patch", WORKER_GROUP, "instances", "status", "team-a"),
    ("update", "coordination.k8s.io", "leases", "", "gpustack-system"),
    # Writes of Instances through v1 (after the caller's review) and the node-capacity patch.
    ("create", WORKER_GROUP, "instances", "", "team-a"),
    ("delete", WORKER_GROUP, "instances", "", "team-a"),
    ("patch", "", "nodes", "status", ""),
    # The node-devices check's per-card fit labels (a merge patch of the Nodes' labels).
    ("patch", "", "nodes", "", ""),
    # The InstanceType chain's derived types (create-only).
    ("create", WORKER_GROUP, "instancetypes", "", ""),
]
DAEMON_DENIED = [
    ("get", "", "configmaps", "", "default"),
    ("get", "", "secrets", "", "kube-system"),
]


@pytest.mark.parametrize("user", ["device-manager", "worker"])
def test_service_users_have_what_their_daemons_need_and_no_more(user: str) -> None:
    ex = expanded("nvidia-mixed")
    for verb, group, resource, sub, ns in DAEMON_NEEDS:
        ok, reason = ex.allowed(
            user, verb=verb, group=group, resource=resource, subresource=sub, namespace=ns
        )
        assert ok, (verb, resource, sub, reason)
    for verb, group, resource, sub, ns in DAEMON_DENIED:
        ok, _ = ex.allowed(
            user, verb=verb, group=group, resource=resource, subresource=sub, namespace=ns
        )
        assert not ok, (verb, resource, sub, ns)
    for verb, group, resource, sub, ns in WORKER_ONLY:  # the Instance controller's writes
        ok, _ = ex.allowed(
            user, verb=verb, group=group, resource=resource, subresource=sub, namespace=ns
        )
        assert ok is (user == "worker"), (user, verb, resource, sub, ns)
    for ns in ("default", "team-a"):  # its Lease only where the worker runs
        ok, _ = ex.allowed("worker", verb="update", group="coordination.k8s.io",
                           resource="leases", namespace=ns)  # fmt: skip
        assert not ok


def test_scenario_users_are_scoped_to_their_namespaces() -> None:
    ex = expanded("nvidia-mixed")
    metrics = {"verb": "get", "group": WORKER_GROUP, "resource": "instances"}
    assert ex.allowed("team-a-viewer", subresource="metrics", namespace="team-a", **metrics)[0]
    assert not ex.allowed("team-a-viewer", subresource="metrics", namespace="team-b", **metrics)[0]
    assert not ex.allowed("team-a-viewer", **metrics)[0]
    assert not ex.allowed("stranger", **metrics)[0]


def test_tokens_are_stable_and_authenticate_their_user() -> None:
    ex = expanded("nvidia-mixed")
    names = {u.name for u in ex.users}
    assert {"admin", "no-metrics", "device-manager", "worker", "team-a-viewer"} <= names
    for user in ex.users:
        assert user.token == token_for(user.name)
        assert ex.user_for_token(user.token) == user
    assert ex.user_for_token("sim-nobody") is None
    admin = next(u for u in ex.users if u.name == "admin")
    assert "system:masters" in admin.groups
    assert len({u.token for u in ex.users}) == len(ex.users)


def rule(**kw: Any) -> Rule:
    defaults: dict[str, Any] = {"api_groups": ("*",), "resources": ("*",), "verbs": ("*",)}
    return Rule(**{**defaults, **kw})


@pytest.mark.parametrize(
    ("given_rule", "request_", "expected"),
    [
        (rule(resources=("instances",)), ("instances", "metrics", ""), False),
        (rule(resources=("instances/metrics",)), ("instances", "metrics", ""), True),
        (rule(resources=("*/metrics",)), ("instances", "metrics", ""), True),
        (rule(resources=("*/metrics",)), ("instances", "", ""), False),
        (rule(resources=("*",)), ("instances", "metrics", ""), True),
        (rule(resource_names=("a",)), ("instances", "", "a"), True),
        (rule(resource_names=("a",)), ("instances", "", "b"), False),
        (rule(resource_names=("a",)), ("instances", "", ""), False),
        (rule(api_groups=("",)), ("instances", "", ""), False),
        (rule(verbs=("list",)), ("instances", "", ""), False),
    ],
)
def test_rules_match_as_kubernetes_rbac_does(
    given_rule: Rule, request_: tuple[str, str, str], expected: bool
) -> None:
    resource, sub, name = request_
    ok, reason = allowed(
        {"u": [given_rule]},
        "u",
        ["system:authenticated"],
        verb="get",
        group=WORKER_GROUP,
        resource=resource,
        subresource=sub,
        name=name,
    )
    assert ok is expected
    assert reason


# -- broken scenarios ---------------------------------------------------------------------------

Mutate = Callable[[dict[str, Any]], None]


def at(*keys: Any, value: Any) -> Mutate:
    def mutate(doc: dict[str, Any]) -> None:
        target: Any = doc
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return mutate


def append_to(*keys: Any, value: Any) -> Mutate:
    def mutate(doc: dict[str, Any]) -> None:
        target: Any = doc
        for key in keys:
            target = target[key]
        target.append(value)

    return mutate


MAIN = ("instances", 0, "pod", "containers", 0)
GRANT = (*MAIN, "accelerators", 0)

CORRUPTIONS: list[tuple[str, Mutate, str, str]] = [
    ("wrong schema", at("schema", value="cluster-scenario/v2"), "$.schema", "Invalid enum"),
    (
        "unknown node",
        at("instances", 0, "node", value="gpu-node-9"),
        "$.instances[0].node",
        "unknown node 'gpu-node-9'",
    ),
    (
        "unknown recording",
        at("nodes", 0, "deviceManagers", 0, "recording", value="nvidia/nope.yaml"),
        "$.nodes[0].deviceManagers[0].recording",
        "unknown recording 'nvidia/nope.yaml'",
    ),
    (
        "recording of another vendor",
        at("nodes", 0, "deviceManagers", 0, "recording", value="amd/rx7800xt.yaml"),
        "$.nodes[0].deviceManagers[0].recording",
        "is a amd recording, not nvidia",
    ),
    (
        "duplicate UID",
        at("instances", 1, "uid", value="0b7e2c11-9a0d-4f65-8f11-1c2d3e4f5a01"),
        "$.instances[1].uid",
        "is also used at $.instances[0].uid",
    ),
    (
        "duplicate Instance",
        at("instances", 1, "name", value="llama-70b"),
        "$.instances[1].name",
        "team-a/llama-70b is also declared",
    ),
    (
        "device not in the recording",
        at(*GRANT, "device", value="GPU-00000000-0000-0000-0000-000000000000"),
        "$.instances[0].pod.containers[0].accelerators[0].device",
        "is not a device in the recordings of node 'gpu-node-1'",
    ),
    (
        "partition not in the recording",
        at("instances", 6, "pod", "containers", 0, "accelerators", 0, "device", value="MIG-x"),
        "$.instances[6].pod.containers[0].accelerators[0].device",
        "'MIG-x' is not a partition",
    ),
    (
        "whole MIG card granted",
        at(*GRANT, "device", value="GPU-8d2f4a61-3c7e-4b19-a5d0-6e1f2b3c4d04"),
        "$.instances[0].pod.containers[0].accelerators[0].device",
        "is in MIG mode",
    ),
    (
        "unknown mode",
        at(*GRANT, "mode", value="Borrowed"),
        "$.instances[0].pod.containers[0].accelerators[0].mode",
        "unknown allocation mode 'Borrowed'",
    ),
    (
        "PID claimed twice",
        at("instances", 1, "pod", "containers", 0, "pids", value=[8101]),
        "$.instances[1].pod.containers[0].pids[0]",
        "PID 8101 on node 'gpu-node-1' is already claimed by $.instances[0]",
    ),
    (
        "PID absent from the recording",
        at(*MAIN, "pids", value=[31337]),
        "$.instances[0].pod.containers[0].pids[0]",
        "PID 31337 is absent from the recordings of node 'gpu-node-1'",
    ),
    (
        "PID on a card the container does not hold",
        at(*MAIN, "pids", value=[8203]),
        "$.instances[0].pod.containers[0].pids[0]",
        "none of which container 'main' is granted",
    ),
    (
        "time series going back in time",
        at("instances", 0, "pod", "usage", 2, "t", value=10),
        "$.instances[0].pod.usage[2].t",
        "10 goes back in time (previous point 30",
    ),
    (
        "negative time",
        at("instances", 0, "pod", "usage", 1, "t", value=-0.5),
        "$.instances[0].pod.usage[1].t",
        "-0.5 must be a non-negative time",
    ),
    (
        "time off the calendar",
        at("instances", 0, "pod", "created", value=1e300),
        "$.instances[0].pod.created",
        "is not a time within",
    ),
    (
        "time series repeating a time",
        at("instances", 0, "pod", "usage", 2, "t", value=30),
        "$.instances[0].pod.usage[2].t",
        "goes back in time",
    ),
    (
        "misspelt key",
        at(*GRANT, "memroyPercent", value=5),
        "$.instances[0].pod.containers[0].accelerators[0]",
        "unknown field `memroyPercent`",
    ),
    (
        "fault ending before it starts",
        at("faults", 0, "to", value=100),
        "$.faults[0].to",
        "must be after 'from'",
    ),
    (
        "fault on an unknown node",
        at("faults", 0, "node", value="gpu-node-9"),
        "$.faults[0].node",
        "unknown node 'gpu-node-9'",
    ),
    (
        "bad quantity",
        at("instances", 0, "resources", "cpu", value="eight"),
        "$.instances[0].resources.cpu",
        "not of the form",
    ),
    (
        "exclusive card held twice",
        at(
            "instances",
            1,
            "pod",
            "containers",
            0,
            "accelerators",
            0,
            "device",
            value="GPU-8d2f4a61-3c7e-4b19-a5d0-6e1f2b3c4d01",
        ),
        "$.instances[1].pod.containers[0].accelerators[0].mode",
        "is already held Exclusive at $.instances[0]",
    ),
    (
        "over-full slices",
        at("instances", 5, "pod", "containers", 0, "accelerators", 0, "memoryPercent", value=60),
        "$.instances[5].pod.containers[0].accelerators[0].memoryPercent",
        "add up to 135 % of its memory",
    ),
    (
        "derived accelerator request written by hand",
        at(*MAIN, "limits", value={"nvidia.com/gpu": "1"}),
        "$.instances[0].pod.containers[0].limits.nvidia.com/gpu",
        "derived from 'accelerators'",
    ),
    (
        "usage before the Pod started",
        at("instances", 0, "pod", "created", value=60),
        "$.instances[0].pod.usage[0].t",
        "before the Pod's containers start",
    ),
    (
        "duplicate container",
        append_to("instances", 0, "pod", "containers", value={"name": "main"}),
        "$.instances[0].pod.containers[1].name",
        "container 'main' is declared twice",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "path", "message"),
    [c[1:] for c in CORRUPTIONS],
    ids=[c[0] for c in CORRUPTIONS],
)
def test_a_corrupted_scenario_is_named_by_file_path_and_field(
    tmp_path: Path, mutate: Mutate, path: str, message: str
) -> None:
    doc = document("nvidia-mixed")
    mutate(doc)
    file = tmp_path / "scenarios" / "broken.yaml"
    file.parent.mkdir()
    file.write_text(yaml.safe_dump(doc))
    with pytest.raises(ContractError) as caught:
        expand(load_scenario(file), base=RECORDINGS_DIR)
    text = str(caught.value)
    assert text.startswith(f"{file}: ")
    assert path in text
    assert message in text


def test_corruptions_are_distinct_and_many() -> None:
    assert len({c[2] for c in CORRUPTIONS}) >= 6


def test_unreadable_and_non_yaml_files_are_contract_errors(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")
    with pytest.raises(ContractError, match="not valid YAML"):
        parse_scenario("schema: [", source="x.yaml")
    with pytest.raises(ContractError, match=r"x\.yaml: Expected `object`"):
        parse_scenario("- just a list", source="x.yaml")


# -- finding scenarios --------------------------------------------------------------------------


def test_find_scenario_by_name_or_path(tmp_path: Path) -> None:
    assert find_scenario("nvidia-mixed") == SCENARIOS_DIR / "nvidia-mixed.yaml"
    path = str(SCENARIOS_DIR / "amd-rdna3.yaml")
    assert find_scenario(path) == Path(path)
    with pytest.raises(FileNotFoundError, match="nvidia-mixed"):
        find_scenario("no-such-scenario")
    assert not is_scenario(RECORDINGS_DIR / "nvidia" / "t4.yaml")
    assert not is_scenario(tmp_path / "absent.yaml")
    quoted = tmp_path / "q.yaml"
    quoted.write_text(f'# a comment\nschema: "{SCHEMA}"  # trailing\n')
    assert is_scenario(quoted)


def test_scenarios_dir_follows_the_environment(tmp_path: Path) -> None:
    code = "from gpustack_simulator.scenario import SCENARIOS_DIR; print(SCENARIOS_DIR)"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"GPUSTACK_SCENARIOS": str(tmp_path), "PATH": ""},
    )
    assert result.stdout.strip() == str(tmp_path)


def test_find_scenario_reads_the_module_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "mine.yaml").write_text(f"schema: {SCHEMA}\n")
    monkeypatch.setattr(scenario_loading, "SCENARIOS_DIR", tmp_path)
    assert find_scenario("mine") == tmp_path / "mine.yaml"


# -- the CLI ------------------------------------------------------------------------------------

runner = CliRunner()


def test_cli_validate_accepts_scenarios_and_names_broken_ones(tmp_path: Path) -> None:
    good = SCENARIOS_DIR / "amd-rdna3.yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.read_text().replace("pids: [7002]", "pids: [9999]"))
    ok = runner.invoke(app, ["simulator", "validate", str(good)])
    assert ok.exit_code == 0, ok.output
    assert "ok (scenario, 1 nodes" in ok.output
    failed = runner.invoke(app, ["simulator", "validate", str(good), str(bad)])
    assert failed.exit_code == 1
    flat = " ".join(failed.output.split())
    assert f"{bad}: invalid" in flat
    assert "$.instances[1].pod.containers[0].pids[0]" in flat


def test_cli_list_shows_scenarios_with_their_node_count() -> None:
    result = runner.invoke(app, ["simulator", "list", str(RECORDINGS_DIR)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if "scenarios/" in line]
    assert len(rows) == len(COMMITTED)
    for row in rows:
        cells = [c.strip() for c in row.split("│")]
        assert cells[2] == "scenario"
        name = cells[1].rsplit("/", 1)[-1].removesuffix(".yaml")
        nodes = len(load_scenario(RECORDINGS_DIR / "scenarios" / f"{name}.yaml").document.nodes)
        assert cells[3] == str(nodes), row
    assert "invalid" not in result.output


# -- fuzzing ------------------------------------------------------------------------------------

JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.binary(max_size=400) | st.text(max_size=400))
def test_random_input_is_a_contract_error_or_a_scenario(data: bytes | str) -> None:
    with contextlib.suppress(ContractError):
        parse_scenario(data, source="fuzz.yaml")


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(JSONISH)
def test_random_documents_are_contract_errors(obj: Any) -> None:
    with pytest.raises(ContractError):
        parse_scenario(yaml.safe_dump(obj), source="fuzz.yaml")


def leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in leaves(v, (*path, k))] or [path]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in leaves(v, (*path, i))] or [path]
    return [path]


BASE_DOC = document("nvidia-mixed")
BASE_LEAVES = leaves(BASE_DOC)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.sampled_from(BASE_LEAVES), JSONISH)
def test_a_scenario_with_any_field_replaced_loads_or_is_named(
    path: tuple[Any, ...], value: Any
) -> None:
    doc = json.loads(json.dumps(BASE_DOC, default=str))
    at(*path, value=value)(doc)
    with contextlib.suppress(ContractError):
        expand(parse_scenario(yaml.safe_dump(doc), source="fuzz.yaml"), base=RECORDINGS_DIR)


# -- Pods no Instance owns ----------------------------------------------------------------------

STANDALONE = f"""
schema: {SCHEMA}
description: a notebook Pod no Instance owns holding a slice, beside an Instance's slice
nodes:
  - name: ws
    deviceManagers: [{{manufacturer: amd, recording: amd/rx7800xt.yaml}}]
instances:
  - name: chat
    node: ws
    resources: {{cpu: "1", memory: 1Gi}}
    pod:
      containers:
        - name: main
          pids: [7001]
          accelerators: [{{device: "0000:04:00.0", mode: Sliced, memoryPercent: 40}}]
pods:
  - name: jupyter
    namespace: lab
    node: ws
    containers:
      - name: main
        pids: [7002]
        accelerators: [{{device: "0000:04:00.0", mode: Sliced, memoryPercent: 60}}]
"""


def test_a_pod_no_instance_owns_is_known_but_not_an_instance_pod() -> None:
    ex = expand(parse_scenario(STANDALONE, source="inline.yaml"), base=RECORDINGS_DIR)
    obj = pod_named(ex, "lab", "jupyter")
    assert obj is not None
    pod = pod_from_object(obj)
    assert not is_instance_pod(pod)
    assert obj["status"]["qosClass"] == "BestEffort"
    match = CGROUP.match(ex.procs("ws")["7002"].cgroup)
    assert match is not None
    assert match["qos"] == "besteffort"
    assert match["uid"].replace("_", "-") == pod.metadata.uid
    [grant] = grants(parse_allocation(pod.metadata.annotations[ANNOTATION]))
    assert (grant.accelerator.allocated, grant.accelerator.remaining) == (960_000, 0)
    instance = pod_named(ex, "default", "chat")
    assert instance is not None
    assert instance["status"]["qosClass"] == "Guaranteed"
    # No usage series: the kubelet stand-in has no entry, metrics-server answers 404.
    assert ex.summary("ws", 10.0)["pods"] == []
    assert ex.pod_metrics("lab", "jupyter", 10.0) is None
