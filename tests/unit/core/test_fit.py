"""The per-card fit: the node-devices check's decision and the fit labels, from real ledgers.

Every ledger is built by ``build_ledger`` from Pod annotations the test writes (the path the
Devices controller takes). Expected answers are counted by the test from the grants it made —
a whole card 1,600,000 units, a share 160,000, 1 % of a card 16,000 — never read back from the
module: the issue's example (a 20 % slice on a node whose cards have no such room left while
the node's totals show plenty is refused; releasing a card admits it), then each mode, several
Pods of one Workload, and hypothesis properties tying the labels to the decision.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_ledger import read_pod

from gpustack_core.devices import (
    AcceleratorSpec,
    AcceleratorStatus,
    GroupSpec,
    LedgerAccelerator,
    LedgerGroup,
    LogicalSliced,
    PhysicalProfile,
    PhysicalSliced,
)
from gpustack_core.fit import Ask, PodSet, admit, fit_labels, fitting, pod_asks
from gpustack_core.ledger import PodAllocation, build_ledger
from gpustack_core.modes import AllocationMode
from gpustack_core.requests import RequestError
from gpustack_core.views import NodeDevices

WHOLE = 1_600_000
SHARE = WHOLE // 10
PERCENT = WHOLE // 100
SLICEABLE = AcceleratorStatus(logical_sliced=LogicalSliced(count=128))
SLICED, SHARED, EXCLUSIVE, PARTITIONED = 3, 2, 1, 4
SLICED_KEY = "sliced-max-free-units.fit.gpustack.ai/nvidia-tesla-t4"
SHARED_KEY = "shared-free-cards.fit.gpustack.ai/nvidia-tesla-t4"


def t4(cards: int, gid: str = "tesla-t4", status: AcceleratorStatus = SLICEABLE) -> GroupSpec:
    return GroupSpec(
        id=gid,
        manufacturer="nvidia",
        memory=15360,
        accelerators=tuple(
            AcceleratorSpec(id=f"GPU-{gid}-{i}", index=i, status=status) for i in range(cards)
        ),
    )


def annotation(gid: str, *entries: tuple[str, int, int]) -> str:
    """One container holding ``(card, mode, units)`` of group ``gid``."""
    accelerators = [{"id": c, "index": 0, "mode": m, "allocated": u} for c, m, u in entries]
    devices = {"groups": [{"id": gid, "manufacturer": "nvidia", "accelerators": accelerators}]}
    return json.dumps({"main": {"devices": devices, "deviceIDs": []}})


def pod(name: str, gid: str, *entries: tuple[str, int, int]) -> PodAllocation:
    return read_pod("team", name, "Running", annotation(gid, *entries))


def node(name: str, spec: GroupSpec, *pods: PodAllocation) -> NodeDevices:
    return NodeDevices(name, (spec,), build_ledger([spec], pods).groups)


def one(asks: Sequence[Ask], name: str = "main", count: int = 1, **kw: Any) -> PodSet:
    return PodSet(name, count, tuple(asks), **kw)


def slice_of(units: int) -> Ask:
    return Ask("nvidia", AllocationMode.SLICED, units=units)


def node_free_units(devices: NodeDevices) -> int:
    """What the node's totals show (the Node's .sliced.units less what its Pods hold)."""
    return sum(r.remaining for g in devices.ledger for r in g.accelerators)


# -- the example ---------------------------------------------------------------------


def fragmented(held: int = 4) -> NodeDevices:
    """node-t4-b's four T4s, ``held`` of them each holding a 90 % slice."""
    spec = t4(4)
    pods = [pod(f"p{i}", "tesla-t4", (f"GPU-tesla-t4-{i}", SLICED, 90 * PERCENT))
            for i in range(held)]  # fmt: skip
    return node("node-t4-b", spec, *pods)


