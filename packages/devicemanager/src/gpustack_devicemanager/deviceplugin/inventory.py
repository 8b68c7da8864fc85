"""Detection as the allocator sees it: the ``Devices`` groups plus each partition's own ID.

The groups are built by the same pure code that writes ``Devices.spec``
(:func:`gpustack_core.features.groups_from_cards`), so a token's group and card are the ones the
cluster sees. Partitions keep what the spec does not carry: their own identifier (the
``MIG-<uuid>`` a Partitioned grant records). Where a partition sits on the card
(``allocatedPhysicalPlacements``) is not stated: NVIDIA's detection numbers partitions by MIG
device index, not by GPU-instance placement, so a placement derived from it would be wrong.
"""

from __future__ import annotations

from gpustack_core.allocator import Partition
from gpustack_core.features import Card, groups_from_cards
from gpustack_core.features import Partition as ProfilePartition
from gpustack_devicemanager.deviceplugin.state import Inventory
from gpustack_vendors.model import Detection


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
        Partition(p.id, d.id, p.profile) for d in detection.devices for p in d.partitions
    )
    grouped = groups_from_cards(detection.manufacturer, cards)
    return Inventory(groups=grouped.groups, partitions=partitions)
