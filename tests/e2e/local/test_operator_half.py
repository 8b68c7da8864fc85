"""The operator half through ``simulator up``: the allocator and the Instance controller at work.

Nothing here is pre-rendered. Pods are created with kubectl and carry no annotation; the
stand-in's scheduler places them by what the device plugins (through each node's fake kubelet)
and the worker's node-capacity patch advertise, the fake kubelet asks the node's Device Manager
to Allocate, and the Device Manager writes the allocation annotation. The demo's ``apply``
Instances (``team-ops``) are rendered into Pods by the worker's controller the same way. The
expected figures are the cards' own (81559 MiB an H100, 9856 MiB its ``1g.10gb`` partition as
the driver reports it) and the spec's folding (a 25 % slice: a quarter of the card, floored).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, TypeVar

import pytest
from e2e_helpers import create, eventually, kubectl_json
from e2e_system import V1, System
from prometheus_client.parser import text_string_to_metric_families

from gpustack_core.allocation import ANNOTATION, parse_allocation
from gpustack_core.modes import AllocationMode
from gpustack_core.tokens import parse_token_id

needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl here")
pytestmark = needs_kubectl

T = TypeVar("T")
H100_MIB = 81559
"""One H100 80GB HBM3's memory as NVML reports it (recordings/nvidia/h100-8x.yaml)."""
INSTANCES = "/apis/worker.gpustack.ai/v1alpha1/namespaces/team-ops/instances"


def plain_pod(name: str, node: str, containers: dict[str, dict[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-ops"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [
                {"name": c, "image": "busybox", "resources": {"limits": limits}}
                for c, limits in containers.items()
            ],
        },
    }


def running(system: System, namespace: str, name: str) -> dict[str, Any] | None:
    found = kubectl_json(system, "get", "pod", "-n", namespace, name)
    phase = found.get("status", {}).get("phase")
    assert phase != "Failed", found["status"]
    return found if phase == "Running" else None


def confirmed(system: System, node: str, manufacturer: str, pod: dict[str, Any]) -> set[str]:
    """The containers of ``pod`` whose grants the node's Device Manager confirmed."""
    uid = pod["metadata"]["uid"]
    grants = system.snapshot(node, manufacturer).get("grants") or []
    return {g["container"] for g in grants if g["podUID"] == uid}


# The resource requests a user writes per mode (the webhook folds the rest), and where.
MODES: dict[str, tuple[str, str, dict[str, dict[str, str]], dict[str, AllocationMode]]] = {
    "exclusive": (
        "gpu-node-2", "nvidia", {"main": {"nvidia.com/gpu": "1"}},
        {"main": AllocationMode.EXCLUSIVE},
    ),
    "shared": (
        "gpu-node-2", "nvidia", {"main": {"nvidia.com/gpu.shared": "2"}},
        {"main": AllocationMode.SHARED},
    ),
    "sliced": (
        "gpu-node-2", "nvidia",
        {"main": {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "10",
                  "nvidia.com/gpu.sliced.cores-percentage": "10"}},
        {"main": AllocationMode.SLICED},
    ),
    "partitioned": (
        "hygon-bw-mig-1", "hygon",
        {"main": {"hygon.com/dcu.partitioned": "1", "hygon.com/dcu.partitioned.mig-2g.15gb": "1"}},
        {"main": AllocationMode.PARTITIONED},
    ),
    "visibility": (
        "gpu-node-2", "nvidia",
        {"main": {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "10",
                  "nvidia.com/gpu.sliced.cores-percentage": "10"},
         "sidecar": {"device.gpustack.ai/nvidia.visibility": "1"}},
        {"main": AllocationMode.SLICED, "sidecar": AllocationMode.VISIBILITY},
    ),
}  # fmt: skip


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_kubectl_pod_is_allocated_by_the_device_manager(system: System, mode: str) -> None:
    node, manufacturer, containers, expected = MODES[mode]
    name = f"alloc-{mode}"
    made = create(system, plain_pod(name, node, containers))
    assert made.returncode == 0, made.stderr
    try:
        _allocated_as_expected(system, name, node, manufacturer, expected)
    finally:  # its cards back: on a real scheduler the next tests need them
        system.kubectl("delete", "pod", "-n", "team-ops", name, "--wait=false")


