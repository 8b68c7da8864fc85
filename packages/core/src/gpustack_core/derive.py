"""The aggregation layer over the flavors: ClusterQueues, InstanceTypes and the catalog.

Flavors (:mod:`gpustack_core.pools`) never change with a setting; this layer groups them by
``instance-type-aware-cpu-manufacturer`` (``shared/reference/instancetypes.md``):

- off (the default): one pool per ``(aKey, os, arch)`` across every CPU, and one ``generic``
  CPU pool per ``(os, arch)``;
- on: one per ``(gKey, aKey, os, arch)`` and one per ``(gKey, os, arch)``.

A pool is named by its :class:`~gpustack_core.poolnames.PoolIdentity`, and its member flavors
are selected by that identity alone (:func:`members`), never remembered: an InstanceType's spec
carries the same identity, so a collapsed type kept after awareness flips on (the operator only
ever creates), or a custom type an administrator authored, finds its flavors the same way.

Each pool is one isolated ClusterQueue (no cohort, nothing to borrow), covering the
manufacturer's credits (accelerators × 1,600,000) or the CPU cores, flavors smallest per-node
count first so Kueue packs small nodes first. Pure: the controllers write what it returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

import msgspec

from gpustack_core.contract import (
    ARCH_LABEL,
    DERIVED_FROM_NODE_LABEL,
    KUEUE_API_VERSION,
    NODE_DEVICES_CHECK,
    OS_LABEL,
    RESOURCE_TYPE_LABEL,
)
from gpustack_core.devices import GroupSpec
from gpustack_core.features import (
    ACCELERATABLE_PREFIX,
    GENERAL_PREFIX,
    GENERIC_CPU,
    NODE_ACCELERATABLE,
    TRUE,
    accelerator_key,
)
from gpustack_core.instancetype import (
    QUEUE_ENTRANCE_LABEL,
    Feature,
    InstanceType,
    InstanceTypeMeta,
    InstanceTypeSpec,
    LogicalSlicedFeature,
    PhysicalSlicedFeature,
)
from gpustack_core.instancetypeflavor import (
    InstanceTypeFlavor,
    InstanceTypeFlavorMeta,
    InstanceTypeFlavorSpec,
)
from gpustack_core.poolnames import PoolIdentity, credits, credits_resource, entrance_name
from gpustack_core.pools import Flavor
from gpustack_core.presets import unit_preset
from gpustack_core.quantity import canonical_quantity

QUEUE_TYPE: Final = "instancetypes"
"""``resource.gpustack.ai/type`` of a ClusterQueue backing an InstanceType."""
CPU_RESOURCE: Final = "cpu"
MEMORY_PERCENTAGE_STEP: Final = 1
"""A logical slice's memory is asked in whole percent."""


def pool_of(flavor: Flavor, *, aware: bool) -> PoolIdentity:
    """The pool ``flavor`` belongs to under the awareness setting."""
    return PoolIdentity(
        general_group=flavor.general_key if aware else GENERIC_CPU,
        accelerator_group=flavor.accelerator.key if flavor.accelerator else "",
        os=flavor.os,
        arch=flavor.arch,
    )


def identity_of(spec: InstanceTypeSpec) -> PoolIdentity:
    """The pool an InstanceType's spec names (an empty ``generalGroup`` is ``generic``)."""
    return PoolIdentity(
        general_group=spec.general_group or GENERIC_CPU,
        accelerator_group=spec.accelerator_group if spec.acceleratable else "",
        os=spec.os,
        arch=spec.arch,
    )


def members(pool: PoolIdentity, flavors: Iterable[Flavor]) -> tuple[Flavor, ...]:
    """The flavors of ``pool``: same platform, same accelerator (or none), same CPU key if aware.

    Ordered smallest per-node count first, then by name: the order Kueue tries them in.
    """
    found = [
        f
        for f in flavors
        if f.os == pool.os
        and f.arch == pool.arch
        and (f.accelerator.key if f.accelerator else "") == pool.accelerator_group
        and (not pool.cpu_aware or f.general_key == pool.general_group)
    ]
    return tuple(sorted(found, key=lambda f: (f.per_node, f.name)))