def test_a_20_percent_slice_is_refused_where_only_the_node_totals_have_room() -> None:
    devices = fragmented()
    assert node_free_units(devices) == 4 * 10 * PERCENT >= 20 * PERCENT  # totals allow it
    verdict = admit([devices], [one([slice_of(20 * PERCENT)])])
    assert not verdict.ready
    assert "no node has one card that can hold it" in verdict.message
    assert "node-t4-b: card GPU-tesla-t4-" in verdict.message
    assert f"has {10 * PERCENT} units left; the slice asks {20 * PERCENT}" in verdict.message


def test_releasing_one_card_admits_the_slice_on_that_card() -> None:
    devices = fragmented(held=3)  # card 3's slice is gone
    verdict = admit([devices], [one([slice_of(20 * PERCENT)])])
    assert verdict.ready, verdict.message
    [placed] = verdict.placed
    assert (placed.node, placed.cards) == ("node-t4-b", ("GPU-tesla-t4-3",))
    assert verdict.message == "PodSet main fits on node-t4-b (GPU-tesla-t4-3)"


def test_another_node_with_a_free_card_is_chosen_unless_the_flavor_excludes_it() -> None:
    spare = node("node-t4-a", t4(1, gid="t4a"))
    verdict = admit([fragmented(), spare], [one([slice_of(20 * PERCENT)])])
    assert verdict.ready
    assert verdict.placed[0].node == "node-t4-a"
    only_b = admit(
        [fragmented(), spare], [one([slice_of(20 * PERCENT)], nodes=frozenset({"node-t4-b"}))]
    )
    assert not only_b.ready
    nowhere = admit([fragmented()], [one([slice_of(20 * PERCENT)], nodes=frozenset({"gone"}))])
    assert not nowhere.ready
    assert "no node with a Devices object matches its flavor" in nowhere.message


def test_best_fit_takes_the_fullest_card_that_still_holds_the_slice() -> None:
    devices = node("n", t4(3), pod("a", "tesla-t4", ("GPU-tesla-t4-1", SLICED, 70 * PERCENT)),
                   pod("b", "tesla-t4", ("GPU-tesla-t4-2", SLICED, 50 * PERCENT)))  # fmt: skip
    verdict = admit([devices], [one([slice_of(30 * PERCENT)])])
    assert verdict.placed[0].cards == ("GPU-tesla-t4-1",)  # 30 % left there: exactly enough


# -- each mode -------------------------------------------------------------------------------


def test_a_card_held_in_another_mode_takes_no_slice() -> None:
    devices = node("n", t4(1), pod("s", "tesla-t4", ("GPU-tesla-t4-0", SHARED, SHARE)))
    verdict = admit([devices], [one([slice_of(PERCENT)])])
    assert not verdict.ready
    assert "card GPU-tesla-t4-0 (index 0) is held Shared" in verdict.message


def test_a_card_that_cannot_slice_takes_no_slice() -> None:
    devices = node("n", t4(1, status=AcceleratorStatus()))
    verdict = admit([devices], [one([slice_of(PERCENT)])])
    assert not verdict.ready
    assert "offers no Sliced slot" in verdict.message


def test_exclusive_needs_that_many_whole_free_cards_on_one_node() -> None:
    held = [pod(f"p{i}", "tesla-t4", (f"GPU-tesla-t4-{i}", SLICED, PERCENT)) for i in range(3)]
    two = Ask("nvidia", AllocationMode.EXCLUSIVE, count=2)
    verdict = admit([node("n", t4(4), *held)], [one([two])])
    assert not verdict.ready
    assert "1 of its 4 tesla-t4 cards can take a whole card, 2 are asked" in verdict.message
    released = admit([node("n", t4(4), *held[:2])], [one([two])])
    assert released.ready
    assert set(released.placed[0].cards) == {"GPU-tesla-t4-2", "GPU-tesla-t4-3"}


