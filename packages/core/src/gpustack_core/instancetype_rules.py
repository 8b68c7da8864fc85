"""The InstanceType webhook's rules: what a type must be, what it is defaulted to, what may change.

An InstanceType names a pool (:func:`gpustack_core.derive.identity_of`): its accelerator key,
CPU key and platform select the flavors its ClusterQueue covers, and its name gives the
entrance LocalQueue every Instance of it waits in. An administrator authors one against the
catalog by ``acceleratorGroup`` (``shared/spec/instancetype-walkthrough.md`` §4) and the
defaulting webhook fills the rest from the matching flavor, as the operator does for the types
it derives; the validating webhook then holds the result to these rules.

- **Defaulting** (:func:`defaulted`): ``os``/``arch`` when exactly one platform offers the
  pool; the descriptors (manufacturer, product, family, memory, cores, feature) from
  :func:`gpustack_core.derive.enriched_spec`; the schedule labels and the entrance label
  (:func:`stamped_labels`), which follow from the name and spec and are never chosen. On an
  update, what the write leaves unset is carried from the stored spec (:func:`carried`), as
  kube-apiserver keeps a Service's ``clusterIP`` a replace omits: re-applying the manifest an
  administrator first wrote must not read as an attempt to erase what defaulting added.
- **Validation** (:func:`spec_errors`, :func:`immutable_errors`): the keys are what labels and
  flavor names can carry, ``unitResources`` positive and bounded as an Instance's request is,
  and after creation nothing changes but ``displayName`` and ``inactive``
  (``shared/reference/instancetypes.md``: "to re-size or re-point a pool, delete and re-create
  it" — Instances running on a pool that moved under them would hold what it no longer
  offers).

Pure: objects in, field errors and specs out. The wording is kube-apiserver's
(:mod:`gpustack_core.fielderrors`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any, Final

import msgspec

from gpustack_core.derive import enriched_spec, identity_of, members, schedule_labels
from gpustack_core.fielderrors import FieldError, forbidden, invalid, required
from gpustack_core.instance_rules import MAX_CPU_CORES, MAX_LOCAL_STORAGE_BYTES, MAX_RAM_BYTES
from gpustack_core.instancetype import (
    QUEUE_ENTRANCE_LABEL,
    Feature,
    InstanceTypeSpec,
    UnitResources,
)
from gpustack_core.names import dns1123_label_errors, label_value_errors
from gpustack_core.poolnames import entrance_name
from gpustack_core.pools import Flavor
from gpustack_core.quantity import QuantityError, parse_quantity
from gpustack_core.wire import json_name

MUTABLE: Final = ("display_name", "inactive")
"""The spec fields that may change after creation (the reference's two)."""
IMMUTABLE_DETAIL: Final = (
    "field is immutable after creation (only displayName and inactive may change): to re-size "
    "or re-point a pool, delete the InstanceType and create it again"
)

_UNIT_BOUNDS: Final = (
    ("cpu", Fraction(MAX_CPU_CORES), "65536 cores"),
    ("ram", Fraction(MAX_RAM_BYTES), "1Pi"),
    ("local_storage", Fraction(MAX_LOCAL_STORAGE_BYTES), "1Ei"),
)


# -- validation -------------------------------------------------------------------------------


def _key_errors(field: str, value: str) -> list[FieldError]:
    """A group key must be a DNS-1123 label, as every key the node labels carry is.

    It stands in label keys (``acceleratable.feature.gpustack.ai/<key>``) and in flavor and
    queue names.
    """
    return [invalid(field, value, problem) for problem in dns1123_label_errors(value)]


def unit_errors(units: UnitResources) -> list[FieldError]:
    """Each stated unit resource parses, is more than zero and no more than an Instance may ask.

    The unit is what one accelerator (or one CPU Instance) brings: zero would make every
    Instance of the type ask nothing, and the preset caps an explicit request, so a unit past
    what :func:`gpustack_core.instance_rules.resource_errors` allows a request is a typo.
    """
    errors: list[FieldError] = []
    for attribute, bound, spelled in _UNIT_BOUNDS:
        raw = getattr(units, attribute)
        if raw is None:
            continue
        at = f"spec.unitResources.{json_name(attribute)}"
        try:
            value = parse_quantity(raw)
        except QuantityError as exc:
            errors.append(invalid(at, raw, str(exc)))
            continue
        if value <= 0:
            errors.append(invalid(at, raw, "must be greater than 0"))
        elif value > bound:
            errors.append(invalid(at, raw, f"must be no more than {spelled}: no node holds more"))
    return errors


def _descriptor_errors(spec: InstanceTypeSpec) -> list[FieldError]:
    errors: list[FieldError] = []
    for attribute in ("memory", "cores"):
        raw = getattr(spec, attribute)
        if raw is None:
            continue
        try:
            value = parse_quantity(raw)
        except QuantityError as exc:
            errors.append(invalid(f"spec.{attribute}", raw, str(exc)))
            continue
        if value <= 0:
            errors.append(invalid(f"spec.{attribute}", raw, "must be greater than 0"))
    step = spec.feature.logical_sliced.memory_percentage_step
    if step > 100:
        errors.append(
            invalid(
                "spec.feature.logicalSliced.memoryPercentageStep",
                step,
                "must be no more than 100: a slice's memory is a percentage of the card's",
            )
        )
    return errors


def spec_errors(spec: InstanceTypeSpec) -> list[FieldError]:
    """What an InstanceType's spec must be to name a pool, each wrong field named.

    An acceleratable type names its accelerator key (``acceleratorGroup``: the catalog's, e.g.
    ``nvidia-a10g``); a CPU type names none. Keys are DNS-1123 labels, ``os``/``arch`` label
    values (the type carries them as labels).
    """
    errors: list[FieldError] = []
    if spec.acceleratable:
        if not spec.accelerator_group:
            errors.append(
                required(
                    "spec.acceleratorGroup",
                    "an acceleratable InstanceType names its accelerator key, the catalog's "
                    "acceleratorGroup (kubectl get instancetypeflavor), e.g. nvidia-a10g",
                )
            )
        else:
            errors += _key_errors("spec.acceleratorGroup", spec.accelerator_group)
    elif spec.accelerator_group:
        errors.append(
            forbidden(
                "spec.acceleratorGroup",
                "a CPU InstanceType (acceleratable: false) names no accelerator key: set "
                "acceleratable: true to pool those accelerators",
            )
        )
    if spec.general_group:
        errors += _key_errors("spec.generalGroup", spec.general_group)
    for attribute in ("os", "arch"):
        value = getattr(spec, attribute)
        if value:
            errors += [invalid(f"spec.{attribute}", value, p) for p in label_value_errors(value)]
    errors += _descriptor_errors(spec)
    return errors + unit_errors(spec.unit_resources)


def _fixed(spec: InstanceTypeSpec) -> InstanceTypeSpec:
    """``spec`` with the mutable fields blanked: what must stay equal after creation."""
    return msgspec.structs.replace(spec, display_name="", inactive=False)


def changed_fields(new: InstanceTypeSpec, old: InstanceTypeSpec) -> list[str]:
    """The wire names of the immutable top-level spec fields that differ, in spec order."""
    before, after = _fixed(old), _fixed(new)
    return [
        field.encode_name
        for field in msgspec.structs.fields(InstanceTypeSpec)
        if getattr(before, field.name) != getattr(after, field.name)
    ]


def immutable_errors(new: InstanceTypeSpec, old: InstanceTypeSpec) -> list[FieldError]:
    """One ``Forbidden`` per field changed after creation; ``displayName``/``inactive`` free."""
    return [forbidden(f"spec.{name}", IMMUTABLE_DETAIL) for name in changed_fields(new, old)]


# -- defaulting -------------------------------------------------------------------------------


def stamped_labels(name: str, spec: InstanceTypeSpec) -> dict[str, str]:
    """The labels the webhook stamps: the pool's schedule labels and the entrance LocalQueue.

    Both follow from what the type is (its spec names the pool, its name the queue: a custom
    type's ClusterQueue is named after it), so they are written, never taken from the author.
    A type whose keys are not valid gets none (its spec is refused anyway).
    """
    if spec_errors(spec):
        return {}
    return {**schedule_labels(identity_of(spec)), QUEUE_ENTRANCE_LABEL: entrance_name(name)}


def platforms(spec: InstanceTypeSpec, flavors: Iterable[Flavor]) -> list[tuple[str, str]]:
    """The ``(os, arch)`` pairs whose flavors hold the pool ``spec`` names, sorted.

    Only the stated keys and platform fields filter: an unstated ``os`` or ``arch`` matches
    any. An accelerated pool matches its accelerator key (and CPU key, when it names one other
    than ``generic``); a CPU pool matches CPU flavors.
    """
    pool = identity_of(spec)
    found = {
        (f.os, f.arch)
        for f in flavors
        if (f.accelerator.key if f.accelerator else "") == pool.accelerator_group
        and (not pool.cpu_aware or f.general_key == pool.general_group)
        and (not spec.os or f.os == spec.os)
        and (not spec.arch or f.arch == spec.arch)
    }
    return sorted(found)


def defaulted(
    spec: InstanceTypeSpec, flavors: Sequence[Flavor], feature: Feature
) -> tuple[InstanceTypeSpec, list[str]]:
    """The spec defaulting gives a new type, and one warning per thing it could not fill.

    ``flavors``: every flavor the managed nodes form now; ``feature``: what the pool's cards
    offer (:func:`gpustack_core.derive.feature_of` over its member nodes' Devices). The
    platform is filled when exactly one offers the pool; the descriptors come from
    :func:`~gpustack_core.derive.enriched_spec`, which keeps whatever the author stated, and
    a ``feature`` the author stated is kept whole. A spec with nothing to match (no managed
    node offers the pool now) is returned as written, saying so.
    """
    warnings: list[str] = []
    offered = platforms(spec, flavors)
    if (not spec.os or not spec.arch) and len(offered) == 1:
        spec = msgspec.structs.replace(spec, os=offered[0][0], arch=offered[0][1])
    elif not spec.os or not spec.arch:
        where = ", ".join(f"{o}/{a}" for o, a in offered) or "no platform"
        warnings.append(
            f"spec.os and spec.arch are not both set and the pool is offered on {where}: the "
            "type selects no flavor until it names one platform (delete it and create it again)"
        )
    pool = identity_of(spec)
    found = members(pool, flavors) if spec.os and spec.arch else ()
    if spec.acceleratable and spec.accelerator_group and not found and spec.os and spec.arch:
        warnings.append(
            f"no managed node offers {spec.accelerator_group} on {spec.os}/{spec.arch} now: "
            "the type's descriptors are left as written and its pool is empty until one does"
        )
    stated = spec.feature != Feature()
    return enriched_spec(spec, found, spec.feature if stated else feature), warnings


def _unset(value: object) -> bool:
    return value is None or value == "" or value == Feature() or value == UnitResources()


def carried(new: InstanceTypeSpec, old: InstanceTypeSpec) -> InstanceTypeSpec:
    """``new`` with each immutable field it leaves unset taken from the stored ``old``.

    Per field of ``unitResources`` as well, so a manifest stating only ``cpu`` keeps the stored
    ``ram``. ``displayName`` and ``inactive`` are the author's to clear and are never carried.
    A field set to a different value is left as written, for :func:`immutable_errors` to name.
    """
    fields: dict[str, Any] = {}
    for field in msgspec.structs.fields(InstanceTypeSpec):
        if field.name in MUTABLE:
            continue
        have, stored = getattr(new, field.name), getattr(old, field.name)
        if field.name == "unit_resources":
            units = {
                f.name: getattr(stored, f.name)
                for f in msgspec.structs.fields(UnitResources)
                if getattr(have, f.name) is None and getattr(stored, f.name) is not None
            }
            if units:
                fields[field.name] = msgspec.structs.replace(have, **units)
        elif _unset(have) and not _unset(stored) and not isinstance(have, bool):
            fields[field.name] = stored
    return msgspec.structs.replace(new, **fields) if fields else new


def spec_patch(
    raw: Mapping[str, Any] | None, written: InstanceTypeSpec, spec: InstanceTypeSpec
) -> list[dict[str, Any]]:
    """The JSONPatch turning the object's spec (``raw``, decoded as ``written``) into ``spec``.

    One ``add`` (which replaces an existing member) per top-level field whose value differs,
    compared decoded, so ``maxSize: 0`` written out and left out are the same. Defaulting only
    adds; a field ``spec`` leaves at its default is never removed from what the author wrote.
    """
    if not isinstance(raw, Mapping):
        wanted = msgspec.to_builtins(spec)
        return [{"op": "add", "path": "/spec", "value": wanted}] if wanted else []
    return [
        {
            "op": "add",
            "path": f"/spec/{field.encode_name}",
            "value": msgspec.to_builtins(getattr(spec, field.name)),
        }
        for field in msgspec.structs.fields(InstanceTypeSpec)
        if getattr(written, field.name) != getattr(spec, field.name)
    ]


def labels_patch(raw: Mapping[str, Any] | None, labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """The JSONPatch setting ``labels`` on an object whose ``metadata.labels`` is ``raw``."""
    if not labels:
        return []
    if not isinstance(raw, Mapping):
        return [{"op": "add", "path": "/metadata/labels", "value": dict(labels)}]
    return [
        {"op": "add", "path": "/metadata/labels/" + _pointer(key), "value": value}
        for key, value in labels.items()
        if raw.get(key) != value
    ]


def _pointer(key: str) -> str:
    """A JSON Pointer segment (RFC 6901): ``~`` is ``~0``, ``/`` is ``~1``."""
    return key.replace("~", "~0").replace("/", "~1")


__all__ = [
    "IMMUTABLE_DETAIL",
    "MUTABLE",
    "carried",
    "changed_fields",
    "defaulted",
    "immutable_errors",
    "labels_patch",
    "platforms",
    "spec_errors",
    "spec_patch",
    "stamped_labels",
    "unit_errors",
]
