"""The Pod admission webhook (gate 1): ``POST /mutate-v1-pod`` and ``POST /validate-v1-pod``.

kube-apiserver sends an ``admission.k8s.io/v1`` ``AdmissionReview`` for every Pod CREATE the
chart's webhook configurations select; this module decodes it, hands the Pod to the request
rules of :mod:`gpustack_core.requests`, and answers a review with the same ``uid``: allowed
with a base64 JSONPatch (mutating), allowed, or denied with ``status{code: 403, message}``
naming the rule.

**Which Pods.** The reference judges only Pods carrying ``kueue.x-k8s.io/queue-name``; this one
also judges every Pod that names one of our accelerator resources, because without Kueue a user
can still write ``nvidia.com/gpu.sliced: 1`` and such a slice would reach the device plugin
unfolded (no units, no cores default). The configurations therefore select all Pods outside the
system namespaces, and a Pod that is neither queued nor requests an accelerator is allowed
untouched.

**Card memory.** The fold divides by a card's memory, read from the ``Devices`` objects
(``worker.gpustack.ai/v1alpha1``, cluster-scoped, one per node, ``spec.groups[].memory``): the
pinned node's (``spec.nodeName``, else a ``kubernetes.io/hostname`` nodeSelector) when the Pod
pins one and that node has a ``Devices`` object, else every node's groups of the manufacturer,
from which the fold takes the smallest card — the largest charge, so no card the Pod may land on
is charged less than the request's share of it. Without any ``Devices`` of the manufacturer a
memory-percentage slice still folds (it needs no card memory) while memory-MiB and partition
requests are refused with a message saying why. The list is cached for
:data:`DEVICES_TTL` seconds so a burst of Pod creations costs one read.

**Fit affinity.** With the Setting ``workload-fit-affinity`` on (and the worker publishing the
per-card fit labels), the mutating answer also pins a Pod on a Kueue queue that asks for a slice,
or for a share of two or more cards, to the nodes whose fit labels show one card can still hold
it (:func:`_fit_pin`); ``docs/instancetypes.md`` says how.

**Access.** The routes are unauthenticated, as kube-apiserver calls webhooks over plain
server-verified TLS; they only read ``Devices`` (through the worker's own client, never the
caller's input as a path) and answer from the request body, which is bounded to
:data:`MAX_REVIEW_BYTES`. A body that is not a v1 ``AdmissionReview`` is a 400 with one line.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import msgspec
import trio

from gpustack_core import contract
from gpustack_core.decoding import ContractError, convert, decode_json
from gpustack_core.devices import DevicesSpec, GroupSpec
from gpustack_core.features import accelerator_key
from gpustack_core.fit import decision_asks
from gpustack_core.fitaffinity import pin, requirements
from gpustack_core.modes import AllocationMode
from gpustack_core.requests import (
    QUEUE_NAME_LABEL,
    Cards,
    Decision,
    RequestError,
    parse_pod,
    review,
    selects,
)
from gpustack_core.resources import ResourceNames, default_names
from gpustack_kube.client import KubeClient, KubeError
from gpustack_kube.paths import DEVICES
from gpustack_kube.reviews import UserInfo

log = logging.getLogger("gpustack.worker.admission")

MUTATE_PATH: Final = contract.POD_MUTATE_PATH
VALIDATE_PATH: Final = contract.POD_VALIDATE_PATH
PHASES: Final[Mapping[str, Literal["mutate", "validate"]]] = {
    MUTATE_PATH: "mutate",
    VALIDATE_PATH: "validate",
}
"""Path → what that webhook does."""

MAX_REVIEW_BYTES: Final = 3 << 20
"""A review holds one Pod (etcd caps an object near 1.5 MiB) plus its envelope: 3 MiB is
room for the largest real one and bounds what an unauthenticated peer can make us hold."""

DEVICES_TTL: Final = 5.0
"""Seconds a read of the ``Devices`` list answers later reviews."""

HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
REVIEW_VERSION: Final = "admission.k8s.io/v1"

CONTENT_TYPE: Final = "application/json"


class ReviewError(ValueError):
    """The body is not an ``admission.k8s.io/v1`` ``AdmissionReview``: 400, one line."""


class _Kind(msgspec.Struct, frozen=True):
    group: str = ""
    version: str = ""
    kind: str = ""


class _UserInfo(msgspec.Struct, frozen=True):
    username: str = ""
    uid: str = ""
    groups: list[str] = msgspec.field(default_factory=list)
    extra: dict[str, list[str]] = msgspec.field(default_factory=dict)


class _Request(msgspec.Struct, frozen=True):
    uid: str
    kind: _Kind
    operation: str = ""
    namespace: str = ""
    name: str = ""
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = msgspec.field(default=None, name="oldObject")
    user_info: _UserInfo | None = msgspec.field(default=None, name="userInfo")


class _Review(msgspec.Struct, frozen=True, rename="camel"):
    api_version: str
    kind: str
    request: _Request


@dataclass(frozen=True, slots=True)
class Review:
    """What the webhook needs of one review."""

    uid: str
    operation: str
    namespace: str
    name: str
    pod: Mapping[str, Any] | None
    """The Pod being created; ``None`` when the review is about something else."""
    group: str = ""
    kind: str = ""
    obj: dict[str, Any] | None = None
    """``request.object``: what will be stored (``None`` for a DELETE)."""
    old: dict[str, Any] | None = None
    """``request.oldObject``: what is stored now (``None`` for a CREATE)."""
    user: UserInfo | None = None
    """``request.userInfo``: who asked, as the API server authenticated them (user, uid,
    groups, extra); ``None`` when the review names nobody. A webhook that decides on the
    requester's permissions asks a SubjectAccessReview for exactly this user."""


