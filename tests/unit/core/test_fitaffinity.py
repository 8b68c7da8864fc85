"""Node selection by labels and the fit pin, as kube-scheduler would read the terms.

Expected expressions are the reference's (``shared/reference/instancetypes.md`` and the per-card
fit design: a slice of ``U`` units is ``Gt U-1``, a shared request of ``N >= 2`` is ``Gt N-1``,
a shared request of 1 gets nothing); the patches are applied by a JSON Patch ``add`` written
here, and the result is matched against node labels by Kubernetes' operator rules.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpustack_core.fit import Ask
from gpustack_core.fitaffinity import (
    MAX_TERMS,
    REQUIRED,
    pin,
    required_terms,
    requirements,
    selects,
    term_matches,
)
from gpustack_core.modes import AllocationMode

SLICED_A10G = "sliced-max-free-units.fit.gpustack.ai/nvidia-a10g"
SLICED_T4 = "sliced-max-free-units.fit.gpustack.ai/nvidia-tesla-t4"
SHARED_A10G = "shared-free-cards.fit.gpustack.ai/nvidia-a10g"
MODELS = {"nvidia": ["nvidia-a10g"]}


def apply(pod: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 ``add`` (the only op the pin uses): set the member at the pointer."""
    out = copy.deepcopy(pod)
    for op in patch:
        assert op["op"] == "add"
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]
        ]
        target = out
        for part in parents:
            target = target[part]
        target[last] = op["value"]
    return out


def no_skip(_key: str) -> bool:
    return False


def matches(pod: dict[str, Any], labels: dict[str, str], name: str = "n") -> bool:
    terms = required_terms(pod["spec"])
    assert terms is not None
    return any(term_matches(name, labels, t, skip=no_skip) for t in terms)


def slice_pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "main"}], **spec}}


def test_a_slice_of_800000_units_is_pinned_gt_799999() -> None:
    needs = requirements([Ask("nvidia", AllocationMode.SLICED, units=800_000)], MODELS)
    assert needs == [[{"key": SLICED_A10G, "operator": "Gt", "values": ["799999"]}]]
    pinned = apply(slice_pod(), pin(slice_pod(), needs))
    assert matches(pinned, {SLICED_A10G: "800000"})
    assert not matches(pinned, {SLICED_A10G: "799999"})
    assert not matches(pinned, {})  # a node without the label is no candidate


@pytest.mark.parametrize(
    ("count", "expected"),
    [(1, []), (2, [[{"key": SHARED_A10G, "operator": "Gt", "values": ["1"]}]])],
)
def test_a_shared_request_is_pinned_from_two_cards(count: int, expected: list[Any]) -> None:
    asks = [Ask("nvidia", AllocationMode.SHARED, count=count)]
    assert requirements(asks, MODELS) == expected


def test_exclusive_partitions_and_unknown_models_are_not_pinned() -> None:
    asks = [Ask("nvidia", AllocationMode.EXCLUSIVE, 2),
            Ask("nvidia", AllocationMode.PARTITIONED, profile="1g.10gb", units=1)]  # fmt: skip
    assert requirements(asks, MODELS) == []
    assert requirements([Ask("amd", AllocationMode.SLICED, units=5)], MODELS) == []


def test_every_model_of_the_manufacturer_is_an_alternative() -> None:
    needs = requirements(
        [Ask("nvidia", AllocationMode.SLICED, units=100)],
        {"nvidia": ["nvidia-tesla-t4", "nvidia-a10g"]},
    )
    pinned = apply(slice_pod(), pin(slice_pod(), needs))
    terms = required_terms(pinned["spec"])
    assert terms is not None
    assert len(terms) == 2
    assert matches(pinned, {SLICED_T4: "100"})
    assert matches(pinned, {SLICED_A10G: "100", SLICED_T4: "0"})
    assert not matches(pinned, {SLICED_A10G: "99", SLICED_T4: "0"})


