"""``Allocate`` in the trio loop: find the container, decide under the node lock, record it.

The kubelet calls a plugin once per container and resource, and says only which device IDs it
picked. Which (Pod, container) they are for is asked of the kubelet's PodResources API first
(it knows once it has recorded the assignment, e.g. on a retried call) and otherwise taken as
the oldest Pod bound to this node that requests exactly that many of the resource and holds
none yet — the reference operator's rule. Then, under one lock per node (every mode's plugin
shares it), the pure allocator decides against every live grant on the node, the annotation is
re-read from the API server, merged with the container's siblings and written back by a
strategic-merge patch guarded by the Pod's ``resourceVersion``, and the container's injection
is answered.

Before any of that, each container's IDs are screened as the kubelet API requires (at least
one, none twice, every one advertised for the mode): a request that fails is ``InvalidArgument``
at once, never a wait for a Pod that could not match it. A Sliced container whose Pod carries no
``.sliced.units`` (the Pod webhook, which writes it, did not admit the Pod) is refused rather
than charged a guess.

What the node's Pods hold is counted through :class:`~.holdings.Ledger`: this process's own
grants (so the next ``Allocate``, which may arrive before the watch event, counts them) and the
annotations the kubelet's PodResources record backs — never a claim a tenant wrote itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple

import grpc
import trio

from gpustack_core import contract
from gpustack_core.allocation import (
    NOTHING,
    Allocated,
    AllocatedAccelerator,
    AllocatedGroup,
    ContainerAllocation,
    encode_allocation,
    merge_container,
    read_allocation,
)
from gpustack_core.allocation import Grant as AnnotatedGrant
from gpustack_core.allocator import (
    Grant,
    Holding,
    Refusal,
    Request,
    Rule,
    advertised,
    decide,
    live,
    screen,
)
from gpustack_core.decoding import ContractError
from gpustack_core.devices import AcceleratorSpec, GroupSpec
from gpustack_core.modes import AllocationMode
from gpustack_core.pods import Pod, container_request, pod_from_object
from gpustack_core.quantity import QuantityError
from gpustack_core.resources import ResourceNames
from gpustack_core.tokens import listed, parse_token_id
from gpustack_core.units import ceil_fraction
from gpustack_devicemanager.deviceplugin.holdings import Ledger
from gpustack_devicemanager.deviceplugin.injection import DEV, SYSFS, Card, Injection, inject
from gpustack_devicemanager.deviceplugin.plugin import AllocationRefusedError
from gpustack_devicemanager.deviceplugin.state import PluginState, node_of
from gpustack_devicemanager.podview import NodePod
from gpustack_kube.client import KubeClient, KubeError, PatchType, retry_on_conflict
from gpustack_kube.kubeletapi import deviceplugin_v1beta1_pb2 as dp
from gpustack_kube.kubeletapi.api import read_pod_resources
from gpustack_kube.paths import PODS

log = logging.getLogger("gpustack.devicemanager.deviceplugin")

IDENTIFY_SECONDS = 5.0
"""How long to wait for the Pod informer to show the Pod the kubelet is admitting."""
POD_RESOURCES_TIMEOUT = 2.0
DEFAULT_CORES_PERCENTAGE = 100

_STATUS = {
    Rule.MALFORMED: grpc.StatusCode.INVALID_ARGUMENT,
    Rule.UNKNOWN_DEVICE: grpc.StatusCode.INVALID_ARGUMENT,
}
"""A refusal's gRPC status; every rule not listed is ``FAILED_PRECONDITION``."""


class Target(NamedTuple):
    """The (Pod, container) an ``Allocate`` is for."""

    pod: Pod
    container: str

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.pod.metadata.namespace}/{self.pod.metadata.name}"


