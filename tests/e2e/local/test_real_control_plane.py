"""What only a real control plane can show: the real server, authorizer, scheduler and GC at work.

Run by ``./dev e2e-real`` (``GPUSTACK_E2E_CONTROL_PLANE=real``) on the same ``simulator up`` as
the rest of the local suite; against the stand-in every test here skips, saying why. Each test
names the real component whose answer it checks, and the expected values come from Kubernetes'
own behaviour (its version, its Status messages, its printer columns), never from our code.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from typing import Any

import pytest
from e2e_helpers import create, eventually, kubectl_json
from e2e_system import CONTROL_PLANE, V1, System

from gpustack_core.allocation import ANNOTATION, parse_allocation
from gpustack_core.modes import AllocationMode

pytestmark = [
    pytest.mark.skipif(
        CONTROL_PLANE != "real",
        reason="runs against the real control plane only (./dev e2e-real)",
    ),
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl here"),
]

SERVER_VERSION = "v1.37.2"
"""The release clusters/controlplane pins (gomod.py KUBERNETES)."""
INSTANCES = "instances.v1alpha1.worker.gpustack.ai"


def test_kubectl_version_reports_the_real_server(system: System) -> None:
    done = system.kubectl("version", "-o", "json")
    assert done.returncode == 0, done.stderr
    server = json.loads(done.stdout)["serverVersion"]
    assert server["gitVersion"] == SERVER_VERSION
    assert (server["major"], server["minor"]) == ("1", "37")


def test_the_subresource_answers_through_the_real_aggregator(system: System) -> None:
    def answered() -> dict[str, Any] | None:
        done = system.kubectl("get", "--raw", f"{V1}/namespaces/team-a/instances/llama-70b/metrics")
        assert done.returncode == 0, done.stderr
        body: dict[str, Any] = json.loads(done.stdout)
        # The first Device Manager sample may still be on its way: poll until it is in.
        return body if body["sample"].get("accelerators") else None

    body = eventually(answered, "llama-70b's accelerator figures through the aggregator")
    assert (body["kind"], body["apiVersion"]) == ("InstanceMetrics", "worker.gpustack.ai/v1")
    [card] = body["sample"]["accelerators"]
    assert card["mode"] == "Exclusive"
    assert card["memoryTotalMiB"] == 81559  # the H100's own, from recordings/nvidia/h100-mixed


def test_an_unprivileged_context_is_refused_by_the_real_authorizer(system: System) -> None:
    done = system.kubectl(
        "get", "--raw", f"{V1}/namespaces/team-a/instances/llama-70b/metrics",
        context="no-metrics",
    )  # fmt: skip
    assert done.returncode != 0
    # kube-apiserver's RBAC authorizer's own wording, which the stand-in only imitates.
    assert 'User "no-metrics" cannot get resource "instances/metrics" in API group ' in (
        done.stderr
    )


def test_the_daemons_run_with_the_charts_rbac_and_nothing_more(system: System) -> None:
    """The worker and the Device Managers hold ServiceAccount tokens: RBAC as the chart grants."""
    worker = "system:serviceaccount:gpustack-system:gpustack-operator-worker"
    manager = "system:serviceaccount:gpustack-system:gpustack-operator-device-manager"

    def can(user: str, *what: str) -> bool:
        done = system.kubectl("auth", "can-i", *what, f"--as={user}")
        return done.stdout.strip() == "yes"

    assert can(worker, "create", "pods", "-n", "team-a")
    assert can(worker, "create", "subjectaccessreviews.authorization.k8s.io")
    assert not can(worker, "delete", "nodes")
    assert not can(worker, "get", "secrets", "-n", "kube-system")
    assert can(manager, "patch", "pods", "-n", "team-a")
    assert not can(manager, "delete", "pods", "-n", "team-a")
    assert not can(manager, "create", "pods", "-n", "team-a")


def test_a_device_manager_patches_only_its_own_nodes_pods(system: System) -> None:
    """Issue #31, item 5: each Device Manager runs on a token bound to its own Pod (as the
    kubelet mounts it), and kube-apiserver's admission, with the chart's own-node policy,
    refuses its patch of a Pod on another node (the policy's message is the chart's)."""
    managers = kubectl_json(
        system, "get", "pods", "-n", "gpustack-system",
        "-l", "app.kubernetes.io/component=device-manager",
    )["items"]  # fmt: skip
    by_node = {p["spec"]["nodeName"]: p["metadata"]["name"] for p in managers}
    assert len(by_node) >= 2, by_node
    tenants = kubectl_json(system, "get", "pods", "-n", "team-ops")["items"]
    placed = [(p["metadata"]["name"], p["spec"].get("nodeName")) for p in tenants]
    own_node, manager = next((n, m) for n, m in by_node.items() if any(n == o for _, o in placed))
    mine = next(name for name, node in placed if node == own_node)
    theirs = next((name, node) for name, node in placed if node and node != own_node)
    context = f"device-manager-{manager}"
    patch = '{"metadata":{"annotations":{"gpustack.ai/e2e-own-node":"checked"}}}'

    def patched(pod: str) -> subprocess.CompletedProcess[str]:
        return system.kubectl("patch", "pod", pod, "-n", "team-ops", "-p", patch, context=context)

    done = patched(mine)
    assert done.returncode == 0, done.stderr
    done = patched(theirs[0])
    assert done.returncode != 0
    assert (
        f"the Device Manager on node {own_node} may not modify Pod team-ops/{theirs[0]},"
        " which is not on its node"
    ) in done.stderr


def test_kubectl_get_prints_the_crds_printer_columns_from_the_real_server(
    system: System,
) -> None:
    done = system.kubectl("get", INSTANCES, "-n", "team-ops")
    assert done.returncode == 0, done.stderr
    header = done.stdout.splitlines()[0].split()
    # The Instance CRD's additionalPrinterColumns, rendered by the server's table convertor.
    assert header == ["NAME", "PHASE", "TYPE", "ACCELERATOR", "NODE", "AGE"]


def _ready(system: System, name: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        found: dict[str, Any] = kubectl_json(system, "get", INSTANCES, "-n", "team-ops", name)
        return found if found.get("status", {}).get("phase") == "Ready" else None

    return eventually(probe, f"Instance {name} Ready", timeout=90)


def _scheduled_by_kube_scheduler(system: System, pod: str) -> None:
    events = kubectl_json(
        system, "get", "events", "-n", "team-ops",
        "--field-selector", f"involvedObject.name={pod},reason=Scheduled",
    )  # fmt: skip
    sources = {
        (e.get("reportingComponent") or e.get("source", {}).get("component"))
        for e in events["items"]
    }
    assert "default-scheduler" in sources, events["items"]


@pytest.mark.parametrize(
    ("name", "mode"),
    [
        ("ops-exclusive", AllocationMode.EXCLUSIVE),
        ("ops-sliced", AllocationMode.SLICED),
        ("ops-mig", AllocationMode.PARTITIONED),
    ],
)
def test_each_demo_instance_is_scheduled_allocated_and_measured(
    system: System, name: str, mode: AllocationMode
) -> None:
    """kube-scheduler placed the Pod, our device plugin granted it, the figures read back."""
    _ready(system, name)
    pod = kubectl_json(system, "get", "pod", "-n", "team-ops", name)
    assert pod["status"]["phase"] == "Running"
    _scheduled_by_kube_scheduler(system, name)
    allocation = parse_allocation(pod["metadata"]["annotations"][ANNOTATION])
    modes = {a.mode for e in allocation.values() for g in e.devices.groups for a in g.accelerators}
    assert mode in modes

    def figures() -> dict[str, Any] | None:
        answer = system.metrics("team-ops", name)
        if answer.status_code != 200:
            return None
        cards = answer.json()["sample"].get("accelerators") or []
        return cards[0] if cards else None

    card = eventually(figures, f"{name}'s accelerator figures")
    assert card["mode"] == mode.api_name
    assert card["memoryTotalMiB"] > 0


def test_an_instance_placed_by_the_scheduler_and_collected_by_the_real_gc(
    system: System,
) -> None:
    """No node pinned: kube-scheduler picks one with a free card; deletion cascades through
    kube-controller-manager's garbage collector. (Shared is not requested through Instances,
    operator-half.md; the local suite's plain Pods cover it on this target.)
    """
    body = {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": "real-placed", "namespace": "team-ops"},
        "spec": {"type": "nvidia-h100-80gb-hbm3", "image": "ubuntu:24.04",
                 "command": ["sleep", "infinity"], "ports": [{"port": 8080}],
                 "resources": {"cpu": "1", "ram": "2Gi", "accelerator": 1}},
    }  # fmt: skip
    made = create(system, body)
    assert made.returncode == 0, made.stderr
    _ready(system, "real-placed")
    _scheduled_by_kube_scheduler(system, "real-placed")
    pod = kubectl_json(system, "get", "pod", "-n", "team-ops", "real-placed")
    allocation = parse_allocation(pod["metadata"]["annotations"][ANNOTATION])
    [entry] = allocation.values()
    [accelerator] = [a for g in entry.devices.groups for a in g.accelerators]
    assert accelerator.mode is AllocationMode.EXCLUSIVE
    assert accelerator.allocated == 1_600_000  # one whole card: M
    service = kubectl_json(system, "get", "service", "-n", "team-ops", "real-placed")
    assert service["spec"]["type"] == "NodePort"
    [port] = service["spec"]["ports"]
    assert 30000 <= port["nodePort"] <= 32767  # allocated by the real Service registry
    owners = {(o["kind"], o["name"]) for o in pod["metadata"]["ownerReferences"]}
    assert ("Instance", "real-placed") in owners
    # Delete the Instance; the real garbage collector (kube-controller-manager) cascades to the
    # Pod and Service it owns.
    gone = system.kubectl("delete", INSTANCES, "-n", "team-ops", "real-placed", "--wait=false")
    assert gone.returncode == 0, gone.stderr

    def collected() -> bool | None:
        pods = system.kubectl("get", "pod", "-n", "team-ops", "real-placed")
        services = system.kubectl("get", "service", "-n", "team-ops", "real-placed")
        return True if "NotFound" in pods.stderr and "NotFound" in services.stderr else None

    eventually(collected, "the Instance's Pod and Service collected", timeout=90)


def test_the_pod_webhook_is_called_by_the_real_api_server(system: System) -> None:
    """A slice without a size: refused, in kube-apiserver's words around the webhook's."""
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "real-gate", "namespace": "team-ops"},
        "spec": {"containers": [{"name": "main", "image": "busybox",
                                 "resources": {"limits": {"nvidia.com/gpu.sliced": "1"}}}]},
    }  # fmt: skip
    done = create(system, pod)
    assert done.returncode != 0
    assert re.search(r'admission webhook "pods\.[a-z.]+" denied the request', done.stderr)


def test_the_instance_controller_holds_its_leader_lease(system: System) -> None:
    lease = kubectl_json(
        system, "get", "lease", "-n", "gpustack-system", "gpustack-operator-instance-controller"
    )
    assert lease["spec"]["holderIdentity"]
    assert lease["spec"]["leaseDurationSeconds"] > 0


def test_real_kueue_admits_within_quota_and_gates_beyond_it(system: System) -> None:
    """Kueue v0.17 built from its module: its Pod webhook gates, its scheduler admits.

    A ClusterQueue holding one Pod (Kueue's ``pods`` quota: each PodSet counts its Pods; cpu
    and memory are not Kueue's to count under the operator's configuration,
    ``gpustack_core.kueueconfig``): the first Pod is admitted (its Workload ``Admitted``, the
    gate removed, kube-scheduler places it); a second, created after, stays
    ``SchedulingGated`` with Kueue's ``kueue.x-k8s.io/admission`` gate, its Workload pending.
    """

    def pod(name: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "team-ops",
                             "labels": {"kueue.x-k8s.io/queue-name": "e2e-lq"}},
                "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {
                    "requests": {"cpu": "1", "memory": "1Gi"}}}]}}  # fmt: skip

    def apply(items: list[dict[str, Any]]) -> None:
        made = subprocess.run(
            ["kubectl", "--kubeconfig", system.endpoints.kubeconfig, "--context", "admin",
             "apply", "-f", "-"],
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr

    apply([
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": "e2e-flavor"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": {"name": "e2e-cq"},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{
             "coveredResources": ["pods"],
             "flavors": [{"name": "e2e-flavor", "resources": [
                 {"name": "pods", "nominalQuota": "1"}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "e2e-lq", "namespace": "team-ops"},
         "spec": {"clusterQueue": "e2e-cq"}},
        pod("kueue-fits"),
    ])  # fmt: skip

    def running() -> dict[str, Any] | None:
        found: dict[str, Any] = kubectl_json(system, "get", "pod", "-n", "team-ops", "kueue-fits")
        return found if found["status"].get("phase") == "Running" else None

    fits = eventually(running, "the Pod within quota admitted and running")
    assert not fits["spec"].get("schedulingGates")
    assert fits["metadata"]["labels"]["kueue.x-k8s.io/managed"] == "true"  # Kueue's webhook
    _scheduled_by_kube_scheduler(system, "kueue-fits")
    apply([pod("kueue-too-big")])

    def pending() -> dict[str, Any] | None:
        listed = kubectl_json(system, "get", "workloads.kueue.x-k8s.io", "-n", "team-ops")
        found = [w for w in listed["items"]
                 if w["metadata"]["ownerReferences"][0]["name"] == "kueue-too-big"
                 and (w.get("status") or {}).get("conditions")]  # fmt: skip
        return found[0] if found else None

    eventually(pending, "the second Pod's Workload judged")
    big = kubectl_json(system, "get", "pod", "-n", "team-ops", "kueue-too-big")
    gates = {g["name"] for g in big["spec"].get("schedulingGates") or ()}
    assert "kueue.x-k8s.io/admission" in gates
    assert not big["spec"].get("nodeName")
    workloads = kubectl_json(system, "get", "workloads.kueue.x-k8s.io", "-n", "team-ops")
    admitted = {
        w["metadata"]["ownerReferences"][0]["name"]: any(
            c["type"] == "Admitted" and c["status"] == "True"
            for c in (w.get("status") or {}).get("conditions") or ()
        )
        for w in workloads["items"]
        if w["metadata"]["ownerReferences"][0]["name"].startswith("kueue-")
    }
    assert admitted == {"kueue-fits": True, "kueue-too-big": False}


def test_real_nfd_master_turns_the_published_nodefeatures_into_node_labels(
    system: System,
) -> None:
    """nfd-master from NFD's module labels the nodes from the worker's and Device Managers'
    NodeFeatures, and records the keys it owns (``nfd.node.kubernetes.io/feature-labels``)."""

    def labelled() -> dict[str, Any] | None:
        node: dict[str, Any] = kubectl_json(system, "get", "node", "gpu-node-2")
        labels = node["metadata"].get("labels") or {}
        return node if labels.get("acceleratable.feature.gpustack.ai/nvidia") == "true" else None

    node = eventually(labelled, "gpu-node-2's acceleratable labels from nfd-master")
    labels = node["metadata"]["labels"]
    assert labels["gpustack.ai/managed"] == "true"  # the worker's NodeFeature
    owned = set(node["metadata"]["annotations"]["nfd.node.kubernetes.io/feature-labels"].split(","))
    assert "acceleratable.feature.gpustack.ai/nvidia" in owned
    assert any(key.startswith("general.feature.gpustack.ai/") for key in labels)


def _nanocores(quantity: str) -> float:
    """metrics-server's CPU quantity (``n``, ``u`` or ``m`` suffixed) in cores."""
    scale = {"n": 1e-9, "u": 1e-6, "m": 1e-3}
    return float(quantity[:-1]) * scale[quantity[-1]] if quantity[-1] in scale else float(quantity)