def decode_review(body: bytes) -> Review:
    """Decode a review strictly; raises :class:`ReviewError` with a one-line reason."""
    try:
        envelope = decode_json(body, _Review, what="AdmissionReview")
    except ContractError as exc:
        raise ReviewError(_one_line(str(exc))) from None
    if envelope.api_version != REVIEW_VERSION or envelope.kind != "AdmissionReview":
        raise ReviewError(
            f"AdmissionReview: expected apiVersion {REVIEW_VERSION} kind AdmissionReview, got "
            f"{_one_line(envelope.api_version)[:64]} {_one_line(envelope.kind)[:64]}"
        )
    request = envelope.request
    if not request.uid or len(request.uid) > 128:
        raise ReviewError("AdmissionReview: request.uid must be 1 to 128 characters")
    is_pod = request.kind.group == "" and request.kind.kind == "Pod"
    if is_pod and request.operation == "CREATE" and request.object is None:
        raise ReviewError("AdmissionReview: a Pod CREATE review carries no request.object")
    return Review(
        uid=request.uid,
        operation=request.operation,
        namespace=request.namespace,
        name=request.name,
        pod=request.object if is_pod else None,
        group=request.kind.group,
        kind=request.kind.kind,
        obj=request.object,
        old=request.old_object,
        user=_user(request.user_info),
    )


def _user(info: _UserInfo | None) -> UserInfo | None:
    if info is None or not info.username:
        return None
    extra = {key: tuple(values) for key, values in info.extra.items()}
    return UserInfo(name=info.username, uid=info.uid, groups=tuple(info.groups), extra=extra)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def answer(
    uid: str,
    *,
    patch: Sequence[Mapping[str, Any]] = (),
    denied: str | None = None,
    code: int = 403,
    reason: str = "Forbidden",
    causes: Sequence[Mapping[str, str]] = (),
    warnings: Sequence[str] = (),
) -> bytes:
    """The response review: allowed (with a JSONPatch when there is one) or denied.

    A denial carries ``code`` and ``reason`` (403 ``Forbidden`` unless the webhook says
    otherwise: 422 ``Invalid`` for a field that is wrong) and the field ``causes``, which
    kube-apiserver passes on in the ``Status`` the client reads. ``warnings`` reach the client
    as ``Warning:`` headers (kubectl prints them), allowed or not.
    """
    response: dict[str, Any] = {"uid": uid, "allowed": denied is None}
    if warnings:
        response["warnings"] = list(warnings)
    if denied is not None:
        status: dict[str, Any] = {"code": code, "reason": reason, "message": denied}
        if causes:
            status["details"] = {"causes": [dict(c) for c in causes]}
        response["status"] = status
    elif patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(msgspec.json.encode(list(patch))).decode()
    return msgspec.json.encode(
        {"apiVersion": REVIEW_VERSION, "kind": "AdmissionReview", "response": response}
    )


# -- Devices ----------------------------------------------------------------------------------


class DevicesUnavailable(Exception):  # noqa: N818 — a state, named as the message reads
    """The ``Devices`` list could not be read; rules that need it refuse, naming the cause."""


