"""The companion extended resources a node's cards offer (gpustack_core.capacity).

Expected figures are worked out by hand from the rules in the module docstring (and
shared/reference/operator-half.md, "Node capacity"): 1,600,000 units per whole card.
"""

from __future__ import annotations

from gpustack_core.capacity import is_companion, node_capacity
from gpustack_core.devices import (
    AcceleratorSpec,
    AcceleratorStatus,
    GroupSpec,
    LogicalSliced,
    PhysicalProfile,
    PhysicalSliced,
)
from gpustack_core.resources import ResourceNames


def card(
    i: int,
    *,
    slices: int = 0,
    overcommit: bool = False,
    profiles: tuple[tuple[str, int], ...] = (),
    sick: bool = False,
) -> AcceleratorSpec:
    return AcceleratorSpec(
        id=f"GPU-{i}",
        index=i,
        status=AcceleratorStatus(
            unhealthy=sick,
            logical_sliced=LogicalSliced(count=slices, cores_percentage_overcommit=overcommit)
            if slices
            else None,
            physical_sliced=PhysicalSliced(
                profiles=tuple(PhysicalProfile(name=n, count=c) for n, c in profiles),
                count=sum(c for _, c in profiles),
            )
            if profiles
            else None,
        ),
    )


def test_sliceable_and_partitioned_cards_offer_their_companions() -> None:
    group = GroupSpec(
        id="h100",
        manufacturer="nvidia",
        memory=81_559,
        accelerators=(
            card(0, slices=4),
            card(1, slices=4, overcommit=True),
            card(2, profiles=(("1g.10gb", 2), ("3g.40gb", 1))),
            card(3),  # neither: whole-card modes only
        ),
    )
    assert node_capacity([group]) == {
        "nvidia.com/gpu.sliced.units": 2 * 1_600_000,
        "nvidia.com/gpu.sliced.memory-percentage": 200,
        "nvidia.com/gpu.sliced.memory-mib": 2 * 81_559,
        # 100 for the plain card, 4 × 100 for the one whose slices may each ask all cores.
        "nvidia.com/gpu.sliced.cores-percentage": 100 + 400,
        "nvidia.com/gpu.partitioned.units": 1_600_000,
        "nvidia.com/gpu.partitioned.mig-1g.10gb": 2,
        "nvidia.com/gpu.partitioned.mig-3g.40gb": 1,
    }


def test_an_unhealthy_card_offers_nothing_and_unknown_makers_are_skipped() -> None:
    group = GroupSpec(
        id="h100",
        manufacturer="nvidia",
        accelerators=(card(0, slices=4, sick=True), card(1, slices=4)),
    )
    odd = GroupSpec(id="x", manufacturer="acme", accelerators=(card(0, slices=4),))
    offered = node_capacity([group, odd])
    assert offered["nvidia.com/gpu.sliced.units"] == 1_600_000
    assert "nvidia.com/gpu.sliced.memory-mib" not in offered  # the group states no memory
    assert not any(k.startswith("acme") for k in offered)


def test_a_manufacturer_without_partitions_offers_no_partitioned_resources() -> None:
    group = GroupSpec(
        id="mi300x", manufacturer="amd", accelerators=(card(0, profiles=(("cpx", 8),)),)
    )
    assert node_capacity([group]) == {}


def test_bases_override_the_resource_names() -> None:
    group = GroupSpec(id="h100", manufacturer="nvidia", accelerators=(card(0, slices=2),))
    offered = node_capacity([group], {"nvidia": "example.com/accel"})
    assert set(offered) == {
        "example.com/accel.sliced.units",
        "example.com/accel.sliced.memory-percentage",
        "example.com/accel.sliced.cores-percentage",
    }


def test_companions_are_told_from_the_plugins_own_resources() -> None:
    names = ResourceNames.of("nvidia")
    assert is_companion("nvidia.com/gpu.sliced.units", names)
    assert is_companion("nvidia.com/gpu.partitioned.mig-1g.10gb", names)
    for plugin_resource in (
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/gpu.sliced",
        "nvidia.com/gpu.partitioned",
        "device.gpustack.ai/nvidia.visibility",
        "cpu",
    ):
        assert not is_companion(plugin_resource, names), plugin_resource
