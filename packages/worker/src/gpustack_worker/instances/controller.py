"""The Instance controller: every Instance gets its Pod, its NodePort Service and its status.

A controller-runtime reconciler in trio: informers (Instances, their Pods and Services, the
isolation policies, InstanceTypes, Nodes, the operator's Settings ConfigMap) tell a rate-limited
work queue which keys changed; workers take a key, read everything from the caches, compare
with what :mod:`render` and :mod:`status` say should exist, and write only the difference. The
reconcile is level-triggered and idempotent — it never depends on which event woke it — so a
restart, a relist or a duplicate key changes nothing that is already right. Only the holder of
the ``coordination.k8s.io`` Lease reconciles (two worker replicas never fight over a Pod); the
informers run on every replica so a new leader starts warm.

Two kinds of key: ``<namespace>/<name>`` (one Instance) and ``<namespace>`` alone (that
namespace's isolation policy).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final, Literal

import msgspec
import trio

from gpustack_core import contract
from gpustack_core.decoding import ContractError
from gpustack_core.derive import identity_of, members
from gpustack_core.fit import fitting, pod_asks
from gpustack_core.instance import Condition, Instance, InstanceStatus, instance_from_object
from gpustack_core.instancetype import InstanceType, instancetype_from_object
from gpustack_core.manufacturers import runtime_class
from gpustack_core.pools import (
    flavors,
    node_labels_of,
    node_profile_of,
    pinned_flavor_labels,
    steered,
)
from gpustack_core.requests import RequestError
from gpustack_core.resourceconfig import names_with
from gpustack_core.settings import Settings
from gpustack_kube.client import AlreadyExists, ApiError, Conflict, KubeClient, KubeError, NotFound
from gpustack_kube.informer import Informer, Key
from gpustack_kube.leader import ElectionConfig, LeaderElector
from gpustack_kube.paths import (
    DEVICES,
    EVENTS,
    INSTANCE_TYPES,
    INSTANCES,
    NETWORK_POLICIES,
    PODS,
    SERVICES,
)
from gpustack_kube.workqueue import WorkQueue
from gpustack_worker.held import TEMPLATE_HASH, held_pod, node_informer
from gpustack_worker.instances.kueue import KueueView, Waiting, waiting
from gpustack_worker.instances.render import (
    HOSTNAME_LABEL,
    INSTANCES_TYPE,
    ISOLATION_POLICY,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    QUEUE_LABEL,
    STEERED_ANNOTATION,
    TYPE_LABEL,
    Overcommit,
    PodInputs,
    RenderError,
    belongs_to,
    render_isolation_policy,
    render_pod,
    render_service,
)
from gpustack_worker.instances.status import derive_status
from gpustack_worker.instancetypes.observed import node_devices
from gpustack_worker.keyworkers import KeyWorkers, write_log
from gpustack_worker.settings import OperatorSettings

log = logging.getLogger("gpustack.worker.instances")

COMPONENT: Final = "gpustack-operator-worker"
PREDECESSOR_RECHECK: Final = 1.0
"""Seconds before looking again at a Pod a previous incarnation still holds the name of."""
SETTINGS_WAIT: Final = 30.0
"""Seconds the workers wait for the Settings' first read before reconciling on the defaults."""
POD_CREATED: Final = "PodCreated"
SERVICE_CREATED: Final = "ServiceCreated"
"""The conditions that say whether the API server took the Pod and the Service the controller
rendered: ``False`` with the server's reason and message when it refused one."""
ADMITTED: Final = "Admitted"
"""Whether Kueue admitted the Pod from its queue: ``False`` with why it waits (``Pending`` on
quota, an admission check's state), ``True`` once admitted; absent when the Pod is not queued."""
KUEUE_UNDECIDED_RECHECK: Final = 2.0
"""Seconds before looking again at a queued type's Instance while Kueue's presence is unknown."""
LOCAL_QUEUE_GRACE: Final = 10.0
"""Seconds a new Pod waits for its type's LocalQueue where Kueue runs, before it runs without."""


@dataclass(frozen=True)
class Refusal:
    """The API server refused an object the controller rendered (a webhook, a quota, …).

    What it says must reach the user on the Instance — its ``phaseMessage``, a condition and
    an Event — not only the worker's log.
    """

    condition: str
    reason: str
    """CamelCase: the ``Status`` reason (``Forbidden``, ``Invalid``, ``InternalError``)."""
    message: str


def refusal(condition: str, what: str, exc: ApiError) -> Refusal:
    """A :class:`Refusal` from the API server's answer, its message kept whole."""
    reason = "".join(c for c in (exc.reason or "") if c.isalnum()) or f"Code{exc.status}"
    if not reason[0].isalpha():
        reason = f"Code{reason}"
    text = " ".join((exc.message or exc.reason or str(exc.status)).split())
    return Refusal(condition, reason, f"creating {what} was refused: {text}")