def _allocated_as_expected(
    system: System,
    name: str,
    node: str,
    manufacturer: str,
    expected: dict[str, AllocationMode],
) -> None:
    pod = eventually(lambda: running(system, "team-ops", name), f"{name} Running")
    assert pod["spec"]["nodeName"] == node
    allocation = parse_allocation(pod["metadata"]["annotations"][ANNOTATION])
    assert set(allocation) == set(expected)
    for container, want in expected.items():
        entry = allocation[container]
        accelerators = [a for g in entry.devices.groups for a in g.accelerators]
        assert {a.mode for a in accelerators} == {want}
        assert {g.manufacturer for g in entry.devices.groups} == {manufacturer}
        assert entry.device_ids, "the plugin records the kubelet's device IDs"
        for device_id in entry.device_ids:
            parse_token_id(device_id)  # <group>:<card>:<NNNN>, the plugin's own IDs
        if want is AllocationMode.SHARED:
            assert len({a.id for a in accelerators}) == 2, "two shares on two distinct cards"
        if want is AllocationMode.PARTITIONED:
            (accelerator,) = accelerators
            assert accelerator.allocated_physical_profile == "2g.15gb"
            assert accelerator.allocated_physical_id
    if "sidecar" in expected:
        main_cards = {a.id for g in allocation["main"].devices.groups for a in g.accelerators}
        side_cards = {a.id for g in allocation["sidecar"].devices.groups for a in g.accelerators}
        assert side_cards == main_cards, "the sidecar sees its sibling's card, no card of its own"
    eventually(
        lambda: True if confirmed(system, node, manufacturer, pod) == set(expected) else None,
        f"{name}'s grants confirmed against the kubelet's PodResources",
    )


def instance(system: System, name: str) -> dict[str, Any]:
    found: dict[str, Any] = kubectl_json(
        system, "get", "instances.v1alpha1.worker.gpustack.ai", "-n", "team-ops", name
    )
    return found


def ready(system: System, name: str) -> dict[str, Any]:
    last: list[Any] = [None]

    def probe() -> dict[str, Any] | None:
        found = instance(system, name)
        last[0] = found.get("status")
        return found if found.get("status", {}).get("phase") == "Ready" else None

    try:
        return eventually(probe, f"Instance {name} Ready")
    except pytest.fail.Exception:
        pods = system.kubectl("get", "pod", "-n", "team-ops", name, "-o", "json")
        pytest.fail(f"Instance {name} not Ready: {last[0]}\nPod: {pods.stdout[-1500:]}")


def accelerators(system: System, name: str) -> list[dict[str, Any]]:
    """The subresource's accelerator entries, once it answers 200.

    A Pod created a moment ago is not in its kubelet's summary until the next collection (the
    worker caches a node's summary 15 s), so a fresh Instance may answer 503 at first.
    """

    def read() -> list[dict[str, Any]] | None:
        with system.api() as client:
            response = client.get(f"{V1}/namespaces/team-ops/instances/{name}/metrics")
        if response.status_code == 503:
            return None
        assert response.status_code == 200, response.text
        found: list[dict[str, Any]] = response.json()["sample"].get("accelerators") or []
        return found

    return eventually(read, f"{name}'s subresource answering 200")


def series(system: System, node: str, instance_name: str) -> dict[tuple[str, str], float]:
    """(family, accelerator id) → value of every exporter series of ``instance_name``."""
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(system.exposition(node, "nvidia")):
        for sample in family.samples:
            if sample.labels.get("instance_name") == instance_name:
                out[(sample.name, sample.labels.get("id", ""))] = sample.value
    return out