def member_nodes(flavors: Iterable[Flavor]) -> tuple[str, ...]:
    """The nodes a pool's flavors pin, once each, sorted: whose ``Devices`` its views read."""
    return tuple(sorted({node for f in flavors for node in f.nodes}))


def node_cores(flavors: Iterable[Flavor]) -> tuple[int, ...]:
    """One entry per node of a CPU pool's flavors: its cores (the flavor's per-node count)."""
    return tuple(f.per_node for f in flavors if f.accelerator is None for _ in f.nodes)


def pools(flavors: Sequence[Flavor], *, aware: bool) -> dict[PoolIdentity, tuple[Flavor, ...]]:
    """Every pool the flavors form under the setting, by name, with its member flavors."""
    found = {pool_of(f, aware=aware) for f in flavors}
    return {p: members(p, flavors) for p in sorted(found, key=lambda p: p.name)}


def schedule_labels(pool: PoolIdentity) -> dict[str, str]:
    """The labels a pool's ClusterQueue and InstanceType select by.

    Platform, the acceleratable discriminator, the accelerator key, and the CPU key only for
    a CPU-aware pool: a collapsed pool carries no ``general.`` key, so it aggregates every CPU.
    """
    labels = {
        OS_LABEL: pool.os,
        ARCH_LABEL: pool.arch,
        NODE_ACCELERATABLE: "true" if pool.acceleratable else "false",
    }
    if pool.acceleratable:
        labels[ACCELERATABLE_PREFIX + pool.accelerator_group] = TRUE
    if pool.cpu_aware:
        labels[GENERAL_PREFIX + pool.general_group] = TRUE
    return labels


def _nominal(pool: PoolIdentity, flavor: Flavor) -> tuple[str, str]:
    if pool.acceleratable and flavor.accelerator is not None:
        resource = credits_resource(flavor.accelerator.manufacturer)
        return resource, canonical_quantity(credits(flavor.capacity))
    return CPU_RESOURCE, canonical_quantity(flavor.capacity)


def cluster_queue(
    pool: PoolIdentity, flavors: Sequence[Flavor], *, admission_check: bool
) -> dict[str, Any]:
    """The isolated Kueue ``ClusterQueue`` of ``pool`` over its member ``flavors``.

    ``admission_check`` references ``gpustack-node-devices`` on an accelerated queue: the
    caller passes it once the check reports Active and ``instance-type-derived-from-node`` is
    on. ``namespaceSelector: {}`` admits from every namespace (Kueue's default selects none);
    each namespace reaches the queue through its entrance LocalQueue. No flavors, no resource
    groups: the controller drains such a queue before it writes that.
    """
    covered: list[str] = []
    entries = []
    for flavor in flavors:
        resource, quota = _nominal(pool, flavor)
        if resource not in covered:
            covered.append(resource)
        entries.append(
            {"name": flavor.name, "resources": [{"name": resource, "nominalQuota": quota}]}
        )
    spec: dict[str, Any] = {"namespaceSelector": {}}
    if pool.acceleratable and admission_check:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": NODE_DEVICES_CHECK}]}
    spec["resourceGroups"] = [{"coveredResources": covered, "flavors": entries}] if entries else []
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {
            "name": pool.name,
            "labels": {**schedule_labels(pool), RESOURCE_TYPE_LABEL: QUEUE_TYPE},
        },
        "spec": spec,
    }


def cards_published(groups: Iterable[GroupSpec], key: str) -> bool:
    """Whether any Devices group of accelerator ``key`` is known yet.

    A derived type's ``feature`` comes from its cards' Devices and its spec is immutable once
    created, so an acceleratable pool seen through its nodes' labels before their Devices
    arrive waits rather than being authored with no fractions it could ever correct.
    """
    return any(accelerator_key(group) == key for group in groups)


def feature_of(groups: Iterable[GroupSpec], key: str) -> Feature:
    """What fractions the pool's cards of accelerator ``key`` offer, from their Devices spec.

    The most slices (and partitions) any one card offers; compute overcommit when any card
    allows it. A pool with no logically sliceable card has no memory step.
    """
    slices = partitions = 0
    overcommit = False
    for group in groups:
        if accelerator_key(group) != key:
            continue
        for card in group.accelerators:
            logical, physical = card.status.logical_sliced, card.status.physical_sliced
            if logical is not None and logical.count > 0:
                slices = max(slices, logical.count)
                overcommit = overcommit or logical.cores_percentage_overcommit
            if physical is not None:
                partitions = max(partitions, physical.count)
    return Feature(
        logical_sliced=LogicalSlicedFeature(
            max_size=slices,
            cores_percentage_overcommit=overcommit,
            memory_percentage_step=MEMORY_PERCENTAGE_STEP if slices else 0,
        ),
        physical_sliced=PhysicalSlicedFeature(max_size=partitions),
    )


