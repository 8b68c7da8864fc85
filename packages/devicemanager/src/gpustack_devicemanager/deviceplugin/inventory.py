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
from gpustack_devicemanager.deviceplugin.state import Inventory
from gpustack_devicemanager.publish import detected_groups
from gpustack_vendors.model import Detection


def inventory_of(detection: Detection) -> Inventory:
    """The groups and partitions of one manufacturer's detection."""
    partitions = tuple(
        Partition(p.id, d.id, p.profile) for d in detection.devices for p in d.partitions
    )
    grouped = detected_groups(detection)  # the very groups Devices.spec is written from
    return Inventory(groups=grouped.groups, partitions=partitions)