@dataclass
class Allocator:
    """One Device Manager's allocation path, shared by all its plugin servers."""

    manufacturer: str
    node_name: str
    names: ResourceNames
    state: PluginState
    client: KubeClient | None
    pods: Callable[[], list[NodePod] | None]
    pod_resources_socket: Path | None = None
    identify_seconds: float = IDENTIFY_SECONDS
    confirm_grants: bool = True
    """Check the annotations against PodResources (``holdings.py``); off: take them as written."""
    dev: Path = DEV
    """Where the host's device nodes are found (``/dev``): the DRM nodes by PCI address."""
    sysfs: Path = SYSFS
    """The kernel's ``/sys``: a card's DRM minors when udev's ``by-path`` links are absent."""
    lock: trio.Lock = field(default_factory=trio.Lock)
    ledger: Ledger = field(init=False)

    def __post_init__(self) -> None:
        self.ledger = Ledger(self.manufacturer)

    # -- holdings -------------------------------------------------------------------------

    def refresh(self) -> None:
        """Recompute the live holdings (Pod view and reservations) and the waiting slice.

        The waiting slice is the size of the Sliced container the kubelet admits next: its
        preferred card is the best fit for that size.
        """
        self.state.update(held=self._holdings())
        waiting = self._pending(AllocationMode.SLICED, 1, self.pods() or [], {}, set())
        units = self._quantity(waiting, self.names.sliced_units) if waiting else None
        self.state.set_slice_units(units)

    def _holdings(self, *, exclude_uid: str = "") -> list[Holding]:
        return self.ledger.node(self.pods(), exclude_uid=exclude_uid)

    # -- identification -------------------------------------------------------------------

    def _resource(self, mode: AllocationMode) -> str:
        return self.names.plugin_resource(mode)

    async def _kubelet_assignments(self) -> dict[tuple[str, str, str], dict[str, set[str]]]:
        """PodResources: (namespace, pod, container) → resource → device IDs; ``{}`` if none.

        Every answer also becomes the record the holdings are checked against.
        """
        socket = self.pod_resources_socket
        if socket is None or not socket.exists():
            return {}
        try:
            listed_ = await trio.to_thread.run_sync(
                read_pod_resources, socket, POD_RESOURCES_TIMEOUT
            )
        except grpc.RpcError as exc:
            log.info("PodResources unavailable at %s: %s", socket, exc)
            return {}
        if self.confirm_grants:
            self.ledger.assigned = {
                key: frozenset().union(*by_resource.values())
                for key, by_resource in listed_.items()
            }
        return listed_

    async def reread(self) -> None:
        """Read PodResources afresh, the record grants are checked against (or keep the last)."""
        await self._kubelet_assignments()

    async def identify(
        self, mode: AllocationMode, ids: Sequence[str], taken: set[tuple[str, str]]
    ) -> Target | None:
        """The (Pod, container) these IDs are for, or ``None`` when nothing fits in time."""
        resource = self._resource(mode)
        deadline = trio.current_time() + self.identify_seconds
        while True:
            assigned = await self._kubelet_assignments()
            entries = {e.pod.metadata.uid: e for e in self.pods() or []}
            by_name = {(e.pod.metadata.namespace, e.pod.metadata.name): e for e in entries.values()}
            for (namespace, name, container), devices in assigned.items():
                entry = by_name.get((namespace, name))
                if entry is not None and devices.get(resource) == set(ids):
                    return Target(entry.pod, container)
            pending = self._pending(mode, len(ids), entries.values(), assigned, taken)
            if pending is not None:
                return pending
            if trio.current_time() >= deadline:
                return None
            await trio.sleep(0.1)

    def _pending(
        self,
        mode: AllocationMode,
        count: int,
        entries: Iterable[NodePod],
        assigned: dict[tuple[str, str, str], dict[str, set[str]]],
        taken: set[tuple[str, str]],
    ) -> Target | None:
        resource = self._resource(mode)
        candidates: list[tuple[Any, str, int, Target]] = []
        for entry in entries:
            pod = entry.pod
            meta = pod.metadata
            if pod.spec.node_name != self.node_name or meta.deletion_timestamp is not None:
                continue
            if pod.status.phase not in {"", "Pending"}:
                continue
            order = (*pod.spec.init_containers, *pod.spec.containers)
            for position, container in enumerate(order):
                if (meta.uid, container.name) in taken:
                    continue
                if assigned.get((meta.namespace, meta.name, container.name), {}).get(resource):
                    continue
                if self.ledger.holds(meta.uid, container.name, mode) or _holds(
                    entry.grants, container.name, self.manufacturer, mode
                ):
                    continue
                try:
                    asked = container_request(pod, container.name, resource)
                except ContractError:
                    continue
                if asked is not None and asked == count:
                    candidates.append(
                        (meta.creation_timestamp, meta.name, position, Target(pod, container.name))
                    )
                    break
        if not candidates:
            return None
        return min(candidates, key=lambda c: (c[0], c[1], c[2]))[3]

    # -- the call -------------------------------------------------------------------------

    async def allocate(
        self, mode: AllocationMode, request: dp.AllocateRequest
    ) -> dp.AllocateResponse:
        """Answer one ``Allocate``; raises :class:`AllocationRefusedError` naming the rule."""
        self._screen(mode, request)
        response = dp.AllocateResponse()
        taken: set[tuple[str, str]] = set()
        for ask in request.container_requests:
            ids = tuple(ask.devices_ids)
            # With a cluster, wait (briefly) for the Pod view: it may still be syncing.
            target = await self.identify(mode, ids, taken) if self.client is not None else None
            if target is None and self.client is not None:
                raise AllocationRefusedError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"no Pod on node {self.node_name} awaits {len(ids)} "
                    f"{self._resource(mode)} (device IDs {listed(ids)})",
                )
            if target is not None:
                taken.add((target.pod.metadata.uid, target.container))
            async with self.lock:
                injection = await self._grant(mode, ids, target)
            container = response.container_responses.add()
            container.envs.update(injection.envs)
            container.annotations.update(injection.annotations)
            for node in injection.devices:
                container.devices.add(
                    container_path=node.path, host_path=node.path, permissions=node.permissions
                )
        return response

    def _screen(self, mode: AllocationMode, request: dp.AllocateRequest) -> None:
        """Refuse the whole call at once when any container's IDs break the kubelet API."""
        if not request.container_requests:
            raise AllocationRefusedError(
                grpc.StatusCode.INVALID_ARGUMENT, "the request names no container"
            )
        inventory, _, _ = self.state.read()
        offered = advertised(inventory.groups, mode)
        for ask in request.container_requests:
            refusal = screen(tuple(ask.devices_ids), mode, offered)
            if refusal is not None:
                raise AllocationRefusedError(_STATUS[refusal.rule], refusal.message)

    async def _grant(
        self, mode: AllocationMode, ids: tuple[str, ...], target: Target | None
    ) -> Injection:
        group_id = _group_of(ids)
        inventory, _, _ = self.state.read()
        group = inventory.group(group_id)
        if group is None:
            raise AllocationRefusedError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"device IDs {listed(ids)} name no {self.manufacturer} group on this node",
            )
        if target is None or self.client is None:
            current = NOTHING
            pod_obj: dict[str, Any] | None = None
        else:
            pod_obj = await self.client.get(
                PODS.path(target.pod.metadata.namespace, target.pod.metadata.name)
            )
            target = Target(pod_from_object(pod_obj), target.container)
            current = _annotation(pod_obj)
        uid = target.pod.metadata.uid if target is not None else ""
        others = self._holdings(exclude_uid=uid)
        believed: list[Holding] = []
        if target is not None:
            # The Pod's own other grants, as far as a record backs them (not as annotated).
            believed = self.ledger.pod(target.pod, current.grants, current.device_ids)
            others.extend(
                live(
                    [
                        h
                        for h in believed
                        if not (h.container == target.container and h.accelerator.mode is mode)
                    ],
                    self.manufacturer,
                )
            )
        node = node_of(inventory, others, group)
        answer = decide(node, self._request(mode, ids, target, believed, group))
        if isinstance(answer, Refusal):
            raise AllocationRefusedError(
                _STATUS.get(answer.rule, grpc.StatusCode.FAILED_PRECONDITION), answer.message
            )
        if target is not None and pod_obj is not None:
            await self._record(target, mode, group_id, answer, pod_obj)
            self.refresh()
        return self._inject(mode, answer, group_id, target)

    def _request(
        self,
        mode: AllocationMode,
        ids: tuple[str, ...],
        target: Target | None,
        believed: Sequence[Holding],
        group: GroupSpec,
    ) -> Request:
        """The pure allocator's request: the Pod's units, profile or believed siblings.

        Without a cluster there is no Pod to read, and the core's rule for a request without
        units applies (the token count); nothing is recorded then, so nothing is charged.
        """
        units: int | None = None
        profile: str | None = None
        siblings: tuple[AllocatedAccelerator, ...] = ()
        if target is not None:
            if mode is AllocationMode.SLICED:
                units = self._quantity(target, self.names.sliced_units)
                if units is None or units <= 0:
                    raise AllocationRefusedError(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        f"Pod {target.key} container {target.container!r} asks "
                        f"{self._resource(mode)} without a positive "
                        f"{self.names.sliced_units} limit, which the GPUStack Pod webhook "
                        "writes: the webhook did not admit this Pod, and a slice of unknown "
                        "size is refused rather than charged",
                    )
            elif mode is AllocationMode.PARTITIONED:
                units = self._quantity(target, self.names.partitioned_units)
                profile = self._profile(target)
            elif mode is AllocationMode.VISIBILITY:
                cards = {card.id for card in group.accelerators}
                siblings = tuple(
                    h.accelerator
                    for h in believed
                    if h.container != target.container and h.accelerator.id in cards
                )
        return Request(mode, ids, units=units, profile=profile, siblings=siblings)

    def _quantity(self, target: Target, resource: str) -> int | None:
        try:
            value = container_request(target.pod, target.container, resource)
        except (ContractError, QuantityError) as exc:
            log.warning("%s: %s", target.key, exc)
            return None
        return ceil_fraction(value) if isinstance(value, Fraction) else None

    def _profile(self, target: Target) -> str | None:
        prefix = self.names.partitioned_profile_prefix
        for container in (*target.pod.spec.init_containers, *target.pod.spec.containers):
            if container.name != target.container:
                continue
            for key in (*container.resources.limits, *container.resources.requests):
                if key.startswith(prefix) and key != self.names.partitioned_units:
                    _, _, profile = key[len(prefix) :].partition("-")
                    if profile:
                        return profile
        return None

    async def _record(
        self,
        target: Target,
        mode: AllocationMode,
        group_id: str,
        grant: Grant,
        obj: dict[str, Any],
    ) -> None:
        """Merge the grant into the Pod's annotation and write it, re-reading on conflict.

        The patch carries the ``resourceVersion`` the merge was based on, so a concurrent
        writer (another manufacturer's Device Manager on the same Pod) makes it a ``Conflict``
        and the merge is redone on a fresh read instead of overwriting that writer's entry.
        """
        client = self.client
        if client is None:
            return
        path = PODS.path(target.pod.metadata.namespace, target.pod.metadata.name)
        group = AllocatedGroup(
            id=group_id, manufacturer=self.manufacturer, accelerators=grant.accelerators
        )
        based_on: list[dict[str, Any]] = [obj]

        async def write() -> dict[str, ContainerAllocation]:
            current_obj = based_on.pop() if based_on else await client.get(path)
            merged = merge_container(
                _annotation(current_obj).containers,
                target.container,
                group,
                mode,
                grant.device_ids,
            )
            metadata: dict[str, Any] = {
                "annotations": {contract.ALLOCATION_ANNOTATION: encode_allocation(merged)}
            }
            version = current_obj.get("metadata", {}).get("resourceVersion")
            if version:
                metadata["resourceVersion"] = version
            await client.patch(path, {"metadata": metadata}, PatchType.STRATEGIC)
            return merged

        try:
            await retry_on_conflict(write)
        except KubeError as exc:
            raise AllocationRefusedError(
                grpc.StatusCode.UNAVAILABLE,
                f"could not record the allocation on Pod {target.key}: {exc}",
            ) from exc
        self.ledger.record(
            target.pod.metadata.uid, target.key, target.container, mode, grant.accelerators
        )
        log.info(
            "allocated %s %s to %s container %r: %s",
            mode.api_name,
            ", ".join(grant.device_ids),
            target.key,
            target.container,
            ", ".join(a.allocated_physical_id or a.id for a in grant.accelerators) or "no card",
        )

    def _inject(
        self, mode: AllocationMode, grant: Grant, group_id: str, target: Target | None
    ) -> Injection:
        inventory, _, _ = self.state.read()
        group = inventory.group(group_id)
        specs = {c.id: c for c in group.accelerators} if group is not None else {}
        cards = [
            Card(
                id=a.id,
                index=a.index,
                pci_bus_id=_pci_bus_id(specs.get(a.id)),
                partition_id=a.allocated_physical_id,
            )
            for a in grant.accelerators
        ]
        cores: int | None = None
        if mode is AllocationMode.SLICED:
            cores = DEFAULT_CORES_PERCENTAGE
            if target is not None:
                asked = self._quantity(target, self.names.sliced_cores_percentage)
                cores = asked if asked is not None else DEFAULT_CORES_PERCENTAGE
        return inject(
            self.manufacturer,
            mode,
            cards,
            grant.accelerators,
            card_mib=group.memory if group is not None else 0,
            cores_percentage=cores,
            dev=self.dev,
            sysfs=self.sysfs,
        )