class DevicesCache:
    """The cluster's ``Devices`` groups by node, read at most once per :data:`DEVICES_TTL`."""

    def __init__(
        self,
        client: KubeClient,
        *,
        ttl: float = DEVICES_TTL,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self.client = client
        self.ttl = ttl
        self.clock = clock
        self._lock = trio.Lock()
        self._read_at: float | None = None
        self._nodes: dict[str, tuple[GroupSpec, ...]] = {}
        self.reads = 0
        """Upstream reads made; for tests."""

    async def nodes(self) -> Mapping[str, tuple[GroupSpec, ...]]:
        """Node name → its ``spec.groups``; raises :class:`DevicesUnavailable`."""
        async with self._lock:  # a burst of reviews shares one read
            now = self.clock()
            if self._read_at is not None and now - self._read_at < self.ttl:
                return self._nodes
            self.reads += 1
            try:
                listed = await self.client.get(DEVICES.path())
            except KubeError as exc:
                raise DevicesUnavailable(f"reading the Devices objects failed: {exc}") from exc
            self._nodes = _groups_by_node(listed)
            self._read_at = now
            return self._nodes


def _groups_by_node(listed: Mapping[str, Any]) -> dict[str, tuple[GroupSpec, ...]]:
    """Each item's ``spec.groups``; an item that does not decode is skipped and logged."""
    out: dict[str, tuple[GroupSpec, ...]] = {}
    items = listed.get("items")
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, Mapping):
            continue
        metadata = item.get("metadata")
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        if not isinstance(name, str) or not name:
            continue
        try:
            spec = convert(item.get("spec") or {}, DevicesSpec, what=f"Devices {name} spec")
        except ContractError as exc:
            log.warning("skipping a Devices object the fold cannot read: %s", exc)
            continue
        out[name] = spec.groups
    return out


