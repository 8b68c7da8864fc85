"""``GET …/instances/<name>/metrics``: fetch, then let the core decide (reference §4).

Every figure is computed by ``gpustack_core.sample.instance_sample`` — the exporter's function
— so the two surfaces agree. This module only fetches: the Instance (uncached), its backing Pod
(scoped by name, node and part-of UID), usage from the kubelet (through the shared summary
cache) or metrics.k8s.io, and one snapshot per allocated manufacturer from that manufacturer's
own Device Manager. Accelerator failures are logged, never fatal.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx
import trio

from gpustack_core import contract
from gpustack_core.allocation import Grant
from gpustack_core.decoding import ContractError
from gpustack_core.instance import resources_of
from gpustack_core.instance_metrics import InstanceMetrics, ObjectMeta
from gpustack_core.kubelet import usage_from_summary
from gpustack_core.podmetrics import pod_metrics_from_object, usage_from_pod_metrics
from gpustack_core.pods import (
    PART_OF_LABEL,
    Pod,
    is_ready,
    is_terminating,
    named_port,
    pod_from_object,
)
from gpustack_core.sample import instance_sample, pod_grants, pod_started, totals_from_resources
from gpustack_core.snapshot import (
    DEFAULT_FRESHNESS_POLICY,
    MAX_SNAPSHOT_BYTES,
    Freshness,
    MonitorSnapshot,
    parse_snapshot,
)
from gpustack_core.usage import PodUsage
from gpustack_kube.client import ApiError, KubeClient, KubeError, abandon_body
from gpustack_kube.paths import INSTANCES, POD_METRICS, PODS
from gpustack_worker.summaries import SummaryCache
from gpustack_worker.views import Views

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


async def instance_metrics(
    sources: Sources, namespace: str, name: str, now: datetime | None = None
) -> InstanceMetrics:
    """The subresource's answer; ``ApiError`` (e.g. 404) passes through, ``Unavailable`` → 503."""
    with trio.fail_after(OPERATION_TIMEOUT):
        return await _instance_metrics(sources, namespace, name, now or datetime.now(UTC))


async def _instance_metrics(
    sources: Sources, namespace: str, name: str, now: datetime
) -> InstanceMetrics:
    instance = sources.views.instance(namespace, name) if sources.views is not None else None
    if instance is None:
        instance = await sources.client.get(INSTANCES.path(namespace, name))
    uid = str(instance.get("metadata", {}).get("uid", ""))
    what = f"Instance {namespace}/{name}"
    fallback = totals_from_resources(resources_of(instance, what=what).limits(), what=what)
    pod = await _backing_pod(sources, namespace, name, uid)
    usage: PodUsage | None = None
    snapshots: dict[str, MonitorSnapshot] = {}
    if pod is not None and pod_started(pod):  # the gate: nothing started → no upstream I/O
        usage = await _usage(sources, pod)
        snapshots = await _snapshots(sources, pod)
    result = instance_sample(
        pod=pod,
        fallback=fallback,
        usage=usage,
        snapshots=snapshots,
        now=now,
        freshness=sources.freshness,
    )
    for note in result.notes:
        log.info("%s/%s: %s", namespace, name, note)
    return InstanceMetrics.of(ObjectMeta(name=name, namespace=namespace, uid=uid), result.sample)


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


async def _usage(sources: Sources, pod: Pod) -> PodUsage:
    """The kubelet first, metrics.k8s.io second; both failing is the one 503."""
    meta = pod.metadata
    if pod.status.host_ip:
        sources.node_addresses[pod.spec.node_name] = pod.status.host_ip
    try:
        summary = await sources.summaries.get(pod.spec.node_name)
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
        return usage
    try:
        raw = await sources.client.get(POD_METRICS.path(meta.namespace, meta.name))
        metrics = usage_from_pod_metrics(
            pod_metrics_from_object(raw), pod_created=meta.creation_timestamp
        )
        fallback = "" if metrics is not None else "metrics.k8s.io: no usable entry for the Pod"
    except (KubeError, ContractError) as exc:
        metrics, fallback = None, f"metrics.k8s.io: {exc}"
    if metrics is not None:
        return metrics
    raise Unavailable(f"no source measured Pod {meta.namespace}/{meta.name}: {kubelet}; {fallback}")


async def _snapshots(sources: Sources, pod: Pod) -> dict[str, MonitorSnapshot]:
    """One snapshot per allocated manufacturer, each from its own Device Manager."""
    try:
        held: list[Grant] = pod_grants(pod)
    except ContractError as exc:
        log.info("%s", exc)
        return {}
    wanted = sorted({g.manufacturer for g in held})
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
    held = sources.snapshots.current(base)
    if held is not None:
        return held
    if sources.device_managers is not None:
        snapshot = await _read_snapshot(sources.device_managers, base, sources.snapshots)
    else:
        async with device_manager_client(sources.device_manager_transport) as client:
            snapshot = await _read_snapshot(client, base, sources.snapshots)
    cached = sources.snapshots.get(base)
    if cached is not None and cached[1] is snapshot:  # stored under its own tag just now
        hold = sources.freshness.unchanged_for(snapshot, datetime.now(UTC))
        sources.snapshots.put(base, cached[0], snapshot, hold.total_seconds())
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