def test_shared_needs_a_share_on_each_of_n_distinct_cards() -> None:
    full = [("GPU-tesla-t4-0", SHARED, SHARE)] * 10  # all ten shares of card 0
    other = ("GPU-tesla-t4-1", SLICED, PERCENT)  # card 1 held in another mode
    devices = node("n", t4(4), pod("full", "tesla-t4", *full), pod("sl", "tesla-t4", other))
    three = admit([devices], [one([Ask("nvidia", AllocationMode.SHARED, count=3)])])
    assert not three.ready
    assert "2 of its 4 tesla-t4 cards can take a share, 3 are asked" in (three.message)
    two = admit([devices], [one([Ask("nvidia", AllocationMode.SHARED, count=2)])])
    assert two.ready
    assert set(two.placed[0].cards) == {"GPU-tesla-t4-2", "GPU-tesla-t4-3"}
    assert fit_labels(devices)[SHARED_KEY] == "2"


def mig_group(count: int = 2) -> GroupSpec:
    profiles = (PhysicalProfile(name="1g.10gb", memory_mib=9856, count=count),)
    status = AcceleratorStatus(physical_sliced=PhysicalSliced(profiles=profiles, count=count))
    card = AcceleratorSpec(id="GPU-mig", index=0, status=status)
    return GroupSpec(id="a100", manufacturer="nvidia", memory=81920, accelerators=(card,))


def mig_pod(name: str) -> PodAllocation:
    entry = {"id": "GPU-mig", "index": 0, "mode": PARTITIONED, "allocated": 200_000,
             "allocatedPhysicalProfile": "1g.10gb",
             "allocatedPhysicalID": f"MIG-{name}"}  # fmt: skip
    devices = {"groups": [{"id": "a100", "manufacturer": "nvidia", "accelerators": [entry]}]}
    return read_pod("team", name, "Running", json.dumps({"main": {"devices": devices}}))


def test_a_partition_needs_a_free_one_of_its_profile() -> None:
    ask = Ask("nvidia", AllocationMode.PARTITIONED, units=200_000, profile="1g.10gb")
    spec = mig_group()
    full = node("m", spec, mig_pod("a"), mig_pod("b"))
    assert not admit([full], [one([ask])]).ready
    assert admit([node("m", spec, mig_pod("a"))], [one([ask])]).ready
    other = Ask("nvidia", AllocationMode.PARTITIONED, units=200_000, profile="2g.20gb")
    refused = admit([node("m", spec)], [one([other])])
    assert not refused.ready
    assert "no free 2g.20gb partition" in refused.message


def test_an_unfolded_mib_slice_is_folded_against_each_cards_memory() -> None:
    # 15360 MiB cards: 7680 MiB is half a card; 60 % held leaves 40 %.
    devices = node("n", t4(1), pod("a", "tesla-t4", ("GPU-tesla-t4-0", SLICED, 60 * PERCENT)))
    mib = Ask("nvidia", AllocationMode.SLICED, memory_mib=7680)
    assert not admit([devices], [one([mib])]).ready
    assert admit([devices], [one([Ask("nvidia", AllocationMode.SLICED, memory_mib=6144)])]).ready


def test_a_ledger_row_in_an_unknown_mode_is_read_as_a_card_that_grants_nothing() -> None:
    spec = t4(1)
    ledger = (LedgerGroup(id="tesla-t4", manufacturer="nvidia", accelerators=(
        LedgerAccelerator(id="GPU-tesla-t4-0", index=0, mode=9, remaining=WHOLE),)),)  # fmt: skip
    assert not admit([NodeDevices("n", (spec,), ledger)], [one([slice_of(PERCENT)])]).ready


# -- Workloads of several Pods ---------------------------------------------------------------


def test_two_pods_of_one_podset_are_not_promised_the_same_card() -> None:
    devices = node("n", t4(2), pod("a", "tesla-t4", ("GPU-tesla-t4-0", SLICED, 50 * PERCENT)))
    three = admit([devices], [one([slice_of(60 * PERCENT)], count=2)])
    assert not three.ready  # card 1 takes one 60 % slice, card 0 has 50 % left
    assert "Pod 2 of 2 of PodSet main" in three.message
    two = admit([devices], [one([slice_of(50 * PERCENT)], count=2)])
    assert two.ready
    assert sorted(p.cards[0] for p in two.placed) == ["GPU-tesla-t4-0", "GPU-tesla-t4-1"]


