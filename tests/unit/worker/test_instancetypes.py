"""The InstanceType controllers' decisions, each alone: the drain, the check, what is compared.

Expected values come from the reference's rules (``shared/reference/instancetypes.md``: the
drain rule, "referenced once Active") and Kueue's API (v0.17: ``stopPolicy``, the queue status
counts), or are computed here by hand; the walkthrough's figures are the integration test's.
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpustack_core.instancetype import (
    InstanceType,
    InstanceTypeMeta,
    InstanceTypeSpec,
    InstanceTypeStatus,
    UnitResources,
)
from gpustack_core.poolnames import PoolIdentity
from gpustack_core.pools import Accelerator, Flavor
from gpustack_kube.client import Invalid, TransportError
from gpustack_worker.instancetypes.controller import Refusals, RefusedError
from gpustack_worker.instancetypes.desired import (
    desired_queue,
    flavor_patch,
    queue_patch,
    references_check,
    status_patch,
    system_namespace,
    type_object,
)
from gpustack_worker.instancetypes.observed import (
    CheckState,
    check_state,
    held_namespace,
    holds_nothing,
    node_devices,
    reserved,
    terminating,
)
from gpustack_worker.instancetypes.status import type_status

A10G = Accelerator(key="nvidia-a10g", manufacturer="nvidia", count=1, memory="24Gi")
POOL = PoolIdentity("generic", "nvidia-a10g", "linux", "amd64")
FLAVOR = Flavor("amd-epyc-7r32", A10G, "linux", "amd64", 1, ("node-a10g",))
GROUPS = [
    {
        "coveredResources": ["credits.gpustack.ai/nvidia"],
        "flavors": [
            {
                "name": "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d",
                "resources": [{"name": "credits.gpustack.ai/nvidia", "nominalQuota": "1600k"}],
            }
        ],
    }
]
CHECK = "gpustack-node-devices"


def stored(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ClusterQueue as the API server returns it (Kueue's defaults included)."""
    queue: dict[str, Any] = {
        "metadata": {
            "name": POOL.name,
            "resourceVersion": "42",
            "labels": {
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "feature.gpustack.ai/acceleratable": "true",
                "acceleratable.feature.gpustack.ai/nvidia-a10g": "true",
                "resource.gpustack.ai/type": "instancetypes",
                "team": "kept",
            },
        },
        "spec": {"queueingStrategy": "BestEffortFIFO", "namespaceSelector": {}, **spec},
    }
    if status is not None:
        queue["status"] = status
    return queue


def decide(
    current: dict[str, Any] | None,
    *,
    members: tuple[Flavor, ...] = (),
    drain: bool = True,
    inactive: bool = False,
) -> dict[str, Any]:
    return desired_queue(
        POOL.name, POOL, members, check=False, inactive=inactive, drain=drain, current=current
    )


# -- the drain rule --------------------------------------------------------------------------------


def test_a_queue_that_lost_its_flavors_is_held_first_with_its_groups_kept() -> None:
    open_queue = stored({"resourceGroups": GROUPS, "stopPolicy": "None"})
    spec = decide(open_queue)["spec"]
    assert (spec["stopPolicy"], spec["resourceGroups"]) == ("HoldAndDrain", GROUPS)


def test_a_held_queue_keeps_its_groups_while_anything_is_reserved() -> None:
    for status in (
        {"reservingWorkloads": 1},
        {"admittedWorkloads": 2},
        {"flavorsReservation": [{"name": "f", "resources": [{"name": "x", "total": "160k"}]}]},
    ):
        held = stored({"resourceGroups": GROUPS, "stopPolicy": "HoldAndDrain"}, status)
        assert decide(held)["spec"]["resourceGroups"] == GROUPS, status


def test_a_held_queue_that_reserves_nothing_is_emptied() -> None:
    nothing = [{"name": "f", "resources": [{"name": "x", "total": "0"}]}]
    zero = {"reservingWorkloads": 0, "admittedWorkloads": 0, "pendingWorkloads": 3,
            "flavorsReservation": nothing}  # fmt: skip
    for status in (None, {}, zero):
        held = stored({"resourceGroups": GROUPS, "stopPolicy": "HoldAndDrain"}, status)
        spec = decide(held)["spec"]
        assert (spec["stopPolicy"], spec["resourceGroups"]) == ("HoldAndDrain", []), status


