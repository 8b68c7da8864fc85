"""What the Instance controller knows of Kueue: whether it runs, its LocalQueues, its Workloads.

An Instance's Pod waits in its type's entrance LocalQueue through Kueue's Pod integration: the
controller puts ``kueue.x-k8s.io/queue-name`` on the Pod and Kueue's webhook gates it until its
Workload is admitted (quota reserved in the ClusterQueue, every admission check ``Ready``).
Kueue is not a requirement: a cluster without it still runs Instances, unqueued. So the label
goes only where Kueue serves that LocalQueue in the Instance's namespace — a label naming a
queue nothing serves would leave the Pod gated for ever (Kueue present) or mean nothing
(absent) — and the worker says once which it is. (Where Kueue runs, the controller lets a new
Pod wait a few seconds for a queue still on its way: ``controller.LOCAL_QUEUE_GRACE``.)

While the Pod waits, the Instance's status says why, from the Workload Kueue made for the Pod
(``kueue.x-k8s.io/v1beta2`` ``workloads`` in the Pod's namespace, its controller reference
the Pod): ``Pending`` with Kueue's own message while no quota is reserved, the admission
check's state and message while one holds it (:func:`waiting`).

Kueue's presence is its API's discovery document, looked at every :data:`PROBE_PERIOD`
seconds until it answers; only then do the two informers start (an informer on an API not
served would log a failed list every few seconds for as long as the worker runs).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import trio

from gpustack_core import contract
from gpustack_core.decoding import ContractError
from gpustack_kube.client import ApiError, KubeClient, KubeError, NotFound
from gpustack_kube.informer import Informer, Key
from gpustack_kube.paths import KUEUE_GROUP, KUEUE_VERSION, LOCAL_QUEUES, WORKLOADS, join

log = logging.getLogger("gpustack.worker.instances.kueue")

PROBE_PERIOD: Final = 30.0
"""Seconds between looks at Kueue's discovery document while it is not served."""
RETRY_PERIOD: Final = 2.0
"""Seconds before looking again when the look itself failed (no answer is not "absent")."""
DISCOVERY: Final = join("apis", KUEUE_GROUP, KUEUE_VERSION)
ADMITTED: Final = "Admitted"
QUOTA_RESERVED: Final = "QuotaReserved"
EVICTED: Final = "Evicted"
FINISHED: Final = "Finished"


@dataclass(frozen=True, slots=True)
class Waiting:
    """Why Kueue holds an Instance's Pod: a CamelCase reason and Kueue's words."""

    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}" if self.message else self.reason


def _meta(obj: Mapping[str, Any], kind: str) -> dict[str, Any]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
        raise ContractError(f"{kind} without metadata.name")
    return metadata


def held_local_queue(obj: dict[str, Any]) -> dict[str, Any]:
    """A LocalQueue as the controller holds it: that it exists, nothing more."""
    meta = _meta(obj, "LocalQueue")
    return {"metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion") if k in meta}}


def _pod_owner(meta: Mapping[str, Any]) -> tuple[str, str]:
    """``(name, uid)`` of the Pod the Workload is Kueue's for (its controller reference)."""
    for ref in meta.get("ownerReferences") or ():
        if (
            isinstance(ref, Mapping)
            and ref.get("kind") == "Pod"
            and ref.get("apiVersion") == "v1"
            and ref.get("controller")
        ):
            return str(ref.get("name") or ""), str(ref.get("uid") or "")
    return "", ""


def held_workload(obj: dict[str, Any]) -> dict[str, Any]:
    """A Workload as the controller holds it: its Pod, its conditions, its checks' states."""
    meta = _meta(obj, "Workload")
    pod, uid = _pod_owner(meta)
    kept: dict[str, Any] = {
        "metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion") if k in meta},
        "pod": pod,
        "podUID": uid,
    }
    status = obj.get("status")
    status = status if isinstance(status, dict) else {}
    kept["conditions"] = [
        {k: c[k] for k in ("type", "status", "reason", "message") if k in c}
        for c in status.get("conditions") or ()
        if isinstance(c, dict)
    ]
    kept["checks"] = [
        {k: c[k] for k in ("name", "state", "message") if k in c}
        for c in status.get("admissionChecks") or ()
        if isinstance(c, dict)
    ]
    return kept


