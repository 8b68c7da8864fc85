"""The MetricAccess controller: every ``interval``, each declared slice copied to its target.

docs/multi-tenant-metrics.md, "Deliver". Built as the InstanceType controller is: an informer
over ``metricaccesses.observability.gpustack.ai`` tells a rate-limited work queue which objects
changed, and :class:`KeyWorkers` reconciles each key. The reconcile is level-triggered: it reads
the object from the cache, checks its spec with :mod:`gpustack_core.metricaccess` (the same
checks admission makes), delivers once (:mod:`.delivery`), writes the status, and asks to be
called again after the spec's interval. A spec that cannot be taken is reported in the status
(``lastError``, condition ``Delivered=False`` reason ``InvalidSpec``) and not retried until it
changes; a failed delivery is reported and retried at the next interval, the last good figures
kept.

The cluster Prometheus is read through the isolating proxy (prom-label-proxy) when the spec
asks for ``metricIsolation``; an unisolated read goes to the cluster Prometheus directly and is
refused when none is configured (the chart leaves it unset: unisolated delivery is opt-in).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import httpx
import trio

from gpustack_core.metricaccess import GROUP, PLURAL, VERSION, MetricsError, spec_from_object
from gpustack_kube.client import KubeClient, NotFound
from gpustack_kube.informer import Informer, Key
from gpustack_kube.leader import ElectionConfig, LeaderElector
from gpustack_kube.paths import Resource
from gpustack_kube.workqueue import WorkQueue
from gpustack_worker.keyworkers import KeyWorkers, write_log
from gpustack_worker.metricaccess.delivery import (
    DeliveryError,
    Resolve,
    SeriesKey,
    fresh,
    in_cluster,
    read_slice,
    write,
)

log = logging.getLogger("gpustack.worker.metricaccess")

METRIC_ACCESSES: Final = Resource(GROUP, VERSION, PLURAL)
CONDITION: Final = "Delivered"


@dataclass(frozen=True)
class MetricAccessOptions:
    """Where the slices are read from and how targets are reached.

    ``isolating_url``: prom-label-proxy in front of the cluster Prometheus (isolated reads).
    ``cluster_url``: the cluster Prometheus itself, for ``metricIsolation: false``; ``None``
    refuses such objects. ``resolve``: a target's base URL (its Service's cluster DNS name).
    ``election``: the Lease the replicas elect a leader on; only the leader delivers, so two
    replicas never write one slice twice (``None``: this process delivers alone, as a test).
    """

    isolating_url: str
    cluster_url: str | None = None
    resolve: Resolve = in_cluster
    workers: int = 2
    timeout: float = 10.0
    election: ElectionConfig | None = None


def _now_rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class MetricAccessController:
    """Delivers every MetricAccess; run :meth:`run` in the worker's nursery."""

    def __init__(
        self,
        client: KubeClient,
        options: MetricAccessOptions,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Informer over ``client``; the HTTP client for Prometheus is made in :meth:`run`."""
        self.client = client
        self.options = options
        self.clock = clock
        self.queue = WorkQueue()
        self.objects: Informer[dict[str, Any]] = Informer(client, METRIC_ACCESSES.path())
        self.objects.add_handler(self._changed)
        self.workers = KeyWorkers(self.queue, self.reconcile, log)
        self.writes = write_log()
        self._marks: dict[Key, dict[SeriesKey, int]] = {}
        self._due: dict[Key, tuple[str, float]] = {}
        """(spec, when the next delivery is due): the status write's own watch event,
        or a resync, must not deliver again before the interval is up."""
        self._http: httpx.AsyncClient | None = None
        self.elector = None if options.election is None else LeaderElector(client, options.election)

    def _changed(self, key: Key) -> None:
        self.queue.add(f"{key[0]}/{key[1]}")

    async def run(self) -> None:
        """The informer always; the workers while this replica leads, until cancelled.

        The informer runs on every replica so a new leader starts warm; its high-water marks
        start empty, so its first delivery re-sends the interval's samples, which the target
        keeps once (Prometheus drops a sample it already holds).
        """
        async with httpx.AsyncClient(timeout=self.options.timeout) as http:
            self._http = http
            async with trio.open_nursery() as nursery:
                await nursery.start(self.objects.run)
                if self.elector is None:
                    await self.workers.run(self.options.workers)
                else:
                    await self.elector.run(self._lead)

    async def _lead(self) -> None:
        """Deliver while leading; a lost lease cancels this, and the next term starts afresh."""
        self._marks.clear()
        self._due.clear()
        for obj in self.objects.objects():
            meta = obj.get("metadata") or {}
            self.queue.add(f"{meta.get('namespace', '')}/{meta.get('name', '')}")
        await self.workers.run(self.options.workers)

    async def drain(self, timeout: float = 10.0) -> None:
        """Stop taking keys and wait (at most ``timeout``) for the deliveries in flight."""
        await self.workers.drain(timeout)

    async def reconcile(self, key: str) -> float | None:
        """Deliver one object's slice once; the seconds until the next delivery, if any."""
        namespace, _, name = key.partition("/")
        obj = self.objects.get(namespace, name)
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            self._marks.pop((namespace, name), None)
            self._due.pop((namespace, name), None)
            return None
        # The spec itself, not metadata.generation: a status write must not look like a change
        # even where an API server (the stand-in) moves the generation on it.
        generation = json.dumps(obj.get("spec"), sort_keys=True)
        due = self._due.get((namespace, name))
        if due is not None and due[0] == generation and self.clock() < due[1]:
            return due[1] - self.clock()  # delivered this interval; the spec is unchanged
        status = dict(obj.get("status") or {})
        try:
            spec = spec_from_object(obj)
        except MetricsError as exc:
            await self._status(obj, status, {"lastError": str(exc)}, False, "InvalidSpec", str(exc))
            return None
        if not spec.enabled or spec.target is None:
            await self._status(obj, status, {}, False, "Disabled", "remoteWrite is not enabled")
            return None
        base = self.options.isolating_url if spec.isolation else self.options.cluster_url
        if base is None:
            why = "metricIsolation: false is not enabled on this cluster"
            await self._status(obj, status, {"lastError": why}, False, "Unisolated", why)
            return None
        assert self._http is not None, "reconcile runs inside run()"
        target = spec.target
        url = self.options.resolve(target).rstrip("/") + target.path
        now = self.clock()
        marks = self._marks.setdefault((namespace, name), {})
        try:
            read, foreign = await read_slice(self._http, base, spec, now)
            moved = dict(marks)  # the marks move only once the target took the samples
            series = fresh(read, moved, target.extra_labels)
            if series:
                await write(self._http, url, series)
        except DeliveryError as exc:
            why = str(exc)
            await self._status(obj, status, {"lastError": why}, False, "DeliveryFailed", why)
            return spec.interval
        marks.update(moved)
        self._due[(namespace, name)] = (generation, now + spec.interval)
        samples = sum(len(s.samples) for s in series)
        figures: dict[str, Any] = {
            "series": len(series),
            "samples": samples,
            "lastDeliveryTime": _now_rfc3339(now),
            "lastError": None,
        }
        message = f"{len(series)} series, {samples} samples to {url}"
        if foreign:
            message += f"; {foreign} series of other namespaces dropped"
        await self._status(obj, status, figures, True, "Delivered", message)
        self.writes.append(("deliver", f"{key}: {message}"))
        return spec.interval

    async def _status(
        self,
        obj: dict[str, Any],
        old: dict[str, Any],
        figures: dict[str, Any],
        ok: bool,
        reason: str,
        message: str,
    ) -> None:
        """Merge-patch the status: the figures and the ``Delivered`` condition."""
        meta = obj.get("metadata") or {}
        now = _now_rfc3339(self.clock())
        previous: dict[str, Any] = next(
            (c for c in old.get("conditions") or () if c.get("type") == CONDITION), {}
        )
        state = "True" if ok else "False"
        condition = {
            "type": CONDITION,
            "status": state,
            "reason": reason,
            "message": message[:1024],
            "lastTransitionTime": previous.get("lastTransitionTime", now)
            if previous.get("status") == state
            else now,
        }
        patch = {
            "status": {
                **figures,
                "observedGeneration": meta.get("generation"),
                "conditions": [condition],
            }
        }
        path = METRIC_ACCESSES.path(str(meta.get("namespace")), str(meta.get("name")), "status")
        try:
            await self.client.patch(path, patch)
        except NotFound:
            return  # deleted meanwhile
