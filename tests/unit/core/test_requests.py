"""The Pod request rules and the unit fold: one test per rule, asserting the message it names.

Expected units come from the fold's definition computed here by hand (1 % = 16,000; MiB and
profiles ``⌈MiB × 1,600,000 / card MiB⌉``), with card and profile sizes from the committed H100
MIG recording (81,559 MiB card; 1g.10gb = 9,856 MiB, the spec's figure; 3g.40gb = 40,448 MiB).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_core.devices import (
    AcceleratorSpec,
    AcceleratorStatus,
    GroupSpec,
    PhysicalProfile,
    PhysicalSliced,
)
from gpustack_core.requests import (
    Cards,
    RequestError,
    fold_mib,
    fold_percentage,
    json_pointer_token,
    review,
    selects,
)
from gpustack_core.resources import default_names
from gpustack_core.units import UNITS_PER_ACCELERATOR, slice_memory_mib

H100_MIB = 81_559
MIG = PhysicalSliced(
    profiles=(
        PhysicalProfile(name="1g.10gb", memory_mib=9_856, count=7),
        PhysicalProfile(name="3g.40gb", memory_mib=40_448, count=2),
    ),
    count=2,
)
H100 = GroupSpec(
    id="h100",
    manufacturer="nvidia",
    name="NVIDIA H100 80GB HBM3",
    memory=H100_MIB,
    accelerators=tuple(
        AcceleratorSpec(id=f"GPU-{i}", index=i, status=AcceleratorStatus(physical_sliced=MIG))
        for i in range(2)
    ),
)
A10 = GroupSpec(
    id="a10",
    manufacturer="nvidia",
    memory=24_564,
    accelerators=(AcceleratorSpec(id="GPU-a", index=0),),
)
ON_H100 = {"nvidia": Cards(groups=(H100,), where="node gpu-1", pinned=True)}
CLUSTER = {"nvidia": Cards(groups=(H100, A10))}

SLICED = "nvidia.com/gpu.sliced"
UNITS = "nvidia.com/gpu.sliced.units"
CORES = "nvidia.com/gpu.sliced.cores-percentage"
PERCENT = "nvidia.com/gpu.sliced.memory-percentage"
MIB = "nvidia.com/gpu.sliced.memory-mib"
PARTITIONED = "nvidia.com/gpu.partitioned"
P_UNITS = "nvidia.com/gpu.partitioned.units"
MIG_1G = "nvidia.com/gpu.partitioned.mig-1g.10gb"
MIG_3G = "nvidia.com/gpu.partitioned.mig-3g.40gb"
VISIBILITY = "device.gpustack.ai/nvidia.visibility"


def container(
    limits: dict[str, Any],
    name: str = "main",
    requests: dict[str, Any] | None = None,
    restart: str | None = None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": limits}
    if requests is not None:
        resources["requests"] = requests
    out: dict[str, Any] = {"name": name, "resources": resources}
    if restart is not None:
        out["restartPolicy"] = restart
    return out


def pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {"metadata": {"name": "p", "namespace": "team-a"}, "spec": spec}


def refused(p: dict[str, Any], cards: dict[str, Cards] | None = None, **kw: Any) -> str:
    with pytest.raises(RequestError) as caught:
        review(p, cards or {}, **kw)
    message = str(caught.value)
    assert "\n" not in message
    return message


def added(p: dict[str, Any], cards: dict[str, Cards] | None = None) -> dict[str, str]:
    """The patch as {path: value}, every operation an ``add``."""
    ops = review(p, cards or {}).patch
    assert all(op["op"] == "add" for op in ops)
    return {op["path"]: op["value"] for op in ops}


LIMITS = "/spec/containers/0/resources/limits/"

# -- the fold ---------------------------------------------------------------------------------


def test_percentage_folds_times_16000() -> None:
    assert fold_percentage(1) == 16_000
    assert fold_percentage(25) == 400_000
    assert fold_percentage(100) == 1_600_000 == UNITS_PER_ACCELERATOR


def test_sliced_percentage_patch_writes_units_and_default_cores() -> None:
    p = pod(container({SLICED: "1", PERCENT: "25"}))
    assert added(p) == {
        LIMITS + "nvidia.com~1gpu.sliced.units": "400000",
        LIMITS + "nvidia.com~1gpu.sliced.cores-percentage": "100",
    }


def test_requests_map_gets_the_same_writes() -> None:
    p = pod(container({SLICED: "1", PERCENT: "25"}, requests={SLICED: "1", PERCENT: "25"}))
    patch = added(p)
    assert patch["/spec/containers/0/resources/requests/nvidia.com~1gpu.sliced.units"] == "400000"
    assert patch["/spec/containers/0/resources/requests/" + json_pointer_token(CORES)] == "100"


def test_given_cores_are_kept() -> None:
    p = pod(container({SLICED: "1", PERCENT: "50", CORES: "40"}))
    assert added(p) == {LIMITS + json_pointer_token(UNITS): "800000"}


def test_mib_folds_up_against_the_pinned_card() -> None:
    p = pod(container({SLICED: "1", MIB: "20000"}))
    # ⌈20000 × 1,600,000 / 81,559⌉ = ⌈392,354.98…⌉
    assert added(p, ON_H100)[LIMITS + json_pointer_token(UNITS)] == "392355"


def test_mib_folds_against_the_smallest_card_when_unpinned() -> None:
    p = pod(container({SLICED: "1", MIB: "20000"}))
    # the A10's 24,564 MiB: ⌈20000 × 1,600,000 / 24,564⌉ = ⌈1,302,719.4…⌉
    assert added(p, CLUSTER)[LIMITS + json_pointer_token(UNITS)] == "1302720"


def test_mib_above_the_smallest_card_caps_at_one_card() -> None:
    p = pod(container({SLICED: "1", MIB: "40000"}))
    assert added(p, CLUSTER)[LIMITS + json_pointer_token(UNITS)] == "1600000"


def test_partition_profile_folds_its_memory() -> None:
    p = pod(container({PARTITIONED: "1", MIG_1G: "1"}))
    # ⌈9856 × 1,600,000 / 81,559⌉ = ⌈193,352.05…⌉
    assert added(p, ON_H100) == {LIMITS + json_pointer_token(P_UNITS): "193353"}
    p = pod(container({PARTITIONED: "1", MIG_3G: "1"}))
    assert added(p, ON_H100) == {LIMITS + json_pointer_token(P_UNITS): "793497"}


def test_escaping_is_rfc6901() -> None:
    assert json_pointer_token("a~b/c") == "a~0b~1c"


def test_exclusive_and_shared_need_no_patch() -> None:
    assert added(pod(container({"nvidia.com/gpu": "2"})), ON_H100) == {}
    assert added(pod(container({"nvidia.com/gpu.shared": "2"})), ON_H100) == {}


def test_units_already_folded_are_idempotent() -> None:
    p = pod(container({SLICED: "1", PERCENT: "25", UNITS: "400000", CORES: "100"}))
    assert added(p) == {}
    assert review(p, {}, phase="validate").patch == ()


def test_other_resources_and_plain_pods_pass_untouched() -> None:
    p = pod(container({"cpu": "2", "memory": "1Gi", "example.com/fpga": "1"}))
    assert added(p) == {}
    assert not selects(p)


@given(st.integers(1, 200_000), st.integers(1, 200_000), st.integers(1, 200_000))
def test_mib_fold_is_monotonic_and_never_under_provisions(a: int, b: int, card: int) -> None:
    low, high = sorted((a, b))
    assert fold_mib(low, card) <= fold_mib(high, card) <= UNITS_PER_ACCELERATOR
    if high <= card:  # the Device Manager's floored quota gives at least what was asked
        quota = slice_memory_mib(fold_mib(high, card), card)
        assert quota is not None
        assert quota >= high
        exact = Fraction(high * UNITS_PER_ACCELERATOR, card)
        assert fold_mib(high, card) == math.ceil(exact)


@given(st.integers(1, 100), st.integers(1, 100))
def test_percentage_fold_is_monotonic(a: int, b: int) -> None:
    low, high = sorted((a, b))
    assert fold_percentage(low) <= fold_percentage(high) <= fold_percentage(100) == 1_600_000


# -- one test per rule ------------------------------------------------------------------------


def test_rule_quantities_are_positive_integers() -> None:
    for bad in ("1.5", "0", "-1", "abc", "500m"):
        message = refused(pod(container({"nvidia.com/gpu": bad})))
        assert message.startswith("spec.containers[0].resources.limits[nvidia.com/gpu]: ")
        assert "must be a positive integer" in message


def test_rule_extended_resource_only_in_requests() -> None:
    message = refused(pod(container({}, requests={"nvidia.com/gpu": "1"})))
    assert message == (
        'spec.containers[0].resources.requests[nvidia.com/gpu]: Invalid value: "1": an '
        "accelerator resource must be set in limits (requests may only repeat the limit)"
    )


def test_rule_requests_equal_limits() -> None:
    message = refused(pod(container({"nvidia.com/gpu": "2"}, requests={"nvidia.com/gpu": "1"})))
    assert 'must equal its limit "2"' in message
    assert "cannot be overcommitted" in message


def test_rule_sliced_is_exactly_one() -> None:
    message = refused(pod(container({SLICED: "2", PERCENT: "50"})))
    assert message == (
        'spec.containers[0].resources.limits[nvidia.com/gpu.sliced]: Invalid value: "2": a '
        "logical slice request is always a single accelerator (nvidia.com/gpu.sliced must be 1)"
    )


def test_rule_sliced_needs_memory() -> None:
    message = refused(pod(container({SLICED: "1"})))
    assert message == (
        "spec.containers[0].resources.limits: Required value: a nvidia.com/gpu.sliced request "
        "must set nvidia.com/gpu.sliced.memory-percentage or nvidia.com/gpu.sliced.memory-mib"
    )


def test_rule_memory_percentage_xor_mib() -> None:
    message = refused(pod(container({SLICED: "1", PERCENT: "50", MIB: "1000"})))
    assert message.endswith(
        "Forbidden: cannot set both nvidia.com/gpu.sliced.memory-percentage and "
        "nvidia.com/gpu.sliced.memory-mib"
    )


def test_rule_memory_percentage_range() -> None:
    message = refused(pod(container({SLICED: "1", PERCENT: "101"})))
    assert message == (
        "spec.containers[0].resources.limits[nvidia.com/gpu.sliced.memory-percentage]: "
        'Invalid value: "101": must be a percentage from 1 to 100'
    )
    assert "positive integer" in refused(pod(container({SLICED: "1", PERCENT: "0"})))


def test_rule_cores_percentage_range() -> None:
    message = refused(pod(container({SLICED: "1", PERCENT: "10", CORES: "150"})))
    assert message == (
        "spec.containers[0].resources.limits[nvidia.com/gpu.sliced.cores-percentage]: "
        'Invalid value: "150": must be a percentage from 1 to 100'
    )


def test_rule_slice_companions_need_the_slice() -> None:
    message = refused(pod(container({"nvidia.com/gpu": "1", PERCENT: "10"})))
    assert message.endswith('Forbidden: only meaningful beside nvidia.com/gpu.sliced: "1"')


def test_rule_sliced_units_are_webhook_derived() -> None:
    message = refused(pod(container({SLICED: "1", PERCENT: "25", UNITS: "1"})))
    assert message == (
        "spec.containers[0].resources.limits[nvidia.com/gpu.sliced.units]: Invalid value: "
        '"1": webhook-derived, never set by hand (this request folds to "400000"); remove it'
    )


def test_rule_partitioned_units_are_webhook_derived() -> None:
    p = pod(container({PARTITIONED: "1", MIG_1G: "1", P_UNITS: "1600000"}))
    message = refused(p, ON_H100)
    assert "nvidia.com/gpu.partitioned.units]" in message
    assert 'webhook-derived, never set by hand (this request folds to "193353")' in message


def test_rule_validate_requires_the_fold() -> None:
    message = refused(pod(container({SLICED: "1", PERCENT: "25"})), phase="validate")
    assert message.startswith("spec.containers[0].resources.limits[nvidia.com/gpu.sliced.units]")
    assert "folded by the mutating webhook and missing" in message


def test_rule_partitioned_is_exactly_one() -> None:
    message = refused(pod(container({PARTITIONED: "2", MIG_1G: "1"})), ON_H100)
    assert message == (
        'spec.containers[0].resources.limits[nvidia.com/gpu.partitioned]: Invalid value: "2": '
        "a partition request is always a single accelerator (nvidia.com/gpu.partitioned must "
        "be 1)"
    )


def test_rule_partitioned_names_a_profile() -> None:
    message = refused(pod(container({PARTITIONED: "1"})), ON_H100)
    assert message == (
        "spec.containers[0].resources.limits: Required value: a nvidia.com/gpu.partitioned "
        "request must name a profile, e.g. nvidia.com/gpu.partitioned.mig-<profile>"
    )


def test_rule_partitioned_names_one_profile() -> None:
    message = refused(pod(container({PARTITIONED: "1", MIG_1G: "1", MIG_3G: "1"})), ON_H100)
    assert message.endswith(
        "Forbidden: a partition request names exactly one profile, found [mig-1g.10gb mig-3g.40gb]"
    )


def test_rule_profile_is_one_instance() -> None:
    message = refused(pod(container({PARTITIONED: "1", MIG_1G: "2"})), ON_H100)
    assert message == (
        "spec.containers[0].resources.limits[nvidia.com/gpu.partitioned.mig-1g.10gb]: "
        'Invalid value: "2": a partition profile request must be exactly 1 instance'
    )


def test_rule_profile_unknown_for_the_cards() -> None:
    p = pod(container({PARTITIONED: "1", "nvidia.com/gpu.partitioned.mig-7g.80gb": "1"}))
    message = refused(p, ON_H100)
    assert message == (
        "spec.containers[0].resources.limits[nvidia.com/gpu.partitioned.mig-7g.80gb]: Invalid "
        "value: profile '7g.80gb' is not offered by the nvidia cards in node gpu-1; offered: "
        "1g.10gb, 3g.40gb"
    )


def test_rule_profile_without_devices_cannot_fold() -> None:
    message = refused(pod(container({PARTITIONED: "1", MIG_1G: "1"})))
    assert "no Devices object in the cluster lists nvidia partition profiles" in message


def test_rule_partition_kind_is_the_manufacturers() -> None:
    p = pod(container({PARTITIONED: "1", "nvidia.com/gpu.partitioned.cpx-1g": "1"}))
    message = refused(p, ON_H100)
    assert "not a nvidia partition profile (expected nvidia.com/gpu.partitioned.mig-" in message


def test_rule_manufacturer_without_partitioning() -> None:
    message = refused(pod(container({"amd.com/gpu.partitioned": "1"})))
    assert message == (
        "spec.containers[0].resources.limits[amd.com/gpu.partitioned]: Forbidden: amd "
        "accelerators have no hardware partitioning"
    )


def test_rule_profile_needs_the_partition() -> None:
    message = refused(pod(container({MIG_1G: "1"})), ON_H100)
    assert message.endswith('Forbidden: only meaningful beside nvidia.com/gpu.partitioned: "1"')


def test_rule_one_mode_per_container() -> None:
    message = refused(pod(container({"nvidia.com/gpu": "1", SLICED: "1", PERCENT: "5"})))
    assert message == (
        "spec.containers[0].resources.limits: Forbidden: a container may request one mode of "
        "nvidia accelerators, found nvidia.com/gpu and nvidia.com/gpu.sliced"
    )


def test_rule_one_mode_per_pod() -> None:
    p = pod(
        container({"nvidia.com/gpu": "1"}, name="a"),
        container({SLICED: "1", PERCENT: "50"}, name="b"),
    )
    assert refused(p) == (
        "spec: Forbidden: a Pod may request nvidia accelerators in one mode only, found "
        "[Exclusive Sliced]"
    )


def test_rule_other_manufacturers_may_sit_beside() -> None:
    p = pod(container({"nvidia.com/gpu": "1", "amd.com/gpu": "1"}))
    assert added(p) == {}


def test_rule_shared_across_more_cards_than_a_node_has() -> None:
    message = refused(pod(container({"nvidia.com/gpu.shared": "3"})), ON_H100)
    assert message == (
        'spec.containers[0].resources.limits[nvidia.com/gpu.shared]: Invalid value: "3": a '
        "Pod's accelerators come from one node, and no node in node gpu-1 has more than 2 "
        "nvidia accelerators"
    )


def test_rule_exclusive_beyond_the_largest_node() -> None:
    message = refused(pod(container({"nvidia.com/gpu": "3"})), CLUSTER)
    assert "no node in the cluster has more than 2 nvidia accelerators" in message


def test_rule_card_counts_unchecked_without_devices() -> None:
    assert added(pod(container({"nvidia.com/gpu.shared": "64"}))) == {}


def test_rule_memory_mib_needs_devices() -> None:
    message = refused(pod(container({SLICED: "1", MIB: "1000"})))
    assert message == (
        "spec.containers[0].resources.limits[nvidia.com/gpu.sliced.memory-mib]: Invalid value: "
        '"1000": no Devices object lists a nvidia card\'s memory, so MiB cannot be folded into '
        "units; request nvidia.com/gpu.sliced.memory-percentage instead"
    )


def test_rule_memory_mib_above_every_card() -> None:
    message = refused(pod(container({SLICED: "1", MIB: "90000"})), ON_H100)
    assert message.endswith("more than the memory of any nvidia card in node gpu-1 (81559 MiB)")


def test_rule_visibility_needs_a_sibling_grant() -> None:
    message = refused(pod(container({VISIBILITY: "1"}, name="sshd")))
    assert message == (
        "spec.containers[0].resources.limits[device.gpustack.ai/nvidia.visibility]: Forbidden: "
        "visibility lets a sidecar see a sibling container's nvidia accelerators, and no "
        "sibling container requests one"
    )


def test_rule_visibility_beside_a_sibling_is_fine() -> None:
    p = pod(
        container({SLICED: "1", PERCENT: "20"}),
        container({VISIBILITY: "1"}, name="sshd"),
    )
    assert LIMITS + json_pointer_token(UNITS) in added(p)
    assert not any("/containers/1/" in path for path in added(p))


def test_rule_visibility_and_a_grant_in_one_container() -> None:
    message = refused(pod(container({"nvidia.com/gpu": "1", VISIBILITY: "1"})))
    assert "found nvidia.com/gpu and device.gpustack.ai/nvidia.visibility" in message


def test_rule_one_slicing_container() -> None:
    p = pod(
        container({SLICED: "1", PERCENT: "50"}, name="a"),
        container({SLICED: "1", PERCENT: "50"}, name="b"),
    )
    assert refused(p) == (
        "spec: Forbidden: at most one container may request a nvidia slice or partition, found 2"
    )


def test_rule_one_container_group() -> None:
    p = pod(container({"nvidia.com/gpu": "1"}), init=(container({"nvidia.com/gpu": "1"}, "w"),))
    message = refused(p)
    assert message.startswith(
        "spec.initContainers: Forbidden: a Pod's nvidia requests must all sit in one container "
        "group"
    )


def test_rule_native_sidecar_holds_no_accelerator() -> None:
    sidecar = container({"nvidia.com/gpu": "1"}, name="log", restart="Always")
    message = refused(pod(container({"cpu": "1"}), init=(sidecar,)))
    assert message == (
        "spec.initContainers[0].resources.limits: Forbidden: a restartable init container (a "
        "native sidecar) may not request an accelerator; move the request to an app container"
    )


# -- selection --------------------------------------------------------------------------------


def test_selects_queued_pods_and_accelerator_requests() -> None:
    queued = pod(container({"cpu": "1"}))
    queued["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "q"}
    assert selects(queued)
    assert selects(pod(container({SLICED: "1"})))
    assert selects(pod(container({}, requests={"hygon.com/dcu": "1"})))
    assert not selects(pod(container({"nvidia.com/gpus": "1"})))


# -- never crashes ----------------------------------------------------------------------------

KEYS = st.one_of(
    st.sampled_from(
        [
            n.base + suffix
            for n in default_names()
            for suffix in (
                "",
                ".shared",
                ".sliced",
                ".sliced.units",
                ".sliced.cores-percentage",
                ".sliced.memory-percentage",
                ".sliced.memory-mib",
                ".partitioned",
                ".partitioned.units",
                ".partitioned.mig-1g.10gb",
                ".partitioned.mig-",
                ".partitioned.x",
            )
        ]
        + [n.visibility for n in default_names()]
        + ["cpu", "memory"]
    ),
    st.text(max_size=40),
)
VALUES = st.one_of(
    st.sampled_from(["1", "2", "0", "100", "101", "1.5", "1k", "1Mi", "-3", "1e2", "", "x"]),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.text(max_size=70),
)
LIMIT_MAPS = st.dictionaries(KEYS, VALUES, max_size=8)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(LIMIT_MAPS, st.one_of(st.none(), LIMIT_MAPS)), max_size=3),
    st.sampled_from([{}, ON_H100, CLUSTER]),
    st.sampled_from(["mutate", "validate"]),
)
def test_review_never_crashes(
    maps: list[tuple[dict[str, Any], dict[str, Any] | None]],
    cards: dict[str, Cards],
    phase: str,
) -> None:
    p = pod(*(container(lim, name=f"c{i}", requests=req) for i, (lim, req) in enumerate(maps)))
    message = ""
    try:
        patch = review(p, cards, phase=phase).patch  # type: ignore[arg-type]
    except RequestError as error:
        message, patch = str(error), ()
    assert "\n" not in message
    for op in patch:
        assert op["op"] == "add"
        assert int(op["value"]) > 0
