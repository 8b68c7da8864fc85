"""The check's reading of Kueue's objects and its writes to them.

The Workload below has the shape Kueue v0.17's Pod integration writes (``kueue.x-k8s.io/
v1beta2``: ``spec.podSets[].template``, ``status.admission.podSetAssignments[].flavors``,
``status.admissionChecks[]`` with ``name state message lastTransitionTime retryCount``,
conditions ``QuotaReserved``/``Evicted``/``Admitted``); the expectations are Kueue's contract
(``shared/reference/control-plane.md``): answer only Pending entries of a Workload holding
quota, never one evicted, write Ready or Retry, never Rejected.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpustack_core.fit import Verdict
from gpustack_core.kueuecheck import (
    RETRY_MAX,
    active_patch,
    admission_check,
    answer_patch,
    is_active,
    ours,
    podsets,
    to_answer,
    workload_from_object,
)
from gpustack_core.modes import AllocationMode
from gpustack_core.requests import RequestError

CHECK = "gpustack-node-devices"
NOW = "2026-12-03T17:00:00Z"


def workload(*, conditions: list[tuple[str, str]] = (("QuotaReserved", "True"),),
             state: str = "Pending", limits: dict[str, str] | None = None,
             flavor: str = "fl-a10g", count: int = 1) -> dict[str, Any]:  # fmt: skip
    limits = limits or {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "320000",
                        "nvidia.com/gpu.sliced.memory-percentage": "20"}  # fmt: skip
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "pod-slice-1a2b3", "namespace": "team", "uid": "u1",
                     "resourceVersion": "42", "generation": 1},
        "spec": {"queueName": "gpustack-fnv64-c4680bb149644f1c", "podSets": [{
            "name": "main", "count": count,
            "template": {"metadata": {}, "spec": {"containers": [{
                "name": "main", "image": "busybox", "resources": {"limits": limits,
                                                                   "requests": limits}}]}}}]},
        "status": {
            "conditions": [{"type": t, "status": s, "reason": "x", "message": "",
                            "lastTransitionTime": NOW} for t, s in conditions],
            "admission": {"clusterQueue": "gpustack--nvidia-a10g-linux-amd64",
                          "podSetAssignments": [{
                              "name": "main", "count": count,
                              "flavors": {"credits.gpustack.ai/nvidia": flavor},
                              "resourceUsage": {"credits.gpustack.ai/nvidia": "320k"}}]},
            "admissionChecks": [
                {"name": "other-check", "state": "Ready", "message": "fine",
                 "lastTransitionTime": NOW},
                {"name": CHECK, "state": state, "message": "",
                 "lastTransitionTime": "2026-12-03T16:00:00Z"},
            ],
        },
    }  # fmt: skip


@pytest.mark.parametrize(
    ("conditions", "state", "expected"),
    [
        ([("QuotaReserved", "True")], "Pending", [CHECK]),
        ([("QuotaReserved", "False")], "Pending", []),
        ([("QuotaReserved", "True"), ("Evicted", "True")], "Pending", []),  # skipped: evicted
        ([("QuotaReserved", "True"), ("Finished", "True")], "Pending", []),
        ([("QuotaReserved", "True")], "Ready", []),  # admitted: not taken back
        ([("QuotaReserved", "True")], "Retry", []),  # Kueue's to reset
    ],
)
def test_which_entries_are_ours_to_answer(
    conditions: list[tuple[str, str]], state: str, expected: list[str]
) -> None:
    decoded = workload_from_object(workload(conditions=conditions, state=state))
    assert to_answer(decoded, frozenset({CHECK})) == expected
    assert to_answer(decoded, frozenset({"someone-else"})) == []


def test_a_podsets_asks_and_nodes_come_from_its_template_and_flavor() -> None:
    decoded = workload_from_object(workload(count=2))
    flavors = {"fl-a10g": {"pool": "a10g"}, "fl-t4": {"pool": "t4"}}
    nodes = {"node-a10g": {"pool": "a10g"}, "node-t4": {"pool": "t4"}}
    [podset] = podsets(decoded, flavors, nodes)
    assert podset.name == "main"
    assert podset.count == 2
    assert podset.nodes == frozenset({"node-a10g"})
    [ask] = podset.asks
    assert (ask.mode, ask.units) == (AllocationMode.SLICED, 320_000)
    gone = podsets(workload_from_object(workload(flavor="deleted")), flavors, nodes)
    assert gone[0].nodes == frozenset()  # a flavor deleted under the reservation selects none


def test_a_template_whose_requests_do_not_parse_is_refused_in_the_parsers_words() -> None:
    decoded = workload_from_object(workload(limits={"nvidia.com/gpu": "-1"}))
    with pytest.raises(RequestError, match="must be a positive integer"):
        podsets(decoded, {"fl-a10g": {}}, {})


def test_retry_keeps_every_other_entry_and_carries_the_resource_version() -> None:
    obj = workload()
    patch = answer_patch(obj, CHECK, Verdict(False, "no card"), NOW)
    assert patch is not None
    assert patch["metadata"] == {"resourceVersion": "42"}
    other, mine = patch["status"]["admissionChecks"]
    assert other == obj["status"]["admissionChecks"][0]
    assert mine == {"name": CHECK, "state": "Retry", "message": "no card",
                    "lastTransitionTime": NOW, "requeueAfterSeconds": 5}  # fmt: skip


def test_retry_waits_longer_with_each_retry_kueue_counted() -> None:
    obj = workload()
    delays = []
    for count in (1, 2, 3, 20):
        obj["status"]["admissionChecks"][1]["retryCount"] = count
        patch = answer_patch(obj, CHECK, Verdict(False, "no card"), NOW)
        assert patch is not None
        delays.append(patch["status"]["admissionChecks"][1]["requeueAfterSeconds"])
    assert delays == [10, 20, 40, RETRY_MAX]


def test_ready_and_no_write_when_the_entry_already_says_it() -> None:
    obj = workload()
    patch = answer_patch(obj, CHECK, Verdict(True, "fits"), NOW)
    assert patch is not None
    mine = patch["status"]["admissionChecks"][1]
    assert (mine["state"], mine["message"], mine["lastTransitionTime"]) == ("Ready", "fits", NOW)
    assert "requeueAfterSeconds" not in mine
    done = copy.deepcopy(obj)
    done["status"]["admissionChecks"][1].update(state="Ready", message="fits")
    assert answer_patch(done, CHECK, Verdict(True, "fits"), NOW) is None
    gone = copy.deepcopy(obj)
    gone["status"]["admissionChecks"].pop()
    assert answer_patch(gone, CHECK, Verdict(True, "fits"), NOW) is None


def test_a_huge_message_is_clipped_to_the_crds_bound() -> None:
    patch = answer_patch(workload(), CHECK, Verdict(False, "x" * 40000), NOW)
    assert patch is not None
    assert len(patch["status"]["admissionChecks"][1]["message"]) == 32768


def test_the_admission_check_object_and_its_active_condition() -> None:
    check = admission_check({"app.kubernetes.io/managed-by": "gpustack-operator"})
    assert check["metadata"]["name"] == CHECK
    assert check["spec"] == {"controllerName": "gpustack.ai/node-devices"}
    assert ours(check)
    assert not ours({"spec": {"controllerName": "kueue.x-k8s.io/provisioning-request"}})
    stored = {**check, "metadata": {**check["metadata"], "generation": 3},
              "status": {"conditions": [{"type": "Other", "status": "False"}]}}  # fmt: skip
    patch = active_patch(stored, NOW)
    assert patch is not None
    other, active = patch["status"]["conditions"]
    assert other == {"type": "Other", "status": "False"}
    assert (active["type"], active["status"], active["observedGeneration"]) == ("Active", "True", 3)
    assert is_active({"status": patch["status"]})
    assert active_patch({"status": patch["status"]}, NOW) is None
