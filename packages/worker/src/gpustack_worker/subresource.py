"""``GET …/instances/<name>/metrics``: fetch, then let the core decide (reference §4).

Every figure is computed by ``gpustack_core.sample.instance_sample`` — the exporter's function
— so the two surfaces agree. This module only fetches: the Instance (from the informer, or
live), its backing Pod (scoped by name, node and part-of UID), usage from the kubelet (through
the shared summary cache) or metrics.k8s.io, and one snapshot per allocated manufacturer from
that manufacturer's own Device Manager. Accelerator failures are logged, never fatal.

The served answer (:func:`instance_metrics_json`) is kept per Instance with the very objects it
was computed from, and sent again only while every input fetched for the next read is the same
object and every snapshot is judged as fresh (or stale) as it was: a console polling an
Instance costs the fetches, not the arithmetic and the encoding, each time. Its notes are
logged when it is computed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx
import msgspec
import trio

from gpustack_core import contract
from gpustack_core.allocation import Grant
from gpustack_core.decoding import ContractError
from gpustack_core.instance_metrics import InstanceMetrics, ObjectMeta
from gpustack_core.kubelet import Summary, usage_from_summary
from gpustack_core.podmetrics import pod_metrics_from_object, usage_from_pod_metrics
from gpustack_core.pods import (
    PART_OF_LABEL,
    Pod,
    is_ready,
    is_terminating,
    named_port,
    pod_from_object,
)
from gpustack_core.sample import instance_sample, pod_grants, pod_started
from gpustack_core.snapshot import (
    DEFAULT_FRESHNESS_POLICY,
    FRESHNESS_PERIODS,
    MAX_SNAPSHOT_BYTES,
    Freshness,
    MonitorSnapshot,
    parse_snapshot,
)
from gpustack_core.usage import PodUsage
from gpustack_kube.client import ApiError, KubeClient, KubeError, abandon_body
from gpustack_kube.paths import INSTANCES, POD_METRICS, PODS
from gpustack_worker.summaries import SummaryCache
from gpustack_worker.views import InstanceFacts, Views

log = logging.getLogger("instance-metrics")

OPERATION_TIMEOUT = 10.0
DEVICE_MANAGER_PORT = contract.DEVICE_MANAGER_PORT


class Unavailable(Exception):  # noqa: N818 — it is the HTTP status it becomes
    """No source could measure a started Instance: 503, naming each source and how it failed."""


class SnapshotCache:
    """Parsed snapshots by Device Manager URL, with the tag they were served under.

    Bounded (oldest entry out first) so Device Managers that came and went cannot grow it
    without limit. A cached snapshot is still subject to freshness on every read: a Device
    Manager whose monitor stopped keeps answering ``304`` for a snapshot that grows stale.
    Until the producer's next tick can have happened (``Freshness.unchanged_for``) a read is
    answered from here without asking at all: nothing newer can exist yet.

    Past that moment, concurrent reads of one Device Manager share one request (``flight``):
    when a hold ran out under 32 concurrent reads, each asked on its own connection, the
    Device Manager answered the same ``304`` 32 times and the handshakes for the extra
    connections stalled every request on the worker.
    """

    def __init__(self, limit: int = 4096, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.clock = clock
        """Seconds, monotonic; a test seam (``trio.current_time`` under a ``MockClock``)."""
        self._entries: dict[str, tuple[str, MonitorSnapshot, float]] = {}
        self.revalidated = 0
        """How many reads a ``304`` answered; for tests and benchmarks."""
        self.held = 0
        """How many reads were answered before the producer's next tick, with no request."""
        self.shared = 0
        """How many reads joined another read's request instead of making their own."""
        self.served_while_revalidating = 0
        """How many reads were answered the last snapshot while a request revalidated it."""
        self._flights: dict[str, _SnapshotFlight] = {}

    def get(self, base: str) -> tuple[str, MonitorSnapshot] | None:
        """The tag and snapshot last read from ``base``."""
        entry = self._entries.get(base)
        return None if entry is None else (entry[0], entry[1])

    def current(self, base: str) -> MonitorSnapshot | None:
        """The snapshot of ``base`` if its producer cannot have stored a newer one yet."""
        entry = self._entries.get(base)
        if entry is None or self.clock() >= entry[2]:
            return None
        self.held += 1
        return entry[1]

    def put(self, base: str, etag: str, snapshot: MonitorSnapshot, hold: float = 0.0) -> None:
        """Remember ``snapshot`` as what ``base`` serves under ``etag``, unchanged ``hold`` s."""
        self._entries.pop(base, None)
        self._entries[base] = (etag, snapshot, self.clock() + hold)
        while len(self._entries) > self.limit:
            del self._entries[next(iter(self._entries))]


