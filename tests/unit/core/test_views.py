"""The four views and the CPU view, from ledgers built the way the Devices controller builds them.

Every ledger here is made by ``build_ledger`` from Pod annotations the test writes, so the path
is the real one. Expected figures are the walkthrough's rows (``shared/spec/instancetype-
walkthrough.md`` §1-§3), with the one documented change — the current shared reading counts SH
once-max in cards, so the walkthrough's ``10/10`` is ``1/10`` and ``40/50`` is ``4/50`` — or are
counted by the test from the grants it made (a whole card is 1,600,000 units, a share 160,000,
1 % of VRAM 16,000), never read back from the module.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import astuple
from typing import Any

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
from gpustack_core.ledger import PodAllocation, build_ledger
from gpustack_core.views import NodeDevices, View, Views, accelerator_views, cpu_view

WHOLE = 1_600_000
SHARE = WHOLE // 10
PERCENT = WHOLE // 100
SLICEABLE = AcceleratorStatus(logical_sliced=LogicalSliced(count=128))


def group(gid: str, ids: list[str], **status: AcceleratorStatus) -> GroupSpec:
    return GroupSpec(
        id=gid,
        manufacturer="nvidia",
        accelerators=tuple(
            AcceleratorSpec(id=card, index=i, status=status.get(card, SLICEABLE))
            for i, card in enumerate(ids)
        ),
    )


A10G = group("a10g", ["GPU-a10g"])
T4_A = group("tesla-t4", ["GPU-t4a"])
T4_B = group("tesla-t4", ["GPU-t4b-0", "GPU-t4b-1", "GPU-t4b-2", "GPU-t4b-3"])


def grant(gid: str, card: str, mode: int, allocated: int | None = None, **extra: Any) -> str:
    entry: dict[str, Any] = {"id": card, "index": 0, "mode": mode, **extra}
    if allocated is not None:
        entry["allocated"] = allocated
    devices = {"groups": [{"id": gid, "manufacturer": "nvidia", "accelerators": [entry]}]}
    return json.dumps({"main": {"devices": devices, "deviceIDs": []}})


def node(name: str, spec: GroupSpec, *pods: PodAllocation) -> NodeDevices:
    return NodeDevices(name, (spec,), build_ledger([spec], pods).groups)


def row(views: Views) -> str:
    """The ACCELERATOR(EX/SH/SL/PT) cell, as the test reads the figures."""
    return " ".join(
        f"{v.once_max_request}/{v.remaining}"
        for v in (views.exclusive, views.shared, views.sliced, views.partitioned)
    )


# -- the walkthrough ---------------------------------------------------------------------------


def test_section_1_a10g() -> None:
    views = accelerator_views([node("node-a10g", A10G)], "nvidia-a10g")
    assert row(views) == "1/1 1/10 100/100 0/0"  # walkthrough: 1/1 10/10 100/100 0/0 (shares)
    # The walkthrough's status YAML: capacity 1, 10, 100, 0.
    assert [v[0] for v in astuple(views)[:4]] == [1, 10, 100, 0]
    assert views.remaining_profiles == ()


def test_section_1_t4_over_two_nodes() -> None:
    views = accelerator_views([node("node-t4-a", T4_A), node("node-t4-b", T4_B)], "nvidia-tesla-t4")
    assert row(views) == "4/5 4/50 100/500 0/0"  # walkthrough: 4/5 40/50 100/500 0/0 (shares)
    assert (views.exclusive.capacity, views.shared.capacity, views.sliced.capacity) == (5, 50, 500)


def test_section_3_a_20_percent_slice_and_its_release() -> None:
    sliced = read_pod(
        "default", "sliced-demo", "Running", grant("a10g", "GPU-a10g", 3, 20 * PERCENT)
    )
    held = accelerator_views([node("node-a10g", A10G, sliced)], "nvidia-a10g")
    assert row(held) == "0/0 0/0 80/80 0/0"  # the walkthrough's §3 row, exactly
    released = accelerator_views([node("node-a10g", A10G)], "nvidia-a10g")
    assert row(released) == "1/1 1/10 100/100 0/0"
    finished = dataclasses.replace(sliced, phase="Succeeded")
    assert accelerator_views([node("node-a10g", A10G, finished)], "nvidia-a10g") == released


def test_section_2_a_pool_without_members_reads_zero() -> None:
    assert row(accelerator_views([], "nvidia-a10g")) == "0/0 0/0 0/0 0/0"


def test_section_4_a_whole_card_empties_every_view() -> None:
    whole = read_pod("default", "custom-demo", "Running", grant("a10g", "GPU-a10g", 1, WHOLE))
    assert row(accelerator_views([node("node-a10g", A10G, whole)], "nvidia-a10g")) == (
        "0/0 0/0 0/0 0/0"
    )


# -- the rules, case by case -------------------------------------------------------------------


def test_shared_cards_keep_their_free_shares_and_leave_ex() -> None:
    pods = [
        read_pod("ns", f"shared-{i}", "Running", grant("tesla-t4", "GPU-t4b-1", 2, SHARE))
        for i in range(3)
    ]
    views = accelerator_views([node("node-t4-b", T4_B, *pods)], "nvidia-tesla-t4")
    assert views.exclusive == View(4, 3, 3)
    assert views.shared == View(40, 4, 37)  # 3 free cards × 10 + 7 left on the shared one
    assert views.sliced == View(400, 100, 300)  # a shared card takes no slice


def test_once_max_is_per_node_for_ex_and_sh_and_per_card_for_sl() -> None:
    slice_30 = read_pod("ns", "s", "Running", grant("tesla-t4", "GPU-t4b-0", 3, 30 * PERCENT))
    views = accelerator_views(
        [node("node-t4-a", T4_A), node("node-t4-b", T4_B, slice_30)], "nvidia-tesla-t4"
    )
    assert views.exclusive == View(5, 3, 4)  # node-t4-b has 3 free cards, the pool 4
    assert views.shared == View(50, 3, 40)
    assert views.sliced == View(500, 100, 470)


def test_a_card_of_another_model_is_not_counted() -> None:
    both = NodeDevices("mixed", (A10G, T4_A), ())
    assert row(accelerator_views([both], "nvidia-tesla-t4")) == "1/1 1/10 100/100 0/0"


def test_a_card_without_a_ledger_row_is_free_not_full() -> None:
    assert accelerator_views([NodeDevices("fresh", (A10G,))], "nvidia-a10g") == accelerator_views(
        [node("fresh", A10G)], "nvidia-a10g"
    )


def test_an_unhealthy_card_offers_nothing() -> None:
    sick = group("a10g", ["GPU-a10g"], **{"GPU-a10g": AcceleratorStatus(unhealthy=True)})
    assert accelerator_views([node("n", sick)], "nvidia-a10g") == Views()


def test_a_card_without_logical_slicing_has_no_sl() -> None:
    plain = group("a10g", ["GPU-a10g"], **{"GPU-a10g": AcceleratorStatus()})
    views = accelerator_views([node("n", plain)], "nvidia-a10g")
    assert row(views) == "1/1 1/10 0/0 0/0"
    assert views.sliced.capacity == 0


MIG = PhysicalSliced(
    profiles=(
        PhysicalProfile(name="1g.10gb", memory_mib=9856, count=2),
        PhysicalProfile(name="3g.40gb", memory_mib=40448, count=1),
    ),
    count=3,
)
H100 = GroupSpec(
    id="h100",
    manufacturer="nvidia",
    accelerators=(
        AcceleratorSpec(id="GPU-0", index=0, status=SLICEABLE),
        AcceleratorSpec(id="GPU-1", index=1, status=AcceleratorStatus(physical_sliced=MIG)),
    ),
)


def test_a_partitioned_card_counts_in_pt_only() -> None:
    mig = grant("h100", "GPU-1", 4, WHOLE // 8, allocatedPhysicalProfile="1g.10gb")
    views = accelerator_views([node("n", H100, read_pod("ns", "p", "Running", mig))], "nvidia-h100")
    assert row(views) == "1/1 1/10 100/100 1/2"
    assert views.partitioned.capacity == 3
    assert views.remaining_profiles == (("1g.10gb", 1), ("3g.40gb", 1))


def test_every_offered_profile_is_listed_even_when_full() -> None:
    pods = [
        read_pod("ns", name, "Running", grant("h100", "GPU-1", 4, 1, allocatedPhysicalProfile=p))
        for name, p in (("a", "1g.10gb"), ("b", "1g.10gb"), ("c", "3g.40gb"))
    ]
    views = accelerator_views([node("n", H100, *pods)], "nvidia-h100")
    assert views.partitioned == View(3, 0, 0)
    assert views.remaining_profiles == (("1g.10gb", 0), ("3g.40gb", 0))


def test_a_finished_partition_is_still_held() -> None:
    mig = grant("h100", "GPU-1", 4, 1, allocatedPhysicalProfile="3g.40gb")
    views = accelerator_views(
        [node("n", H100, read_pod("ns", "p", "Succeeded", mig))], "nvidia-h100"
    )
    assert views.remaining_profiles == (("1g.10gb", 2), ("3g.40gb", 0))


# -- the CPU view ------------------------------------------------------------------------------


def test_the_walkthroughs_cpu_cells() -> None:
    # §1 generic pool: node-cpu 16, node-a10g 4, node-t4-a 4, node-t4-b 48 cores.
    assert cpu_view([16, 4, 4, 48]) == View(72_000, 48_000, 72_000)
    # §2: node-a10g unmanaged.
    assert cpu_view([16, 4, 48]) == View(68_000, 48_000, 68_000)
    # §5's aware pools.
    assert cpu_view([4, 48]) == View(52_000, 48_000, 52_000)
    assert cpu_view([16]) == View(16_000, 16_000, 16_000)
    assert cpu_view([]) == View()


def test_cpu_reserved_by_the_queue_comes_off_remaining_and_once_max() -> None:
    assert cpu_view([16, 4], 1_500) == View(20_000, 16_000, 18_500)
    assert cpu_view([16, 4], 19_000) == View(20_000, 1_000, 1_000)
    assert cpu_view([4], 10_000) == View(4_000, 0, 0)  # over-reserved: nothing, never negative


# -- properties --------------------------------------------------------------------------------

CARDS = ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]
FOUR = group("a10g", CARDS)
Ask = tuple[int, int, int]
"""(card, mode, amount): mode 1 whole, 2 one share, 3 a slice of ``amount`` percent."""

asks = st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from([1, 2, 3]), st.integers(1, 100)), max_size=12
)


def admitted(wanted: list[Ask]) -> list[Ask]:
    """The asks an allocator would grant, in order: one mode per card, never over a card."""
    mode: dict[int, int] = {}
    used: dict[int, int] = {}
    kept = []
    for card, how, amount in wanted:
        cost = {1: WHOLE, 2: SHARE, 3: amount * PERCENT}[how]
        if mode.get(card, how) != how or used.get(card, 0) + cost > WHOLE:
            continue
        mode[card] = how
        used[card] = used.get(card, 0) + cost
        kept.append((card, how, amount))
    return kept


def pods_of(granted: list[Ask]) -> list[PodAllocation]:
    return [
        read_pod(
            "ns",
            f"pod-{i}",
            "Running",
            grant("a10g", CARDS[card], how, {1: WHOLE, 2: SHARE, 3: amount * PERCENT}[how]),
        )
        for i, (card, how, amount) in enumerate(granted)
    ]


def views_of(pods: list[PodAllocation]) -> Views:
    return accelerator_views([node("n", FOUR, *pods)], "nvidia-a10g")


def expected(granted: list[Ask]) -> tuple[int, int, int]:
    """EX, SH and SL remaining counted from the grants: free cards, shares, percent."""
    modes = {card: how for card, how, _ in granted}
    shares = {
        c: 10 - sum(1 for card, how, _ in granted if card == c and how == 2) for c in range(4)
    }
    percent = {
        c: 100 - sum(a for card, how, a in granted if card == c and how == 3) for c in range(4)
    }
    ex = sum(1 for c in range(4) if c not in modes)
    sh = sum(shares[c] for c in range(4) if modes.get(c, 2) == 2)
    sl = sum(percent[c] for c in range(4) if modes.get(c, 3) == 3)
    return ex, sh, sl


@settings(max_examples=150, deadline=None)
@given(asks)
def test_views_count_what_the_grants_left(wanted: list[Ask]) -> None:
    granted = admitted(wanted)
    views = views_of(pods_of(granted))
    assert (views.exclusive.remaining, views.shared.remaining, views.sliced.remaining) == expected(
        granted
    )
    for view in (views.exclusive, views.shared, views.sliced, views.partitioned):
        assert 0 <= view.once_max_request <= view.remaining <= view.capacity


@settings(max_examples=150, deadline=None)
@given(asks, st.data())
def test_a_release_restores_exactly_what_an_allocation_took(wanted: list[Ask], data: Any) -> None:
    granted = admitted(wanted)
    if not granted:
        return
    pods = pods_of(granted)
    released = data.draw(st.integers(0, len(pods) - 1))
    without = pods[:released] + pods[released + 1 :]
    before, after = views_of(without), views_of(pods)
    for held, free in zip(astuple(after)[:4], astuple(before)[:4], strict=True):
        assert held[2] <= free[2]  # an allocation never adds room
    # The release (the Pod gone from the ledger's rebuild) gives back exactly what it took:
    ex, sh, sl = expected(granted[:released] + granted[released + 1 :])
    assert (before.exclusive.remaining, before.shared.remaining, before.sliced.remaining) == (
        ex,
        sh,
        sl,
    )


ledger_rows = st.lists(
    st.builds(
        LedgerAccelerator,
        id=st.sampled_from([*CARDS, "GPU-unknown"]),
        index=st.integers(0, 7),
        mode=st.integers(-3, 9),
        allocated=st.integers(-(10**7), 10**7),
        remaining=st.integers(-(10**7), 10**7),
    ),
    max_size=6,
)


@given(ledger_rows)
def test_no_ledger_however_wrong_makes_a_view_negative(rows: list[LedgerAccelerator]) -> None:
    ledger = (LedgerGroup(id="a10g", manufacturer="nvidia", accelerators=tuple(rows)),)
    views = accelerator_views([NodeDevices("n", (FOUR, H100), ledger)], "nvidia-a10g")
    for view in astuple(views)[:4]:
        assert all(figure >= 0 for figure in view)
        assert view[2] <= view[0]


def test_a_fraction_of_a_percent_held_is_a_whole_percent_gone() -> None:
    # 1,000 units is 0.0625 % of a card: 99.9375 % is left, and a slice is asked in whole
    # percent, so only 99 can still be granted.
    tiny = read_pod("ns", "tiny", "Running", grant("a10g", "GPU-a10g", 3, 1_000))
    assert accelerator_views([node("n", A10G, tiny)], "nvidia-a10g").sliced == View(100, 99, 99)
