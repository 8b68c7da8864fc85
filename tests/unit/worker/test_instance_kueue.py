"""What the Instance controller reads of Kueue: a Workload held small, and why a Pod waits.

The Workloads below have the shape Kueue v0.17 writes for a Pod (its ``pod`` integration: a
controller reference to the Pod, ``status.conditions``, ``status.admissionChecks``); the
messages are Kueue's own wording (``couldn't assign flavors to pod set …``), so what the
Instance shows is what ``kubectl describe workload`` shows.
"""

from __future__ import annotations

from typing import Any

from gpustack_core.instance import Instance, InstanceMeta, InstanceSpec
from gpustack_worker.instances.controller import _template_hash
from gpustack_worker.instances.kueue import Waiting, held_workload, waiting
from gpustack_worker.instances.render import flavor_affinity
from gpustack_worker.instances.status import phase_of

QUEUE = "gpustack-fnv64-c4680bb149644f1c"
PENDING = (
    "couldn't assign flavors to pod set main: insufficient unused quota for "
    "credits.gpustack.ai/nvidia in flavor gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d, "
    "320k more needed"
)


def workload(
    conditions: list[dict[str, Any]], checks: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "pod-sliced-demo-3f2a1",
            "namespace": "default",
            "resourceVersion": "7",
            "managedFields": [{"manager": "kueue"}],
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": "sliced-demo", "uid": "pod-uid-1",
                 "controller": True, "blockOwnerDeletion": True},
            ],
        },
        "spec": {"queueName": QUEUE, "podSets": [{"name": "main", "count": 1}]},
        "status": {"conditions": conditions, "admissionChecks": checks or []},
    }  # fmt: skip


def condition(kind: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}  # fmt: skip


def test_a_workload_is_held_as_its_pod_its_conditions_and_its_checks() -> None:
    held = held_workload(
        workload(
            [condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in x")],
            [{"name": "gpustack-node-devices", "state": "Retry", "message": "no card fits",
              "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        )
    )  # fmt: skip
    assert held == {
        "metadata": {"name": "pod-sliced-demo-3f2a1", "namespace": "default",
                     "resourceVersion": "7"},
        "pod": "sliced-demo",
        "podUID": "pod-uid-1",
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                        "message": "Quota reserved in x"}],
        "checks": [{"name": "gpustack-node-devices", "state": "Retry", "message": "no card fits"}],
    }  # fmt: skip


def test_a_workload_owned_by_anything_but_a_pod_names_no_pod() -> None:
    obj = workload([])
    obj["metadata"]["ownerReferences"][0]["kind"] = "Job"
    obj["metadata"]["ownerReferences"][0]["apiVersion"] = "batch/v1"
    assert (held_workload(obj)["pod"], held_workload(obj)["podUID"]) == ("", "")


def test_no_quota_is_pending_in_kueues_words() -> None:
    held = held_workload(workload([condition("QuotaReserved", "False", "Pending", PENDING)]))
    said = waiting(held, QUEUE)
    assert said == Waiting("Pending", PENDING)
    assert str(said) == f"Pending: {PENDING}"


def test_an_inadmissible_workload_says_so() -> None:
    message = f"LocalQueue {QUEUE} doesn't exist"
    held = held_workload(workload([condition("QuotaReserved", "False", "Inadmissible", message)]))
    assert waiting(held, QUEUE) == Waiting("Inadmissible", message)


def test_quota_reserved_then_the_checks_reason() -> None:
    reserved = condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved")
    retry = "no node has one card with 20 % of its memory free (node-a10g: 0 %)"
    held = held_workload(workload([reserved], [
        {"name": "gpustack-node-devices", "state": "Retry", "message": retry}]))  # fmt: skip
    assert waiting(held, QUEUE) == Waiting("Retry", f"gpustack-node-devices: {retry}")
    pending = held_workload(workload([reserved], [
        {"name": "gpustack-node-devices", "state": "Pending"}]))  # fmt: skip
    assert waiting(pending, QUEUE) == Waiting("Pending", "gpustack-node-devices is Pending")


def test_admitted_waits_no_more_and_no_workload_is_queued() -> None:
    admitted = held_workload(workload([
        condition("QuotaReserved", "True", "QuotaReserved"),
        condition("Admitted", "True", "Admitted", "The workload is admitted"),
    ]))  # fmt: skip
    assert waiting(admitted, QUEUE) is None
    assert waiting(None, QUEUE) == Waiting(
        "Queued", f"waiting for Kueue to admit it from LocalQueue {QUEUE}"
    )


def test_an_evicted_workload_says_why() -> None:
    held = held_workload(workload([
        condition("Evicted", "True", "Preempted", "Preempted to accommodate a workload"),
    ]))  # fmt: skip
    assert waiting(held, QUEUE) == Waiting("Evicted", "Preempted to accommodate a workload")


def instance() -> Instance:
    return Instance(
        metadata=InstanceMeta(name="sliced-demo", namespace="default", uid="inst-1"),
        spec=InstanceSpec(image="ubuntu:24.04"),
    )


def test_an_unscheduled_queued_pod_says_why_it_waits() -> None:
    pod = {"metadata": {"name": "sliced-demo", "labels": {"app.kubernetes.io/part-of": "inst-1"}},
           "spec": {}, "status": {"phase": "Pending"}}  # fmt: skip
    assert phase_of(instance(), pod) == ("Starting", "waiting to be scheduled")
    assert phase_of(instance(), pod, Waiting("Pending", PENDING)) == (
        "Starting",
        f"Pending: {PENDING}",
    )


def test_the_queue_label_is_not_part_of_the_rendering_that_replaces_a_pod() -> None:
    """A queue appearing after a Pod runs must not restart it: the label is left out."""
    pod = {"metadata": {"labels": {"app.kubernetes.io/part-of": "u"}}, "spec": {"x": 1}}
    labels = {"app.kubernetes.io/part-of": "u", "kueue.x-k8s.io/queue-name": QUEUE}
    queued = {"metadata": {"labels": labels}, "spec": {"x": 1}}
    assert _template_hash(pod) == _template_hash(queued)
    assert _template_hash(pod) != _template_hash({**pod, "spec": {"x": 2}})


def test_a_pins_flavor_labels_are_not_part_of_the_rendering_but_the_hostname_is() -> None:
    """The pinned node's flavor labels follow its labels (an administrator's managed flip): a
    change there must not restart a running Instance; a different node must."""
    pod = {"metadata": {}, "spec": {"nodeSelector": {"kubernetes.io/hostname": "n1"}}}
    steered = {**pod["spec"], "affinity": flavor_affinity([{"gpustack.ai/managed": "true"}])}
    assert _template_hash(pod) == _template_hash({"metadata": {}, "spec": steered})
    moved = {"metadata": {}, "spec": {"nodeSelector": {"kubernetes.io/hostname": "n2"}}}
    assert _template_hash(pod) != _template_hash(moved)