def _bytes(quantity: str) -> int:
    """A memory quantity (plain or with a binary suffix, as metrics-server writes it)."""
    for power, suffix in enumerate(("Ki", "Mi", "Gi", "Ti"), start=1):
        if quantity.endswith(suffix):
            return int(quantity.removesuffix(suffix)) * 1024**power
    return int(quantity)


def test_real_metrics_server_serves_the_node_agents_resource_metrics(system: System) -> None:
    """metrics-server from its module scrapes the node agent's ``/metrics/resource`` and serves
    ``metrics.k8s.io`` through the real aggregator; ``kubectl top`` reads it as a user does.

    Expected figures are the demo scenario's (recordings/scenarios/demo.yaml): from t = 90 s
    llama-70b's one container holds 7500m of CPU and 42Gi of memory."""

    def steady() -> dict[str, Any] | None:
        done = system.kubectl(
            "get", "--raw", "/apis/metrics.k8s.io/v1beta1/namespaces/team-a/pods/llama-70b"
        )
        if done.returncode != 0:
            return None  # not scraped twice yet (metrics-server's rate needs two points)
        body: dict[str, Any] = json.loads(done.stdout)
        [container] = body["containers"]
        usage = container["usage"]
        # a rate taken across t = 90 s lies between the two points: wait for one after it
        memory_held = _bytes(usage["memory"]) == 42 * 1024**3
        return body if memory_held and abs(_nanocores(usage["cpu"]) - 7.5) < 0.01 else None

    body = eventually(steady, "llama-70b's PodMetrics at the scenario's figures", timeout=240)
    [container] = body["containers"]
    assert container["name"] == "main"
    top = system.kubectl("top", "pod", "llama-70b", "-n", "team-a", "--no-headers")
    assert top.returncode == 0, top.stderr
    name, cpu, memory = top.stdout.split()
    assert (name, memory) == ("llama-70b", "43008Mi")
    assert abs(_nanocores(cpu) - 7.5) < 0.01
    nodes = system.kubectl("top", "node", "gpu-node-1", "--no-headers")
    assert nodes.returncode == 0, nodes.stderr
    assert nodes.stdout.split()[0] == "gpu-node-1"