@dataclass(frozen=True)
class ControllerOptions:
    """Where the controller's own objects live and how it elects a leader."""

    system_namespace: str = contract.SYSTEM_NAMESPACE
    identity: str = "worker"
    """This replica's name in the Lease (the Pod name)."""
    lease_name: str = "gpustack-operator-instance-controller"
    workers: int = 2
    leader_election: bool = True
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    resource_bases: Mapping[str, str] = field(default_factory=dict)
    """Manufacturer -> the extended-resource base the cluster moved ours to
    (``GPUSTACK_<MFR>_ACCELERATABLE_RESOURCE_NAME``, ``gpustack_core.resourceconfig``): an
    Instance's Pod asks for the names the device plugins register."""


def _template_hash(pod: Mapping[str, Any]) -> str:
    """The digest a rendered Pod is compared by: a differing one replaces the Pod.

    Kueue's queue label is left out: whether a LocalQueue serves the Pod is decided when it is
    created, and a queue appearing later (Kueue installed, a namespace's queue written after
    the Instance) must not restart Instances that already run; their next start queues them.
    So is a pinned Pod's node affinity: the pinned node's flavor labels steer Kueue
    (``PodInputs.flavors``) and follow the node's labels, which an administrator may
    change (§2's managed flip) without that being a change to the Instance; the pin itself,
    the hostname ``nodeSelector``, is kept.
    """
    labels = {k: v for k, v in (pod["metadata"].get("labels") or {}).items() if k != QUEUE_LABEL}
    spec = {k: v for k, v in pod["spec"].items() if k != "affinity"}
    canonical = json.dumps({"labels": labels, "spec": spec}, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _owner_uid(obj: Mapping[str, Any]) -> str | None:
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Instance":
            return str(ref.get("uid") or "")
    return None


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return obj.get("metadata", {}).get("labels") or {}


def _status_patch(status: InstanceStatus) -> dict[str, Any]:
    """A merge patch setting ``status`` to exactly this: absent fields become ``null``."""
    body: dict[str, Any] = msgspec.to_builtins(status)
    for name in (f.encode_name for f in msgspec.structs.fields(InstanceStatus)):
        body.setdefault(name, None)
    return {"status": body}


def managed_here(instance: Instance) -> bool:
    """Whether this controller reconciles ``instance`` (``worker.gpustack.ai/managed-by``).

    Absent, empty or naming this controller: yes. Any other manager: the worker renders no Pod,
    writes no status and collects nothing of it, as a Job controller does for a Job whose
    ``spec.managedBy`` names someone else.
    """
    manager = instance.metadata.labels.get(contract.INSTANCE_MANAGED_BY_LABEL, "")
    return manager in ("", contract.INSTANCE_CONTROLLER)


class InstanceController:
    """Reconciles Instances; run :meth:`run` in the worker's nursery."""

    def __init__(
        self,
        client: KubeClient,
        options: ControllerOptions | None = None,
        *,
        nodes: Informer[dict[str, Any]] | None = None,
        settings: OperatorSettings | None = None,
    ) -> None:
        """Informers over ``client``.

        ``nodes``: a Node informer the caller runs and shares (``held_node`` objects);
        without one the controller runs its own. ``settings``: the operator Settings the
        caller runs and shares; without them the controller follows (and seeds) its own.
        """
        self.client = client
        self.options = options or ControllerOptions()
        self.queue = WorkQueue()
        self.instances: Informer[Instance] = Informer(
            client,
            INSTANCES.path(),
            decode=instance_from_object,
            indexers={
                "namespace": lambda i: (i.metadata.namespace,),
                "type": lambda i: (i.spec.type,) if i.spec.type else (),
            },
        )
        self.pods: Informer[dict[str, Any]] = Informer(
            client,
            PODS.path(),
            decode=held_pod,  # what a reconcile reads of a Pod, not its whole spec and status
            label_selector=contract.PART_OF_LABEL,
            indexers={"node": lambda p: (p.get("spec", {}).get("nodeName") or "",)},
        )
        self.services: Informer[dict[str, Any]] = Informer(
            client, SERVICES.path(), label_selector=f"{TYPE_LABEL}={INSTANCES_TYPE}"
        )
        self.policies: Informer[dict[str, Any]] = Informer(
            client, NETWORK_POLICIES.path(), field_selector=f"metadata.name={ISOLATION_POLICY}"
        )
        self.types: Informer[InstanceType] = Informer(
            client, INSTANCE_TYPES.path(), decode=instancetype_from_object
        )
        self._owns_nodes = nodes is None
        self.nodes: Informer[dict[str, Any]] = nodes or node_informer(client)
        self._owns_settings = settings is None
        self.operator_settings = settings or OperatorSettings(client, self.options.system_namespace)
        self.kueue = KueueView(client, self._kueue_changed)
        self._queue_waits: dict[str, float] = {}
        """Instance UID → when its new Pod began waiting for its LocalQueue."""
        self.runtime_classes: set[str] = set()
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
        self.reconciles = 0
        self.workers = KeyWorkers(self.queue, self.reconcile, log, after=self.flush_events)
        self.writes = write_log()
        """(verb, what) of the latest writes made; for tests and the debug state."""
        self._told: dict[str, str] = {}
        """What was last said of an Instance (``ns/name/uid`` → Event) or a namespace's policy
        (``policy:ns``), so a repeated reconcile says it once; an entry goes with its object."""
        self._repeats: dict[str, Told] = {}
        self._pending_events: list[Told] = []
        self._wire()

    # -- wiring ---------------------------------------------------------------------------

    def _wire(self) -> None:
        self.instances.add_handler(self._instance_changed)
        for informer in (self.pods, self.services):
            informer.add_handler(self._owned_changed)
        self.policies.add_handler(lambda key: self.queue.add(key[0]))
        self.types.add_handler(self._type_changed)
        self.nodes.add_handler(self._node_changed)
        self.operator_settings.add_handler(lambda _settings: self._settings_changed())

    def _instance_changed(self, key: Key) -> None:
        self.queue.add(f"{key[0]}/{key[1]}")
        self.queue.add(key[0])

    def _owned_changed(self, key: Key) -> None:
        self.queue.add(f"{key[0]}/{key[1]}")  # a Pod and a Service are named after the Instance

    def _type_changed(self, key: Key) -> None:
        for instance in self.instances.by_index("type", key[1]):
            self.queue.add(f"{instance.metadata.namespace}/{instance.metadata.name}")

    def _node_changed(self, key: Key) -> None:
        for pod in self.pods.by_index("node", key[1]):
            meta = pod.get("metadata", {})
            self.queue.add(f"{meta.get('namespace', '')}/{meta.get('name', '')}")

    @property
    def settings(self) -> Settings:
        """The operator Settings in force now."""
        return self.operator_settings.current

    def _kueue_changed(self, key: str) -> None:
        """Kueue told of ``key``: one Instance, a namespace's (a LocalQueue), or all (``""``)."""
        if "/" in key:
            self.queue.add(key)
            return
        found = self.instances.by_index("namespace", key) if key else self.instances.objects()
        for instance in found:
            self.queue.add(f"{instance.metadata.namespace}/{instance.metadata.name}")

    def _settings_changed(self) -> None:
        """A Setting changed: every Instance and isolation policy is looked at again."""
        for instance in self.instances.objects():
            self._instance_changed((instance.metadata.namespace, instance.metadata.name))
        for namespace in self._policy_namespaces():
            self.queue.add(namespace)

    def _policy_namespaces(self) -> set[str]:
        return {p.get("metadata", {}).get("namespace", "") for p in self.policies.objects()}

    # -- running --------------------------------------------------------------------------

    async def run(self) -> None:
        """Informers always; the workers only while this replica leads."""
        async with trio.open_nursery() as nursery:
            if self._owns_settings:
                nursery.start_soon(self.operator_settings.run)
            for informer in self._informers():
                await nursery.start(informer.run)
            await nursery.start(self.kueue.run)
            while not self.nodes.synced:  # a shared one, run by its owner
                await self.nodes.wait_changed()
            await self._read_runtime_classes()
            with trio.move_on_after(SETTINGS_WAIT) as waited:
                await self.operator_settings.read.wait()
            if waited.cancelled_caught:
                log.warning("the Settings were not read in %.0fs: reconciling on the defaults "
                            "until they are", SETTINGS_WAIT)  # fmt: skip
            if self.options.leader_election:
                await self.elector.run(self._work)
            else:
                await self._work()

    async def drain(self, timeout: float = 10.0) -> None:
        """Stop taking keys and wait (at most ``timeout``) for the reconciles in flight."""
        await self.workers.drain(timeout)

    def _informers(self) -> Iterable[Informer[Any]]:
        nodes = (self.nodes,) if self._owns_nodes else ()
        return (
            self.types,
            *nodes,
            self.services,
            self.policies,
            self.pods,
            self.instances,
        )

    async def _read_runtime_classes(self) -> None:
        try:
            listed = await self.client.get("/apis/node.k8s.io/v1/runtimeclasses")
        except KubeError as exc:
            log.info("no RuntimeClasses readable (%s): Pods get none", exc)
            return
        self.runtime_classes = {
            str(item.get("metadata", {}).get("name")) for item in listed.get("items") or []
        }

    async def _work(self) -> None:
        """Reconcile every key once on taking the lead, then whatever the informers tell."""
        for instance in self.instances.objects():
            self._instance_changed((instance.metadata.namespace, instance.metadata.name))
        for namespace in self._policy_namespaces():
            self.queue.add(namespace)
        await self.workers.run(self.options.workers)

    # -- reconcile ------------------------------------------------------------------------

    async def reconcile(self, key: str) -> float | None:
        """Make the cluster match ``key``'s desired state; seconds until a recheck, if one."""
        self.reconciles += 1
        if "/" not in key:
            await self._reconcile_isolation(key)
            return None
        namespace, name = key.split("/", 1)
        instance = self.instances.get(namespace, name)
        if instance is None:
            self._forget(f"{namespace}/{name}/")
            return None  # deleted: its Pod and Service go with it (owner references)
        return await self._reconcile_instance(instance)

    async def _reconcile_instance(self, instance: Instance) -> float | None:
        meta = instance.metadata
        if not managed_here(instance):
            return None  # another manager's (a scenario's pre-rendered Instance): hands off
        pod = self.pods.get(meta.namespace, meta.name)
        service = self.services.get(meta.namespace, meta.name)
        if meta.deletion_timestamp:
            await self._write_status(instance, pod, service)
            return None
        inputs, unavailable = self._inputs(instance)
        if unavailable is not None and not instance.spec.stop:
            await self._stop(instance, unavailable)
            return None
        queued = self._queued(instance, inputs, has_pod=belongs_to(instance, pod))
        if isinstance(queued, float):  # queue or not: not known yet, so no Pod yet
            await self._write_status(instance, pod, service)
            return queued
        inputs = queued
        refused: list[Refusal] = []
        if not instance.spec.stop:
            # Ports edited while stopped apply when the Instance starts again (gpu-instances.md):
            # until then the Service and every node port a user connected to stay as they are.
            try:
                await self._reconcile_service(instance, service)
            except ApiError as exc:
                refused.append(refusal(SERVICE_CREATED, f"Service {meta.name}", exc))
        recheck = None
        if instance.spec.stop:
            await self._delete_pod(instance, pod, "Stopping", "spec.stop is set")
        else:
            try:
                recheck = await self._reconcile_pod(instance, pod, inputs)
            except RenderError as exc:
                refused.append(Refusal(POD_CREATED, "InvalidSpec", str(exc)))
            except ApiError as exc:
                refused.append(refusal(POD_CREATED, f"Pod {meta.name}", exc))
        for said in refused:
            reason = "InvalidSpec" if said.reason == "InvalidSpec" else "FailedCreate"
            self._event(instance, "Warning", reason, said.message, repeat=reason == "FailedCreate")
        await self._write_status(instance, pod, self.services.get(meta.namespace, meta.name),
                                 refused=refused)  # fmt: skip
        if any(r.reason != "InvalidSpec" for r in refused):
            # The server may take it later (a quota freed, a webhook fixed): try again, backing
            # off per key, as for any failed write.
            raise RefusedError(refused[0].message)
        return recheck

    def _inputs(self, instance: Instance) -> tuple[PodInputs, str | None]:
        """What rendering needs beyond the Instance, and why it may not run (its type)."""
        manufacturer = queue = None
        pool: InstanceType | None = None
        if instance.spec.type:
            found = self.types.get("", instance.spec.type)
            if found is None:
                return PodInputs(), f"InstanceType {instance.spec.type} does not exist"
            why = found.unavailable()
            if why is not None:
                return PodInputs(), why
            manufacturer = found.spec.manufacturer or None
            queue = found.queue or None  # where Kueue serves it: decided by the caller
            pool = found
        hostname = None
        pinned: tuple[dict[str, str], ...] = ()
        if instance.spec.node_name:
            node = self.nodes.get("", instance.spec.node_name)
            hostname = _labels(node or {}).get(HOSTNAME_LABEL)
            if node is not None and pool is not None:
                spec = pool.spec
                accelerator = spec.accelerator_group if spec.acceleratable else None
                labels = pinned_flavor_labels(
                    node, accelerator, mixed_on_node=self.settings.instance_type_mixed_on_node
                )
                pinned = (labels,) if labels else ()
        # The manufacturer's row names its RuntimeClass; used only when the cluster serves one
        # by that name (looked up, never assumed).
        runtime = runtime_class(manufacturer or "")
        return (
            PodInputs(
                manufacturer=manufacturer,
                resource_base=self.options.resource_bases.get(manufacturer or ""),
                queue=queue,
                hostname=hostname,
                flavors=pinned,
                runtime_class=runtime if runtime in self.runtime_classes else None,
                sshd_image=self.settings.instance_ssh_server_image,
                overcommit=Overcommit(
                    self.settings.instance_cpu_overcommit, self.settings.instance_memory_overcommit
                ),
            ),
            None,
        )

    def _queued(self, instance: Instance, inputs: PodInputs, *, has_pod: bool) -> PodInputs | float:
        """``inputs`` with the queue only where Kueue serves it, or seconds to wait first.

        While Kueue's presence is unknown, no Pod (its first look has not answered). Where Kueue
        runs but the type's LocalQueue is not in the namespace yet, a new Pod waits up to
        :data:`LOCAL_QUEUE_GRACE` for it — the InstanceType controller writes it moments after
        the type or the namespace appears, and a Pod created meanwhile would run outside the
        quota and the admission check — then runs unqueued, said once. A stopped Instance, or
        one whose Pod exists (the label does not restart it), is not held.
        """
        if instance.spec.stop or inputs.queue is None:
            return inputs
        if self.kueue.served is None:
            return KUEUE_UNDECIDED_RECHECK
        meta = instance.metadata
        if self.kueue.serves(meta.namespace, inputs.queue):
            self._queue_waits.pop(meta.uid, None)
            return inputs
        if self.kueue.served and not has_pod:
            now = trio.current_time()
            if len(self._queue_waits) > 4096:
                self._queue_waits.clear()
            waited = now - self._queue_waits.setdefault(meta.uid, now)
            if waited < LOCAL_QUEUE_GRACE:
                return LOCAL_QUEUE_GRACE - waited  # the queue's arrival wakes it sooner
        self._queue_waits.pop(meta.uid, None)
        self.kueue.unqueued(meta.namespace, inputs.queue, meta.name)
        return replace(inputs, queue=None)

    async def _stop(self, instance: Instance, why: str) -> None:
        """The reference's answer to a type that is gone, deleting or inactive: stop, say why.

        ``spec.stop: true`` is the operator's write (walkthrough §4: "a drained Instance
        carries operator-set spec.stop: true"); the Instance then goes ``Stopped`` as any
        stopped one does, and re-pointing ``spec.type`` and clearing the stop starts it again.
        The patch is conditional on the version decided on: a user who re-pointed the type
        meanwhile is not stopped for the type they left (409: looked at again).
        """
        meta = instance.metadata
        path = INSTANCES.path(meta.namespace, meta.name)
        body: dict[str, Any] = {"spec": {"stop": True}}
        if meta.resource_version:
            body["metadata"] = {"resourceVersion": meta.resource_version}
        try:
            await self.client.patch(path, body)
        except Conflict:
            self.queue.add(f"{meta.namespace}/{meta.name}")
            return
        except NotFound:
            return
        self.writes.append(("patch", f"instance {path} stop"))
        self._event(instance, "Warning", "TypeUnavailable", f"{why}: stopping the Instance")

    async def _steered(self, instance: Instance, inputs: PodInputs) -> PodInputs:
        """``inputs`` naming the type's flavors that can hold the new Pod now, when some cannot.

        Kueue assigns the first flavor with quota; one whose nodes cannot hold the Pod (cards
        fragmented, partitioned, held outside Kueue) gets the node-devices check's Retry and is
        assigned again after each requeue, while another flavor has room. So a queued Pod on an
        accelerated type of several flavors is created with a node affinity on the flavors
        that fit it now (:func:`gpustack_core.pools.steered`), read from the ``Devices``
        ledgers once, at creation. Anything unreadable leaves the Pod unsteered (the check
        still gates it): never a reason not to create it.
        """
        found = self.types.get("", instance.spec.type) if instance.spec.type else None
        if found is None or not found.spec.acceleratable:
            return inputs
        try:
            asks = pod_asks(render_pod(instance, inputs), names_with(self.options.resource_bases))
        except (RenderError, RequestError):
            return inputs
        profiles = [p for n in self.nodes.objects() if (p := node_profile_of(n).profile)]
        mixed = self.settings.instance_type_mixed_on_node
        pool = members(identity_of(found.spec), flavors(profiles, mixed_on_node=mixed))
        if not asks or len(pool) < 2:
            return inputs
        try:
            listed = await self.client.get(DEVICES.path())
        except KubeError as exc:
            meta = instance.metadata
            log.info("Instance %s/%s unsteered: %s", meta.namespace, meta.name, exc)
            return inputs
        devices = []
        for item in listed.get("items") or ():
            try:
                devices.append(node_devices(item))
            except (ContractError, KeyError, TypeError):
                continue  # the node offers nothing here, as in the views
        chosen = steered(pool, fitting(devices, asks))
        return replace(
            inputs,
            flavors=tuple(node_labels_of(f) for f in chosen),
            steered_to=tuple(f.name for f in chosen),
        )

    async def _reconcile_pod(
        self, instance: Instance, pod: dict[str, Any] | None, inputs: PodInputs
    ) -> float | None:
        meta = instance.metadata
        if pod is None and inputs.queue and not inputs.flavors:
            inputs = await self._steered(instance, inputs)
        desired = render_pod(instance, inputs)
        digest = _template_hash(desired)
        desired["metadata"]["annotations"] = {TEMPLATE_HASH: digest}
        if inputs.steered_to:
            desired["metadata"]["annotations"][STEERED_ANNOTATION] = ",".join(inputs.steered_to)
        if pod is not None:
            if not belongs_to(instance, pod):
                # A previous incarnation's Pod still holds the name: remove it, look again.
                if not pod["metadata"].get("deletionTimestamp"):
                    await self._delete(pod, "predecessor Pod")
                return PREDECESSOR_RECHECK
            if pod["metadata"].get("deletionTimestamp"):
                return PREDECESSOR_RECHECK  # ours, going away (a replacement): wait for it
            current = (pod["metadata"].get("annotations") or {}).get(TEMPLATE_HASH)
            if current is not None and current != digest:
                await self._delete_pod(instance, pod, "Restarting", "the spec changed")
                return PREDECESSOR_RECHECK
            return await self._resteer(instance, pod, inputs)
        try:
            await self.client.create(PODS.path(meta.namespace), desired)
        except AlreadyExists:
            return PREDECESSOR_RECHECK  # the cache is behind: the next look sees the Pod
        self.writes.append(("create", f"pod {meta.namespace}/{meta.name}"))
        self._event(instance, "Normal", "Created", f"created Pod {meta.name}")
        return None

    async def _resteer(
        self, instance: Instance, pod: dict[str, Any], inputs: PodInputs
    ) -> float | None:
        """Replace a gated Pod the node-devices check keeps refusing, when room moved.

        A Pod is steered once, at creation, to the flavors that could hold it then (or not at
        all, when none could). While Kueue holds it and the check answers ``Retry``, Kueue
        assigns the same first flavor again after every requeue; if a card frees up on a node
        of another flavor, the Pod would wait for ever. So while it waits on ``Retry`` the
        flavors that can hold it are looked up again, and when they are a different, non-empty
        set the Pod — never scheduled, never run — is deleted, to be created steered anew. A
        pinned Pod is never re-steered (its node is the user's choice).
        """
        if inputs.flavors or pod.get("spec", {}).get("nodeName"):
            return None
        admission = self._admission(instance, pod)
        if admission.waiting is None or admission.waiting.reason != "Retry":
            return None
        fresh = await self._steered(instance, inputs)
        said = (pod["metadata"].get("annotations") or {}).get(STEERED_ANNOTATION, "")
        if not fresh.steered_to or ",".join(fresh.steered_to) == said:
            return None
        names = ", ".join(fresh.steered_to)
        await self._delete_pod(
            instance, pod, "Resteering", f"the check refuses its flavor; room is now on {names}"
        )
        return PREDECESSOR_RECHECK

    async def _delete_pod(
        self, instance: Instance, pod: dict[str, Any] | None, reason: str, why: str
    ) -> None:
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        if not belongs_to(instance, pod):
            return
        await self._delete(pod, f"Pod ({why})")
        self._event(instance, "Normal", reason, f"deleting Pod {instance.metadata.name}: {why}")

    async def _delete(self, obj: Mapping[str, Any], what: str) -> None:
        meta = obj["metadata"]
        path = PODS.path(meta["namespace"], meta["name"])
        try:
            # The UID precondition: never delete a Pod that replaced the one decided on.
            await self.client.delete(path, preconditions={"uid": meta.get("uid", "")})
        except (NotFound, Conflict):
            return
        self.writes.append(("delete", f"{what} {meta['namespace']}/{meta['name']}"))

    async def _reconcile_service(self, instance: Instance, service: dict[str, Any] | None) -> None:
        meta = instance.metadata
        path = SERVICES.path(meta.namespace, meta.name)
        ours = service is not None and _owner_uid(service) == meta.uid
        if service is not None and not ours:
            if _owner_uid(service) is None:
                self._event(instance, "Warning", "ServiceConflict",
                            f"Service {meta.name} exists and is not the Instance's")  # fmt: skip
                return
            if not service["metadata"].get("deletionTimestamp"):
                await self.client.delete(path)  # a predecessor's: its node ports go with it
                self.writes.append(("delete", f"service {meta.namespace}/{meta.name}"))
            return
        kept = {
            (p.get("port"), p.get("protocol", "TCP")): p["nodePort"]
            for p in (service or {}).get("spec", {}).get("ports") or []
            if p.get("nodePort")
        }
        desired = render_service(instance, kept)
        if desired is None:
            if service is not None:
                await self.client.delete(path)
                self.writes.append(("delete", f"service {meta.namespace}/{meta.name}"))
            return
        if service is None:
            try:
                await self.client.create(SERVICES.path(meta.namespace), desired)
            except AlreadyExists:
                return
            self.writes.append(("create", f"service {meta.namespace}/{meta.name}"))
            return
        spec = service.get("spec", {})
        if spec.get("selector") != desired["spec"]["selector"] or _ports_differ(
            spec.get("ports") or [], desired["spec"]["ports"]
        ):
            await self.client.patch(
                path, {"spec": {"ports": desired["spec"]["ports"],
                                "selector": desired["spec"]["selector"]}}
            )  # fmt: skip
            self.writes.append(("patch", f"service {meta.namespace}/{meta.name}"))

    async def _write_status(
        self,
        instance: Instance,
        pod: dict[str, Any] | None,
        service: dict[str, Any] | None,
        *,
        refused: list[Refusal] | None = None,
    ) -> None:
        node_name = (pod or {}).get("spec", {}).get("nodeName") or ""
        node = self.nodes.get("", node_name) if node_name else None
        admission = self._admission(instance, pod)
        status = derive_status(instance, pod, service, node, queued=admission.waiting)
        refused = refused or []
        conditions = _conditions(instance, status, service, refused, admission)
        status = msgspec.structs.replace(status, conditions=conditions)
        pod_refused = [r for r in refused if r.condition == POD_CREATED]
        if pod_refused or refused:
            status = msgspec.structs.replace(
                status, phase_message=(pod_refused or refused)[0].message
            )
        if status == instance.status:
            return
        meta = instance.metadata
        if status.phase != instance.status.phase:
            self._event(instance, "Normal", status.phase or "Unknown",
                        status.phase_message or f"the Instance is {status.phase}")  # fmt: skip
        path = INSTANCES.path(meta.namespace, meta.name, "status")
        try:
            await self.client.patch(path, _status_patch(status))
        except NotFound:
            return
        self.writes.append(("patch", f"status {meta.namespace}/{meta.name} {status.phase}"))

    def _admission(self, instance: Instance, pod: Mapping[str, Any] | None) -> Admission:
        """Whether the Instance's Pod is in a Kueue queue and, if so, why it still waits.

        A Pod Kueue placed on a node was admitted (its gate is lifted only then); one still
        unscheduled waits for what its Workload says.
        """
        if pod is None or not belongs_to(instance, pod) or instance.spec.stop:
            return Admission()
        queue = _labels(pod).get(QUEUE_LABEL)
        if not queue:
            return Admission()
        if pod.get("spec", {}).get("nodeName"):
            return Admission(queue=queue)
        uid = str(pod.get("metadata", {}).get("uid") or "")
        return Admission(queue=queue, waiting=waiting(self.kueue.workload(uid), queue))

    async def _reconcile_isolation(self, namespace: str) -> None:
        """One policy per namespace holding an Instance; only the operator's own is touched."""
        cidrs = list(self.settings.instance_isolation_pod_cidrs)
        existing = self.policies.get(namespace, ISOLATION_POLICY)
        ours = existing is not None and _labels(existing).get(MANAGED_BY_LABEL) == MANAGED_BY
        path = NETWORK_POLICIES.path(namespace, ISOLATION_POLICY)
        if existing is None or ours:
            self._told.pop(f"policy:{namespace}", None)  # no hand-written one left to warn of
        if not cidrs:
            if ours:
                await self.client.delete(path)
                self.writes.append(("delete", f"networkpolicy {namespace}"))
            return
        holds = bool(self.instances.by_index("namespace", namespace))
        if existing is None and not holds:
            return  # kept where it was rendered, never created for an empty namespace
        desired = render_isolation_policy(namespace, cidrs)
        assert desired is not None
        if existing is None:
            try:
                await self.client.create(NETWORK_POLICIES.path(namespace), desired)
            except AlreadyExists:
                return
            self.writes.append(("create", f"networkpolicy {namespace}"))
            return
        if not ours:
            if self._told.get(f"policy:{namespace}") != "hand-written":
                self._told[f"policy:{namespace}"] = "hand-written"
                log.warning("%s/%s exists and was not rendered by the operator: left as it is",
                            namespace, ISOLATION_POLICY)  # fmt: skip
            return
        if existing.get("spec") != desired["spec"] or _labels(existing) != _labels(desired):
            body = {**desired, "metadata": {**desired["metadata"],
                                            "resourceVersion": existing["metadata"].get(
                                                "resourceVersion", "")}}  # fmt: skip
            await self.client.update(path, body)  # reverts a manual edit, whole
            self.writes.append(("update", f"networkpolicy {namespace}"))

    # -- events ---------------------------------------------------------------------------

    def _forget(self, prefix: str) -> None:
        """Drop what was said of a deleted Instance (every UID its name had)."""
        for key in [k for k in self._told if k.startswith(prefix)]:
            del self._told[key]

    def _event(
        self, instance: Instance, kind: str, reason: str, message: str, *, repeat: bool = False
    ) -> None:
        """Record an Event on the Instance (best effort: a failed Event never fails a write).

        The same thing said again by a repeated reconcile is said once. With ``repeat`` (a
        create the API server refused, tried again) each attempt counts: the Event already
        posted gets its ``count`` raised and its ``lastTimestamp`` moved, as client-go's
        event correlator does, instead of a new Event per attempt.
        """
        key = f"{instance.metadata.namespace}/{instance.metadata.name}/{instance.metadata.uid}"
        if repeat:
            repeated = f"{key}/{kind}/{reason}/{message}"
            told = self._repeats.get(repeated)
            if told is not None:
                told.count += 1
                self._pending_events.append(told)
                return
            if len(self._repeats) > 4096:
                self._repeats.clear()
            told = self._repeats[repeated] = Told(instance, kind, reason, message)
            log.info("%s: %s %s: %s", key, kind, reason, message)
            self._pending_events.append(told)
            return
        said = f"{kind}/{reason}/{message}"
        if self._told.get(key) == said:
            return  # the same thing again, as a repeated reconcile would: said once
        self._told[key] = said
        log.info("%s: %s %s: %s", key, kind, reason, message)
        self._pending_events.append(Told(instance, kind, reason, message))

    async def flush_events(self) -> None:
        """Write the Events recorded so far (the reconcile loop calls this after each key)."""
        pending, self._pending_events = self._pending_events, []
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for told in pending:
            meta = told.instance.metadata
            try:
                if told.name:
                    try:
                        await self.client.patch(
                            EVENTS.path(meta.namespace, told.name),
                            {"count": told.count, "lastTimestamp": now},
                        )
                        continue
                    except NotFound:
                        told.first = ""  # expired: post it again
                if not told.first:
                    told.first = now
                created = await self.client.create(
                    EVENTS.path(meta.namespace), self._event_body(told, now)
                )
                told.name = str(created.get("metadata", {}).get("name") or "")
            except (ApiError, KubeError) as exc:
                log.info("event for %s/%s not recorded: %s", meta.namespace, meta.name, exc)

    def _event_body(self, told: Told, now: str) -> dict[str, Any]:
        meta = told.instance.metadata
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.name}.", "namespace": meta.namespace},
            "involvedObject": {
                "apiVersion": f"{contract.API_GROUP}/{contract.CRD_VERSION}",
                "kind": "Instance",
                "name": meta.name,
                "namespace": meta.namespace,
                "uid": meta.uid,
            },
            "reason": told.reason,
            "message": told.message[:1024],
            "type": told.kind,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.options.identity,
            "firstTimestamp": told.first or now,
            "lastTimestamp": now,
            "count": told.count,
        }


