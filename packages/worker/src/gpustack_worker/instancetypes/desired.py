"""What each object of the InstanceType chain should be now, and the write that makes it so.

The bodies come from :mod:`gpustack_core.derive` and :mod:`gpustack_core.pools`; this module adds
what depends on what the cluster holds now — a ClusterQueue's drain, its reference to the
``gpustack-node-devices`` check — and compares a stored object with its rendering field by field,
so a reconcile writes only a difference and never fights a field it does not own (Kueue's
defaults, its status).

The drain rule (``shared/reference/instancetypes.md``, ``instance-type-drain-when-no-flavors``):
a queue whose pool lost every flavor is set ``stopPolicy: HoldAndDrain`` first, keeping its
resource groups; only once that stop is stored and the queue reserves nothing are the groups
emptied. A queue whose flavors return is reopened (``stopPolicy: None``) with them. With the
setting off the groups are emptied at once. An ``inactive`` InstanceType's queue is held and
drained too: it admits nothing new.

Pure: objects in, objects and patches out.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, Final

import msgspec

from gpustack_core.contract import API_GROUP, CRD_VERSION, KUEUE_API_VERSION, RESOURCE_TYPE_LABEL
from gpustack_core.derive import QUEUE_TYPE, cluster_queue
from gpustack_core.instancetype import KIND as INSTANCE_TYPE_KIND
from gpustack_core.instancetype import InstanceType, InstanceTypeStatus
from gpustack_core.instancetypeflavor import KIND as FLAVOR_KIND
from gpustack_core.instancetypeflavor import InstanceTypeFlavor
from gpustack_core.poolnames import PoolIdentity, entrance_name
from gpustack_core.pools import Flavor
from gpustack_core.quantity import QuantityError, parse_quantity
from gpustack_worker.instancetypes.observed import CheckState, holds_nothing

HOLD_AND_DRAIN: Final = "HoldAndDrain"
STOP_NONE: Final = "None"
"""Kueue's ``stopPolicy`` values; an absent one is ``None`` (Kueue's default)."""
LOCAL_QUEUE_LABELS: Final = {RESOURCE_TYPE_LABEL: QUEUE_TYPE}
"""On every entrance LocalQueue the operator writes: the only ones it updates or deletes."""
SYSTEM_NAMESPACE_PREFIX: Final = "kube-"
KUEUE_NAMESPACE: Final = "kueue-system"


def system_namespace(name: str, operator_namespace: str) -> bool:
    """Whether ``name`` gets no entrance LocalQueues.

    Kubernetes' own (``kube-*``), Kueue's (whose Pods it never queues) and the operator's.
    """
    return name.startswith(SYSTEM_NAMESPACE_PREFIX) or name in {KUEUE_NAMESPACE, operator_namespace}


# -- ResourceFlavors ---------------------------------------------------------------------------


def flavor_patch(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any] | None:
    """A merge patch making ``current``'s labels and ``spec.nodeLabels`` exactly ``desired``'s.

    ``None`` when they already are. A ResourceFlavor labelled ``resource.gpustack.ai/type:
    nodes`` is wholly the operator's, so a key it no longer wants is removed (``null``); the
    rest of its spec (taints, tolerations an administrator added) is left alone.
    """
    patch: dict[str, Any] = {}
    for path in (("metadata", "labels"), ("spec", "nodeLabels")):
        have = (current.get(path[0]) or {}).get(path[1]) or {}
        want = desired[path[0]][path[1]]
        if have != want:
            change: dict[str, Any] = dict.fromkeys(set(have) - set(want))
            change.update({k: v for k, v in want.items() if have.get(k) != v})
            patch.setdefault(path[0], {})[path[1]] = change
    return patch or None


# -- ClusterQueues -----------------------------------------------------------------------------


def _spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    spec = (obj or {}).get("spec")
    return spec if isinstance(spec, Mapping) else {}


def checks_named(queue: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The AdmissionChecks a ClusterQueue names."""
    strategy = _spec(queue).get("admissionChecksStrategy") or {}
    return tuple(str(c.get("name")) for c in strategy.get("admissionChecks") or ())


def references_check(state: CheckState, current: Mapping[str, Any] | None, check: str) -> bool:
    """Whether an accelerated queue names the check now.

    Once it is Active (before, Kueue would hold the queue inactive for a check nobody
    answers). A queue already naming it keeps it while the check exists: a check that stops
    answering then holds the queue rather than letting Workloads past the per-card gate.
    """
    if state is CheckState.ACTIVE:
        return True
    return state is CheckState.INACTIVE and check in checks_named(current)