def test_podsets_are_charged_together_and_a_podset_without_accelerators_needs_nothing() -> None:
    devices = node("n", t4(1))
    sets = [
        one([slice_of(70 * PERCENT)], "a"),
        one([], "launcher"),
        one([slice_of(40 * PERCENT)], "b"),
    ]
    verdict = admit([devices], sets)
    assert not verdict.ready
    assert "PodSet b" in verdict.message
    assert admit([devices], [one([], "cpu")]).message == "no PodSet asks for accelerators"


# -- the asks of a template ------------------------------------------------------------------


def template(
    limits: dict[str, str], *, init: bool = False, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    container = {"name": "main", "image": "x", "resources": {"limits": limits}}
    spec: dict[str, Any] = {"initContainers" if init else "containers": [container]}
    if init:
        spec["containers"] = [{"name": "app", "image": "x"}]
    return {"metadata": {"labels": {}}, "spec": {**spec, **(extra or {})}}


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"nvidia.com/gpu": "2"}, Ask("nvidia", AllocationMode.EXCLUSIVE, 2, container="main")),
        ({"nvidia.com/gpu.shared": "3"}, Ask("nvidia", AllocationMode.SHARED, 3, container="main")),
        ({"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "20"},
         Ask("nvidia", AllocationMode.SLICED, units=320_000, container="main")),
        ({"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "4096",
          "nvidia.com/gpu.sliced.units": "426667"},
         Ask("nvidia", AllocationMode.SLICED, units=426_667, container="main")),
        ({"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "4096"},
         Ask("nvidia", AllocationMode.SLICED, memory_mib=4096, container="main")),
        ({"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-1g.10gb": "1"},
         Ask("nvidia", AllocationMode.PARTITIONED, profile="1g.10gb", container="main")),
    ],
)  # fmt: skip
def test_a_templates_asks(limits: dict[str, str], expected: Ask) -> None:
    assert pod_asks(template(limits)) == (expected,)


def test_a_template_without_accelerators_or_with_a_bad_request() -> None:
    assert pod_asks(template({"cpu": "1"})) == ()
    with pytest.raises(RequestError):
        pod_asks(template({"nvidia.com/gpu": "0.5"}))


# -- the fit labels --------------------------------------------------------------------------


def held_to(remaining: Sequence[int]) -> NodeDevices:
    """A T4 node whose card i has ``remaining[i]`` units left after a slice."""
    spec = t4(len(remaining))
    pods = [pod(f"p{i}", "tesla-t4", (f"GPU-tesla-t4-{i}", SLICED, WHOLE - left))
            for i, left in enumerate(remaining) if left < WHOLE]  # fmt: skip
    return node("n", spec, *pods)


def test_the_sliced_label_is_the_most_one_card_can_give() -> None:
    # shared/reference: {640000, 640000, 1600000} labels 1600000; {640000, 640000} 640000.
    assert fit_labels(held_to([640_000, 640_000, WHOLE]))[SLICED_KEY] == str(WHOLE)
    assert fit_labels(held_to([640_000, 640_000]))[SLICED_KEY] == "640000"


def test_the_labels_count_only_cards_that_would_grant() -> None:
    spec = t4(3)
    devices = node("n", spec, pod("x", "tesla-t4", ("GPU-tesla-t4-0", EXCLUSIVE, WHOLE)),
                   pod("s", "tesla-t4", ("GPU-tesla-t4-1", SHARED, SHARE)))  # fmt: skip
    labels = fit_labels(devices)
    assert labels[SLICED_KEY] == str(WHOLE)  # card 2 is free; 0 is Exclusive, 1 Shared
    assert labels[SHARED_KEY] == "2"  # the shared card has nine shares left, card 2 ten
    plain = fit_labels(node("n", t4(2, status=AcceleratorStatus())))
    assert SLICED_KEY not in plain
    assert plain[SHARED_KEY] == "2"


