"""The ``gpustack-node-devices`` AdmissionCheck controller: Kueue's per-card gate.

Kueue admits on quota, a scalar per pool that cannot see how the free room is spread over cards
(``shared/reference/instancetypes.md``, "The per-accelerator admission check"). A ClusterQueue
naming this check makes every Workload that reserved quota in it wait for this controller's
answer in its ``status.admissionChecks``: ``Ready`` when one node's cards can hold each PodSet
(:func:`gpustack_core.fit.admit`, on the ``Devices`` ledgers read **uncached** for each answer, so
a card freed a moment ago counts and a card granted a moment ago does not), otherwise
``Retry`` with the reason — Kueue then gives the quota back and queues the Workload again after
``requeueAfterSeconds``. It never answers ``Rejected``, never preempts, and leaves an evicted
Workload alone (Kueue is resetting it). Each distinct Retry reason is also posted as a Warning
Event on the Workload: Kueue resets the entry's message to ``Pending`` when it evicts, and the
reason must stay readable (``kubectl describe workload``).

The worker writes the AdmissionCheck itself (``spec.controllerName: gpustack.ai/node-devices``)
and sets its ``Active`` condition once it leads: until then Kueue holds every ClusterQueue that
names it inactive. Only the holder of the Lease answers; the informers run on every replica so
a new leader starts warm. Without Kueue's API in the cluster the controller says so once and
looks again every minute; the fit labels (:mod:`.fitlabels`) are published regardless.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import trio

from gpustack_core import contract
from gpustack_core.decoding import ContractError
from gpustack_core.fit import Verdict, admit
from gpustack_core.kueuecheck import (
    RETRY,
    active_patch,
    admission_check,
    answer_patch,
    ours,
    podsets,
    to_answer,
    workload_from_object,
)
from gpustack_core.requests import RequestError
from gpustack_core.views import NodeDevices
from gpustack_kube.client import AlreadyExists, ApiError, Conflict, KubeClient, KubeError, NotFound
from gpustack_kube.informer import Informer, Key
from gpustack_kube.leader import ElectionConfig, LeaderElector
from gpustack_kube.paths import (
    ADMISSION_CHECKS,
    DEVICES,
    EVENTS,
    KUEUE_GROUP,
    KUEUE_VERSION,
    RESOURCE_FLAVORS,
    WORKLOADS,
    join,
)
from gpustack_kube.workqueue import WorkQueue
from gpustack_worker.held import node_informer
from gpustack_worker.instancetypes.observed import node_devices
from gpustack_worker.keyworkers import KeyWorkers

log = logging.getLogger("gpustack.worker.admissioncheck")

COMPONENT: Final = "gpustack-node-devices"
CHECK_KEY: Final = "@admissioncheck"
"""The work-queue key of the AdmissionCheck object itself (no Workload key has an ``@``)."""
KUEUE_RECHECK: Final = 60.0
"""Seconds between looks for Kueue's API while it is not served."""
MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "gpustack-operator"}
RETRY_REASON: Final = "NodeDevicesRetry"


@dataclass(frozen=True)
class CheckOptions:
    """Where the controller's Lease lives and how it elects a leader."""

    system_namespace: str = contract.SYSTEM_NAMESPACE
    identity: str = "worker"
    lease_name: str = "gpustack-operator-node-devices-check"
    workers: int = 2
    leader_election: bool = True
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()}