def _condition(workload: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in workload.get("conditions") or ():
        if condition.get("type") == kind:
            found: Mapping[str, Any] = condition
            return found
    return None


def _true(workload: Mapping[str, Any], kind: str) -> bool:
    condition = _condition(workload, kind)
    return condition is not None and condition.get("status") == "True"


def _one_line(text: object) -> str:
    return " ".join(str(text or "").split())


def waiting(workload: Mapping[str, Any] | None, queue: str) -> Waiting | None:
    """Why Kueue still holds the Pod of ``workload`` (a :func:`held_workload`), or ``None``.

    ``None`` once admitted (or finished): the Pod's own state says the rest. Before that:
    evicted (Kueue re-queues it), no quota reserved (``QuotaReserved`` False — Kueue's reason,
    ``Pending`` or ``Inadmissible``, and its message naming the resource short), or quota
    reserved with an admission check not yet ``Ready`` (its state — ``Pending``, ``Retry``,
    ``Rejected`` — and the check's message). No Workload yet: Kueue has not seen the Pod.
    """
    if workload is None:
        return Waiting("Queued", f"waiting for Kueue to admit it from LocalQueue {queue}")
    if _true(workload, ADMITTED) or _true(workload, FINISHED):
        return None
    if _true(workload, EVICTED):
        evicted = _condition(workload, EVICTED) or {}
        return Waiting("Evicted", _one_line(evicted.get("message")) or "evicted; queued again")
    if not _true(workload, QUOTA_RESERVED):
        reserved = _condition(workload, QUOTA_RESERVED) or {}
        reason = "".join(c for c in str(reserved.get("reason") or "Pending") if c.isalnum())
        message = _one_line(reserved.get("message"))
        return Waiting(reason or "Pending", message or f"waiting for quota (LocalQueue {queue})")
    for check in workload.get("checks") or ():
        state = str(check.get("state") or "Pending")
        if state != "Ready":
            said = _one_line(check.get("message"))
            name = check.get("name") or "an admission check"
            return Waiting(state, f"{name}: {said}" if said else f"{name} is {state}")
    return Waiting("QuotaReserved", "quota reserved; waiting for Kueue to admit it")


class KueueView:
    """Kueue's LocalQueues and Workloads, once (and while) its API is served.

    ``tell``: called with each key (``<namespace>/<name>`` of an Instance, ``<namespace>``
    for every Instance there) whose Pod's queue or wait may have changed.
    """

    def __init__(self, client: KubeClient, tell: Callable[[str], None]) -> None:
        self.client = client
        self.tell = tell
        self.served: bool | None = None
        """``None`` until the first look; ``False`` while Kueue's API is not served."""
        self.local_queues: Informer[dict[str, Any]] = Informer(
            client, LOCAL_QUEUES.path(), decode=held_local_queue
        )
        self.workloads: Informer[dict[str, Any]] = Informer(
            client,
            WORKLOADS.path(),
            decode=held_workload,
            indexers={"pod": _pod_index},
        )
        self.local_queues.add_handler(lambda key: self.tell(key[0]))
        self.workloads.add_handler(self._workload_changed)
        self._said: set[tuple[str, str]] = set()

    async def _probe(self) -> bool | None:
        """Whether Kueue's API is served now (``None``: the answer was no answer)."""
        try:
            found = await self.client.get(DISCOVERY)
        except NotFound:
            return False
        except ApiError as exc:
            log.info("looking for Kueue (%s): %s", DISCOVERY, exc)
            return None
        except KubeError as exc:
            log.info("looking for Kueue (%s): %s", DISCOVERY, exc)
            return None
        names = {r.get("name") for r in found.get("resources") or () if isinstance(r, dict)}
        return {"localqueues", "workloads"} <= names

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Look for Kueue until it is served, then follow its queues and Workloads. Never returns.

        Started after the first look, answered or not; while :attr:`served` is still ``None``
        (no answer yet) the controller creates no Pod, since it cannot tell whether to queue.
        """
        started = False
        while True:
            served = await self._probe()
            if served:
                break
            if served is False and self.served is not False:
                self.served = False
                log.warning(
                    "Kueue does not serve %s/%s here: Instances run without its queue "
                    "(their Pods get no %s label, so no quota and no admission check holds "
                    "them); looking again every %.0fs",
                    KUEUE_GROUP, KUEUE_VERSION, contract.KUEUE_QUEUE_LABEL, PROBE_PERIOD,
                )  # fmt: skip
                self.tell("")  # every Instance waiting for the answer
            if not started:
                started = True
                task_status.started()
            await trio.sleep(PROBE_PERIOD if served is False else RETRY_PERIOD)
        async with trio.open_nursery() as nursery:
            await nursery.start(self.local_queues.run)
            await nursery.start(self.workloads.run)
            if self.served is False:
                log.info("Kueue now serves %s/%s: Instances' Pods wait in their queues",
                         KUEUE_GROUP, KUEUE_VERSION)  # fmt: skip
            self.served = True
            self.tell("")  # every Instance: where its Pod queues has changed
            if not started:
                task_status.started()

    def serves(self, namespace: str, name: str) -> bool:
        """Whether Kueue serves the LocalQueue ``name`` in ``namespace`` now."""
        return bool(self.served and name and self.local_queues.get(namespace, name) is not None)

    def unqueued(self, namespace: str, name: str, instance: str) -> None:
        """Say, once per queue and namespace, that an Instance there runs without its queue."""
        if not self.served or (namespace, name) in self._said:
            return
        self._said.add((namespace, name))
        log.warning(
            "Kueue serves no LocalQueue %s in namespace %s: Instance %s/%s (and any other of "
            "that type there) runs without its queue",
            name, namespace, namespace, instance,
        )  # fmt: skip

    def workload(self, pod_uid: str) -> Mapping[str, Any] | None:
        """The Workload Kueue keeps for the Pod of UID ``pod_uid`` (not a predecessor's)."""
        found = self.workloads.by_index("pod", pod_uid) if pod_uid else []
        return found[0] if found else None

    def _workload_changed(self, key: Key) -> None:
        held = self.workloads.get(*key)
        pod = (held or {}).get("pod")
        if pod:
            self.tell(f"{key[0]}/{pod}")  # an Instance's Pod is named after it
        else:
            self.tell(key[0])  # gone (its Pod no longer known here): the whole namespace


def _pod_index(held: dict[str, Any]) -> Iterable[str]:
    return (held["podUID"],) if held.get("podUID") else ()


__all__ = ["PROBE_PERIOD", "KueueView", "Waiting", "held_local_queue", "held_workload", "waiting"]
