"""The InstanceType chain's controller: pools from the nodes, one queue per type, their status.

What it writes (``shared/spec/instancetype-walkthrough.md``, ``shared/reference/instancetypes.md``;
``docs/instancetypes.md``, "The controllers"):

- **ResourceFlavors**, the finest grain, aligned with the managed Nodes' labels: created, their
  labels and ``spec.nodeLabels`` kept exact, and retired (deleted) once no managed node has their
  keys — Kueue holds a retired flavor until no queue names it. Independent of every setting but
  ``instance-type-mixed-on-node``.
- with ``instance-type-derived-from-node`` on (the default):
  - one **InstanceType** per pool, created only (never updated: its spec is immutable after
    creation; one an administrator deletes is authored again, at the presets of the day). With
    ``instance-type-aware-cpu-manufacturer`` on the CPU-aware pools are created beside the
    collapsed ones, which stay;
  - one isolated **ClusterQueue** per InstanceType, derived or custom, over the flavors its spec
    selects; accelerated ones name the ``gpustack-node-devices`` AdmissionCheck once it reports
    Active; a queue whose pool lost every flavor is drained before it is emptied
    (:mod:`.desired`), and a queue whose type is gone is deleted;
  - one entrance **LocalQueue** per InstanceType in every non-system namespace, and in every new
    one.
- the **InstanceTypeFlavor** catalog, re-grouped when awareness flips;
- every InstanceType's **status**: phase, the four views, the CPU view, the entrance and the
  table's cells (:mod:`.status`).

Without Kueue in the cluster (``kueue.x-k8s.io/v1beta2`` not served) the types, their status
and the catalog are still written and no Kueue object is; the worker says so once and looks
again every :data:`KUEUE_PROBE` seconds, so Kueue installed later is taken up without a restart.

Built as the Instance controller is: typed informers decoded once tell a rate-limited work
queue which keys changed, and each reconcile reads the caches, compares with what the pure
functions of ``gpustack_core`` say should exist and writes only the difference — level-triggered
and idempotent, so a restart, a relist or a duplicate key changes nothing already right. Only
the holder of its Lease reconciles; the informers run on every replica. Three kinds of key:
:data:`POOLS` (flavors, derived types, catalog), ``type:<name>`` (one type's queue and status)
and ``ns:<namespace>`` (that namespace's LocalQueues). The Settings are read per reconcile.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

import trio

from gpustack_core import derive
from gpustack_core.contract import NODE_DEVICES_CHECK, RESOURCE_TYPE_LABEL
from gpustack_core.decoding import ContractError
from gpustack_core.instancetype import InstanceType, instancetype_from_object
from gpustack_core.instancetypeflavor import instancetypeflavor_from_object
from gpustack_core.names import dns1123_subdomain_errors
from gpustack_core.poolnames import entrance_name
from gpustack_core.pools import FLAVOR_TYPE, Flavor, flavors, node_profile_of, resource_flavor
from gpustack_core.settings import Settings
from gpustack_core.views import NodeDevices
from gpustack_kube.client import (
    AlreadyExists,
    ApiError,
    Conflict,
    KubeClient,
    KubeError,
    NotFound,
    PatchType,
)
from gpustack_kube.informer import Informer, Key
from gpustack_kube.leader import ElectionConfig, LeaderElector
from gpustack_kube.paths import (
    ADMISSION_CHECKS,
    CLUSTER_QUEUES,
    DEVICES,
    INSTANCE_TYPE_FLAVORS,
    INSTANCE_TYPES,
    KUEUE_GROUP,
    KUEUE_VERSION,
    LOCAL_QUEUES,
    NAMESPACES,
    RESOURCE_FLAVORS,
    join,
)
from gpustack_kube.workqueue import WorkQueue
from gpustack_worker.held import node_informer
from gpustack_worker.instances.controller import ControllerOptions
from gpustack_worker.instancetypes.desired import (
    HOLD_AND_DRAIN,
    STOP_NONE,
    catalog_object,
    catalog_patch,
    desired_queue,
    flavor_patch,
    fronts,
    local_queue,
    queue_patch,
    references_check,
    status_patch,
    system_namespace,
    type_object,
)
from gpustack_worker.instancetypes.observed import (
    CheckState,
    check_state,
    held_namespace,
    node_devices,
    terminating,
)
from gpustack_worker.instancetypes.status import type_status
from gpustack_worker.keyworkers import KeyWorkers, write_log
from gpustack_worker.settings import OperatorSettings

log = logging.getLogger("gpustack.worker.instancetypes")

LEASE: Final = "gpustack-operator-instancetype-controller"
POOLS: Final = "pools"
TYPE_KEY: Final = "type:"
NAMESPACE_KEY: Final = "ns:"
KUEUE_PROBE: Final = 30.0
"""Seconds between looks for Kueue's API while it is not served."""
CHECK_PERIOD: Final = 10.0
"""Seconds between reads of the ``gpustack-node-devices`` AdmissionCheck's state."""
SETTINGS_WAIT: Final = 30.0
"""Seconds the workers wait for the Settings' first read before reconciling on the defaults."""
KUEUE_RESOURCES: Final = frozenset(
    r.plural for r in (RESOURCE_FLAVORS, CLUSTER_QUEUES, LOCAL_QUEUES, ADMISSION_CHECKS)
)
QUEUE_SELECTOR: Final = f"{RESOURCE_TYPE_LABEL}={derive.QUEUE_TYPE}"
"""The operator's ClusterQueues and entrance LocalQueues: the only ones it updates or deletes."""


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _deleting(obj: Mapping[str, Any] | None) -> bool:
    return bool(((obj or {}).get("metadata") or {}).get("deletionTimestamp"))