@dataclass(frozen=True, eq=False)
class _Inputs:
    """What one answer is computed from, each object as its source handed it over."""

    namespace: str
    name: str
    instance: InstanceFacts
    pod: Pod | None
    wanted: tuple[str, ...]
    """The manufacturers the Pod holds accelerators of (empty when none, or not started)."""
    summary: Summary | None
    """The summary ``usage`` came from; ``None`` when it came from elsewhere (or nowhere)."""
    usage: PodUsage | None
    snapshots: dict[str, MonitorSnapshot]

    @property
    def reusable(self) -> bool:
        """Whether the answer depends on nothing but these objects and the snapshots' ages.

        An Instance with no started Pod answers ``now`` as its timestamp; usage read from
        metrics.k8s.io is read anew each time. Neither is kept.
        """
        return self.pod is not None and self.summary is not None and self.usage is not None


@dataclass(eq=False)
class _Answer:
    """One Instance's last answer and the very objects it was computed from."""

    inputs: _Inputs
    fresh: tuple[bool, ...]
    """Each snapshot's freshness verdict (in ``inputs.snapshots`` order) when computed."""
    body: bytes
    used: float = 0.0
    """When it was last sent (the cache's clock), for the sweep."""

    @classmethod
    def of(cls, inputs: _Inputs, now: datetime, freshness: Freshness, body: bytes) -> _Answer:
        verdicts = tuple(freshness.problem(s, now) is None for s in inputs.snapshots.values())
        return cls(inputs, verdicts, body)

    def answers(self, inputs: _Inputs, now: datetime, freshness: Freshness) -> bool:
        """Whether ``inputs`` are this answer's own, every snapshot judged alike at ``now``."""
        mine = self.inputs
        if not (
            inputs.reusable
            and inputs.instance is mine.instance
            and inputs.pod is mine.pod
            and inputs.summary is mine.summary
            and inputs.usage is mine.usage
            and inputs.snapshots.keys() == mine.snapshots.keys()
        ):
            return False
        for (manufacturer, snapshot), fresh in zip(mine.snapshots.items(), self.fresh, strict=True):
            if inputs.snapshots[manufacturer] is not snapshot:
                return False
            if (freshness.problem(snapshot, now) is None) is not fresh:
                return False
        return True


