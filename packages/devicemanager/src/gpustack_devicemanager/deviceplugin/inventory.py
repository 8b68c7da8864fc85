"""Detection as the allocator sees it: the ``Devices`` groups plus each partition's own ID.

The groups are built by the same pure code that writes ``Devices.spec``
(:func:`gpustack_core.features.groups_from_cards`), so a token's group and card are the ones the
cluster sees. Partitions keep what the spec does not carry: their own identifier (the
``MIG-<uuid>`` a Partitioned grant records) and where they sit on the card.
"""

from __future__ import annotations

import re

from gpustack_core.allocation import Placement
from gpustack_core.allocator import Partition
from gpustack_core.features import Card, groups_from_cards
from gpustack_core.features import Partition as ProfilePartition
from gpustack_devicemanager.deviceplugin.state import Inventory
from gpustack_vendors.model import Detection

_MIG_SLICES = {1: 1, 2: 2, 3: 4, 4: 4, 7: 8}
"""NVIDIA MIG: memory slices a ``<N>g`` profile spans (its placement's length)."""
_MIG_PROFILE = re.compile(r"^(\d+)g\.")


def placement(manufacturer: str, profile: str, slot: int) -> Placement | None:
    """Where a partition sits, when the vendor's profile names its size; else unstated."""
    if manufacturer != "nvidia":
        return None
    match = _MIG_PROFILE.match(profile)
    length = _MIG_SLICES.get(int(match.group(1))) if match else None
    return Placement(start=slot, length=length) if length else None


def inventory_of(detection: Detection) -> Inventory:
    """The groups and partitions of one manufacturer's detection."""
    cards = [
        Card(
            id=d.id,
            index=d.index,
            name=d.name,
            memory_mib=d.memory_mib,
            cores=d.cores,
            driver_version=d.driver_version,
            runtime_version=d.runtime_version,
            pci_bus_id=d.pci_bus_id,
            unhealthy=d.unhealthy,
            compute_capability=d.compute_capability,
            partitions=tuple(ProfilePartition(p.profile, p.memory_mib) for p in d.partitions),
        )
        for d in detection.devices
    ]
    partitions = tuple(
        Partition(p.id, d.id, p.profile, placement(detection.manufacturer, p.profile, p.slot))
        for d in detection.devices
        for p in d.partitions
    )
    grouped = groups_from_cards(detection.manufacturer, cards)
    return Inventory(groups=grouped.groups, partitions=partitions)