@dataclass(frozen=True)
class Admission:
    """The Pod's place in Kueue: its LocalQueue (``""``: not queued) and why it waits."""

    queue: str = ""
    waiting: Waiting | None = None


@dataclass
class Told:
    """One Event to post, or posted (``name``) and counted again."""

    instance: Instance
    kind: str
    reason: str
    message: str
    name: str = ""
    count: int = 1
    first: str = ""


class RefusedError(KubeError):
    """The API server refused a rendered object: reconcile the key again, backing off."""


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(
    instance: Instance,
    status: InstanceStatus,
    service: Mapping[str, Any] | None,
    refused: list[Refusal],
    admission: Admission | None = None,
) -> tuple[Condition, ...]:
    """``PodCreated``, ``ServiceCreated`` and ``Admitted`` as this reconcile found them.

    ``False`` with the server's reason when it refused the object now; ``True`` once the
    object exists; absent when none is wanted (stopped: no Pod; no ports: no Service); left as
    it was while neither is known (the Pod about to be created). ``Admitted`` is Kueue's
    verdict on a queued Pod: ``False`` with why it waits, ``True`` once admitted, absent when
    the Pod is in no queue. A condition whose status does not change keeps its
    ``lastTransitionTime``; any other condition is kept as it is.
    """
    kept = {c.type: c for c in instance.status.conditions}
    decided: dict[str, tuple[Literal["True", "False"], str, str] | None] = {}
    for said in refused:
        decided.setdefault(said.condition, ("False", said.reason, said.message))
    if POD_CREATED not in decided:
        if instance.spec.stop or instance.metadata.deletion_timestamp:
            decided[POD_CREATED] = None
        elif status.pod_name:
            decided[POD_CREATED] = ("True", "Created", f"created Pod {status.pod_name}")
    if SERVICE_CREATED not in decided:
        if not instance.spec.ports:
            decided[SERVICE_CREATED] = None
        elif service is not None and _owner_uid(service) == instance.metadata.uid:
            decided[SERVICE_CREATED] = (
                "True", "Created", f"created Service {instance.metadata.name}",
            )  # fmt: skip
    if admission is not None and not admission.queue:
        decided[ADMITTED] = None
    elif admission is not None and admission.waiting is not None:
        decided[ADMITTED] = ("False", admission.waiting.reason, admission.waiting.message)
    elif admission is not None:
        decided[ADMITTED] = ("True", "Admitted", f"admitted from LocalQueue {admission.queue}")
    for kind, verdict in decided.items():
        if verdict is None:
            kept.pop(kind, None)
            continue
        truth, reason, message = verdict
        before = kept.get(kind)
        since = before.last_transition_time if before and before.status == truth else _now()
        kept[kind] = Condition(
            type=kind,
            status=truth,
            reason=reason,
            message=message[:32768],
            last_transition_time=since,
            observed_generation=instance.metadata.generation or None,
        )
    return tuple(sorted(kept.values(), key=lambda c: c.type))


def _ports_differ(current: list[dict[str, Any]], desired: list[dict[str, Any]]) -> bool:
    """Whether the Service's ports differ from the rendering.

    A server-allocated node port (which the rendering cannot know yet) is not a difference.
    """
    if len(current) != len(desired):
        return True
    for have, want in zip(current, desired, strict=True):
        for key, value in want.items():
            if have.get(key) != value:
                return True
    return False