class AnswerCache:
    """The last answer per Instance; bounded, and what nobody asked for lately is dropped.

    An entry holds the objects it was computed from (the node's summary among them), so an
    Instance no longer read would keep an old summary alive: entries unused for
    ``idle`` seconds are swept, at most once per ``idle / 2``.
    """

    def __init__(
        self, limit: int = 4096, idle: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.idle = idle
        self.clock = clock
        self._entries: dict[tuple[str, str], _Answer] = {}
        self._swept_at = clock()

    def get(self, namespace: str, name: str) -> _Answer | None:
        """The Instance's last answer, if one is kept."""
        self._sweep()
        return self._entries.get((namespace, name))

    def sent(self, answer: _Answer) -> None:
        """``answer`` was sent again: it is in use."""
        answer.used = self.clock()

    def put(self, namespace: str, name: str, answer: _Answer) -> None:
        """Keep ``answer`` as the Instance's last."""
        answer.used = self.clock()
        key = (namespace, name)
        self._entries.pop(key, None)
        self._entries[key] = answer
        while len(self._entries) > self.limit:
            del self._entries[next(iter(self._entries))]

    def _sweep(self) -> None:
        now = self.clock()
        if now - self._swept_at < self.idle / 2:
            return
        self._swept_at = now
        for stale in [k for k, a in self._entries.items() if now - a.used > self.idle]:
            del self._entries[stale]

    def __len__(self) -> int:
        return len(self._entries)


@dataclass
class _SnapshotFlight:
    """One snapshot request in progress; the reads that joined it wait on ``done``."""

    done: trio.Event = field(default_factory=trio.Event)
    snapshot: MonitorSnapshot | None = None
    error: Exception | None = None


@dataclass
class Sources:
    """What the subresource reads from; the Device Manager transport is a test seam."""

    client: KubeClient
    summaries: SummaryCache
    system_namespace: str = contract.SYSTEM_NAMESPACE
    device_manager_transport: httpx.AsyncBaseTransport | None = None
    device_managers: httpx.AsyncClient | None = None
    """A long-lived client for the snapshots (pooled connections: no TLS handshake per read);
    without one, each read opens its own."""
    freshness: Freshness = DEFAULT_FRESHNESS_POLICY
    """The worker's own expectation of the Device Managers' period, never the snapshot's."""
    node_addresses: dict[str, str] = field(default_factory=dict)
    """Node → the address its Pods report (``status.hostIP``), for kubelet reads made
    directly; filled as backing Pods are read."""
    snapshots: SnapshotCache = field(default_factory=SnapshotCache)
    """The last snapshot of each Device Manager with its ``ETag``: an unchanged one is
    revalidated (``304``, no body) instead of fetched and parsed again."""
    views: Views | None = None
    """Informer-fed Instances and Pods (the warm path); without them every read is live."""
    background: trio.Nursery | None = None
    """Where snapshot revalidations run detached from the reads (:func:`_fetch`); without
    it a read past the producer's tick waits for the Device Manager's answer."""
    answers: AnswerCache = field(default_factory=AnswerCache)
    """The last answer per Instance with the objects it came from (``instance_metrics_json``)."""


async def instance_metrics(
    sources: Sources, namespace: str, name: str, now: datetime | None = None
) -> InstanceMetrics:
    """The subresource's answer; ``ApiError`` (e.g. 404) passes through, ``Unavailable`` → 503."""
    when = now or datetime.now(UTC)
    with trio.fail_after(OPERATION_TIMEOUT):
        inputs = await _gather(sources, namespace, name, None)
        return _compose(sources, inputs, when)


async def instance_metrics_json(
    sources: Sources, namespace: str, name: str, now: datetime | None = None
) -> bytes:
    """:func:`instance_metrics` as the JSON it is sent as, reused while its inputs are the same.

    The inputs are read exactly as for a fresh answer — the Instance, its backing Pod scoped
    by the Instance's UID, the node's summary, one snapshot per manufacturer — and only when
    every one of them is the very object the last answer was computed from, and every
    snapshot is as fresh (or as stale) now as it was then, are the last answer's bytes sent
    again: the same inputs give the same answer. Anything changed (a new Pod, a recreated
    Instance, a summary read since, a new snapshot, a snapshot that aged past its bound)
    computes it anew.
    """
    when = now or datetime.now(UTC)
    with trio.fail_after(OPERATION_TIMEOUT):
        last = sources.answers.get(namespace, name)
        inputs = await _gather(sources, namespace, name, last)
        if last is not None and last.answers(inputs, when, sources.freshness):
            sources.answers.sent(last)
            return last.body
        body = msgspec.json.encode(_compose(sources, inputs, when))
        if inputs.reusable:
            sources.answers.put(namespace, name, _Answer.of(inputs, when, sources.freshness, body))
        return body


async def _gather(sources: Sources, namespace: str, name: str, last: _Answer | None) -> _Inputs:
    """Read what the answer needs; what ``last`` derived from the same objects is not redone."""
    instance = sources.views.instance(namespace, name) if sources.views is not None else None
    if instance is None:
        instance = InstanceFacts.of(await sources.client.get(INSTANCES.path(namespace, name)))
    known = last.inputs if last is not None else None
    if known is not None and known.instance is not instance:
        known = None
    pod = await _backing_pod(sources, namespace, name, instance.uid)
    if known is not None and known.pod is not pod:
        known = None
    summary: Summary | None = None
    usage: PodUsage | None = None
    wanted: tuple[str, ...] = ()
    snapshots: dict[str, MonitorSnapshot] = {}
    if pod is not None and pod_started(pod):  # the gate: nothing started → no upstream I/O
        summary, usage = await _usage(sources, pod, known)
        wanted = known.wanted if known is not None else _wanted(pod)
        snapshots = await _snapshots(sources, pod, wanted)
    return _Inputs(namespace, name, instance, pod, wanted, summary, usage, snapshots)


def _compose(sources: Sources, inputs: _Inputs, now: datetime) -> InstanceMetrics:
    result = instance_sample(
        pod=inputs.pod,
        fallback=inputs.instance.fallback,
        usage=inputs.usage,
        snapshots=inputs.snapshots,
        now=now,
        freshness=sources.freshness,
    )
    namespace, name = inputs.namespace, inputs.name
    for note in result.notes:
        log.info("%s/%s: %s", namespace, name, note)
    meta = ObjectMeta(name=name, namespace=namespace, uid=inputs.instance.uid)
    return InstanceMetrics.of(meta, result.sample)


async def _backing_pod(sources: Sources, namespace: str, name: str, uid: str) -> Pod | None:
    """Same name and namespace, scheduled, and labelled with *this* Instance's UID.

    The cached Pod is used only when it already names this UID: a cached predecessor (its
    deletion not yet seen) or a miss is read live, so the cache can only ever save a read.
    """
    cached = sources.views.pod(namespace, name) if sources.views is not None else None
    if cached is not None and cached.metadata.labels.get(PART_OF_LABEL) == uid:
        pod = cached
    else:
        try:
            raw = await sources.client.get(PODS.path(namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        pod = pod_from_object(raw)
    if not pod.spec.node_name or pod.metadata.labels.get(PART_OF_LABEL) != uid:
        return None  # unscheduled, or a previous incarnation's Pod
    return pod


async def _usage(
    sources: Sources, pod: Pod, known: _Inputs | None = None
) -> tuple[Summary | None, PodUsage]:
    """The kubelet first, metrics.k8s.io second; both failing is the one 503.

    Also the summary the usage was read from (``None`` for metrics.k8s.io). ``known``: inputs
    of an earlier answer for this same Pod, whose usage stands if its summary is still the
    one cached.
    """
    meta = pod.metadata
    if pod.status.host_ip:
        sources.node_addresses[pod.spec.node_name] = pod.status.host_ip
    try:
        summary = await sources.summaries.get(pod.spec.node_name)
        if known is not None and known.summary is summary and known.usage is not None:
            return summary, known.usage
        usage = usage_from_summary(summary, namespace=meta.namespace, name=meta.name, uid=meta.uid)
        if usage is None and pod.status.start_time is not None:
            # Started after the cached read was made: read again (once per Pod start). The
            # API states times in whole seconds, so "after" is a second past the stamp.
            summary = await sources.summaries.get(
                pod.spec.node_name, newer_than=pod.status.start_time + timedelta(seconds=1)
            )
            usage = usage_from_summary(
                summary, namespace=meta.namespace, name=meta.name, uid=meta.uid
            )
        kubelet = (
            "the kubelet has no usable entry for the Pod (unknown yet, or figures beyond any "
            "node's capacity)"
            if usage is None
            else ""
        )
    except (KubeError, ContractError, trio.TooSlowError, OSError) as exc:
        usage, kubelet = None, f"kubelet summary of node {pod.spec.node_name}: {exc}"
    if usage is not None:
        return summary, usage
    try:
        raw = await sources.client.get(POD_METRICS.path(meta.namespace, meta.name))
        metrics = usage_from_pod_metrics(
            pod_metrics_from_object(raw), pod_created=meta.creation_timestamp
        )
        fallback = "" if metrics is not None else "metrics.k8s.io: no usable entry for the Pod"
    except (KubeError, ContractError) as exc:
        metrics, fallback = None, f"metrics.k8s.io: {exc}"
    if metrics is not None:
        return None, metrics
    raise Unavailable(f"no source measured Pod {meta.namespace}/{meta.name}: {kubelet}; {fallback}")


def _wanted(pod: Pod) -> tuple[str, ...]:
    """The manufacturers whose accelerators the Pod holds (none when its grants do not parse)."""
    try:
        held: list[Grant] = pod_grants(pod)
    except ContractError as exc:
        log.info("%s", exc)
        return ()
    return tuple(sorted({g.manufacturer for g in held}))


async def _snapshots(
    sources: Sources, pod: Pod, wanted: tuple[str, ...] | None = None
) -> dict[str, MonitorSnapshot]:
    """One snapshot per allocated manufacturer, each from its own Device Manager."""
    if wanted is None:
        wanted = _wanted(pod)
    if not wanted:
        return {}
    managers = sources.views.managers_on(pod.spec.node_name) if sources.views else None
    if managers is None:
        try:
            listed = await sources.client.get(
                PODS.path(sources.system_namespace),
                {
                    "labelSelector": contract.DEVICE_MANAGER_SELECTOR,
                    "fieldSelector": f"spec.nodeName={pod.spec.node_name}",
                },
            )
        except KubeError as exc:
            log.info("device managers of node %s unavailable: %s", pod.spec.node_name, exc)
            return {}
        managers = [pod_from_object(item) for item in listed.get("items", [])]
    found: dict[str, MonitorSnapshot] = {}
    for manufacturer in wanted:
        target = _device_manager(managers, manufacturer)
        if target is None:
            log.info("no Ready %s Device Manager on node %s", manufacturer, pod.spec.node_name)
            continue
        try:
            found[manufacturer] = await _fetch(sources, target)
        except (httpx.HTTPError, ContractError, ValueError) as exc:
            log.info("%s snapshot from %s unavailable: %s", manufacturer, target, exc)
    return found


def _device_manager(managers: list[Pod], manufacturer: str) -> str | None:
    """``https://ip:port`` of a Ready, non-terminating Device Manager of that manufacturer."""
    for manager in managers:
        if (
            manager.metadata.labels.get(contract.MANUFACTURER_LABEL) == manufacturer
            and is_ready(manager)
            and not is_terminating(manager)
            and manager.status.pod_ip
        ):
            return f"https://{manager.status.pod_ip}:{_https_port(manager)}"
    return None


def _https_port(pod: Pod) -> int:
    """The container port named ``https``; the reference's default otherwise."""
    return named_port(pod, "https") or DEVICE_MANAGER_PORT


def device_manager_client(transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
    """TLS unverified (the Device Manager's certificate is self-signed by design), no proxy."""
    return httpx.AsyncClient(verify=False, trust_env=False, timeout=5, transport=transport)


async def _fetch(sources: Sources, base: str) -> MonitorSnapshot:
    """The snapshot of ``base``: held, the last one while it is revalidated, or requested.

    Until the producer's next tick the held snapshot answers (nothing newer exists). Past
    it, one request revalidates it for every reader (single flight). With a ``background``
    nursery that request is detached and readers go on with the last snapshot while it may
    still be used (:meth:`Freshness.is_fresh`; the core judges it again for the answer), so
    no read waits on the Device Manager once per tick — at the price of answering, for one
    round trip, the snapshot the producer just replaced. A reader waits only when there is
    no usable snapshot. Without the nursery the first reader makes the request and the
    others wait on it; if it is cancelled (its client went away), they ask again themselves.
    """
    cache = sources.snapshots
    while True:
        held = cache.current(base)
        if held is not None:
            return held
        flight = cache._flights.get(base)
        if flight is None:
            if sources.background is None:
                break
            flight = _SnapshotFlight()
            cache._flights[base] = flight
            sources.background.start_soon(_revalidate, sources, base, flight)
        else:
            cache.shared += 1
        last = cache.get(base) if sources.background is not None else None
        if last is not None and sources.freshness.is_fresh(last[1], datetime.now(UTC)):
            cache.served_while_revalidating += 1
            return last[1]
        await flight.done.wait()
        if flight.snapshot is not None:
            return flight.snapshot
        if flight.error is not None:
            raise flight.error
    flight = _SnapshotFlight()
    cache._flights[base] = flight
    try:
        flight.snapshot = await _request_snapshot(sources, base)
    except Exception as exc:  # handed to every read that joined; never cached
        flight.error = exc
        raise
    finally:
        del cache._flights[base]
        flight.done.set()
    return flight.snapshot


LATE_RETRY_DIVISOR = 20
RETRY_AFTER_FAILURE = 1.0
"""Seconds a failed background revalidation lets the last snapshot stand before the next try
(it is still judged fresh or stale on every read): a Device Manager that is down is asked
once a second, not once per read."""


async def _revalidate(sources: Sources, base: str, flight: _SnapshotFlight) -> None:
    """The detached request of :func:`_fetch`; its failure is handed to the readers waiting."""
    cache = sources.snapshots
    try:
        with trio.fail_after(OPERATION_TIMEOUT):
            flight.snapshot = await _request_snapshot(sources, base)
    except Exception as exc:  # never out into the daemon's nursery (a timeout included)
        flight.error = exc
        log.info("revalidating the snapshot of %s failed: %s", base, exc)
        last = cache.get(base)
        if last is not None:
            cache.put(base, last[0], last[1], RETRY_AFTER_FAILURE)
    finally:
        del cache._flights[base]
        flight.done.set()


async def _request_snapshot(sources: Sources, base: str) -> MonitorSnapshot:
    if sources.device_managers is not None:
        snapshot = await _read_snapshot(sources.device_managers, base, sources.snapshots)
    else:
        async with device_manager_client(sources.device_manager_transport) as client:
            snapshot = await _read_snapshot(client, base, sources.snapshots)
    cached = sources.snapshots.get(base)
    if cached is not None and cached[1] is snapshot:  # stored under its own tag just now
        hold = sources.freshness.unchanged_for(snapshot, datetime.now(UTC))
        # A producer past its tick (a 304 with nothing held) is asked again a twentieth of a
        # period later, not at once: the next read would otherwise start the next request.
        floor = sources.freshness.bound(snapshot) / FRESHNESS_PERIODS / LATE_RETRY_DIVISOR
        sources.snapshots.put(base, cached[0], snapshot, max(hold, floor).total_seconds())
    return snapshot


async def _read_snapshot(
    client: httpx.AsyncClient, base: str, cache: SnapshotCache
) -> MonitorSnapshot:
    """GET the snapshot (gzip welcome), revalidating the cached one by its ``ETag``.

    The 4 MiB bound applies to the *decoded* bytes, counted as they are inflated, so a small
    compressed body cannot make the worker hold more than a plain one could.
    """
    headers = {"Accept": "application/json", "Accept-Encoding": "gzip"}
    cached = cache.get(base)
    if cached is not None:
        headers["If-None-Match"] = cached[0]
    async with client.stream("GET", f"{base}/monitor/snapshot", headers=headers) as response:
        if response.status_code == 304 and cached is not None:
            cache.revalidated += 1
            return cached[1]
        if response.status_code != 200:
            raise ValueError(f"answered {response.status_code}")
        body = bytearray()
        chunks = response.aiter_bytes()
        try:
            async for chunk in chunks:
                body += chunk
                if len(body) > MAX_SNAPSHOT_BYTES:
                    raise ValueError(f"larger than {MAX_SNAPSHOT_BYTES} bytes")
        finally:
            await abandon_body(response, chunks)  # leaving early strands no nested iterator
        etag = response.headers.get("ETag")
    snapshot = parse_snapshot(bytes(body))
    if etag:
        cache.put(base, etag, snapshot)
    return snapshot