def _pci_bus_id(card: AcceleratorSpec | None) -> str:
    return card.topology.pci_bus_id if card is not None and card.topology is not None else ""


def _group_of(ids: Sequence[str]) -> str:
    groups = set()
    for text in ids:
        try:
            groups.add(parse_token_id(text).group)
        except ValueError as exc:
            raise AllocationRefusedError(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from exc
    if len(groups) != 1:
        raise AllocationRefusedError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"device IDs {listed(ids)} span {len(groups)} groups; one request is one group",
        )
    return groups.pop()


def _annotation(obj: dict[str, Any]) -> Allocated:
    """The Pod's annotation as just read, to merge the next grant into.

    A malformed one is logged and counts as claiming nothing (``read_allocation``'s policy):
    the write that follows replaces it, since the kubelet is waiting on this answer.
    """
    meta = obj.get("metadata") or {}
    try:
        return read_allocation(
            meta.get("annotations"), pod=f"{meta.get('namespace')}/{meta.get('name')}"
        )
    except ContractError as exc:
        log.warning("replacing a malformed allocation annotation: %s", exc)
        return NOTHING


def _holds(
    held: Sequence[AnnotatedGrant], container: str, manufacturer: str, mode: AllocationMode
) -> bool:
    """Whether the Pod's annotation claims ``container`` a grant of ``mode`` from us already.

    Read from the Pod view's grants (the annotation as written), only to skip a container the
    kubelet need not be matched to again.
    """
    return any(
        g.container == container and g.manufacturer == manufacturer and g.accelerator.mode is mode
        for g in held
    )