# -- properties ------------------------------------------------------------------------------

card_state = st.one_of(
    st.just(("free", 0)),
    st.tuples(st.just("sliced"), st.integers(1, WHOLE)),
    st.tuples(st.just("shared"), st.integers(1, 10)),
    st.just(("exclusive", WHOLE)),
)


def built(states: Sequence[tuple[str, int]]) -> NodeDevices:
    spec = t4(len(states))
    pods = []
    for i, (kind, amount) in enumerate(states):
        card = f"GPU-tesla-t4-{i}"
        if kind == "sliced":
            pods.append(pod(f"p{i}", "tesla-t4", (card, SLICED, amount)))
        elif kind == "shared":
            pods.append(pod(f"p{i}", "tesla-t4", *[(card, SHARED, SHARE)] * amount))
        elif kind == "exclusive":
            pods.append(pod(f"p{i}", "tesla-t4", (card, EXCLUSIVE, WHOLE)))
    return node("n", spec, *pods)


@settings(max_examples=150, deadline=None)
@given(st.lists(card_state, min_size=1, max_size=6), st.integers(1, WHOLE))
def test_a_slice_is_ready_exactly_when_one_card_has_its_units(
    states: list[tuple[str, int]], units: int
) -> None:
    devices = built(states)
    # Independently: a card takes a slice when nothing or slices hold it and enough is left.
    expected = any(
        kind == "free" or (kind == "sliced" and WHOLE - amount >= units) for kind, amount in states
    )
    verdict = admit([devices], [one([slice_of(units)])])
    assert verdict.ready == expected, verdict.message
    assert verdict.ready == (int(fit_labels(devices)[SLICED_KEY]) >= units)


@settings(max_examples=150, deadline=None)
@given(st.lists(card_state, min_size=1, max_size=6), st.integers(1, 6))
def test_a_shared_request_is_ready_exactly_when_n_cards_have_a_share(
    states: list[tuple[str, int]], count: int
) -> None:
    devices = built(states)
    shareable = sum(kind == "free" or (kind == "shared" and amount < 10) for kind, amount in states)
    verdict = admit([devices], [one([Ask("nvidia", AllocationMode.SHARED, count=count)])])
    assert verdict.ready == (shareable >= count), verdict.message
    assert verdict.ready == (int(fit_labels(devices)[SHARED_KEY]) >= count)


@settings(max_examples=100, deadline=None)
@given(st.lists(card_state, min_size=1, max_size=5), st.lists(st.integers(1, WHOLE), max_size=4))
def test_pods_placed_together_never_overfill_a_card(
    states: list[tuple[str, int]], slices: list[int]
) -> None:
    devices = built(states)
    verdict = admit([devices], [one([slice_of(u)], name=f"s{i}") for i, u in enumerate(slices)])
    if not verdict.ready:
        return
    left = {r.id: r.remaining for g in devices.ledger for r in g.accelerators}
    for placed, units in zip(verdict.placed, slices, strict=True):
        [card] = placed.cards
        left[card] -= units
        assert left[card] >= 0


def test_fitting_names_the_nodes_whose_cards_hold_the_pod_now() -> None:
    spare = node("node-t4-a", t4(1, gid="t4a"))
    twenty = [slice_of(20 * PERCENT)]
    assert fitting([fragmented(), spare], twenty) == {"node-t4-a"}  # 10 % left per card on b
    assert fitting([fragmented(held=3), spare], twenty) == {"node-t4-a", "node-t4-b"}
    assert fitting([fragmented()], twenty) == frozenset()
    four = [Ask("nvidia", AllocationMode.EXCLUSIVE, count=4)]
    assert fitting([node("node-t4-b", t4(4)), spare], four) == {"node-t4-b"}
