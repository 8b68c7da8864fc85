"""The node-level extended resources a node's accelerators offer, beside the plugins' tokens.

The kubelet learns each device-plugin resource (``nvidia.com/gpu``, ``.shared``, ``.sliced``,
``.partitioned``, the Visibility pool) from ListAndWatch and reports it in the Node's status by
itself. The *companion* resources a Sliced or Partitioned request also carries
(``.sliced.units``, ``.sliced.cores-percentage``, ``.sliced.memory-percentage``,
``.sliced.memory-mib``, ``.partitioned.units``, ``.partitioned.<kind>-<profile>``) belong to no
plugin: in the reference operator the worker patches them into the Node's ``status.capacity``
(``shared/reference/operator-half.md``, "Node capacity") — the documented way to advertise a
node-level extended resource — so the scheduler can count them. Without them a Pod asking for a
25 % slice is unschedulable everywhere.

The figures, per manufacturer, over the cards that offer the mode:

- ``.sliced.units``: 1,600,000 per sliceable card (the memory a slice may take, folded);
- ``.sliced.memory-percentage``: 100 per sliceable card; ``.sliced.memory-mib``: the card's
  memory;
- ``.sliced.cores-percentage``: 100 per sliceable card, times its slice count when the card
  allows cores to be overcommitted (every slice may then ask 100 %);
- ``.partitioned.units``: 1,600,000 per partitioned card;
- ``.partitioned.<kind>-<profile>``: how many partitions of the profile exist now.

An unhealthy card offers nothing (its plugin tokens are Unhealthy too). The figures go into
``status.capacity``; the kubelet copies a node-level extended resource's capacity into
``status.allocatable``, so the writer sets both to the same figure. Pure: the caller reads the
``Devices`` spec and writes the Node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpustack_core.devices import AcceleratorSpec, GroupSpec
from gpustack_core.manufacturers import partition_kind
from gpustack_core.resources import ResourceNames
from gpustack_core.units import UNITS_PER_ACCELERATOR

PERCENT = 100


def _card_offer(
    card: AcceleratorSpec, group: GroupSpec, names: ResourceNames, kind: str | None
) -> dict[str, int]:
    offer: dict[str, int] = {}
    logical = card.status.logical_sliced
    if logical is not None and logical.count > 0:
        offer[names.sliced_units] = UNITS_PER_ACCELERATOR
        offer[names.sliced_memory_percentage] = PERCENT
        if group.memory > 0:
            offer[names.sliced_memory_mib] = group.memory
        overcommit = logical.count if logical.cores_percentage_overcommit else 1
        offer[names.sliced_cores_percentage] = PERCENT * overcommit
    physical = card.status.physical_sliced
    if kind is not None and physical is not None and physical.count > 0:
        offer[names.partitioned_units] = UNITS_PER_ACCELERATOR
        for profile in physical.profiles:
            if profile.count > 0:
                name = names.partitioned_profile(kind, profile.name)
                offer[name] = offer.get(name, 0) + profile.count
    return offer


def companion_names(names: ResourceNames) -> tuple[str, ...]:
    """The fixed companion names of one manufacturer (profiles are open-ended: see prefix)."""
    return (
        names.sliced_units,
        names.sliced_memory_percentage,
        names.sliced_memory_mib,
        names.sliced_cores_percentage,
        names.partitioned_units,
    )


def is_companion(name: str, names: ResourceNames) -> bool:
    """Whether ``name`` is one of the companion resources this module computes."""
    return name in companion_names(names) or (
        name.startswith(names.partitioned_profile_prefix) and name != names.partitioned_units
    )


def node_capacity(
    groups: Sequence[GroupSpec], bases: Mapping[str, str] | None = None
) -> dict[str, int]:
    """The companion resources the healthy cards of a node's groups offer, name → count.

    ``bases`` overrides a manufacturer's resource base. A group whose manufacturer has no base
    (and no override) offers nothing: the Device Manager would not have advertised it either.
    """
    offered: dict[str, int] = {}
    for group in groups:
        try:
            names = ResourceNames.of(group.manufacturer, (bases or {}).get(group.manufacturer))
        except ValueError:
            continue
        kind = partition_kind(group.manufacturer)
        for card in group.accelerators:
            if card.status.unhealthy:
                continue
            for name, count in _card_offer(card, group, names, kind).items():
                offered[name] = offered.get(name, 0) + count
    return offered