def enriched_spec(
    spec: InstanceTypeSpec, flavors: Sequence[Flavor], feature: Feature
) -> InstanceTypeSpec:
    """``spec`` with its descriptors filled from the pool's first member flavor.

    What the defaulting webhook does to a custom type and what a derived type is created
    with: ``generalGroup`` defaults to ``generic``; manufacturer, product, family, memory and
    cores come from the accelerator's labels, ``feature`` from the cards' Devices spec. A
    field the spec already states is kept (an InstanceType's spec is immutable after creation).
    """
    model = next((f.accelerator for f in flavors if f.accelerator is not None), None)
    fields: dict[str, Any] = {"general_group": spec.general_group or GENERIC_CPU}
    if spec.acceleratable and model is not None:
        fields |= {
            "manufacturer": spec.manufacturer or model.manufacturer,
            "product": spec.product or model.product,
            "family": spec.family or model.family,
            "memory": spec.memory or model.memory or None,
            "cores": spec.cores or model.cores or None,
            "feature": feature,
        }
    return msgspec.structs.replace(spec, **fields)


def derived_instance_type(
    pool: PoolIdentity, flavors: Sequence[Flavor], feature: Feature
) -> InstanceType:
    """The InstanceType the operator authors for ``pool`` (create-only; status comes later).

    Labelled with the pool's schedule labels, ``schedule.gpustack.ai/derived-from-node`` and
    its entrance; unit resources from the preset table, chosen now and never updated.
    """
    base = InstanceTypeSpec(
        acceleratable=pool.acceleratable,
        accelerator_group=pool.accelerator_group,
        general_group=pool.general_group,
        os=pool.os,
        arch=pool.arch,
        unit_resources=unit_preset(pool.accelerator_group or None),
    )
    labels = {
        **schedule_labels(pool),
        DERIVED_FROM_NODE_LABEL: TRUE,
        QUEUE_ENTRANCE_LABEL: entrance_name(pool.name),
    }
    return InstanceType(
        metadata=InstanceTypeMeta(name=pool.name, labels=labels),
        spec=enriched_spec(base, flavors, feature),
    )


def catalog(
    flavors: Sequence[Flavor], *, aware: bool, groups: Iterable[GroupSpec] = ()
) -> tuple[InstanceTypeFlavor, ...]:
    """The InstanceTypeFlavor catalog: one entry per pool, without os/arch, sorted by name.

    A collapsed CPU entry is ``generic`` (manufacturer ``generic``); an aware one names its
    CPU's manufacturer and model. An accelerated entry is sliceable when a card of its model
    offers logical slices (``groups``: the member nodes' Devices spec; ``None`` when unknown).
    """
    cards = tuple(groups)
    entries: dict[str, InstanceTypeFlavorSpec] = {}
    for pool, found in pools(flavors, aware=aware).items():
        first = found[0]
        model = first.accelerator
        if model is None:
            spec = InstanceTypeFlavorSpec(
                acceleratable=False,
                general_group=pool.general_group,
                manufacturer=first.cpu_manufacturer if aware else GENERIC_CPU,
                product=first.cpu_product if aware else "",
            )
        else:
            offered = [g for g in cards if accelerator_key(g) == model.key]
            feature = feature_of(offered, model.key)
            spec = InstanceTypeFlavorSpec(
                acceleratable=True,
                general_group=pool.general_group if aware else "",
                accelerator_group=model.key,
                manufacturer=model.manufacturer,
                product=model.product,
                memory=model.memory or None,
                cores=model.cores or None,
                sliceable=feature.logical_sliced.max_size > 0 if offered else None,
            )
        entries.setdefault(pool.catalog, spec)
    return tuple(
        InstanceTypeFlavor(metadata=InstanceTypeFlavorMeta(name=name), spec=spec)
        for name, spec in sorted(entries.items())
    )
