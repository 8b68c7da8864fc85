"""Token IDs and pools, the allocator's rules, health, packing, and the annotation writer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_core.allocation import (
    AllocatedAccelerator,
    AllocatedDevices,
    AllocatedGroup,
    ContainerAllocation,
    Placement,
    encode_allocation,
    merge_container,
    parse_allocation,
)
from gpustack_core.allocator import (
    Grant,
    Holding,
    Node,
    Partition,
    Refusal,
    Request,
    Rule,
    decide,
    health,
    holdings,
    live,
    preferred,
)
from gpustack_core.devices import (
    AcceleratorSpec,
    AcceleratorStatus,
    GroupSpec,
    LogicalSliced,
    PhysicalProfile,
    PhysicalSliced,
)
from gpustack_core.modes import AllocationMode
from gpustack_core.tokens import parse_token_id, pool, token_id
from gpustack_core.units import UNITS_PER_ACCELERATOR

M = UNITS_PER_ACCELERATOR
E, SH, SL, P, V = (
    AllocationMode.EXCLUSIVE,
    AllocationMode.SHARED,
    AllocationMode.SLICED,
    AllocationMode.PARTITIONED,
    AllocationMode.VISIBILITY,
)


def group(cards: int = 2, slices: int = 4, partitions: int = 2, sick: int = -1) -> GroupSpec:
    return GroupSpec(
        id="h100",
        manufacturer="nvidia",
        memory=81_559,
        accelerators=tuple(
            AcceleratorSpec(
                id=f"GPU-{i}",
                index=i,
                status=AcceleratorStatus(
                    unhealthy=i == sick,
                    logical_sliced=LogicalSliced(count=slices),
                    physical_sliced=PhysicalSliced(
                        profiles=(PhysicalProfile(name="1g.10gb", count=partitions),),
                        count=partitions,
                    ),
                ),
            )
            for i in range(cards)
        ),
    )


def mig(cards: int = 2, per_card: int = 2) -> tuple[Partition, ...]:
    return tuple(
        Partition(f"MIG-{c}-{k}", f"GPU-{c}", "1g.10gb", Placement(start=k, length=1))
        for c in range(cards)
        for k in range(per_card)
    )


def hold(pod: str, accelerator: AllocatedAccelerator, *, terminated: bool = False) -> Holding:
    return Holding(pod, "main", "nvidia", accelerator, terminated)


def granted(answer: Grant | Refusal) -> Grant:
    assert isinstance(answer, Grant), answer
    return answer


def refused(answer: Grant | Refusal, rule: Rule) -> str:
    assert isinstance(answer, Refusal), answer
    assert answer.rule is rule, answer
    return answer.message


# --- token IDs and pools ------------------------------------------------------------------


def test_ids_are_zero_padded_to_four_digits() -> None:
    assert token_id("h100", "GPU-1", 3) == "h100:GPU-1:0003"
    assert str(parse_token_id("mi300:0000:03:00.0:0009")) == "mi300:0000:03:00.0:0009"
    assert parse_token_id("mi300:0000:03:00.0:0009").accelerator == "0000:03:00.0"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("h100-GPU-1", "device ID 'h100-GPU-1' is not <group>:<accelerator>:<NNNN>"),
        ("h100:GPU-1:3", "device ID 'h100:GPU-1:3': token '3' is not 4 digits"),
        ("h100:GPU-1:00x1", "device ID 'h100:GPU-1:00x1': token '00x1' is not 4 digits"),
    ],
)
def test_malformed_ids_are_named(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("<", ".").replace(">", ".")):
        parse_token_id(text)


@given(
    st.text(st.characters(blacklist_characters=":"), min_size=1, max_size=20),
    st.text(min_size=1, max_size=40),
    st.integers(0, 9999),
)
def test_ids_round_trip(group_id: str, accelerator: str, number: int) -> None:
    parsed = parse_token_id(token_id(group_id, accelerator, number))
    assert parsed == (group_id, accelerator, number)


def test_pool_sizes_per_mode() -> None:
    g = group(cards=3, slices=7, partitions=2)
    assert [str(t) for t in pool(g, E)] == ["h100:GPU-0:0000", "h100:GPU-1:0000", "h100:GPU-2:0000"]
    assert len(pool(g, SH)) == 30
    assert len(pool(g, SL)) == 21
    assert len(pool(g, P)) == 6
    assert len(pool(g, V)) == 3 * 512
    assert pool(group(slices=0), SL) == []


# --- the rules --------------------------------------------------------------------------


def test_exclusive_takes_the_whole_card() -> None:
    answer = granted(decide(Node(group()), Request(E, ("h100:GPU-1:0000",))))
    assert answer.accelerators == (AllocatedAccelerator(id="GPU-1", index=1, mode=E, allocated=M),)


def test_a_card_held_in_another_mode_is_refused_naming_the_holder() -> None:
    node = Node(
        group(), (hold("team-a/slice", AllocatedAccelerator(id="GPU-0", mode=SL, allocated=1)),)
    )
    message = refused(decide(node, Request(E, ("h100:GPU-0:0000",))), Rule.OTHER_MODE)
    assert message == (
        "card GPU-0 (index 0) is held Sliced by team-a/slice container 'main'; refusing Exclusive"
    )
    refused(decide(node, Request(SH, ("h100:GPU-0:0001",))), Rule.OTHER_MODE)
    granted(decide(node, Request(SH, ("h100:GPU-1:0001",))))


def test_shared_needs_distinct_cards_and_costs_a_tenth() -> None:
    node = Node(group())
    message = refused(
        decide(node, Request(SH, ("h100:GPU-0:0001", "h100:GPU-0:0002"))), Rule.DISTINCT_CARDS
    )
    assert "2 shares must be on 2 distinct cards; got 1" in message
    answer = granted(decide(node, Request(SH, ("h100:GPU-0:0001", "h100:GPU-1:0009"))))
    assert [a.allocated for a in answer.accelerators] == [160_000, 160_000]


def test_the_eleventh_share_is_refused() -> None:
    share = AllocatedAccelerator(id="GPU-0", mode=SH, allocated=160_000)
    node = Node(group(), tuple(hold(f"ns/p{i}", share) for i in range(10)))
    refused(decide(node, Request(SH, ("h100:GPU-0:0003",))), Rule.NO_SHARE)


def test_sliced_takes_the_folded_units_capped_at_a_card() -> None:
    node = Node(group())
    answer = granted(decide(node, Request(SL, ("h100:GPU-0:0002",), units=320_000)))
    assert answer.accelerators[0].allocated == 320_000
    capped = granted(decide(node, Request(SL, ("h100:GPU-0:0002",), units=5 * M)))
    assert capped.accelerators[0].allocated == M
    without_webhook = granted(decide(node, Request(SL, ("h100:GPU-0:0002",))))
    assert without_webhook.accelerators[0].allocated == 1


def test_sliced_refuses_without_units_or_slots() -> None:
    big = AllocatedAccelerator(id="GPU-0", mode=SL, allocated=1_400_000)
    node = Node(group(slices=2), (hold("ns/big", big),))
    message = refused(decide(node, Request(SL, ("h100:GPU-0:0001",), units=320_000)), Rule.NO_UNITS)
    assert message == "card GPU-0 (index 0) has 200000 units left; the slice asks 320000"
    small = AllocatedAccelerator(id="GPU-0", mode=SL, allocated=1)
    full = Node(group(slices=2), (hold("ns/a", small), hold("ns/b", small)))
    refused(decide(full, Request(SL, ("h100:GPU-0:0001",), units=1)), Rule.NO_SLOT)


def test_partitioned_picks_a_free_partition_and_records_its_own_id() -> None:
    taken = AllocatedAccelerator(
        id="GPU-1", index=1, mode=P, allocated=200_000, allocated_physical_id="MIG-1-0"
    )
    node = Node(group(), (hold("ns/first", taken),), mig())
    answer = granted(
        decide(node, Request(P, ("h100:GPU-0:0000",), units=200_000, profile="1g.10gb"))
    )
    # The token named GPU-0, but the pool is fungible: packing fills GPU-1 first.
    assert answer.accelerators == (
        AllocatedAccelerator(
            id="GPU-1",
            index=1,
            mode=P,
            allocated=200_000,
            allocated_physical_profile="1g.10gb",
            allocated_physical_placements=(Placement(start=1, length=1),),
            allocated_physical_id="MIG-1-1",
        ),
    )
    refused(decide(node, Request(P, ("h100:GPU-0:0000",), profile="7g.80gb")), Rule.NO_PARTITION)
    refused(decide(node, Request(P, ("h100:GPU-0:0000",))), Rule.PROFILE_REQUIRED)


def test_visibility_mirrors_the_siblings_cards_at_no_charge() -> None:
    sibling = AllocatedAccelerator(id="GPU-1", index=1, mode=SL, allocated=320_000)
    answer = granted(decide(Node(group()), Request(V, ("h100:GPU-0:0007",), siblings=(sibling,))))
    assert answer.accelerators == (AllocatedAccelerator(id="GPU-1", index=1, mode=V),)


def test_foreign_and_malformed_ids_are_refused() -> None:
    node = Node(group())
    refused(decide(node, Request(E, ("a10g:GPU-0:0000",))), Rule.UNKNOWN_DEVICE)
    refused(decide(node, Request(E, ("h100:GPU-9:0000",))), Rule.UNKNOWN_DEVICE)
    refused(decide(node, Request(E, ("h100:GPU-0:0001",))), Rule.UNKNOWN_DEVICE)
    refused(decide(node, Request(E, ("nonsense",))), Rule.MALFORMED)
    refused(decide(Node(group(sick=0)), Request(E, ("h100:GPU-0:0000",))), Rule.UNHEALTHY)


def test_terminated_pods_release_all_but_partitions() -> None:
    exclusive = AllocatedAccelerator(id="GPU-0", mode=E, allocated=M)
    partition = AllocatedAccelerator(id="GPU-1", mode=P, allocated_physical_id="MIG-1-0")
    held = holdings(
        "ns/done",
        "Succeeded",
        {
            "main": ContainerAllocation(
                devices=AllocatedDevices(
                    groups=(
                        AllocatedGroup(
                            id="h100", manufacturer="nvidia", accelerators=(exclusive, partition)
                        ),
                    )
                )
            )
        },
    )
    assert all(h.terminated for h in held)
    assert [h.accelerator for h in live(held, "nvidia")] == [partition]
    assert live(held, "amd") == []


# --- health and packing ------------------------------------------------------------------


def test_health_marks_other_mode_and_sick_cards_unhealthy() -> None:
    node = Node(
        group(cards=3, sick=2),
        (hold("ns/x", AllocatedAccelerator(id="GPU-0", mode=E, allocated=M)),),
    )
    shared = health(node, SH)
    assert not shared["h100:GPU-0:0004"]
    assert shared["h100:GPU-1:0004"]
    assert not shared["h100:GPU-2:0004"]
    assert health(node, E)["h100:GPU-0:0000"], "its own mode's grants never turn it Unhealthy"
    assert health(node, V)["h100:GPU-0:0000"], "visibility conflicts with no mode"


def test_preferred_packs_fungible_pools_and_spreads_shares() -> None:
    taken = AllocatedAccelerator(id="GPU-1", mode=P, allocated_physical_id="MIG-1-0")
    node = Node(group(), (hold("ns/a", taken),), mig())
    available = [str(t) for t in pool(node.group, P)]
    assert preferred(node, P, available, [], 1) == ["h100:GPU-1:0000"]
    shares = [str(t) for t in pool(node.group, SH)]
    picked = preferred(Node(group()), SH, shares, [], 2)
    assert {parse_token_id(i).accelerator for i in picked} == {"GPU-0", "GPU-1"}


def test_preferred_slice_goes_to_the_roomiest_card_and_never_to_a_full_one() -> None:
    full = AllocatedAccelerator(id="GPU-0", mode=SL, allocated=M)
    half = AllocatedAccelerator(id="GPU-1", mode=SL, allocated=M // 2)
    quarter = AllocatedAccelerator(id="GPU-2", mode=SL, allocated=M // 4)
    node = Node(
        group(cards=3, slices=4),
        (hold("ns/a", full), hold("ns/b", half), hold("ns/c", quarter)),
    )
    slices = [str(t) for t in pool(node.group, SL)]
    # GPU-2 has 3/4 of its units left, GPU-1 half, GPU-0 none.
    assert [parse_token_id(i).accelerator for i in preferred(node, SL, slices, [], 1)] == ["GPU-2"]
    on_full_or_half = [i for i in slices if not i.startswith("h100:GPU-2:")]
    picked = preferred(node, SL, on_full_or_half, [], 1)
    assert [parse_token_id(i).accelerator for i in picked] == ["GPU-1"]
    only_full = [i for i in slices if i.startswith("h100:GPU-0:")]
    assert preferred(node, SL, only_full, [], 1) == []


def test_preferred_slice_of_known_size_takes_the_tightest_card_it_fits() -> None:
    half = AllocatedAccelerator(id="GPU-1", mode=SL, allocated=M // 2)
    quarter = AllocatedAccelerator(id="GPU-2", mode=SL, allocated=M // 4)
    node = Node(group(cards=3, slices=4), (hold("ns/b", half), hold("ns/c", quarter)))
    slices = [str(t) for t in pool(node.group, SL)]

    def card(units: int) -> list[str]:
        return [parse_token_id(i).accelerator for i in preferred(node, SL, slices, [], 1, units)]

    # Left: GPU-0 all of it, GPU-1 a half, GPU-2 three quarters.
    assert card(M // 4) == ["GPU-1"], "a quarter packs onto the fullest card that holds it"
    assert card(M * 6 // 10) == ["GPU-2"], "60 % fits only GPU-2 and GPU-0; GPU-2 is tighter"
    assert card(M * 8 // 10) == ["GPU-0"], "80 % fits only the empty card"
    assert card(M + 1) == [], "what no card holds is not preferred anywhere"


# --- properties ---------------------------------------------------------------------------

MODES = st.sampled_from([E, SH, SL, P])


@st.composite
def steps(draw: st.DrawFn) -> list[tuple[AllocationMode, int, int, int]]:
    return draw(
        st.lists(
            st.tuples(MODES, st.integers(0, 2), st.integers(0, 9), st.integers(1, 2 * M)),
            max_size=25,
        )
    )


@settings(max_examples=150, deadline=None)
@given(steps())
def test_no_sequence_of_grants_breaks_the_invariants(
    plan: list[tuple[AllocationMode, int, int, int]],
) -> None:
    g = group(cards=3, slices=4, partitions=2)
    partitions = mig(cards=3, per_card=2)
    held: list[Holding] = []
    for n, (mode, index, token, units) in enumerate(plan):
        node = Node(g, tuple(held), partitions)
        count = {E: 1, SH: 10, SL: 4, P: 2}[mode]
        asked = (token_id("h100", f"GPU-{index}", token % count),)
        answer = decide(node, Request(mode, asked, units=units, profile="1g.10gb"))
        if isinstance(answer, Grant):
            held.extend(hold(f"ns/p{n}", a) for a in answer.accelerators)
    node = Node(g, tuple(held), partitions)
    for card in g.accelerators:
        on = node.on(card.id)
        assert len({h.accelerator.mode for h in on}) <= 1, "one mode per card"
        assert node.used_units(card.id) <= M, "never more than one card's units"
        if on and on[0].accelerator.mode is SL:
            assert len(on) <= 4
        if on and on[0].accelerator.mode is E:
            assert len(on) == 1
        for mode in (E, SH, SL, P):
            tokens = [v for k, v in health(node, mode).items() if f":{card.id}:" in k]
            other = bool(on) and on[0].accelerator.mode is not mode
            assert all(not ok for ok in tokens) if other else all(tokens)
    ids = [h.accelerator.allocated_physical_id for h in held if h.accelerator.mode is P]
    assert len(ids) == len(set(ids)), "a partition is granted once"


# --- the annotation writer --------------------------------------------------------------


def test_merge_keeps_siblings_and_other_groups_and_drops_remaining() -> None:
    nvidia = AllocatedGroup(
        id="h100",
        manufacturer="nvidia",
        accelerators=(AllocatedAccelerator(id="GPU-0", mode=SL, allocated=320_000, remaining=7),),
    )
    amd = AllocatedGroup(
        id="mi300",
        manufacturer="amd",
        accelerators=(AllocatedAccelerator(id="0000:03:00.0", mode=E, allocated=M),),
    )
    current = merge_container({}, "main", amd, E, ["mi300:0000:03:00.0:0000"])
    current = merge_container(current, "sshd", nvidia, V, ["h100:GPU-0:0001"])
    current = merge_container(current, "main", nvidia, SL, ["h100:GPU-0:0003"])
    text = encode_allocation(current)
    assert '"remaining"' not in text
    parsed = parse_allocation(text)
    assert sorted(parsed) == ["main", "sshd"]
    assert [g.manufacturer for g in parsed["main"].devices.groups] == ["amd", "nvidia"]
    assert parsed["main"].device_ids == ("mi300:0000:03:00.0:0000", "h100:GPU-0:0003")
    # Re-allocating the same resource replaces that mode's entries, not the others'.
    again = AllocatedGroup(
        id="h100",
        manufacturer="nvidia",
        accelerators=(AllocatedAccelerator(id="GPU-1", mode=SL, allocated=1),),
    )
    replaced = merge_container(parsed, "main", again, SL, ["h100:GPU-1:0000"])
    nvidia_main = replaced["main"].devices.groups[1]
    assert [a.id for a in nvidia_main.accelerators] == ["GPU-1"]


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8),
        st.lists(st.tuples(st.sampled_from([E, SH, SL, P, V]), st.integers(0, M)), max_size=3),
        max_size=4,
    )
)
def test_encode_then_parse_is_the_identity_without_remaining(
    plan: dict[str, list[tuple[AllocationMode, int]]],
) -> None:
    allocation: dict[str, ContainerAllocation] = {}
    for container, entries in plan.items():
        for n, (mode, units) in enumerate(entries):
            accelerator = AllocatedAccelerator(id=f"GPU-{n}", mode=mode, allocated=units)
            grp = AllocatedGroup(id="g", manufacturer="nvidia", accelerators=(accelerator,))
            allocation = merge_container(allocation, container, grp, mode, [f"g:GPU-{n}:0000"])
    text = encode_allocation(allocation)
    assert parse_allocation(text) == allocation
    assert encode_allocation(parse_allocation(text)) == text
