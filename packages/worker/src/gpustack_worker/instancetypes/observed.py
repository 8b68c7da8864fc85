"""What the InstanceType controllers read of the cluster, decoded once as the informers hold it.

Each decoder keeps only what a reconcile reads — a Devices object as the views' ``NodeDevices``,
a Namespace as its name and whether it is going away — and each reader of a Kueue object says
how a figure is taken from it, in one place:

- a ClusterQueue's reservation: ``status.reservingWorkloads``, ``status.admittedWorkloads`` and
  every ``status.flavorsReservation[].resources[].total``. Kueue writes the counts with
  ``omitempty`` semantics in its Go types, so an absent count is Kueue's spelling of zero; a
  queue Kueue has never written a status for has admitted nothing through it either.
- the ``gpustack-node-devices`` AdmissionCheck's state: absent, or its ``Active`` condition.

Pure: objects in, typed values out; the controller does the I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from gpustack_core.decoding import ContractError, convert
from gpustack_core.devices import DevicesSpec, DevicesStatus
from gpustack_core.quantity import QuantityError, cpu_to_millicores, parse_quantity
from gpustack_core.views import NodeDevices


def _meta(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        raise ContractError(f"{kind} without metadata.name")
    return meta


def node_devices(obj: dict[str, Any]) -> NodeDevices:
    """A ``Devices`` object as the views read it: what its cards offer and what Pods hold.

    A spec or ledger that does not decode raises ``ContractError`` naming the node and the
    field, and the informer leaves the object out (its node then offers nothing to a view,
    and the informer's log says why).
    """
    name = str(_meta(obj, "Devices")["name"])
    spec = convert(obj.get("spec") or {}, DevicesSpec, what=f"Devices {name} spec")
    status = convert(obj.get("status") or {}, DevicesStatus, what=f"Devices {name} status")
    return NodeDevices(node=name, groups=spec.groups, ledger=status.groups)


def held_namespace(obj: dict[str, Any]) -> dict[str, Any]:
    """A Namespace as the LocalQueue reconcile holds it: name, deletion and phase."""
    meta = _meta(obj, "Namespace")
    kept: dict[str, Any] = {"name": meta["name"]}
    if meta.get("deletionTimestamp"):
        kept["deletionTimestamp"] = meta["deletionTimestamp"]
    held: dict[str, Any] = {"metadata": kept}
    status = obj.get("status")
    if isinstance(status, Mapping) and isinstance(status.get("phase"), str):
        held["status"] = {"phase": status["phase"]}
    return held


def terminating(namespace: Mapping[str, Any]) -> bool:
    """Whether the namespace is going away (no object may be created in it then)."""
    meta = namespace.get("metadata") or {}
    phase = (namespace.get("status") or {}).get("phase")
    return bool(meta.get("deletionTimestamp")) or phase == "Terminating"


def _status(queue: Mapping[str, Any] | None) -> Mapping[str, Any]:
    status = (queue or {}).get("status")
    return status if isinstance(status, Mapping) else {}


def _entries(value: object) -> list[Mapping[str, Any]]:
    """The objects of a list field; anything else (absent, malformed) holds none."""
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def reserved(queue: Mapping[str, Any] | None, resource: str) -> int:
    """The ``resource`` a ClusterQueue has reserved, summed over its flavors, in millis.

    Millicores for ``cpu``. A total that is no quantity (Kueue writes none such) adds
    nothing; :func:`holds_nothing` never reads it as zero.
    """
    total = 0
    for flavor in _entries(_status(queue).get("flavorsReservation")):
        for entry in _entries(flavor.get("resources")):
            if entry.get("name") != resource:
                continue
            figure = _quantity(entry.get("total", 0))
            if figure is not None:
                total += cpu_to_millicores(figure)
    return total


def holds_nothing(queue: Mapping[str, Any] | None) -> bool:
    """Whether a ClusterQueue reserves nothing: no reserving or admitted Workload, no quota.

    The drain rule's test before a queue's resource groups are emptied: every reservation
    must be zero (``shared/reference/instancetypes.md``, ``instance-type-drain-when-no-flavors``).
    """
    status = _status(queue)
    for count in ("reservingWorkloads", "admittedWorkloads"):
        value = status.get(count)
        if value is not None and (type(value) is not int or value != 0):
            return False
    reservations = status.get("flavorsReservation")
    if reservations is not None and not isinstance(reservations, list):
        return False  # a figure that does not read is not known to be zero
    for flavor in _entries(reservations):
        for entry in _entries(flavor.get("resources")):
            if _quantity(entry.get("total", 0)) != 0:
                return False
    return True


def _quantity(value: object) -> Fraction | None:
    """A status figure as a number; ``None`` for one that does not read as a quantity."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


class CheckState(enum.Enum):
    """The ``gpustack-node-devices`` AdmissionCheck as a ClusterQueue's reference needs it."""

    ABSENT = "absent"
    INACTIVE = "inactive"
    ACTIVE = "active"


def check_state(check: Mapping[str, Any] | None) -> CheckState:
    """``ACTIVE`` only while its ``Active`` condition is ``True`` (what Kueue itself requires).

    One being deleted is ``ABSENT``: Kueue keeps it (its ``resource-in-use`` finalizer) until
    no ClusterQueue names it, so a queue still naming it would hold the deletion forever.
    """
    meta = check.get("metadata") if check is not None else None
    if check is None or (isinstance(meta, Mapping) and meta.get("deletionTimestamp")):
        return CheckState.ABSENT
    for condition in _entries(_status(check).get("conditions")):
        if condition.get("type") == "Active":
            return CheckState.ACTIVE if condition.get("status") == "True" else CheckState.INACTIVE
    return CheckState.INACTIVE