# name → node, mode, memory total (MiB) by the spec's rules.
APPLIED = {
    "ops-exclusive": ("gpu-node-2", "Exclusive", H100_MIB),
    "ops-sliced": ("gpu-node-2", "Sliced", H100_MIB * 25 // 100),
    "ops-ssh": ("gpu-node-2", "Sliced", H100_MIB * 50 // 100),
    "ops-mig": ("gpu-hybrid-1", "Partitioned", 9856),
}


@pytest.mark.parametrize("name", sorted(APPLIED))
def test_an_applied_instance_runs_with_its_figures(system: System, name: str) -> None:
    node, mode, total = APPLIED[name]
    found = ready(system, name)
    uid = found["metadata"]["uid"]
    pod = kubectl_json(system, "get", "pod", "-n", "team-ops", name)
    labels = pod["metadata"]["labels"]
    assert labels["app.kubernetes.io/part-of"] == uid
    assert labels["resource.gpustack.ai/type"] == "instances"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == uid
    assert pod["spec"]["nodeName"] == node == found["status"]["nodeName"]
    assert pod["spec"]["automountServiceAccountToken"] is False
    names = [c["name"] for c in pod["spec"]["containers"]]
    assert names == (["main", "sshd"] if name == "ops-ssh" else ["main"])
    assert ANNOTATION in pod["metadata"]["annotations"], "written by the Device Manager"

    seen: list[Any] = [None]

    def entry() -> dict[str, Any] | None:
        listed = seen[0] = accelerators(system, name)
        return listed[0] if listed and "memoryTotalMiB" in listed[0] else None

    try:
        got = eventually(entry, f"{name}'s accelerator on the subresource")
    except pytest.fail.Exception:
        log = Path(system.device_manager(node, "nvidia").log)
        lines = [line for line in log.read_text().splitlines() if name in line][-5:]
        pytest.fail(f"{name}: subresource accelerators {seen[0]}; DM log: {lines}")
    assert got["mode"] == mode
    assert got["memoryTotalMiB"] == total
    exported = eventually(
        lambda: series(system, node, name) or None, f"{name}'s series on the exporter"
    )
    family = "gpustack_instance_accelerator_memory_total_mib"
    totals = [v for (f, _), v in exported.items() if f == family]
    assert totals == [float(total)]


def test_the_ssh_sidecar_holds_only_visibility_of_mains_card(system: System) -> None:
    ready(system, "ops-ssh")
    pod = kubectl_json(system, "get", "pod", "-n", "team-ops", "ops-ssh")
    sshd = next(c for c in pod["spec"]["containers"] if c["name"] == "sshd")
    assert sshd["resources"]["limits"] == {"device.gpustack.ai/nvidia.visibility": "1"}
    mounts = {m["mountPath"] for m in sshd.get("volumeMounts") or ()}
    assert "/var/run/sshd-authorized-keys" in mounts
    allocation = parse_allocation(pod["metadata"]["annotations"][ANNOTATION])
    main = {a.id for g in allocation["main"].devices.groups for a in g.accelerators}
    side = [a for g in allocation["sshd"].devices.groups for a in g.accelerators]
    assert {a.id for a in side} == main
    assert {a.mode for a in side} == {AllocationMode.VISIBILITY}


def test_a_forged_annotation_reads_no_figures(system: System) -> None:
    """A tenant copies ops-exclusive's grant onto its own Instance's Pod: nothing is believed."""
    forger = {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": "ops-forger", "namespace": "team-ops"},
        "spec": {"image": "ubuntu:24.04", "command": ["sleep", "infinity"],
                 "nodeName": "gpu-node-2", "resources": {"cpu": "1", "ram": "1Gi"}},
    }  # fmt: skip
    made = create(system, forger)
    assert made.returncode == 0, made.stderr
    try:
        _nothing_believed(system)
    finally:
        system.kubectl("delete", "instances.v1alpha1.worker.gpustack.ai", "-n", "team-ops",
                       "ops-forger", "--wait=false")  # fmt: skip


def _nothing_believed(system: System) -> None:
    ready(system, "ops-forger")
    victim = kubectl_json(system, "get", "pod", "-n", "team-ops", "ops-exclusive")
    stolen = victim["metadata"]["annotations"][ANNOTATION]
    card = json.loads(stolen)["main"]["devices"]["groups"][0]["accelerators"][0]["id"]
    done = system.kubectl(
        "annotate", "pod", "-n", "team-ops", "ops-forger", f"{ANNOTATION}={stolen}", "--overwrite"
    )
    if system.real:
        # kube-apiserver evaluates the chart's allocation-record policy: the forgery never lands
        # (the stand-in evaluates no ValidatingAdmissionPolicy, so there the Device Manager's
        # cross-check against the kubelet's record is what stops it, below).
        assert done.returncode != 0
        assert "only the Device Manager may add, change or remove it" in done.stderr
        held = kubectl_json(system, "get", "pod", "-n", "team-ops", "ops-forger")
        assert ANNOTATION not in (held["metadata"].get("annotations") or {})
        assert not [a for a in accelerators(system, "ops-forger") if a.get("id") == card]
        return
    assert done.returncode == 0, done.stderr
    log = Path(system.device_manager("gpu-node-2", "nvidia").log)
    eventually(
        lambda: (
            True
            if "pod team-ops/ops-forger container 'main'" in log.read_text()
            and "not believed" in log.read_text()
            else None
        ),
        "the Device Manager logging the unbelieved claim",
    )
    time.sleep(4)  # two monitor periods: the worker has read a snapshot since the edit
    assert not [a for a in accelerators(system, "ops-forger") if a.get("id") == card]
    assert not [k for k in series(system, "gpu-node-2", "ops-forger") if k[1] == card]
    # The victim's own figures are untouched.
    assert [a["id"] for a in accelerators(system, "ops-exclusive")] == [card]


def node_ports(system: System, name: str) -> dict[int, int]:
    service = kubectl_json(system, "get", "service", "-n", "team-ops", name)
    return {p["port"]: p["nodePort"] for p in service["spec"]["ports"]}


def patch(system: System, name: str, spec: dict[str, Any]) -> None:
    done = system.kubectl(
        "patch", "instances.v1alpha1.worker.gpustack.ai", "-n", "team-ops", name,
        "--type=merge", "-p", json.dumps({"spec": spec}),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def gone(system: System, kind: str, name: str) -> bool | None:
    done = system.kubectl("get", kind, "-n", "team-ops", name)
    return True if done.returncode != 0 and "NotFound" in done.stderr else None


def test_stop_start_keeps_the_node_ports_and_edits_apply_on_start(system: System) -> None:
    life = {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": "ops-life", "namespace": "team-ops"},
        "spec": {"type": "nvidia-h100-80gb-hbm3", "image": "ubuntu:24.04",
                 "command": ["sleep", "infinity"], "nodeName": "gpu-node-2",
                 "ports": [{"port": 22}, {"port": 8888}],
                 "resources": {"cpu": "2", "ram": "8Gi", "accelerator": 1}},
    }  # fmt: skip
    made = create(system, life)
    assert made.returncode == 0, made.stderr
    ready(system, "ops-life")
    before = node_ports(system, "ops-life")
    assert set(before) == {22, 8888}
    patch(system, "ops-life", {"stop": True})
    eventually(lambda: gone(system, "pod", "ops-life"), "the stopped Instance's Pod gone")
    assert node_ports(system, "ops-life") == before, "stopping keeps the Service and its ports"
    with system.api() as client:
        stopped = client.get(f"{V1}/namespaces/team-ops/instances/ops-life/metrics")
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["sample"]["cpuUsedMilliCores"] == 0
    # Edited while stopped: 8888 dropped, 9000 added; applied only on start.
    patch(system, "ops-life", {"ports": [{"port": 22}, {"port": 9000}]})
    time.sleep(2)
    assert node_ports(system, "ops-life") == before
    patch(system, "ops-life", {"stop": False})
    ready(system, "ops-life")
    after = eventually(
        lambda: p if set(p := node_ports(system, "ops-life")) == {22, 9000} else None,
        "the edited ports applied on start",
    )
    assert after[22] == before[22], "a kept port keeps its node port"
    assert 30000 <= after[9000] <= 32767, "an added port gets a node port of its own"
    pod = kubectl_json(system, "get", "pod", "-n", "team-ops", "ops-life")
    assert ANNOTATION in pod["metadata"]["annotations"], "allocated again on start"
    # Clearing the ports (stopped first: spec is immutable while the Instance runs) deletes
    # the Service when it starts again; deleting the Instance collects the rest.
    patch(system, "ops-life", {"stop": True})
    patch(system, "ops-life", {"ports": None})
    patch(system, "ops-life", {"stop": False})
    eventually(lambda: gone(system, "service", "ops-life"), "the Service gone with its ports")
    done = system.kubectl("delete", "instances.v1alpha1.worker.gpustack.ai", "-n", "team-ops",
                          "ops-life", "--wait=false")  # fmt: skip
    assert done.returncode == 0, done.stderr
    eventually(lambda: gone(system, "pod", "ops-life"), "the deleted Instance's Pod collected")


def test_a_recreated_instance_never_publishes_its_predecessor(system: System) -> None:
    spec = {"image": "ubuntu:24.04", "command": ["sleep", "infinity"], "nodeName": "gpu-node-2",
            "type": "nvidia-h100-80gb-hbm3",
            "resources": {"cpu": "1", "ram": "4Gi", "accelerator": 1,
                          "acceleratorSlicedMemoryPercentage": 10}}  # fmt: skip
    body = {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "Instance",
            "metadata": {"name": "ops-again", "namespace": "team-ops"}, "spec": spec}  # fmt: skip
    assert create(system, body).returncode == 0
    first = ready(system, "ops-again")["metadata"]["uid"]
    eventually(lambda: series(system, "gpu-node-2", "ops-again") or None, "the first's series")
    done = system.kubectl("delete", "instances.v1alpha1.worker.gpustack.ai", "-n", "team-ops",
                          "ops-again", "--wait=false")  # fmt: skip
    assert done.returncode == 0, done.stderr
    eventually(lambda: gone(system, "instances.v1alpha1.worker.gpustack.ai", "ops-again"),
               "the first Instance gone")  # fmt: skip
    assert create(system, body).returncode == 0
    second = ready(system, "ops-again")["metadata"]["uid"]
    assert second != first
    # An exposition is rendered once per monitor round (2 s here): from the first round that
    # publishes the second incarnation on, the first's UID never appears again.
    eventually(
        lambda: (
            True
            if f'instance_uid="{second}"' in system.exposition("gpu-node-2", "nvidia")
            else None
        ),
        "the second incarnation published",
    )
    for _ in range(6):  # three more rounds
        text = system.exposition("gpu-node-2", "nvidia")
        assert f'instance_uid="{first}"' not in text
        time.sleep(1)
    system.kubectl("delete", "instances.v1alpha1.worker.gpustack.ai", "-n", "team-ops",
                   "ops-again", "--wait=false")  # fmt: skip


# -- Instances through worker.gpustack.ai/v1 -------------------------------------------------


def test_kubectl_get_instances_prints_the_columns_a_user_wants(system: System) -> None:
    ready(system, "ops-sliced")
    ready(system, "ops-mig")
    done = system.kubectl("get", "instances.v1.worker.gpustack.ai", "-n", "team-ops")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["NAME", "PHASE", "TYPE", "ACCELERATOR", "NODE", "AGE"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["ops-sliced"][1:5] == ["Ready", "nvidia-h100-80gb-hbm3", "25%", "gpu-node-2"]
    assert rows["ops-mig"][1:5] == ["Ready", "nvidia-h100-80gb-hbm3", "1g.10gb", "gpu-hybrid-1"]


def test_instances_are_written_through_v1(system: System) -> None:
    body = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance",
            "metadata": {"name": "ops-v1", "namespace": "team-ops"},
            "spec": {"image": "ubuntu:24.04", "command": ["sleep", "infinity"],
                     "nodeName": "gpu-node-2",
                     "resources": {"cpu": "1", "ram": "1Gi"}}}  # fmt: skip
    made = create(system, body)
    assert made.returncode == 0, made.stderr
    stored = ready(system, "ops-v1")  # read at the CRD's version: the write reached the store
    assert stored["apiVersion"] == "worker.gpustack.ai/v1alpha1"
    patched = system.kubectl(
        "patch", "instances.v1.worker.gpustack.ai", "-n", "team-ops", "ops-v1",
        "--type=merge", "-p", json.dumps({"spec": {"stop": True}}),
    )  # fmt: skip
    assert patched.returncode == 0, patched.stderr
    eventually(lambda: gone(system, "pod", "ops-v1"), "the v1-stopped Instance's Pod gone")
    strategic = system.kubectl(
        "patch", "instances.v1.worker.gpustack.ai", "-n", "team-ops", "ops-v1",
        "-p", json.dumps({"spec": {"stop": False}}),
    )  # fmt: skip
    assert strategic.returncode != 0
    assert "--type=merge" in strategic.stderr
    bad = {**body, "metadata": {"name": "ops-v1-bad", "namespace": "team-ops"},
           "spec": {**body["spec"], "resources": {"cpu": "lots"}}}  # fmt: skip
    refused = create(system, bad)
    assert refused.returncode != 0
    assert "spec.resources.cpu" in refused.stderr, refused.stderr
    deleted = system.kubectl("delete", "instances.v1.worker.gpustack.ai", "-n", "team-ops",
                             "ops-v1", "--wait=false")  # fmt: skip
    assert deleted.returncode == 0, deleted.stderr
    eventually(
        lambda: gone(system, "instances.v1alpha1.worker.gpustack.ai", "ops-v1"), "ops-v1 gone"
    )