def test_the_pin_is_anded_into_every_existing_term_and_keeps_the_rest() -> None:
    terms = [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]},
    ]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms},
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}],
        },
        "podAntiAffinity": {"x": 1},
    }
    pod = slice_pod(affinity=affinity)
    needs = requirements([Ask("nvidia", AllocationMode.SLICED, units=10)], MODELS)
    patch = pin(pod, needs)
    assert [op["path"] for op in patch] == [
        "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"
    ]
    pinned = apply(pod, patch)
    kept = pinned["spec"]["affinity"]
    assert kept["podAntiAffinity"] == {"x": 1}
    assert kept["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert matches(pinned, {"zone": "a", SLICED_A10G: "10"})
    assert not matches(pinned, {"zone": "a", SLICED_A10G: "9"})
    assert matches(pinned, {SLICED_A10G: "10"}, name="n2")
    assert not matches(pinned, {SLICED_A10G: "10"}, name="n3")
    assert pin(pinned, needs) == []  # a reinvoked webhook adds nothing twice


@pytest.mark.parametrize(
    "affinity",
    [
        None,
        {"podAffinity": {}},
        {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
    ],
)
def test_only_the_missing_levels_are_added(affinity: dict[str, Any] | None) -> None:
    pod = slice_pod(**({"affinity": affinity} if affinity is not None else {}))
    needs = requirements([Ask("nvidia", AllocationMode.SLICED, units=10)], MODELS)
    pinned = apply(pod, pin(pod, needs))
    for key, value in (affinity or {}).items():
        if key != "nodeAffinity":
            assert pinned["spec"]["affinity"][key] == value
    assert matches(pinned, {SLICED_A10G: "10"})


def test_a_cross_product_over_the_bound_is_not_pinned() -> None:
    terms = [
        {"matchExpressions": [{"key": f"k{i}", "operator": "Exists"}]} for i in range(MAX_TERMS)
    ]
    required = {"nodeSelectorTerms": terms}
    pod = slice_pod(affinity={"nodeAffinity": {REQUIRED: required}})
    two_models = {"nvidia": ["nvidia-a10g", "nvidia-tesla-t4"]}
    assert pin(pod, requirements([Ask("nvidia", AllocationMode.SLICED, units=1)], two_models)) == []
    assert pin(pod, requirements([Ask("nvidia", AllocationMode.SLICED, units=1)], MODELS))


@given(st.integers(1, 1_600_000), st.integers(0, 1_600_000))
def test_a_pinned_pod_fits_a_node_exactly_when_its_label_holds_the_slice(
    units: int, label: int
) -> None:
    needs = requirements([Ask("nvidia", AllocationMode.SLICED, units=units)], MODELS)
    pinned = apply(slice_pod(), pin(slice_pod(), needs))
    assert matches(pinned, {SLICED_A10G: str(label)}) == (label >= units)


# -- selection --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "labels", "expected"),
    [
        ({"key": "a", "operator": "In", "values": ["1", "2"]}, {"a": "2"}, True),
        ({"key": "a", "operator": "In", "values": ["1"]}, {}, False),
        ({"key": "a", "operator": "NotIn", "values": ["1"]}, {}, True),
        ({"key": "a", "operator": "NotIn", "values": ["1"]}, {"a": "1"}, False),
        ({"key": "a", "operator": "Exists"}, {"a": ""}, True),
        ({"key": "a", "operator": "DoesNotExist"}, {"a": ""}, False),
        ({"key": "a", "operator": "Gt", "values": ["5"]}, {"a": "6"}, True),
        ({"key": "a", "operator": "Gt", "values": ["5"]}, {"a": "5"}, False),
        ({"key": "a", "operator": "Lt", "values": ["5"]}, {"a": "4"}, True),
        ({"key": "a", "operator": "Gt", "values": ["5"]}, {"a": "x"}, False),
        ({"key": "a", "operator": "Bogus", "values": ["5"]}, {"a": "5"}, False),
    ],
)
def test_an_expression_reads_as_the_scheduler_reads_it(
    expression: dict[str, Any], labels: dict[str, str], expected: bool
) -> None:
    assert term_matches("n", labels, {"matchExpressions": [expression]}) is expected


def test_an_empty_term_matches_nothing() -> None:
    assert not term_matches("n", {"a": "1"}, {})


def test_a_podset_selects_by_node_selector_flavor_labels_and_affinity() -> None:
    spec = {
        "nodeSelector": {"kubernetes.io/hostname": "node-b"},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "gpu", "operator": "Exists"},
                {"key": SLICED_A10G, "operator": "Gt", "values": ["799999"]}]}]}}},
    }  # fmt: skip
    node_b = {"kubernetes.io/hostname": "node-b", "gpu": "", "pool": "a10g"}
    assert selects("node-b", node_b, spec)  # the stale fit label is the ledger's to judge
    assert selects("node-b", node_b, spec, {"pool": "a10g"})
    assert not selects("node-b", node_b, spec, {"pool": "t4"})
    assert not selects("node-b", {**node_b, "kubernetes.io/hostname": "x"}, spec)
    assert not selects("node-b", {"kubernetes.io/hostname": "node-b"}, spec)
