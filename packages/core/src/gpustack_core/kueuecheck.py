"""The ``gpustack-node-devices`` AdmissionCheck as Kueue sees it: the object, a Workload's entry.

Kueue's contract for an admission check (``shared/reference/control-plane.md``, "Kueue v0.17.0"):
the AdmissionCheck names its controller in ``spec.controllerName``, and that controller sets
its ``Active`` condition (until then every ClusterQueue naming the check is inactive). Once a
Workload has reserved quota in such a queue, Kueue lists the check in the Workload's
``status.admissionChecks`` as ``Pending``; the controller answers in that entry — ``Ready``
(with quota, Admitted) or ``Retry`` (Kueue evicts the Workload, releases its quota, resets the
entry to ``Pending`` and queues it again after ``requeueAfterSeconds``). This check never
answers ``Rejected`` (which deactivates a Workload for good): a card may free up at any moment.

This module reads what the check needs of a Workload (leniently: Kueue's objects carry many
fields this code has no use for), says whether an entry is this check's to answer, and builds
the writes; :mod:`gpustack_core.fit` decides. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from gpustack_core import contract
from gpustack_core.decoding import convert
from gpustack_core.fit import PodSet, Verdict, pod_asks
from gpustack_core.fitaffinity import selects

READY: Final = "Ready"
RETRY: Final = "Retry"
PENDING: Final = "Pending"
ACTIVE: Final = "Active"
MAX_MESSAGE: Final = 32768
"""The Workload CRD's bound on an entry's message (``maxLength``)."""
RETRY_BASE: Final = 5
RETRY_MAX: Final = 60
"""Seconds Kueue waits before queueing a Workload again after a ``Retry``: doubling from
:data:`RETRY_BASE` with each retry Kueue counted, at most :data:`RETRY_MAX` — without it Kueue
requeues at once, and a Workload nothing fits would reserve and release quota in a loop."""


class _Struct(msgspec.Struct, rename="camel", frozen=True, kw_only=True):
    """Kueue's spelling; unknown fields ignored."""


class Condition(_Struct, frozen=True, kw_only=True):
    type: str
    status: str = ""
    reason: str = ""
    message: str = ""


class CheckState(_Struct, frozen=True, kw_only=True):
    """One ``status.admissionChecks`` entry."""

    name: str
    state: str = ""
    message: str = ""
    last_transition_time: str | None = None
    requeue_after_seconds: int | None = None
    retry_count: int | None = None


class PodSetAssignment(_Struct, frozen=True, kw_only=True):
    name: str
    flavors: dict[str, str] = msgspec.field(default_factory=dict)
    count: int | None = None


class Admission(_Struct, frozen=True, kw_only=True):
    cluster_queue: str = ""
    pod_set_assignments: tuple[PodSetAssignment, ...] = ()


class PodSetSpec(_Struct, frozen=True, kw_only=True):
    name: str
    count: int = 1
    template: dict[str, Any] = msgspec.field(default_factory=dict)


class WorkloadSpec(_Struct, frozen=True, kw_only=True):
    pod_sets: tuple[PodSetSpec, ...] = ()
    queue_name: str = ""


class WorkloadStatus(_Struct, frozen=True, kw_only=True):
    conditions: tuple[Condition, ...] = ()
    admission: Admission | None = None
    admission_checks: tuple[CheckState, ...] = ()


class Meta(_Struct, frozen=True, kw_only=True):
    name: str
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""


class Workload(_Struct, frozen=True, kw_only=True):
    """What the check reads of a Kueue Workload."""

    metadata: Meta
    spec: WorkloadSpec = WorkloadSpec()
    status: WorkloadStatus = WorkloadStatus()

    def condition(self, kind: str) -> bool:
        """Whether condition ``kind`` is ``True``."""
        return any(c.type == kind and c.status == "True" for c in self.status.conditions)

    def entry(self, check: str) -> CheckState | None:
        """The ``status.admissionChecks`` entry named ``check``."""
        return next((c for c in self.status.admission_checks if c.name == check), None)


def workload_from_object(obj: Mapping[str, Any]) -> Workload:
    """Decode a Workload; :class:`~gpustack_core.decoding.ContractError` names what is wrong."""
    name = (obj.get("metadata") or {}).get("name", "?")
    return convert(obj, Workload, what=f"Workload {name}")


def to_answer(workload: Workload, checks: frozenset[str]) -> list[str]:
    """The entries of ours this Workload waits on: ``Pending`` ones, while quota is reserved.

    Nothing while the Workload is evicted (Kueue is taking its quota back and will reset every
    entry), finished or without a reservation; an entry already ``Ready`` stays so (the
    Workload may be admitted and running), and a ``Retry`` is Kueue's to reset.
    """
    if not workload.condition("QuotaReserved") or workload.status.admission is None:
        return []
    if workload.condition("Evicted") or workload.condition("Finished"):
        return []
    return [
        c.name for c in workload.status.admission_checks if c.name in checks and c.state == PENDING
    ]