def pinned_node(pod: Mapping[str, Any]) -> str | None:
    """The node a Pod names at creation: ``spec.nodeName``, else a hostname nodeSelector."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return None
    node = spec.get("nodeName")
    if isinstance(node, str) and node:
        return node
    selector = spec.get("nodeSelector")
    hostname = selector.get(HOSTNAME_LABEL) if isinstance(selector, Mapping) else None
    return hostname if isinstance(hostname, str) and hostname else None


def cards_for(pod: Mapping[str, Any], nodes: Mapping[str, Sequence[GroupSpec]]) -> dict[str, Cards]:
    """What is known of each manufacturer's cards where this Pod may land.

    A pinned node with a ``Devices`` object gives its own groups. A pin to a name no ``Devices``
    object carries (a hostname label that differs from the node's name, or a node without
    accelerators) falls back to the whole cluster: the cluster-wide fold charges at least as
    much, so the fallback can only over-charge, never under-charge.
    """
    node = pinned_node(pod)
    if node is not None and node in nodes:
        return _by_manufacturer(nodes[node], f"node {node}", pinned=True)
    return _by_manufacturer(
        [g for groups in nodes.values() for g in groups], "the cluster", pinned=False
    )


def _by_manufacturer(groups: Sequence[GroupSpec], where: str, *, pinned: bool) -> dict[str, Cards]:
    grouped: dict[str, list[GroupSpec]] = {}
    for group in groups:
        grouped.setdefault(group.manufacturer, []).append(group)
    return {m: Cards(groups=tuple(g), where=where, pinned=pinned) for m, g in grouped.items()}


# -- the webhook ------------------------------------------------------------------------------


class AdmissionWebhook:
    """Answers reviews; one per worker, sharing the worker's kube client."""

    def __init__(
        self,
        devices: DevicesCache,
        names: Sequence[ResourceNames] | None = None,
        *,
        fit_affinity: Callable[[], bool] = lambda: False,
    ) -> None:
        self.devices = devices
        self.names = default_names() if names is None else tuple(names)
        """The names judged: ``names``, else every manufacturer's default (the table at start)."""
        self.fit_affinity = fit_affinity
        """Whether to pin queued slices to the fit labels now (the worker publishes them and
        the Setting ``workload-fit-affinity`` is on), asked at each review."""
        self.denied = 0
        self.patched = 0
        self.pinned = 0

    @classmethod
    def of(
        cls,
        client: KubeClient,
        *,
        names: Sequence[ResourceNames] | None = None,
        fit_affinity: Callable[[], bool] = lambda: False,
    ) -> AdmissionWebhook:
        """The webhook reading ``Devices`` through ``client``, judging ``names``."""
        return cls(DevicesCache(client), names, fit_affinity=fit_affinity)

    async def handle(self, path: str, body: bytes) -> tuple[int, bytes]:
        """``(status, body)`` for one POST: 200 with a review, or 400 with one line."""
        phase = PHASES[path]
        try:
            decoded = decode_review(body)
        except ReviewError as exc:
            return 400, f"{exc}\n".encode()
        return 200, await self.judge(decoded, phase)

    async def judge(self, decoded: Review, phase: Literal["mutate", "validate"]) -> bytes:
        """The response review for a decoded request."""
        pod = decoded.pod
        if pod is None or decoded.operation != "CREATE" or not selects(pod, self.names):
            return answer(decoded.uid)
        try:
            cards = await self._cards(pod)
            decision = review(pod, cards, phase=phase, names=self.names)
        except (RequestError, DevicesUnavailable) as exc:
            self.denied += 1
            log.info(
                "denied Pod %s/%s (%s): %s",
                decoded.namespace,
                decoded.name or _generate_name(pod),
                phase,
                exc,
            )
            return answer(decoded.uid, denied=str(exc))
        patch = [*decision.patch]
        if phase == "mutate":
            patch += await self._fit_pin(pod, decision)
        if patch:
            self.patched += 1
        return answer(decoded.uid, patch=patch)

    async def _fit_pin(self, pod: Mapping[str, Any], decision: Decision) -> list[dict[str, Any]]:
        """The ``workload-fit-affinity`` pin of a queued slice or multi-card shared request.

        A Pod on a Kueue queue asking for a slice, or for a share of two or more cards, gets a
        required node affinity on the per-card fit labels of its manufacturer's models
        (:mod:`gpustack_core.fitaffinity`), so the scheduler skips a fragmented node. Never a
        denial: without the models (the ``Devices`` list unreadable) the Pod goes unpinned, and
        the node-devices check still gates it.
        """
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if QUEUE_NAME_LABEL not in labels or not self.fit_affinity():
            return []
        asks = decision_asks(decision)
        if not requirements(asks, {a.manufacturer: ("?",) for a in asks}):
            return []  # nothing to pin: no read of the Devices list needed
        try:
            nodes = await self.devices.nodes()
        except DevicesUnavailable as exc:
            log.info("Pod left unpinned to the fit labels: %s", exc)
            return []
        models: dict[str, set[str]] = {}
        for groups in nodes.values():
            for group in groups:
                models.setdefault(group.manufacturer, set()).add(accelerator_key(group))
        ops = pin(pod, requirements(asks, {m: sorted(k) for m, k in models.items()}))
        self.pinned += 1 if ops else 0
        return ops

    async def _cards(self, pod: Mapping[str, Any]) -> dict[str, Cards]:
        """Read ``Devices`` only when a request needs the cards.

        A percentage slice and a visibility sidecar need none; a failed read then refuses only
        what cannot be folded (MiB, partitions), while whole-card and shared counts go
        unchecked rather than refused.
        """
        requests = [r for c in parse_pod(pod, self.names) for r in c.requests]
        if all(
            r.mode is AllocationMode.VISIBILITY
            or (r.mode is AllocationMode.SLICED and r.memory_percentage is not None)
            for r in requests
        ):
            return {}
        try:
            nodes = await self.devices.nodes()
        except DevicesUnavailable:
            if any(
                r.mode is AllocationMode.PARTITIONED
                or (r.mode is AllocationMode.SLICED and r.memory_mib is not None)
                for r in requests
            ):
                raise
            return {}
        return cards_for(pod, nodes)


def _generate_name(pod: Mapping[str, Any]) -> str:
    metadata = pod.get("metadata")
    name = metadata.get("generateName") if isinstance(metadata, Mapping) else None
    return f"{name}<generated>" if isinstance(name, str) else "<unnamed>"


__all__ = [
    "DEVICES",
    "MAX_REVIEW_BYTES",
    "MUTATE_PATH",
    "PHASES",
    "VALIDATE_PATH",
    "AdmissionWebhook",
    "DevicesCache",
    "DevicesUnavailable",
    "Review",
    "ReviewError",
    "answer",
    "cards_for",
    "decode_review",
    "pinned_node",
]
