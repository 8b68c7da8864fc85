"""The InstanceTypeFlavor API (``worker.gpustack.ai/v1alpha1``, cluster-scoped): the catalog.

One entry per pool the nodes form, without os/arch: what an administrator may author a custom
InstanceType against, by its ``acceleratorGroup`` (``shared/spec/instancetype-walkthrough.md``,
§1 and §4). The operator aggregates it read-only from the ResourceFlavors and regroups it when
CPU-manufacturer awareness flips (§5); it carries no ``metadata.labels``, its grouping identity
lives in ``spec``.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from msgspec import Meta

from gpustack_core.decoding import convert
from gpustack_core.instance import Quantity, quantity_meta
from gpustack_core.wire import Wire

KIND: Final = "InstanceTypeFlavor"
PLURAL: Final = "instancetypeflavors"


class InstanceTypeFlavorSpec(Wire, frozen=True, kw_only=True):
    """What the pool's accelerators (or CPUs) are, as the catalog lists them."""

    acceleratable: Annotated[bool, Meta(description="Whether the pool holds accelerators.")]
    """Required, so ``false`` is written out: the catalog's ACCELERATABLE column shows it."""
    general_group: Annotated[
        str, Meta(description="The CPU key, generic, or absent for a collapsed accelerator.")
    ] = ""
    accelerator_group: Annotated[
        str, Meta(description="The accelerator key a custom InstanceType names, e.g. nvidia-a10g.")
    ] = ""
    manufacturer: Annotated[
        str, Meta(description="The accelerators' manufacturer, or the CPUs' for a CPU pool.")
    ] = ""
    product: Annotated[str, Meta(description="The accelerator's or the CPU's product.")] = ""
    memory: Annotated[Quantity, quantity_meta("One accelerator's memory.")] | None = None
    cores: Annotated[Quantity, quantity_meta("One accelerator's cores.")] | None = None
    sliceable: (
        Annotated[bool, Meta(description="Whether its accelerators can be sliced logically.")]
        | None
    ) = None


class InstanceTypeFlavorMeta(Wire, frozen=True, kw_only=True):
    """The catalog entry's name: the pool's name without its platform."""

    name: str


class InstanceTypeFlavor(Wire, frozen=True, kw_only=True):
    """A catalog entry as stored."""

    metadata: InstanceTypeFlavorMeta
    spec: InstanceTypeFlavorSpec


def instancetypeflavor_from_object(obj: dict[str, Any]) -> InstanceTypeFlavor:
    """Decode a stored InstanceTypeFlavor; the ``ContractError`` names it and the field."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name", "?") if isinstance(meta, dict) else "?"
    return convert(obj, InstanceTypeFlavor, what=f"InstanceTypeFlavor {name}")
