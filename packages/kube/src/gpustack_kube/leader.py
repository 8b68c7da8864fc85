"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's ``leaderelection``.

Two worker replicas must never both reconcile Instances (they would fight over Pods and
Services). One holds the Lease and renews it every ``retry_period``; the others try to take it
when it has not been renewed for ``lease_duration``. Every write carries the Lease's
``resourceVersion``, so two candidates racing for an expired Lease cannot both win: the loser
gets ``409 Conflict`` and stays a follower.

Expiry is judged on the candidate's *own* monotonic clock, from when it last saw the Lease's
record change, never by comparing the Lease's timestamps with local wall time: clocks on two
nodes disagree, and a skewed clock must not let a follower take a Lease that is being renewed.
A leader that cannot renew within ``renew_deadline`` stops leading (its work is cancelled)
before any follower may take over (``renew_deadline < lease_duration``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import trio

from gpustack_kube.client import ApiError, Conflict, KubeClient, KubeError, NotFound
from gpustack_kube.paths import LEASES

log = logging.getLogger(__name__)


def _micro_time(when: datetime) -> str:
    """``metav1.MicroTime``: RFC 3339 with microseconds, in UTC."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class ElectionConfig:
    """client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry."""

    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election needs retry period < renew deadline < lease duration, got "
                f"{self.retry_period} s, {self.renew_deadline} s, {self.lease_duration} s"
            )


class LeaderElector:
    """Run ``lead`` while this candidate holds the Lease; follow otherwise, forever."""

    def __init__(self, client: KubeClient, config: ElectionConfig) -> None:
        self.client = client
        self.config = config
        self.leading = False
        self.transitions = 0
        """How many times this candidate became leader; for tests and health."""
        self._observed: tuple[str, str] | None = None
        """(holder, renewTime) last seen, and when (monotonic) it was first seen so."""
        self._observed_at = 0.0

    @property
    def _path(self) -> str:
        return LEASES.path(self.config.namespace, self.config.name)

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Alternate between following and leading until cancelled."""
        while True:
            await self._acquire()
            self.transitions += 1
            log.info("%s: leading (lease %s)", self.config.identity, self.config.name)
            self.leading = True
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._lead_then_release, lead, nursery.cancel_scope)
                    await self._renew_until_lost()
                    nursery.cancel_scope.cancel()
            finally:
                self.leading = False
            log.warning("%s: lost the lease %s", self.config.identity, self.config.name)

    async def _lead_then_release(
        self, lead: Callable[[], Awaitable[None]], scope: trio.CancelScope
    ) -> None:
        await lead()
        scope.cancel()  # the work ended by itself: stop renewing too

    async def _acquire(self) -> None:
        while not await self._try():
            await trio.sleep(self.config.retry_period)

    async def _renew_until_lost(self) -> None:
        deadline = trio.current_time() + self.config.renew_deadline
        while True:
            await trio.sleep(self.config.retry_period)
            if await self._try():
                deadline = trio.current_time() + self.config.renew_deadline
            elif trio.current_time() >= deadline or not self._still_ours():
                return

    def _still_ours(self) -> bool:
        return self._observed is not None and self._observed[0] == self.config.identity

    async def _try(self) -> bool:
        """One attempt to take or renew the Lease; ``True`` when this candidate holds it."""
        now = datetime.now(UTC)
        try:
            lease = await self.client.get(self._path)
        except NotFound:
            return await self._create(now)
        except KubeError as exc:
            log.info("%s: reading lease: %s", self.config.identity, exc)
            return False
        spec: dict[str, Any] = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        record = (holder, str(spec.get("renewTime") or ""))
        if record != self._observed:
            self._observed, self._observed_at = record, trio.current_time()
        duration = float(spec.get("leaseDurationSeconds") or self.config.lease_duration)
        expired = trio.current_time() - self._observed_at >= duration
        if holder and holder != self.config.identity and not expired:
            return False
        fresh = dict(spec)
        if holder != self.config.identity:
            fresh["acquireTime"] = _micro_time(now)
            fresh["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (
                1 if holder else 0
            )
        fresh.update(
            holderIdentity=self.config.identity,
            leaseDurationSeconds=round(self.config.lease_duration),
            renewTime=_micro_time(now),
        )
        body = {**lease, "spec": fresh}
        try:
            updated = await self.client.update(self._path, body)
        except Conflict:
            return False  # another candidate wrote first; its record is read next time
        except (ApiError, KubeError) as exc:
            log.info("%s: updating lease: %s", self.config.identity, exc)
            return False
        self._seen(updated)
        return True

    async def _create(self, now: datetime) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.config.name, "namespace": self.config.namespace},
            "spec": {
                "holderIdentity": self.config.identity,
                "leaseDurationSeconds": round(self.config.lease_duration),
                "acquireTime": _micro_time(now),
                "renewTime": _micro_time(now),
                "leaseTransitions": 0,
            },
        }
        try:
            created = await self.client.create(LEASES.path(self.config.namespace), body)
        except (ApiError, KubeError) as exc:  # AlreadyExists: someone else was first
            log.info("%s: creating lease: %s", self.config.identity, exc)
            return False
        self._seen(created)
        return True

    def _seen(self, lease: dict[str, Any]) -> None:
        spec = lease.get("spec") or {}
        self._observed = (str(spec.get("holderIdentity") or ""), str(spec.get("renewTime") or ""))
        self._observed_at = trio.current_time()