def podsets(
    workload: Workload,
    flavor_labels: Mapping[str, Mapping[str, str]],
    node_labels: Mapping[str, Mapping[str, str]],
) -> list[PodSet]:
    """The Workload's PodSets with their asks and the nodes each may land on.

    ``flavor_labels``: each ResourceFlavor's ``spec.nodeLabels`` by name; ``node_labels``: each
    Node's labels by name. A PodSet's nodes are those its template selects with the labels of
    every flavor Kueue assigned it (a flavor not found selects nothing: it was deleted under
    the reservation). Raises :class:`~gpustack_core.requests.RequestError` for a template whose
    accelerator requests do not parse.
    """
    assigned = {
        a.name: a for a in (workload.status.admission.pod_set_assignments
                            if workload.status.admission else ())
    }  # fmt: skip
    out: list[PodSet] = []
    for spec in workload.spec.pod_sets:
        assignment = assigned.get(spec.name)
        count = assignment.count if assignment and assignment.count is not None else spec.count
        flavors = sorted(set(assignment.flavors.values())) if assignment else []
        pod_spec = spec.template.get("spec")
        pod_spec = pod_spec if isinstance(pod_spec, Mapping) else {}
        wanted: dict[str, str] = {}
        missing = False
        for flavor in flavors:
            labels = flavor_labels.get(flavor)
            if labels is None:
                missing = True
            else:
                wanted.update(labels)
        nodes = frozenset(
            name for name, labels in node_labels.items()
            if not missing and selects(name, labels, pod_spec, wanted)
        )  # fmt: skip
        out.append(PodSet(spec.name, count, pod_asks(spec.template), nodes))
    return out


def retry_after(entry: CheckState | None) -> int:
    """Seconds before Kueue queues the Workload again: :data:`RETRY_BASE` doubled per retry."""
    retries = entry.retry_count if entry and entry.retry_count and entry.retry_count > 0 else 0
    delay: int = RETRY_BASE << min(retries, 8)
    return min(delay, RETRY_MAX)


def _clip(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…"


def answer_patch(
    workload: Mapping[str, Any], check: str, verdict: Verdict, now: str
) -> dict[str, Any] | None:
    """The merge patch of ``workload``'s ``status`` setting entry ``check`` to the verdict.

    The whole ``admissionChecks`` list goes in the patch (a merge patch replaces a list), so it
    carries the ``resourceVersion`` it was built from: if Kueue or another check wrote the list
    meanwhile the server answers 409 and the caller reads again, and nothing another writer set
    is lost. ``None`` when the entry is gone or already says this.
    """
    status = workload.get("status") or {}
    entries = [dict(e) for e in status.get("admissionChecks") or () if isinstance(e, Mapping)]
    for entry in entries:
        if entry.get("name") != check:
            continue
        state = READY if verdict.ready else RETRY
        message = _clip(verdict.message)
        if entry.get("state") == state and entry.get("message") == message:
            return None
        if entry.get("state") != state:
            entry["lastTransitionTime"] = now
        entry["state"] = state
        entry["message"] = message
        if verdict.ready:
            entry.pop("requeueAfterSeconds", None)
        else:
            retries = entry.get("retryCount")
            current = CheckState(
                name=check, retry_count=retries if isinstance(retries, int) else None
            )
            entry["requeueAfterSeconds"] = retry_after(current)
        version = (workload.get("metadata") or {}).get("resourceVersion")
        return {"metadata": {"resourceVersion": version}, "status": {"admissionChecks": entries}}
    return None


# -- the AdmissionCheck object ----------------------------------------------------------------


def admission_check(labels: Mapping[str, str]) -> dict[str, Any]:
    """The ``gpustack-node-devices`` AdmissionCheck the worker writes."""
    return {
        "apiVersion": contract.KUEUE_API_VERSION,
        "kind": "AdmissionCheck",
        "metadata": {"name": contract.NODE_DEVICES_CHECK, "labels": dict(labels)},
        "spec": {"controllerName": contract.NODE_DEVICES_CONTROLLER},
    }


def is_active(check: Mapping[str, Any]) -> bool:
    """Whether the AdmissionCheck's ``Active`` condition is ``True``."""
    conditions = (check.get("status") or {}).get("conditions") or ()
    return any(
        isinstance(c, Mapping) and c.get("type") == ACTIVE and c.get("status") == "True"
        for c in conditions
    )


def active_patch(check: Mapping[str, Any], now: str) -> dict[str, Any] | None:
    """The status merge patch making ``Active=True`` (other conditions kept); ``None`` if so."""
    if is_active(check):
        return None
    kept = [
        c for c in (check.get("status") or {}).get("conditions") or ()
        if isinstance(c, Mapping) and c.get("type") != ACTIVE
    ]  # fmt: skip
    generation = (check.get("metadata") or {}).get("generation")
    active = {
        "type": ACTIVE,
        "status": "True",
        "reason": ACTIVE,
        "message": "the worker's node-devices controller answers this check's Workloads",
        "lastTransitionTime": now,
        **({"observedGeneration": generation} if isinstance(generation, int) else {}),
    }
    return {"status": {"conditions": [*kept, active]}}


def ours(check: Mapping[str, Any], controller: str = contract.NODE_DEVICES_CONTROLLER) -> bool:
    """Whether an AdmissionCheck names this controller."""
    return (check.get("spec") or {}).get("controllerName") == controller


__all__ = [
    "ACTIVE",
    "PENDING",
    "READY",
    "RETRY",
    "CheckState",
    "Workload",
    "active_patch",
    "admission_check",
    "answer_patch",
    "is_active",
    "ours",
    "podsets",
    "retry_after",
    "to_answer",
    "workload_from_object",
]