def _uid(obj: Mapping[str, Any]) -> dict[str, str]:
    return {"uid": str((obj.get("metadata") or {}).get("uid") or "")}


class RefusedError(KubeError):
    """The API server refused some of a reconcile's writes: the key is tried again, backing off."""


class Refusals:
    """The writes one reconcile had refused; the others go on.

    One object Kueue or a webhook refuses (a quota past its limits, a name it will not take)
    must not keep every other pool from being written; the key is still retried afterwards.
    A transport error is not collected: the next write would fail the same way.
    """

    def __init__(self) -> None:
        self.said: list[str] = []

    @contextmanager
    def each(self, what: str) -> Iterator[None]:
        """Run one object's write; a refusal is noted and the reconcile goes on."""
        try:
            yield
        except ApiError as exc:
            self.said.append(f"{what}: {exc}")

    def check(self) -> None:
        """Raise :class:`RefusedError` naming the refusals, if there were any."""
        if self.said:
            more = f" (and {len(self.said) - 1} more)" if len(self.said) > 1 else ""
            raise RefusedError(self.said[0] + more)


class InstanceTypeController:
    """Derives and reports the InstanceType chain; run :meth:`run` in the worker's nursery."""

    def __init__(
        self,
        client: KubeClient,
        options: ControllerOptions | None = None,
        *,
        nodes: Informer[dict[str, Any]] | None = None,
        settings: OperatorSettings | None = None,
        kueue_probe: float = KUEUE_PROBE,
        check_period: float = CHECK_PERIOD,
    ) -> None:
        """Informers over ``client``.

        ``nodes``: a Node informer the caller runs and shares (``held_node`` objects); without
        one the controller runs its own. ``settings``: the operator Settings the caller runs
        and shares; without them the controller follows (and seeds) its own.
        """
        self.client = client
        self.options = options or ControllerOptions(lease_name=LEASE)
        self.kueue_probe = kueue_probe
        self.check_period = check_period
        self.queue = WorkQueue()
        self._owns_nodes = nodes is None
        self.nodes: Informer[dict[str, Any]] = nodes or node_informer(client)
        self.devices: Informer[NodeDevices] = Informer(client, DEVICES.path(), decode=node_devices)
        self.types: Informer[InstanceType] = Informer(
            client, INSTANCE_TYPES.path(), decode=instancetype_from_object
        )
        self.catalog: Informer[dict[str, Any]] = Informer(client, INSTANCE_TYPE_FLAVORS.path())
        self.namespaces: Informer[dict[str, Any]] = Informer(
            client, NAMESPACES.path(), decode=held_namespace
        )
        # Kueue's, run once its API is found to be served.
        self.flavors: Informer[dict[str, Any]] = Informer(
            client, RESOURCE_FLAVORS.path(), label_selector=f"{RESOURCE_TYPE_LABEL}={FLAVOR_TYPE}"
        )
        self.queues: Informer[dict[str, Any]] = Informer(
            client, CLUSTER_QUEUES.path(), label_selector=QUEUE_SELECTOR
        )
        self.local_queues: Informer[dict[str, Any]] = Informer(
            client,
            LOCAL_QUEUES.path(),
            label_selector=QUEUE_SELECTOR,
            indexers={"namespace": lambda q: (str(q["metadata"].get("namespace", "")),)},
        )
        self._owns_settings = settings is None
        self.operator_settings = settings or OperatorSettings(client, self.options.system_namespace)
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
        self.kueue = False
        """Whether Kueue's API is served (and its informers synced)."""
        self.check = CheckState.ABSENT
        """The ``gpustack-node-devices`` AdmissionCheck's state, as last read."""
        self.reconciles = 0
        self.workers = KeyWorkers(self.queue, self.reconcile, log)
        self.writes = write_log()
        """(verb, what) of the latest writes made; for tests and the debug state."""
        self._profiles: dict[str, object] = {}
        self._present: set[str] = set()
        self._said: set[str] = set()
        self._flavor_memo: tuple[tuple[int, bool], tuple[Flavor, ...]] | None = None
        self._devices_memo: tuple[int, dict[str, NodeDevices]] | None = None
        self._wire()

    # -- wiring ---------------------------------------------------------------------------

    def _wire(self) -> None:
        self.nodes.add_handler(self._node_changed)
        self.devices.add_handler(lambda _key: self._pools_and_types())
        self.types.add_handler(self._type_changed)
        self.catalog.add_handler(lambda _key: self.queue.add(POOLS))
        self.namespaces.add_handler(lambda key: self.queue.add(NAMESPACE_KEY + key[1]))
        self.flavors.add_handler(lambda _key: self.queue.add(POOLS))
        self.queues.add_handler(lambda key: self.queue.add(TYPE_KEY + key[1]))
        self.local_queues.add_handler(lambda key: self.queue.add(NAMESPACE_KEY + key[0]))
        self.operator_settings.add_handler(lambda _settings: self._everything())

    def _node_changed(self, key: Key) -> None:
        """A Node changed: the pools move only if what they read of it (its profile) did."""
        node = self.nodes.get(*key)
        profile = node_profile_of(node).profile if node is not None else None
        if key[1] in self._profiles and self._profiles[key[1]] == profile:
            return
        self._profiles[key[1]] = profile
        self._pools_and_types()

    def _type_changed(self, key: Key) -> None:
        name = key[1]
        self.queue.add(TYPE_KEY + name)
        self.queue.add(POOLS)  # a derived type deleted is authored again
        found = self.types.get("", name)
        present = found is not None and not found.metadata.deletion_timestamp
        if present != (name in self._present):
            (self._present.add if present else self._present.discard)(name)
            self._namespaces()  # a LocalQueue more or less in every namespace

    def _pools_and_types(self) -> None:
        self.queue.add(POOLS)
        for name in self._type_names():
            self.queue.add(TYPE_KEY + name)

    def _namespaces(self) -> None:
        for namespace in self.namespaces.objects():
            self.queue.add(NAMESPACE_KEY + _name(namespace))

    def _everything(self) -> None:
        self._pools_and_types()
        self._namespaces()

    def _type_names(self) -> set[str]:
        names = {t.metadata.name for t in self.types.objects()}
        if self.kueue:
            names |= {_name(q) for q in self.queues.objects()}
        return names

    @property
    def settings(self) -> Settings:
        """The operator Settings in force now."""
        return self.operator_settings.current

    # -- running --------------------------------------------------------------------------

    async def run(self) -> None:
        """Informers always; the workers only while this replica leads."""
        async with trio.open_nursery() as nursery:
            if self._owns_settings:
                nursery.start_soon(self.operator_settings.run)
            for informer in self._informers():
                await nursery.start(informer.run)
            while not self.nodes.synced:  # a shared one, run by its owner
                await self.nodes.wait_changed()
            await nursery.start(self._follow_kueue, nursery)
            with trio.move_on_after(SETTINGS_WAIT) as waited:
                await self.operator_settings.read.wait()
            if waited.cancelled_caught:
                log.warning("the Settings were not read in %.0fs: reconciling on the defaults "
                            "until they are", SETTINGS_WAIT)  # fmt: skip
            if self.options.leader_election:
                await self.elector.run(self._work)
            else:
                await self._work()

    def _informers(self) -> Iterable[Informer[Any]]:
        nodes = (self.nodes,) if self._owns_nodes else ()
        return (*nodes, self.devices, self.types, self.catalog, self.namespaces)

    async def drain(self, timeout: float = 10.0) -> None:
        """Stop taking keys and wait (at most ``timeout``) for the reconciles in flight."""
        await self.workers.drain(timeout)

    async def _follow_kueue(
        self, nursery: trio.Nursery, *, task_status: trio.TaskStatus[None]
    ) -> None:
        """Find Kueue's API (started once the first look is done), then follow the check.

        Kueue's informers run in ``nursery`` (the controller's), started once it is served.
        """
        started = False
        while not await self._kueue_served():
            if not started:
                started = True
                task_status.started()
            await trio.sleep(self.kueue_probe)
        for informer in (self.flavors, self.queues, self.local_queues):
            await nursery.start(informer.run)
        await self._read_check()
        self.kueue = True
        log.info("Kueue (%s/%s) is served: writing ResourceFlavors, ClusterQueues and "
                 "LocalQueues", KUEUE_GROUP, KUEUE_VERSION)  # fmt: skip
        self._everything()
        if not started:
            task_status.started()
        while True:
            await trio.sleep(self.check_period)
            await self._read_check()

    async def _kueue_served(self) -> bool:
        try:
            found = await self.client.get(join("apis", KUEUE_GROUP, KUEUE_VERSION))
        except NotFound:
            found = {}
        except KubeError as exc:
            self._say(logging.WARNING, f"cannot tell whether Kueue is served ({exc}); "
                      f"looking again every {self.kueue_probe:.0f}s")  # fmt: skip
            return False
        served = {str(r.get("name")) for r in found.get("resources") or () if isinstance(r, dict)}
        if served >= KUEUE_RESOURCES:
            return True
        self._say(
            logging.WARNING,
            f"Kueue ({KUEUE_GROUP}/{KUEUE_VERSION}) is not served: InstanceTypes are derived and "
            "reported, but no ResourceFlavor, ClusterQueue or LocalQueue is written and "
            "Instances run without Kueue's queue; looking again every "
            f"{self.kueue_probe:.0f}s",
        )
        return False

    async def _read_check(self) -> None:
        try:
            found: dict[str, Any] | None = await self.client.get(
                ADMISSION_CHECKS.path(name=NODE_DEVICES_CHECK)
            )
        except NotFound:
            found = None
        except KubeError as exc:
            self._say(logging.WARNING, f"reading the AdmissionCheck {NODE_DEVICES_CHECK}: {exc}")
            return
        state = check_state(found)
        if state is self.check:
            return
        log.info("the AdmissionCheck %s is %s", NODE_DEVICES_CHECK, state.value)
        self.check = state
        for name in self._type_names():
            self.queue.add(TYPE_KEY + name)

    async def _work(self) -> None:
        """Reconcile every key once on taking the lead, then whatever the informers tell."""
        self._present = {t.metadata.name for t in self.types.objects()
                         if not t.metadata.deletion_timestamp}  # fmt: skip
        self._everything()
        await self.workers.run(self.options.workers)

    # -- what the caches say --------------------------------------------------------------

    def _flavors(self) -> tuple[Flavor, ...]:
        """Every flavor the managed nodes form now (recomputed only when a Node changed)."""
        mixed = self.settings.instance_type_mixed_on_node
        stamp = (self.nodes.generation, mixed)
        if self._flavor_memo is not None and self._flavor_memo[0] == stamp:
            return self._flavor_memo[1]
        profiles = []
        for node in self.nodes.objects():
            found = node_profile_of(node)
            for reason in found.skipped:
                self._say(logging.INFO, reason)
            if found.profile is not None:
                profiles.append(found.profile)
        formed = tuple(f for f in flavors(profiles, mixed_on_node=mixed) if self._nameable(f))
        self._flavor_memo = (stamp, formed)
        return formed

    def _nameable(self, flavor: Flavor) -> bool:
        """Whether the flavor's name is one the API server takes (a DNS-1123 subdomain).

        A key that is a valid label but no valid name (``hygon-k100_ai``: an underscore)
        cannot name a ResourceFlavor, nor the queue and type built on it: such a flavor is
        left out of every pool, said once, rather than refused at every reconcile.
        """
        problems = dns1123_subdomain_errors(flavor.name)
        if problems:
            self._say(logging.WARNING, f"the ResourceFlavor {flavor.name!r} cannot be named "
                      f"({problems[0]}): nodes {', '.join(flavor.nodes)} are left out of its "
                      "pools")  # fmt: skip
        return not problems

    def _devices(self) -> dict[str, NodeDevices]:
        stamp = self.devices.generation
        if self._devices_memo is None or self._devices_memo[0] != stamp:
            self._devices_memo = (stamp, {d.node: d for d in self.devices.objects()})
        return self._devices_memo[1]

    def _say(self, level: int, message: str) -> None:
        """Log each distinct message once (a reconcile repeats what it finds)."""
        if message in self._said:
            return
        if len(self._said) > 1024:
            self._said.clear()
        self._said.add(message)
        log.log(level, "%s", message)

    # -- reconcile ------------------------------------------------------------------------

    async def reconcile(self, key: str) -> float | None:
        """Make the cluster match ``key``'s desired state; seconds until a recheck, if one."""
        self.reconciles += 1
        if key == POOLS:
            await self._reconcile_pools()
        elif key.startswith(TYPE_KEY):
            await self._reconcile_type(key.removeprefix(TYPE_KEY))
        elif key.startswith(NAMESPACE_KEY):
            await self._reconcile_namespace(key.removeprefix(NAMESPACE_KEY))
        return None

    async def _reconcile_pools(self) -> None:
        settings = self.settings
        found = self._flavors()
        refusals = Refusals()
        if self.kueue:
            await self._align_flavors(found, refusals)
        aware = settings.instance_type_aware_cpu_manufacturer
        if settings.instance_type_derived_from_node:
            await self._author_types(found, refusals, aware=aware)
        await self._align_catalog(found, refusals, aware=aware)
        refusals.check()

    async def _align_flavors(self, found: tuple[Flavor, ...], refusals: Refusals) -> None:
        desired = {f.name: resource_flavor(f) for f in found}
        for name, body in desired.items():
            current = self.flavors.get("", name)
            with refusals.each(f"ResourceFlavor {name}"):
                if current is None:
                    try:
                        await self.client.create(RESOURCE_FLAVORS.path(), body)
                    except AlreadyExists:
                        continue  # the cache is behind, or Kueue still holds it retiring
                    self._wrote("create", f"resourceflavor {name}")
                    continue
                if _deleting(current):
                    continue  # retiring: created anew once Kueue has let it go
                patch = flavor_patch(current, body)
                if patch is not None:
                    await self.client.patch(RESOURCE_FLAVORS.path(name=name), patch)
                    self._wrote("patch", f"resourceflavor {name}")
        for current in self.flavors.objects():
            name = _name(current)
            if name in desired or _deleting(current):
                continue
            with refusals.each(f"ResourceFlavor {name}"):
                try:
                    await self.client.delete(
                        RESOURCE_FLAVORS.path(name=name), preconditions=_uid(current)
                    )
                except (NotFound, Conflict):
                    continue
                self._wrote("delete", f"resourceflavor {name}")
                log.info("retired the ResourceFlavor %s: no managed node has its keys", name)

    async def _author_types(
        self, found: tuple[Flavor, ...], refusals: Refusals, *, aware: bool
    ) -> None:
        devices = self._devices()
        for pool, members in derive.pools(found, aware=aware).items():
            if self.types.get("", pool.name) is not None:
                continue  # create-only: an existing type is never rewritten
            groups = [g for n in derive.member_nodes(members) if n in devices
                      for g in devices[n].groups]  # fmt: skip
            if pool.accelerator_group and not derive.cards_published(
                groups, pool.accelerator_group
            ):
                log.debug("InstanceType %s waits for its cards' Devices", pool.name)
                continue  # authored once they arrive: the Devices informer wakes this pass
            itype = derive.derived_instance_type(
                pool, members, derive.feature_of(groups, pool.accelerator_group)
            )
            with refusals.each(f"InstanceType {pool.name}"):
                try:
                    await self.client.create(INSTANCE_TYPES.path(), type_object(itype))
                except AlreadyExists:
                    continue
                self._wrote("create", f"instancetype {pool.name}")
                log.info("authored the InstanceType %s", pool.name)

    async def _align_catalog(
        self, found: tuple[Flavor, ...], refusals: Refusals, *, aware: bool
    ) -> None:
        groups = [g for d in self._devices().values() for g in d.groups]
        desired = {e.metadata.name: e for e in derive.catalog(found, aware=aware, groups=groups)}
        for name, entry in desired.items():
            current = self.catalog.get("", name)
            with refusals.each(f"InstanceTypeFlavor {name}"):
                if current is None:
                    try:
                        await self.client.create(
                            INSTANCE_TYPE_FLAVORS.path(), catalog_object(entry)
                        )
                    except AlreadyExists:
                        continue
                    self._wrote("create", f"instancetypeflavor {name}")
                    continue
                try:
                    same = instancetypeflavor_from_object(current).spec == entry.spec
                except ContractError:
                    same = False  # written by hand, wrongly: the catalog is the operator's
                if not same:
                    await self.client.patch(
                        INSTANCE_TYPE_FLAVORS.path(name=name), catalog_patch(entry), PatchType.JSON
                    )
                    self._wrote("patch", f"instancetypeflavor {name}")
        for current in self.catalog.objects():
            name = _name(current)
            if name in desired or _deleting(current):
                continue
            with refusals.each(f"InstanceTypeFlavor {name}"):
                try:
                    await self.client.delete(
                        INSTANCE_TYPE_FLAVORS.path(name=name), preconditions=_uid(current)
                    )
                except (NotFound, Conflict):
                    continue
                self._wrote("delete", f"instancetypeflavor {name}")

    async def _reconcile_type(self, name: str) -> None:
        itype = self.types.get("", name)
        queue = self.queues.get("", name) if self.kueue else None
        if itype is None or itype.metadata.deletion_timestamp:
            await self._retire_queue(name, queue)
            return
        found = self._flavors()
        status = type_status(itype, found, self._devices(), queue)
        if status != itype.status:
            try:
                await self.client.patch(
                    INSTANCE_TYPES.path(name=name, subresource="status"),
                    status_patch(status),
                    PatchType.JSON,
                )
            except NotFound:
                return
            self._wrote("patch", f"instancetype {name} status {status.summary}")
        if self.kueue and self.settings.instance_type_derived_from_node:
            await self._align_queue(itype, found, queue)

    async def _retire_queue(self, name: str, queue: dict[str, Any] | None) -> None:
        """Delete the queue of a type that is gone, unless the type is about to be re-authored.

        Kueue keeps a deleted queue until its Workloads are gone (its own finalizer); the
        Instance controller stops the Instances of a type gone or going.
        """
        settings = self.settings
        if queue is None or _deleting(queue) or not settings.instance_type_derived_from_node:
            return
        aware = settings.instance_type_aware_cpu_manufacturer
        if any(p.name == name for p in derive.pools(self._flavors(), aware=aware)):
            return  # a derived type deleted: POOLS authors it again, the queue stays
        try:
            await self.client.delete(CLUSTER_QUEUES.path(name=name), preconditions=_uid(queue))
        except (NotFound, Conflict):
            return
        self._wrote("delete", f"clusterqueue {name}")
        log.info("deleted the ClusterQueue %s: its InstanceType is gone", name)

    async def _align_queue(
        self, itype: InstanceType, found: tuple[Flavor, ...], queue: dict[str, Any] | None
    ) -> None:
        name = itype.metadata.name
        pool = derive.identity_of(itype.spec)
        members = derive.members(pool, found)
        check = pool.acceleratable and references_check(self.check, queue, NODE_DEVICES_CHECK)
        desired = desired_queue(
            name,
            pool,
            members,
            check=check,
            inactive=itype.spec.inactive,
            drain=self.settings.instance_type_drain_when_no_flavors,
            current=queue,
        )
        if queue is None:
            try:
                await self.client.create(CLUSTER_QUEUES.path(), desired)
            except AlreadyExists:
                return
            self._wrote("create", f"clusterqueue {name}")
            return
        if _deleting(queue):
            return  # Kueue is draining it away; created anew once it is gone
        patch = queue_patch(queue, desired)
        if patch is None:
            return
        # A Conflict (the reservations moved since the cache's reading) is retried, re-decided.
        await self.client.patch(CLUSTER_QUEUES.path(name=name), patch)
        before = (queue.get("spec") or {}).get("stopPolicy") or STOP_NONE
        after = desired["spec"]["stopPolicy"]
        groups = len(desired["spec"]["resourceGroups"])
        self._wrote("patch", f"clusterqueue {name} {after} groups={groups}")
        if after != before:
            what = "draining" if after == HOLD_AND_DRAIN else "reopened"
            log.info("ClusterQueue %s %s (stopPolicy %s)", name, what, after)

    async def _reconcile_namespace(self, name: str) -> None:
        if not (self.kueue and self.settings.instance_type_derived_from_node):
            return
        namespace = self.namespaces.get("", name)
        if namespace is None or terminating(namespace):
            return  # going away: its LocalQueues go with it
        if system_namespace(name, self.options.system_namespace):
            return
        wanted = {entrance_name(t.metadata.name): t.metadata.name for t in self.types.objects()
                  if not t.metadata.deletion_timestamp}  # fmt: skip
        have = {_name(q): q for q in self.local_queues.by_index("namespace", name)}
        refusals = Refusals()
        for local, cluster_queue in sorted(wanted.items()):
            current = have.get(local)
            if current is not None and fronts(current) == cluster_queue:
                continue
            with refusals.each(f"LocalQueue {name}/{local}"):
                if current is not None:  # ours, fronting another queue (immutable): replace
                    await self._delete_local(current)
                    continue
                try:
                    body = local_queue(name, cluster_queue)
                    await self.client.create(LOCAL_QUEUES.path(name), body)
                except AlreadyExists:
                    self._say(logging.WARNING, f"LocalQueue {name}/{local} exists and is not "
                              "the operator's: left as it is")  # fmt: skip
                    continue
                self._wrote("create", f"localqueue {name}/{local}")
        for local, current in have.items():
            if local not in wanted and not _deleting(current):
                with refusals.each(f"LocalQueue {name}/{local}"):
                    await self._delete_local(current)
        refusals.check()

    async def _delete_local(self, current: dict[str, Any]) -> None:
        meta = current["metadata"]
        try:
            await self.client.delete(
                LOCAL_QUEUES.path(meta["namespace"], meta["name"]), preconditions=_uid(current)
            )
        except (NotFound, Conflict):
            return
        self._wrote("delete", f"localqueue {meta['namespace']}/{meta['name']}")

    def _wrote(self, verb: str, what: str) -> None:
        self.writes.append((verb, what))
        log.debug("%s %s", verb, what)


__all__ = ["LEASE", "InstanceTypeController"]