def test_without_the_drain_setting_the_groups_go_at_once() -> None:
    open_queue = stored({"resourceGroups": GROUPS}, {"reservingWorkloads": 4})
    spec = decide(open_queue, drain=False)["spec"]
    assert (spec["stopPolicy"], spec["resourceGroups"]) == ("None", [])


def test_flavors_returning_reopen_the_queue() -> None:
    held = stored({"resourceGroups": [], "stopPolicy": "HoldAndDrain"})
    spec = decide(held, members=(FLAVOR,))["spec"]
    assert (spec["stopPolicy"], spec["resourceGroups"]) == ("None", GROUPS)


def test_an_inactive_type_holds_and_drains_its_queue_with_its_flavors() -> None:
    spec = decide(None, members=(FLAVOR,), inactive=True)["spec"]
    assert (spec["stopPolicy"], spec["resourceGroups"]) == ("HoldAndDrain", GROUPS)


def test_a_new_queue_with_no_flavors_is_created_held_and_empty() -> None:
    spec = decide(None)["spec"]
    assert (spec["stopPolicy"], spec["resourceGroups"]) == ("HoldAndDrain", [])


# -- what is compared, what is written -------------------------------------------------------------


def test_a_queue_as_stored_is_no_change() -> None:
    current = stored({"resourceGroups": copy.deepcopy(GROUPS), "stopPolicy": "None"})
    desired = decide(current, members=(FLAVOR,))
    assert queue_patch(current, desired) is None
    # Quantities compare by value (the server may spell 1600k as 1600000), an absent stop
    # is Kueue's None, and a label someone added is not a difference.
    respelled = copy.deepcopy(current)
    quota = respelled["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    quota["nominalQuota"] = "1600000"
    del respelled["spec"]["stopPolicy"]
    assert queue_patch(respelled, desired) is None


def test_a_change_is_one_patch_carrying_the_version_it_was_decided_on() -> None:
    current = stored({"resourceGroups": GROUPS, "stopPolicy": "None"})
    desired = decide(current)
    patch = queue_patch(current, desired)
    assert patch is not None
    assert patch["metadata"]["resourceVersion"] == "42"
    assert patch["spec"] == {
        "namespaceSelector": {},
        "resourceGroups": GROUPS,
        "admissionChecksStrategy": None,
        "stopPolicy": "HoldAndDrain",
    }
    # A queue admitting from no namespace (the selector absent: Kueue's default) is a change.
    closed = stored({"resourceGroups": GROUPS})
    del closed["spec"]["namespaceSelector"]
    assert queue_patch(closed, decide(closed, members=(FLAVOR,))) is not None


def test_the_check_is_named_once_active_and_kept_while_it_exists() -> None:
    named = stored({"admissionChecksStrategy": {"admissionChecks": [{"name": CHECK}]}})
    bare = stored({})
    assert references_check(CheckState.ACTIVE, bare, CHECK)
    assert not references_check(CheckState.INACTIVE, bare, CHECK)
    assert references_check(CheckState.INACTIVE, named, CHECK)  # held, not let past the gate
    assert not references_check(CheckState.ABSENT, named, CHECK)
    assert not references_check(CheckState.ABSENT, None, CHECK)


def test_a_flavors_stale_keys_are_removed_and_an_exact_one_is_left_alone() -> None:
    desired = {"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"nodeLabels": {"n": "1"}}}
    current = {
        "metadata": {"labels": {"a": "1", "b": "old", "stale": "x"}},
        "spec": {"nodeLabels": {"n": "1", "feature.gpustack.ai/cpu-only": "true"},
                 "tolerations": [{"operator": "Exists"}]},
    }  # fmt: skip
    assert flavor_patch(current, desired) == {
        "metadata": {"labels": {"b": "2", "stale": None}},
        "spec": {"nodeLabels": {"feature.gpustack.ai/cpu-only": None}},
    }
    exact = {**desired, "spec": {**desired["spec"], "tolerations": [{"operator": "Exists"}]}}
    assert flavor_patch(exact, desired) is None


def test_system_namespaces_get_no_entrances() -> None:
    for name in ("kube-system", "kube-public", "kube-node-lease", "kueue-system", "ops"):
        assert system_namespace(name, "ops")
    for name in ("default", "team-a", "kubeflow"):
        assert not system_namespace(name, "ops")


def test_a_derived_accelerated_type_states_its_zero_partitions() -> None:
    itype = InstanceType(
        metadata=InstanceTypeMeta(name="t"),
        spec=InstanceTypeSpec(acceleratable=True, accelerator_group="nvidia-a10g"),
    )
    body = type_object(itype)
    assert body["spec"]["feature"]["physicalSliced"] == {"maxSize": 0}
    assert "status" not in body
    cpu = type_object(InstanceType(metadata=InstanceTypeMeta(name="c")))
    assert "feature" not in cpu.get("spec", {})


def test_the_status_write_replaces_the_whole_status() -> None:
    (op,) = status_patch(InstanceTypeStatus(phase="Active"))
    assert op == {"op": "add", "path": "/status", "value": {"phase": "Active"}}


# -- what is read ----------------------------------------------------------------------------------


def test_the_cpu_a_queue_reserved_in_millicores() -> None:
    queue = {"status": {"flavorsReservation": [
        {"name": "a", "resources": [{"name": "cpu", "total": "1500m"},
                                    {"name": "m", "total": "9"}]},
        {"name": "b", "resources": [{"name": "cpu", "total": "2"}]},
    ]}}  # fmt: skip
    assert reserved(queue, "cpu") == 3500
    assert reserved(None, "cpu") == 0


def test_the_checks_state_is_its_active_condition() -> None:
    def check(status: str | None) -> dict[str, Any]:
        conditions = [] if status is None else [{"type": "Active", "status": status}]
        return {"metadata": {"name": CHECK}, "status": {"conditions": conditions}}

    assert check_state(None) is CheckState.ABSENT
    assert check_state(check("True")) is CheckState.ACTIVE
    assert check_state(check("False")) is CheckState.INACTIVE
    assert check_state(check(None)) is CheckState.INACTIVE  # not yet answered: not active
    # Being deleted: Kueue holds it until no queue names it, so it reads as gone (found on the
    # real control plane: a queue kept naming it and the deletion never finished).
    deleting = check("False")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert check_state(deleting) is CheckState.ABSENT


def test_a_terminating_namespace_is_seen_so() -> None:
    held = held_namespace({"metadata": {"name": "x", "uid": "u", "labels": {"a": "b"}},
                           "status": {"phase": "Terminating"}})  # fmt: skip
    assert held == {"metadata": {"name": "x"}, "status": {"phase": "Terminating"}}
    assert terminating(held)
    assert not terminating(held_namespace({"metadata": {"name": "y"}}))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(status=JSON)
@example(status={"flavorsReservation": 5})
@example(status={"flavorsReservation": ["x", {"resources": "cpu"}]})
@example(status={"flavorsReservation": [{"resources": [{"name": "cpu", "total": True}]}]})
@example(status={"reservingWorkloads": ""})
@example(status={"conditions": 3})
def test_a_queue_status_of_any_shape_reads_without_failing(status: Any) -> None:
    """Whatever a status holds, reading it never raises; only a clean zero reads empty."""
    queue = {"metadata": {"name": "q"}, "status": status}
    assert reserved(queue, "cpu") >= 0
    empty = holds_nothing(queue)
    if empty and isinstance(status, dict):
        for count in ("reservingWorkloads", "admittedWorkloads"):
            found = status.get(count)
            assert found is None or (type(found) is int and found == 0)
        reservations = status.get("flavorsReservation")
        assert reservations is None or isinstance(reservations, list)
    check_state(queue)


def test_a_malformed_reservation_is_never_read_as_empty() -> None:
    for status in (
        {"reservingWorkloads": ""},
        {"reservingWorkloads": "0"},
        {"flavorsReservation": 5},
        {"flavorsReservation": [{"resources": [{"name": "cpu", "total": "lots"}]}]},
    ):
        assert not holds_nothing({"status": status}), status


# -- one type's status -----------------------------------------------------------------------------


def test_a_cpu_pools_remaining_is_its_cores_less_its_queues_reservation() -> None:
    cpu = (
        Flavor("amd-epyc-7r13", None, "linux", "amd64", 16, ("node-cpu",)),
        Flavor("intel-xeon", None, "linux", "amd64", 48, ("node-t4-b",)),
        Flavor("intel-xeon", A10G, "linux", "amd64", 1, ("node-a10g",)),  # not a CPU flavor
    )
    itype = InstanceType(
        metadata=InstanceTypeMeta(name="gpustack--generic-linux-amd64"),
        spec=InstanceTypeSpec(general_group="generic", os="linux", arch="amd64",
                              unit_resources=UnitResources(cpu="1", ram="2Gi",
                                                           local_storage="100Gi")),
    )  # fmt: skip
    queue = {"status": {"flavorsReservation": [{"name": "f", "resources": [
        {"name": "cpu", "total": "30"}]}]}}  # fmt: skip
    status = type_status(itype, cpu, {}, queue)
    # 16 + 48 = 64 cores, 30 reserved: 34 left; once-max the largest node (48) capped at 34.
    assert status.cpu is not None
    assert (status.cpu.capacity, status.cpu.remaining, status.cpu.once_max_request) == (
        "64", "34", "34",
    )  # fmt: skip
    assert status.summary is not None
    assert (status.summary.cpu, status.summary.accelerator) == ("34/34", "0/0 0/0 0/0 0/0")
    assert status.entrance == "gpustack-fnv64-3b93966fd73eb9ec"  # the walkthrough's generic


def test_an_accelerated_pool_reads_only_its_member_nodes_devices() -> None:
    def devices(node: str, card: str) -> Any:
        return node_devices({
            "metadata": {"name": node},
            "spec": {"groups": [{"id": "a10g", "manufacturer": "nvidia", "accelerators": [
                {"id": card, "index": 0, "status": {"logicalSliced": {"count": 128}}}]}]},
            "status": {"groups": [{"id": "a10g", "manufacturer": "nvidia", "accelerators": [
                {"id": card, "index": 0, "mode": 0, "remaining": 1_600_000}]}]},
        })  # fmt: skip

    found = {"node-a10g": devices("node-a10g", "GPU-a"), "elsewhere": devices("elsewhere", "b")}
    itype = InstanceType(
        metadata=InstanceTypeMeta(name="custom"),
        spec=InstanceTypeSpec(acceleratable=True, accelerator_group="nvidia-a10g", os="linux",
                              arch="amd64", inactive=True),
    )  # fmt: skip
    status = type_status(itype, (FLAVOR,), found, None)
    # One member card, free: EX 1/1, SH 1 card of 10 shares, SL 100 of 100 (current reading).
    assert status.summary is not None
    assert status.summary.accelerator == "1/1 1/10 100/100 0/0"
    assert status.summary.cpu == "0/0"
    assert status.phase == "Inactive"
    assert msgspec.to_builtins(status)["entrance"] == "gpustack-fnv64-" + format(
        _fnv("custom"), "016x"
    )


def _fnv(text: str) -> int:
    """64-bit FNV-1a, written out here (offset basis and prime from the published algorithm)."""
    value = 0xCBF29CE484222325
    for byte in text.encode():
        value = ((value ^ byte) * 0x100000001B3) % 2**64
    return value


# -- one refusal does not stop the rest ------------------------------------------------------------


def test_a_refused_write_is_noted_and_the_others_go_on() -> None:
    refusals = Refusals()
    written = []
    for name in ("a", "b", "c"):
        with refusals.each(f"ResourceFlavor {name}"):
            if name != "c":
                raise Invalid(422, "Invalid", f"{name} is invalid")
            written.append(name)
    assert written == ["c"]
    with pytest.raises(RefusedError, match=r"ResourceFlavor a: .*a is invalid \(and 1 more\)"):
        refusals.check()
    Refusals().check()  # nothing refused: nothing raised


def test_a_transport_failure_is_not_collected() -> None:
    refusals = Refusals()
    with pytest.raises(TransportError), refusals.each("ResourceFlavor a"):
        raise TransportError("connection refused")
    assert refusals.said == []
