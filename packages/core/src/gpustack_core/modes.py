"""Allocation modes and manufacturers: the vocabulary of an accelerator grant."""

from __future__ import annotations

from enum import IntEnum, StrEnum

from gpustack_core.manufacturers import MANUFACTURERS, resource_base


class AllocationMode(IntEnum):
    """How a grant was made. Integers on the wire (annotation), names in the API and labels."""

    EXCLUSIVE = 1
    SHARED = 2
    SLICED = 3
    PARTITIONED = 4
    VISIBILITY = 5

    @property
    def api_name(self) -> str:
        """The name spelled in ``accelerators[].mode`` and on every exporter ``mode`` label."""
        return _MODE_NAMES[self]

    @classmethod
    def from_api_name(cls, name: str) -> AllocationMode:
        """Inverse of :attr:`api_name`; raises ``ValueError`` naming the unknown mode."""
        for mode, spelled in _MODE_NAMES.items():
            if spelled == name:
                return mode
        raise ValueError(
            f"unknown allocation mode {name!r}; expected one of {', '.join(_MODE_NAMES.values())}"
        )


_MODE_NAMES = {
    AllocationMode.EXCLUSIVE: "Exclusive",
    AllocationMode.SHARED: "Shared",
    AllocationMode.SLICED: "Sliced",
    AllocationMode.PARTITIONED: "Partitioned",
    AllocationMode.VISIBILITY: "Visibility",
}


class Manufacturer(StrEnum):
    """Manufacturer tokens, as on the ``gpustack.ai/manufacturer`` label.

    The names code spells (``Manufacturer.NVIDIA``); every fact about one is its row in
    :mod:`gpustack_core.manufacturers`, and a place that must see every manufacturer iterates
    that table, not this enum (a test holds each member to a row).
    """

    NVIDIA = "nvidia"
    AMD = "amd"
    HYGON = "hygon"
    ASCEND = "ascend"
    THEAD = "thead"
    CAMBRICON = "cambricon"
    ILUVATAR = "iluvatar"
    METAX = "metax"
    MTHREADS = "mthreads"

    @property
    def resource_base(self) -> str:
        """The extended-resource base (``nvidia.com/gpu``) its requests are spelled with.

        From its row in :data:`gpustack_core.manufacturers.MANUFACTURERS`.
        """
        return MANUFACTURERS[self.value].resource_base


def sliced_cores_resource(manufacturer: str) -> str | None:
    """Name the request holding a slice's compute cap (``nvidia.com/gpu.sliced.cores-percentage``).

    Unknown manufacturers have no base name and so no cap; their slices pass compute through.
    """
    base = resource_base(manufacturer)
    return None if base is None else f"{base}.sliced.cores-percentage"


TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})
"""Pod phases in which nothing runs any more: the Pod object may stay, its workload is gone."""

RELEASED_BY_TERMINATION = frozenset(
    {AllocationMode.EXCLUSIVE, AllocationMode.SHARED, AllocationMode.SLICED}
)
"""What a Succeeded or Failed Pod stops holding while its object still exists: whole, shared and
logical units return to the card; a hardware partition stays held until the Pod is gone (its
reclaim is the driver's, not a ledger's)."""