class NodeDevicesCheck:
    """Answers the check's Workloads; run :meth:`run` in the worker's nursery."""

    def __init__(
        self,
        client: KubeClient,
        options: CheckOptions | None = None,
        *,
        nodes: Informer[dict[str, Any]] | None = None,
    ) -> None:
        """Informers over ``client``; ``nodes`` a Node informer the caller runs and shares."""
        self.client = client
        self.options = options or CheckOptions()
        self.queue = WorkQueue()
        self.checks: Informer[dict[str, Any]] = Informer(client, ADMISSION_CHECKS.path())
        self.workloads: Informer[dict[str, Any]] = Informer(client, WORKLOADS.path())
        self.flavors: Informer[dict[str, Any]] = Informer(client, RESOURCE_FLAVORS.path())
        self._owns_nodes = nodes is None
        self.nodes: Informer[dict[str, Any]] = nodes or node_informer(client)
        self.elector = LeaderElector(
            client,
            ElectionConfig(
                namespace=self.options.system_namespace,
                name=self.options.lease_name,
                identity=self.options.identity,
                lease_duration=self.options.lease_duration,
                renew_deadline=self.options.renew_deadline,
                retry_period=self.options.retry_period,
            ),
        )
        # A Conflict: Kueue wrote the Workload meanwhile, so it is read again at once.
        self.workers = KeyWorkers(self.queue, self.reconcile, log, again_at_once=(Conflict,))
        self.answers: list[tuple[str, str, str]] = []
        """(Workload key, state, message) of every answer written; for tests and debugging."""
        self._said: dict[str, str] = {}
        """``namespace/name`` → the last Retry reason posted as an Event (said once)."""
        self.kueue_served = trio.Event()
        self._wire()

    # -- wiring ---------------------------------------------------------------------------

    def _wire(self) -> None:
        self.workloads.add_handler(self._workload_changed)
        self.checks.add_handler(lambda _key: self._everything_changed(check=True))
        for informer in (self.flavors, self.nodes):
            informer.add_handler(lambda _key: self._everything_changed())

    def _workload_changed(self, key: Key) -> None:
        if self.workloads.get(*key) is None:
            self._said.pop(f"{key[0]}/{key[1]}", None)
            return
        self.queue.add(f"{key[0]}/{key[1]}")

    def _everything_changed(self, *, check: bool = False) -> None:
        """A check, flavor or node moved: every Workload waiting on the check is looked at again.

        A ledger is not followed: an entry is answered as soon as it is ``Pending``, from the
        ledgers read then, and Kueue makes it ``Pending`` again (a Workload change) when it
        queues a Workload anew after a ``Retry``.
        """
        if check:
            self.queue.add(CHECK_KEY)
        names = self.check_names()
        for workload in self.workloads.objects():
            entries = (workload.get("status") or {}).get("admissionChecks") or ()
            if any(isinstance(e, Mapping) and e.get("name") in names for e in entries):
                meta = workload.get("metadata") or {}
                self.queue.add(f"{meta.get('namespace', '')}/{meta.get('name', '')}")

    def check_names(self) -> frozenset[str]:
        """The AdmissionChecks that name this controller (the worker's own, and any other)."""
        return frozenset(str(c["metadata"]["name"]) for c in self.checks.objects() if ours(c))

    # -- running --------------------------------------------------------------------------

    def _informers(self) -> Iterable[Informer[dict[str, Any]]]:
        nodes = (self.nodes,) if self._owns_nodes else ()
        return (self.checks, self.flavors, *nodes, self.workloads)

    async def run(self) -> None:
        """Wait for Kueue's API; then informers always, the workers only while leading."""
        await self._wait_for_kueue()
        async with trio.open_nursery() as nursery:
            for informer in self._informers():
                nursery.start_soon(informer.run)
            for informer in (*self._informers(), self.nodes):
                while not informer.synced:
                    await informer.wait_changed()
            if self.options.leader_election:
                await self.elector.run(self._work)
            else:
                await self._work()

    async def _wait_for_kueue(self) -> None:
        said = False
        while True:
            try:
                await self.client.get(join("apis", KUEUE_GROUP, KUEUE_VERSION))
            except NotFound:
                if not said:
                    log.warning("Kueue's API (%s/%s) is not served: the gpustack-node-devices "
                                "check waits for it", KUEUE_GROUP, KUEUE_VERSION)  # fmt: skip
                    said = True
            except KubeError as exc:
                log.info("looking for Kueue's API: %s", exc)
            else:
                self.kueue_served.set()
                return
            await trio.sleep(KUEUE_RECHECK)

    async def drain(self, timeout: float = 10.0) -> None:
        """Stop taking keys and wait (at most ``timeout``) for the reconciles in flight."""
        await self.workers.drain(timeout)

    async def _work(self) -> None:
        """Write the check and look at every Workload on taking the lead, then what changes."""
        self.queue.add(CHECK_KEY)
        self._everything_changed()
        await self.workers.run(self.options.workers)

    # -- reconcile ------------------------------------------------------------------------

    async def reconcile(self, key: str) -> None:
        """Bring the AdmissionCheck object, or one Workload's entries, to what they should say."""
        if key == CHECK_KEY:
            await self._reconcile_check()
            return
        namespace, name = key.split("/", 1)
        obj = self.workloads.get(namespace, name)
        if obj is None:
            return
        workload = workload_from_object(obj)
        waiting = to_answer(workload, self.check_names())
        if not waiting:
            return
        verdict = await self.decide(obj)
        for check in waiting:
            patch = answer_patch(obj, check, verdict, _now())
            if patch is None:
                continue
            await self.client.patch(WORKLOADS.path(namespace, name, "status"), patch)
            state = RETRY if not verdict.ready else "Ready"
            self.answers.append((key, state, verdict.message))
            log.info("Workload %s: %s %s: %s", key, check, state, verdict.message)
            if not verdict.ready:
                await self._tell(obj, verdict.message)

    async def decide(self, obj: Mapping[str, Any]) -> Verdict:
        """The verdict on one Workload, from the ledgers as they are now."""
        workload = workload_from_object(obj)
        flavors = {
            str(f["metadata"]["name"]): {
                str(k): str(v) for k, v in ((f.get("spec") or {}).get("nodeLabels") or {}).items()
            }
            for f in self.flavors.objects()
        }
        nodes = {str(n["metadata"]["name"]): _labels(n) for n in self.nodes.objects()}
        try:
            sets = podsets(workload, flavors, nodes)
        except RequestError as exc:
            return Verdict(False, f"a PodSet's accelerator request does not parse: {exc}")
        return admit(await self.read_devices(), sets)

    async def read_devices(self) -> list[NodeDevices]:
        """Every ``Devices`` object, read now (not from a cache).

        One that does not decode is left out, so its node offers nothing.
        """
        listed = await self.client.get(DEVICES.path())
        read: list[NodeDevices] = []
        for item in listed.get("items") or ():
            try:
                read.append(node_devices(item))
            except ContractError as exc:
                log.warning("the node-devices check skips a node: %s", exc)
        return read

    async def _reconcile_check(self) -> None:
        """Create the AdmissionCheck if it is missing, and say it is Active."""
        name = contract.NODE_DEVICES_CHECK
        found = self.checks.get("", name)
        if found is None:
            try:
                found = await self.client.create(
                    ADMISSION_CHECKS.path(), admission_check(MANAGED_BY)
                )
                log.info("created the AdmissionCheck %s", name)
            except AlreadyExists:
                return  # another writer was first: the informer brings it, and this key again
        if not ours(found):
            log.warning("the AdmissionCheck %s names controller %r, not %s: left as it is",
                        name, (found.get("spec") or {}).get("controllerName"),
                        contract.NODE_DEVICES_CONTROLLER)  # fmt: skip
        for check in [found, *(c for c in self.checks.objects() if ours(c))]:
            patch = active_patch(check, _now())
            if patch is None or not ours(check):
                continue
            path = ADMISSION_CHECKS.path(name=str(check["metadata"]["name"]), subresource="status")
            await self.client.patch(path, patch)
            log.info("AdmissionCheck %s is Active", check["metadata"]["name"])

    async def _tell(self, obj: Mapping[str, Any], message: str) -> None:
        """Post the Retry reason as a Warning Event on the Workload, once per reason."""
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if self._said.get(key) == message:
            return
        self._said[key] = message
        now = _now()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "generateName": f"{meta.get('name')}.",
                "namespace": meta.get("namespace"),
            },
            "involvedObject": {
                "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
                "kind": "Workload",
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
            },
            "reason": RETRY_REASON,
            "message": message[:1024],
            "type": "Warning",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.options.identity,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self.client.create(EVENTS.path(str(meta.get("namespace"))), body)
        except (ApiError, KubeError) as exc:
            log.info("event for Workload %s not recorded: %s", key, exc)
