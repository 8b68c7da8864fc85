"""Custom InstanceTypes through real kubectl on the real control plane (with real Kueue).

Run by ``./dev e2e-real`` (``GPUSTACK_E2E_CONTROL_PLANE=real``); against the stand-in every test
skips (``tests/integration/test_instancetype_lifecycle.py`` holds the same behaviour there).
The real kube-apiserver calls the worker's InstanceType webhooks and words their refusals; the
real Kueue, where it holds an Instance's Pod, writes the Workload whose reason the Instance
shows. Expected texts are the walkthrough's and kube-apiserver's wording of a webhook denial.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
from e2e_helpers import create, eventually, kubectl_json
from e2e_system import CONTROL_PLANE, System

from gpustack_core.quantity import parse_quantity

pytestmark = [
    pytest.mark.skipif(
        CONTROL_PLANE != "real",
        reason="runs against the real control plane only (./dev e2e-real)",
    ),
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl here"),
]

NS = "team-ops"
INSTANCES = "instances.v1alpha1.worker.gpustack.ai"
TYPES = "instancetypes.v1alpha1.worker.gpustack.ai"
IMMUTABLE = (
    "field is immutable after creation (only displayName and inactive may change): to re-size "
    "or re-point a pool, delete the InstanceType and create it again"
)


def cpu_type(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "InstanceType",
        "metadata": {"name": name},
        "spec": {"acceleratable": False, "os": "linux", "arch": "amd64",
                 "unitResources": {"cpu": "1", "ram": "2Gi", "localStorage": "10Gi"}, **spec},
    }  # fmt: skip


def instance(name: str, type_name: str, **resources: Any) -> dict[str, Any]:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"type": type_name, "image": "ubuntu:24.04", "command": ["sleep", "infinity"],
                 "resources": {"cpu": "1", "ram": "1Gi", **resources}},
    }  # fmt: skip


def phase(system: System, name: str, wanted: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        found: dict[str, Any] = kubectl_json(system, "get", INSTANCES, "-n", NS, name)
        return found if found.get("status", {}).get("phase") == wanted else None

    return eventually(probe, f"Instance {name} {wanted}", timeout=90)


def started(system: System, name: str) -> dict[str, Any]:
    """Its Pod created: ``Ready``, or ``Starting`` while Kueue holds it in the type's queue.

    Whether the chain's ClusterQueue admits it is the chain's business, not this test's: the
    lifecycle here is the Instance controller's.
    """

    def probe() -> dict[str, Any] | None:
        found: dict[str, Any] = kubectl_json(system, "get", INSTANCES, "-n", NS, name)
        status = found.get("status", {})
        return found if status.get("podName") == name else None

    return eventually(probe, f"Instance {name}'s Pod created", timeout=90)


def patch(system: System, kind: str, name: str, body: dict[str, Any], *ns: str) -> Any:
    return system.kubectl("patch", kind, *ns, name, "--type=merge", "-p", json.dumps(body))


def test_a_wrong_type_is_refused_by_the_webhook_in_kube_apiservers_words(system: System) -> None:
    made = create(system, cpu_type("e2e-bad", acceleratable=True))
    assert made.returncode != 0
    # A 422 with causes: kubectl prints the causes after "The request is invalid".
    assert made.stderr.startswith("The request is invalid: ")
    assert (
        "spec.acceleratorGroup: Required value: an acceleratable InstanceType names its "
        "accelerator key" in made.stderr
    )
    assert system.kubectl("get", TYPES, "e2e-bad").returncode != 0


def test_a_type_is_stamped_and_only_its_display_name_and_inactive_change(system: System) -> None:
    made = create(system, cpu_type("e2e-stamped"))
    assert made.returncode == 0, made.stderr
    stored = kubectl_json(system, "get", TYPES, "e2e-stamped")
    labels = stored["metadata"]["labels"]
    assert labels["feature.gpustack.ai/acceleratable"] == "false"
    assert labels["kubernetes.io/os"] == "linux"
    assert labels["schedule.gpustack.ai/queue-entrance"].startswith("gpustack-fnv64-")
    assert stored["spec"]["generalGroup"] == "generic"
    resized = patch(system, TYPES, "e2e-stamped", {"spec": {"unitResources": {"cpu": "4"}}})
    assert resized.returncode != 0
    assert f"spec.unitResources: Forbidden: {IMMUTABLE}" in resized.stderr
    renamed = patch(system, TYPES, "e2e-stamped", {"spec": {"displayName": "small CPU"}})
    assert renamed.returncode == 0, renamed.stderr
    assert system.kubectl("delete", TYPES, "e2e-stamped").returncode == 0


def test_deleting_the_type_stops_the_instance_and_repointing_starts_it(system: System) -> None:
    """The walkthrough's §4 end (``Stopped``, operator-set ``spec.stop``) and §5's end."""
    for name in ("e2e-old", "e2e-new"):
        made = create(system, cpu_type(name))
        assert made.returncode == 0, made.stderr
    made = create(system, instance("e2e-life", "e2e-old"))
    assert made.returncode == 0, made.stderr
    started(system, "e2e-life")
    done = system.kubectl("delete", TYPES, "e2e-old")
    assert done.returncode == 0, done.stderr
    stopped = phase(system, "e2e-life", "Stopped")
    assert stopped["spec"]["stop"] is True
    done = system.kubectl("-n", NS, "get", INSTANCES, "e2e-life", "-o", "jsonpath={.status.phase}")
    assert done.stdout == "Stopped"
    repointed = patch(system, INSTANCES, "e2e-life",
                      {"spec": {"type": "e2e-new", "stop": False}}, "-n", NS)  # fmt: skip
    assert repointed.returncode == 0, repointed.stderr
    again = started(system, "e2e-life")
    assert (again["spec"]["type"], again["spec"]["stop"]) == ("e2e-new", False)
    assert again["status"]["phase"] in {"Starting", "Ready"}
    system.kubectl("delete", INSTANCES, "-n", NS, "e2e-life", "--wait=false")
    system.kubectl("delete", TYPES, "e2e-new")


def test_an_inactive_type_stops_its_instance(system: System) -> None:
    made = create(system, cpu_type("e2e-off"))
    assert made.returncode == 0, made.stderr
    made = create(system, instance("e2e-off-1", "e2e-off"))
    assert made.returncode == 0, made.stderr
    started(system, "e2e-off-1")
    done = patch(system, TYPES, "e2e-off", {"spec": {"inactive": True}})
    assert done.returncode == 0, done.stderr
    assert phase(system, "e2e-off-1", "Stopped")["spec"]["stop"] is True
    system.kubectl("delete", INSTANCES, "-n", NS, "e2e-off-1", "--wait=false")
    system.kubectl("delete", TYPES, "e2e-off")


def derived_nvidia(system: System) -> tuple[dict[str, Any], str]:
    """A derived NVIDIA InstanceType with cards and its entrance LocalQueue in ``NS``; skips
    when the chain has not derived one."""

    def derived() -> dict[str, Any] | None:
        listed = kubectl_json(system, "get", TYPES, "-l", "schedule.gpustack.ai/derived-from-node")
        nvidia = [
            t
            for t in listed["items"]
            if t["spec"].get("manufacturer") == "nvidia"
            and int((t.get("status") or {}).get("accelerator", {}).get("capacity", 0))
        ]
        return nvidia[0] if nvidia else None

    try:
        chosen = eventually(derived, "a derived NVIDIA InstanceType with cards", timeout=90)
    except pytest.fail.Exception:
        pytest.skip("no derived NVIDIA InstanceType with cards (is the chain deriving?)")
    entrance = str(chosen["metadata"]["labels"]["schedule.gpustack.ai/queue-entrance"])

    def queue() -> bool | None:
        return (
            True
            if system.kubectl("get", "localqueue", "-n", NS, entrance).returncode == 0
            else None
        )

    try:
        eventually(queue, f"LocalQueue {entrance} in {NS}", timeout=30)
    except pytest.fail.Exception:
        pytest.skip(f"no LocalQueue {entrance} in {NS}: the InstanceType chain is not deriving")
    return chosen, entrance


def test_a_slice_on_a_derived_type_is_admitted_through_its_entrance_and_the_check(
    system: System,
) -> None:
    """A 20 % slice on a derived NVIDIA type of several flavors: real Kueue reserves its
    credits through the type's entrance LocalQueue, the node-devices check answers Ready, the
    Pod runs and the Instance is Ready. On the demo cluster the pool's first flavor is a node
    whose one card is partitioned (no slice fits there): the Pod is created steered to the
    flavors with a card that can hold it, or Kueue would assign that flavor after every
    Retry."""
    chosen, entrance = derived_nvidia(system)
    made = create(system, instance("e2e-slice", chosen["metadata"]["name"], accelerator="1",
                                   acceleratorSlicedMemoryPercentage=20))  # fmt: skip
    assert made.returncode == 0, made.stderr
    try:
        found = phase(system, "e2e-slice", "Ready")
        admitted = {c["type"]: c for c in found["status"]["conditions"]}["Admitted"]
        assert admitted["status"] == "True", admitted
        pod = kubectl_json(system, "get", "pod", "-n", NS, "e2e-slice")
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == entrance
        assert not pod["spec"].get("schedulingGates")
        workloads = kubectl_json(system, "get", "workloads.kueue.x-k8s.io", "-n", NS)["items"]
        (workload,) = [w for w in workloads if any(o.get("name") == "e2e-slice"
                       for o in w["metadata"].get("ownerReferences") or ())]  # fmt: skip
        checks = {c["name"]: c["state"] for c in workload["status"]["admissionChecks"]}
        assert checks == {"gpustack-node-devices": "Ready"}
        usage = workload["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]
        assert set(usage) == {"credits.gpustack.ai/nvidia"}  # cpu and memory left to kube
        assert parse_quantity(usage["credits.gpustack.ai/nvidia"]) == 20 * 16_000  # 1 % = 16,000
    finally:
        system.kubectl("delete", INSTANCES, "-n", NS, "e2e-slice", "--wait=false")


def test_an_instance_kueue_cannot_admit_says_pending_in_kueues_words(system: System) -> None:
    """More cards than a derived type's ClusterQueue holds: real Kueue keeps the Pod gated and
    the Instance shows its Workload's reason. Kueue counts the request as the operator's
    Kueue configuration maps it (``nvidia.com/gpu`` into ``credits.gpustack.ai/nvidia``, a card
    1,600,000), so the quota that runs out is the credits one. Needs the chain's LocalQueue for
    the type in the namespace; without it the Pod is not queued."""
    chosen, entrance = derived_nvidia(system)
    name = chosen["metadata"]["name"]
    # A filler takes every free whole card of the best node (the type's once-max), so its
    # flavor's credits are mostly reserved; then the largest node's card count is asked: the
    # Instance webhook lets it in (one node has that many cards), no flavor has the credits.
    key = f"acceleratable.feature.gpustack.ai/{chosen['spec']['acceleratorGroup']}.count"
    nodes = kubectl_json(system, "get", "nodes")["items"]
    largest = max(int(n["metadata"]["labels"].get(key, 0)) for n in nodes)
    free = int(chosen["status"]["accelerator"]["onceMaxRequest"])
    assert 0 < free <= largest, (free, largest)
    made = create(system, instance("e2e-fill", name, accelerator=str(free)))
    assert made.returncode == 0, made.stderr
    phase(system, "e2e-fill", "Ready")
    made = create(system, instance("e2e-tight-1", name, accelerator=str(largest)))
    assert made.returncode == 0, made.stderr

    def says() -> dict[str, Any] | None:
        found: dict[str, Any] = kubectl_json(system, "get", INSTANCES, "-n", NS, "e2e-tight-1")
        message = found.get("status", {}).get("phaseMessage", "")
        return found if message.startswith("Pending: couldn't assign flavors") else None

    try:
        found = eventually(says, "the Instance showing its Workload's Pending reason", timeout=90)
        assert (
            "insufficient unused quota for credits.gpustack.ai/nvidia"
            in found["status"]["phaseMessage"]
        )
        assert found["status"]["phase"] == "Starting"
        admitted = {c["type"]: c for c in found["status"]["conditions"]}["Admitted"]
        assert (admitted["status"], admitted["reason"]) == ("False", "Pending")
        pod = kubectl_json(system, "get", "pod", "-n", NS, "e2e-tight-1")
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == entrance
        assert "kueue.x-k8s.io/admission" in {g["name"] for g in pod["spec"]["schedulingGates"]}
    finally:
        system.kubectl("delete", INSTANCES, "-n", NS, "e2e-tight-1", "e2e-fill", "--wait=false")
