"""Kueue's ``resources`` block: each mode's Pod requests become exactly the reference's credits.

Kueue's own order is re-enacted here from its documented behaviour (v0.17
``totalRequestsFromPodSets``: the excluded prefixes are dropped first, then every transformation
whose input is requested turns its quantity, times ``multiplyBy``'s when stated, into its
outputs; ``Replace`` drops the input, a resource no rule names passes through). Expected credits
are the reference's table (``shared/reference/operator-half.md``, "Resource names": Exclusive ×
1,600,000, Shared × 160,000, Sliced and Partitioned × 1 a unit, Visibility none).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpustack_core.kueueconfig import excluded_prefixes, resources, transformations
from gpustack_core.resources import ResourceNames, default_names

M = 1_600_000


def kueue_requests(pod: dict[str, int], config: dict[str, Any]) -> dict[str, int]:
    """A PodSet's requests as Kueue v0.17 counts them under ``config``."""
    kept = {
        k: v
        for k, v in pod.items()
        if not any(k.startswith(p) for p in config["excludeResourcePrefixes"])
    }
    rules = {t["input"]: t for t in config["transformations"]}
    if not any(k in rules for k in kept):
        return kept
    out: dict[str, int] = {}
    for name, quantity in kept.items():
        rule = rules.get(name)
        if rule is None:
            out[name] = out.get(name, 0) + quantity
            continue
        amount = quantity * kept.get(rule.get("multiplyBy", ""), 1)
        for output, factor in rule["outputs"].items():
            out[output] = out.get(output, 0) + int(factor) * amount
        if rule["strategy"] == "Retain":
            out[name] = quantity
    return out


CONFIG = resources()
BASE = {"cpu": 8, "memory": 64 << 30, "ephemeral-storage": 1 << 30}


def test_each_mode_becomes_its_credits_and_nothing_else() -> None:
    nvidia = "credits.gpustack.ai/nvidia"
    assert kueue_requests({**BASE, "nvidia.com/gpu": 2}, CONFIG) == {nvidia: 2 * M}
    assert kueue_requests({**BASE, "nvidia.com/gpu.shared": 3}, CONFIG) == {nvidia: 3 * M // 10}
    sliced = {
        "nvidia.com/gpu.sliced": 1,
        "nvidia.com/gpu.sliced.units": 320_000,  # 20 % of the card's memory, folded
        "nvidia.com/gpu.sliced.memory-percentage": 20,
        "nvidia.com/gpu.sliced.cores-percentage": 100,
    }
    assert kueue_requests({**BASE, **sliced}, CONFIG) == {nvidia: 320_000}
    partitioned = {
        "nvidia.com/gpu.partitioned": 1,
        "nvidia.com/gpu.partitioned.units": 800_000,
        "nvidia.com/gpu.partitioned.mig-3g.40gb": 1,
    }
    assert kueue_requests({**BASE, **partitioned}, CONFIG) == {nvidia: 800_000}
    assert kueue_requests({"cpu": 1, "device.gpustack.ai/nvidia.visibility": 1}, CONFIG) == {}
    assert kueue_requests({"amd.com/gpu": 1}, CONFIG) == {"credits.gpustack.ai/amd": M}
    assert kueue_requests({"hugepages-2Mi": 4, "memory": 1}, CONFIG) == {}


def test_no_exclusion_swallows_a_transformation_input() -> None:
    """Exclusion runs first: a prefix of an input would drop the request before it is counted."""
    inputs = [t["input"] for t in transformations()]
    multipliers = [t["multiplyBy"] for t in transformations() if "multiplyBy" in t]
    for prefix in excluded_prefixes():
        assert not [i for i in inputs + multipliers if i.startswith(prefix)], prefix
    assert len(inputs) == len(set(inputs))  # Kueue refuses a duplicate input


def test_an_overridden_base_name_is_followed() -> None:
    names = (ResourceNames.of("nvidia", "example.com/gpu"),)
    config = resources(names)
    assert kueue_requests({"example.com/gpu.shared": 1}, config) == {
        "credits.gpustack.ai/nvidia": M // 10
    }
    assert kueue_requests({"nvidia.com/gpu": 1}, config) == {"nvidia.com/gpu": 1}


@given(
    cards=st.integers(0, 8),
    shares=st.integers(0, 8),
    units=st.integers(0, M),
    mfr=st.sampled_from([n.base for n in default_names()]),
)
def test_credits_never_pass_whole_cards(cards: int, shares: int, units: int, mfr: str) -> None:
    """Whatever mix a Pod asks, its credits are what its cards, shares and units are worth."""
    pod = {**BASE, mfr: cards, f"{mfr}.shared": shares}
    if units:
        pod |= {f"{mfr}.sliced": 1, f"{mfr}.sliced.units": units}
    counted = kueue_requests({k: v for k, v in pod.items() if v}, CONFIG)
    assert set(counted) <= {f"credits.gpustack.ai/{n.manufacturer}" for n in default_names()}
    assert sum(counted.values()) == cards * M + shares * M // 10 + units
