"""The ``Devices`` object (``worker.gpustack.ai/v1alpha1``, cluster-scoped, one per node).

``spec.groups[]`` is what detection found, one group per manufacturer, written by that
manufacturer's Device Manager alone; ``status.groups[]`` is the **ledger** of what the node's Pods
hold, rebuilt from their allocation annotations. The allocator, the webhook, the Instance
controller and the InstanceType chain all read these structs, so they are defined once, here.
Field names are the reference operator's wire contract (``shared/reference/operator-half.md``,
"Devices"); every count and figure is an integer (memory in MiB, allocation in units).
"""

from __future__ import annotations

import msgspec

from gpustack_core.wire import Wire

KIND = "Devices"
PLURAL = "devices"


class Topology(Wire, frozen=True, kw_only=True):
    """Where the card sits: what placement-aware scheduling would read."""

    pci_bus_id: str = msgspec.field(default="", name="pciBusId")
    """Spelt ``pciBusId`` as the reference operator writes it (not this project's ``…ID``)."""
    pci_root_id: str = msgspec.field(default="", name="pciRootId")
    pci_class: str = ""
    numa_affinity: str = ""
    cpu_affinity: str = ""


class LogicalSliced(Wire, frozen=True, kw_only=True):
    """Software slicing (HAMi-style memory/compute quotas): how many slices one card offers."""

    count: int = 0
    cores_percentage_overcommit: bool = False


class PhysicalProfile(Wire, frozen=True, kw_only=True):
    """One hardware partition profile (a MIG profile such as ``1g.10gb``)."""

    name: str
    memory_mib: int = msgspec.field(default=0, name="memoryMib")
    """Spelt ``memoryMib`` as the reference operator writes it."""
    compute_slices: int = 0
    memory_slices: int = 0
    count: int = 0
    """How many partitions of this profile exist on the card now (the Partitioned pool)."""


class PhysicalSliced(Wire, frozen=True, kw_only=True):
    """Hardware partitioning (MIG): the card's profiles and its partition count."""

    profiles: tuple[PhysicalProfile, ...] = ()
    count: int = 0


class AcceleratorStatus(Wire, frozen=True, kw_only=True):
    """Health and what slicing the card offers."""

    unhealthy: bool = False
    logical_sliced: LogicalSliced | None = None
    physical_sliced: PhysicalSliced | None = None


class AcceleratorSpec(Wire, frozen=True, kw_only=True):
    """One card as detected. ``index`` is required: card 0 is written ``index: 0``, not omitted."""

    id: str
    index: int
    physical_indexes: tuple[int, ...] = ()
    topology: Topology | None = None
    status: AcceleratorStatus = AcceleratorStatus()


class GroupSpec(Wire, frozen=True, kw_only=True):
    """One manufacturer's product group on the node (all its cards share name and memory)."""

    id: str
    manufacturer: str
    name: str = ""
    memory: int = 0
    """MiB of one card."""
    cores: int = 0
    driver_version: str = ""
    runtime_version: str = ""
    compute_capability: str = ""
    family: str = ""
    accelerators: tuple[AcceleratorSpec, ...] = ()


class DevicesSpec(Wire, frozen=True, kw_only=True):
    """What detection found on the node, one group per manufacturer."""

    groups: tuple[GroupSpec, ...] = ()


class ProfileCount(Wire, frozen=True, kw_only=True):
    """How many partitions of one profile (held or free)."""

    name: str
    count: int
    """Required: ``count: 0`` (none of this profile left) is a figure, not an absence."""


class LedgerAccelerator(Wire, frozen=True, kw_only=True):
    """What the node's Pods hold of one card. ``mode`` 0 means nothing holds it."""

    id: str
    index: int
    mode: int
    """Required, so ``mode: 0`` (free) is written out as the walkthrough shows it, not omitted."""
    allocated: int = 0
    remaining: int
    """Required for the same reason: ``remaining: 0`` is a full card, not an unknown one."""
    allocated_profiles: tuple[ProfileCount, ...] = ()
    remaining_profiles: tuple[ProfileCount, ...] = ()


class LedgerGroup(Wire, frozen=True, kw_only=True):
    """One manufacturer's cards in the ledger."""

    id: str
    manufacturer: str
    accelerators: tuple[LedgerAccelerator, ...] = ()


class DevicesStatus(Wire, frozen=True, kw_only=True):
    """The ledger: rebuilt wholesale from the node's Pod annotations."""

    groups: tuple[LedgerGroup, ...] = ()