def desired_queue(
    name: str,
    pool: PoolIdentity,
    members: Sequence[Flavor],
    *,
    check: bool,
    inactive: bool,
    drain: bool,
    current: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The ClusterQueue ``name`` backing an InstanceType of ``pool``, as it should be now."""
    body = cluster_queue(pool, members, admission_check=check)
    body["metadata"]["name"] = name
    spec = body["spec"]
    stop = HOLD_AND_DRAIN if inactive else STOP_NONE
    if not members and drain:
        stop = HOLD_AND_DRAIN
        have = _spec(current)
        drained = have.get("stopPolicy") == HOLD_AND_DRAIN and holds_nothing(current)
        if current is not None and not drained:
            spec["resourceGroups"] = copy.deepcopy(list(have.get("resourceGroups") or []))
    spec["stopPolicy"] = stop
    return body


def _quantity(value: object) -> Fraction | str:
    try:
        return parse_quantity(value if isinstance(value, str | int | float) else str(value))
    except QuantityError:
        return str(value)


def _groups(spec: Mapping[str, Any]) -> list[Any]:
    """The resource groups as compared: names and quotas by value (``1600k`` is 1600000)."""
    found = []
    for group in spec.get("resourceGroups") or ():
        flavors = tuple(
            (
                flavor.get("name"),
                tuple(
                    (r.get("name"), _quantity(r.get("nominalQuota")))
                    for r in flavor.get("resources") or ()
                ),
            )
            for flavor in group.get("flavors") or ()
        )
        found.append((tuple(group.get("coveredResources") or ()), flavors))
    return found


def _owned(queue: Mapping[str, Any] | None) -> tuple[Any, ...]:
    spec = _spec(queue)
    return (
        spec.get("namespaceSelector"),
        _groups(spec),
        checks_named(queue),
        spec.get("stopPolicy") or STOP_NONE,
    )


def queue_patch(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch bringing ``current`` to ``desired`` in the fields the operator owns.

    Those are its labels (added, never removed), ``namespaceSelector``, ``resourceGroups``,
    ``admissionChecksStrategy`` and ``stopPolicy``; Kueue's defaults (queueing strategy,
    preemption, fungibility) and the status are not compared. The patch carries the
    ``resourceVersion`` it was decided on, so a queue whose reservations moved meanwhile is a
    ``Conflict`` and is decided again, never emptied on a stale reading. ``None``: nothing to do.
    """
    labels = (current.get("metadata") or {}).get("labels") or {}
    wanted = desired["metadata"]["labels"]
    same_labels = all(labels.get(k) == v for k, v in wanted.items())
    if same_labels and _owned(current) == _owned(desired):
        return None
    spec = desired["spec"]
    version = (current.get("metadata") or {}).get("resourceVersion", "")
    return {
        "metadata": {"labels": wanted, "resourceVersion": version},
        "spec": {
            "namespaceSelector": spec["namespaceSelector"],
            "resourceGroups": spec["resourceGroups"],
            "admissionChecksStrategy": spec.get("admissionChecksStrategy"),
            "stopPolicy": spec["stopPolicy"],
        },
    }


# -- LocalQueues -------------------------------------------------------------------------------


def local_queue(namespace: str, type_name: str) -> dict[str, Any]:
    """The entrance LocalQueue in ``namespace`` of the type (and queue) ``type_name``."""
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "LocalQueue",
        "metadata": {
            "name": entrance_name(type_name),
            "namespace": namespace,
            "labels": dict(LOCAL_QUEUE_LABELS),
        },
        "spec": {"clusterQueue": type_name},
    }


def fronts(local: Mapping[str, Any]) -> str:
    """The ClusterQueue a LocalQueue fronts (``spec.clusterQueue``, immutable in Kueue)."""
    return str(_spec(local).get("clusterQueue") or "")


# -- InstanceTypes and the catalog -------------------------------------------------------------


def spelled_out(struct: msgspec.Struct) -> dict[str, Any]:
    """Every field of ``struct`` under its wire name, defaults included, nested structs too.

    For a figure that was measured as zero, which the wire's ``omit_defaults`` would drop:
    absent would read as unknown.
    """
    found: dict[str, Any] = {}
    for field in msgspec.structs.fields(type(struct)):
        value = getattr(struct, field.name)
        found[field.encode_name] = (
            spelled_out(value) if isinstance(value, msgspec.Struct) else msgspec.to_builtins(value)
        )
    return found


def type_object(itype: InstanceType) -> dict[str, Any]:
    """An InstanceType to create: its metadata and spec (the status is written after).

    An accelerated type's ``feature`` is written whole (``physicalSliced: {maxSize: 0}``, as
    the walkthrough's §1 shows it): what its cards offer was read from their Devices, and a
    zero there is a finding, not a field left out.
    """
    body: dict[str, Any] = msgspec.to_builtins(itype)
    body.pop("status", None)
    if itype.spec.acceleratable:
        body["spec"]["feature"] = spelled_out(itype.spec.feature)
    return {"apiVersion": f"{API_GROUP}/{CRD_VERSION}", "kind": INSTANCE_TYPE_KIND, **body}


def status_patch(status: InstanceTypeStatus) -> list[dict[str, Any]]:
    """A JSON patch replacing the whole status: a figure no longer computed does not linger."""
    return [{"op": "add", "path": "/status", "value": msgspec.to_builtins(status)}]


def catalog_object(entry: InstanceTypeFlavor) -> dict[str, Any]:
    """A catalog entry to create."""
    body: dict[str, Any] = msgspec.to_builtins(entry)
    return {"apiVersion": f"{API_GROUP}/{CRD_VERSION}", "kind": FLAVOR_KIND, **body}


def catalog_patch(entry: InstanceTypeFlavor) -> list[dict[str, Any]]:
    """A JSON patch replacing a catalog entry's whole spec (a field it lost goes with it)."""
    return [{"op": "add", "path": "/spec", "value": msgspec.to_builtins(entry.spec)}]
