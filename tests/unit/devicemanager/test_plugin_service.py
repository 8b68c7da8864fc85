"""One plugin service without sockets: device lists, NUMA topology, options, watch wake-ups."""

from __future__ import annotations

import threading

from gpustack_core.allocation import AllocatedAccelerator
from gpustack_core.allocator import Holding
from gpustack_core.devices import AcceleratorSpec, GroupSpec, Topology
from gpustack_core.modes import AllocationMode
from gpustack_devicemanager.deviceplugin.plugin import ResourcePlugin
from gpustack_devicemanager.deviceplugin.state import Inventory, PluginState
from gpustack_kube.kubeletapi import deviceplugin_v1beta1_pb2 as dp

GROUP = GroupSpec(
    id="a10g",
    manufacturer="nvidia",
    accelerators=(
        AcceleratorSpec(id="GPU-0", index=0, topology=Topology(numa_affinity="1")),
        AcceleratorSpec(id="GPU-1", index=1),
    ),
)


def refuse(mode: AllocationMode, request: dp.AllocateRequest) -> dp.AllocateResponse:
    raise AssertionError("not called")


def plugin(mode: AllocationMode, state: PluginState) -> ResourcePlugin:
    return ResourcePlugin("nvidia.com/gpu", mode, state, refuse)


def test_devices_carry_health_and_numa_node() -> None:
    state = PluginState(Inventory(groups=(GROUP,)))
    devices = plugin(AllocationMode.EXCLUSIVE, state).devices()
    assert [(d.ID, d.health, [n.ID for n in d.topology.nodes]) for d in devices] == [
        ("a10g:GPU-0:0000", "Healthy", [1]),
        ("a10g:GPU-1:0000", "Healthy", []),
    ]
    shared = AllocatedAccelerator(id="GPU-1", mode=AllocationMode.SHARED, allocated=160_000)
    state.update(held=[Holding("ns/p", "main", "nvidia", shared)])
    health = {d.ID: d.health for d in plugin(AllocationMode.EXCLUSIVE, state).devices()}
    assert health == {"a10g:GPU-0:0000": "Healthy", "a10g:GPU-1:0000": "Unhealthy"}


def test_only_packing_distinct_card_and_sliced_modes_offer_a_preference() -> None:
    state = PluginState(Inventory(groups=(GROUP,)))
    offered = {
        mode: plugin(mode, state).options().get_preferred_allocation_available
        for mode in AllocationMode
    }
    assert offered == {
        AllocationMode.EXCLUSIVE: False,
        AllocationMode.SHARED: True,
        AllocationMode.SLICED: True,
        AllocationMode.PARTITIONED: True,
        AllocationMode.VISIBILITY: True,
    }


def test_a_change_wakes_a_waiting_watcher_and_an_equal_update_does_not() -> None:
    state = PluginState(Inventory(groups=(GROUP,)))
    seen = state.generation
    state.update(inventory=Inventory(groups=(GROUP,)))
    assert state.generation == seen, "an equal inventory is no change"
    woke: list[int] = []
    watcher = threading.Thread(target=lambda: woke.append(state.wait_changed(seen, 5.0)))
    watcher.start()
    state.update(
        held=[
            Holding(
                "ns/p",
                "main",
                "nvidia",
                AllocatedAccelerator(id="GPU-0", mode=AllocationMode.EXCLUSIVE),
            )
        ]
    )
    watcher.join(5.0)
    assert woke == [seen + 1]
    state.close()
    assert state.wait_changed(seen + 1, 5.0) == seen + 1  # closed: returns at once
