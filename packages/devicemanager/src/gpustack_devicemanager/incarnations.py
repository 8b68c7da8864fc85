"""Whether each Instance Pod on the node belongs to its Instance's *current* incarnation.

The exporter publishes an Instance Pod only while the UID its ``part-of`` label and controller
reference name is the UID its Instance (same namespace, the reference's name) has now: the Pod
of a deleted Instance lingers until the garbage collector reaches it, and a recreated Instance
of the same name must never be shown that Pod's figures.

How the Device Manager learns the current UID, and why not an Instance informer
---------------------------------------------------------------------------------

An informer of every Instance in every Device Manager makes each node daemon hold, list and
follow the whole cluster's Instances: the API server sends each Instance write to every node,
and relists cost N-nodes times the collection. The kubelet has the same question for the
Secrets and ConfigMaps its Pods reference, and never watches the collection for it; it reads
only the objects its node's Pods name (``pkg/kubelet/util/manager``: a GET cached with a time
to live, or a watch per object). A custom resource can be selected by label, or by
``metadata.name`` / ``metadata.namespace`` only (without ``selectableFields``, which needs
Kubernetes 1.31 and a CRD change), and Instances carry no node label, so a selector cannot
narrow an informer to one node's Instances. A watch per referenced Instance would be exact,
but this client speaks HTTP/1.1, where every watch holds a connection of its own: ten
Instances per node would be ten more long-lived connections per node.

So this reads, with a GET by name, only the Instances the node's Pods reference, and caches
the answer per *UID*, which is what makes the cache safe:

* A UID never comes back. Once a read says an Instance is gone, or has another UID, that UID
  is not current for good: the negative answer is kept as long as a Pod names it, and never
  read again.
* A new incarnation always gets a new UID, so its Pod is always read on its first round: no
  positive answer about the predecessor can stand in for it.
* A positive answer can go stale only when the Instance is deleted. The ordinary path then is
  the garbage collector deleting the Pod (foreground deletion deletes it first), which the
  node's Pod informer sees: a terminating Pod is not published. A positive answer is read
  again after ``recheck`` seconds, which bounds the window if the collector lags or is down;
  it is the informer's own resync period (300 s), the bound an informer gave a missed event.
  Any read that finds another UID for the same Instance ends every cached positive of that
  Instance at once.

The daemon reads ahead (:meth:`InstanceIncarnations.follow`) each time its node's Pods change,
so an exporter round normally finds every answer cached; a round reads only what is still due
(a Pod that appeared just before it, an answer past ``recheck``).

A read that fails (network, 5xx, 403) changes nothing: a UID answered before keeps its answer,
and one never answered is kept, as it was while the former informer had not synced. Cost on
the API server: one GET per Instance Pod when it appears, then one per ``recheck``, instead of
every Instance write sent to every node.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import trio

from gpustack_core.pods import Pod, is_instance_pod, is_terminating
from gpustack_kube.client import KubeClient, KubeError, NotFound
from gpustack_kube.paths import INSTANCES

log = logging.getLogger("gpustack.devicemanager.incarnations")

RECHECK_SECONDS = 300.0
"""How long a positive answer stands before it is read again (the informer resync period)."""

CONCURRENT_READS = 1
"""Reads in flight at once: one, over the client's kept-alive connection. More would open (and
TLS-handshake) a connection each; nothing waits on the read-ahead, and a round rarely reads."""

Key = tuple[str, str]
"""(namespace, Instance name)."""


@dataclass(frozen=True)
class _Answer:
    current: bool
    at: float


@dataclass(frozen=True)
class IncarnationStatistics:
    """Counters for tests and benches."""

    reads: int
    failed_reads: int
    cached: int


def instance_key(pod: Pod) -> tuple[Key, str] | None:
    """The Instance a live Instance Pod belongs to, and the UID it names; ``None`` otherwise."""
    if not is_instance_pod(pod) or is_terminating(pod):
        return None
    owner = next((r for r in pod.metadata.owner_references if r.controller), None)
    if owner is None:
        return None
    return (pod.metadata.namespace, owner.name), owner.uid


class InstanceIncarnations:
    """The current UID of the Instances a node's Pods reference: GETs by name, cached per UID."""

    def __init__(
        self,
        client: KubeClient,
        *,
        recheck: float = RECHECK_SECONDS,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self.client = client
        self.recheck = recheck
        self.clock = clock
        self._answers: dict[str, _Answer] = {}
        self._reads = 0
        self._failed = 0

    def statistics(self) -> IncarnationStatistics:
        """A frozen copy of the counters."""
        return IncarnationStatistics(self._reads, self._failed, len(self._answers))

    async def current_uids(self, pods: Sequence[Pod]) -> dict[Key, str]:
        """(namespace, name) → current UID for every Instance ``pods`` reference.

        An Instance that is gone, or whose every referencing UID is known not to be current, is
        absent; one that could not be read keeps the UID its Pod names (nothing is dropped on a
        failed read alone), as :func:`~gpustack_devicemanager.exporter.current_incarnations`
        expects.
        """
        wanted: dict[Key, set[str]] = {}
        for pod in pods:
            found = instance_key(pod)
            if found is not None:
                wanted.setdefault(found[0], set()).add(found[1])
        now = self.clock()
        due = [key for key, uids in wanted.items() if any(self._due(uid, now) for uid in uids)]
        if due:
            limiter = trio.CapacityLimiter(CONCURRENT_READS)
            async with trio.open_nursery() as nursery:
                for key in due:
                    nursery.start_soon(self._read, key, wanted[key], limiter)
        referenced = set().union(*wanted.values()) if wanted else set()
        for uid in self._answers.keys() - referenced:
            del self._answers[uid]  # no Pod names it any more
        answer: dict[Key, str] = {}
        for key, uids in wanted.items():
            for uid in sorted(uids):
                known = self._answers.get(uid)
                if known is None or known.current:
                    answer[key] = uid
        return answer

    async def follow(
        self,
        pods: Callable[[], Sequence[Pod] | None],
        changed: Callable[[], Awaitable[None]],
    ) -> None:
        """Read ahead each time the node's Pods change (``pods``: ``None`` until known).

        A round then finds its answers cached and renders at once; it still reads what is due.
        """
        while True:
            current = pods()
            if current is not None:
                await self.current_uids(current)
            await changed()

    def _due(self, uid: str, now: float) -> bool:
        known = self._answers.get(uid)
        if known is None:
            return True
        return known.current and now - known.at >= self.recheck

    async def _read(self, key: Key, uids: set[str], limiter: trio.CapacityLimiter) -> None:
        namespace, name = key
        async with limiter:
            self._reads += 1
            try:
                obj = await self.client.get(INSTANCES.path(namespace, name))
            except NotFound:
                current = None
            except KubeError as exc:
                self._failed += 1
                log.warning(
                    "Instance %s/%s not read (its Pods keep their standing): %s",
                    namespace,
                    name,
                    exc,
                )
                return
            else:
                metadata = obj.get("metadata")
                uid = metadata.get("uid") if isinstance(metadata, dict) else None
                current = uid if isinstance(uid, str) and uid else None
        at = self.clock()
        for uid in uids:
            self._answers[uid] = _Answer(uid == current, at)
