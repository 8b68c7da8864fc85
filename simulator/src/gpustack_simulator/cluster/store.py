"""The object store: resourceVersions, lists and watches, as an API server keeps them.

Every change gets the next resourceVersion and is kept in a bounded history, so a watch can
resume from the version a list returned; asking for one older than the history answers 410 Gone
("too old resource version"), exactly the case informers must handle by relisting.

Lists are served from indexes kept on every write, never by scanning or sorting every object:
each kind keeps its objects in list order (namespace, then name), and so does every bucket of
its indexes (by namespace, by ``spec.nodeName``, by label key and by label ``key=value``). A
bucket is therefore always a subsequence of the kind's list, in the same order, so a list
narrowed through an index returns exactly what the scan returned, at the cost of the bucket.
The same buckets answer the node simulator and the garbage collector: objects by UID, those
being deleted (``deletionTimestamp``), those with owners and those owned by one UID.

Watch events are filed by ``spec.nodeName`` too, so a watch narrowed to one node (every
Device Manager's Pod informer) wakes for, and reads, only its node's events.
"""

from __future__ import annotations

import copy
import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import trio

from gpustack_simulator.cluster.selectors import NOTHING, Narrowing

HISTORY = 1000
"""Events kept for watch resumption."""
MEMOS_PER_KIND = 4096
"""Answers kept per kind between two of its changes (``Store.memo``); the oldest goes first."""

T = TypeVar("T")
_Objects = list[dict[str, Any]]
"""A list of stored objects (``Store.list`` shadows the builtin's name in the class body)."""


@dataclass(frozen=True)
class Event:
    """One change, as a watch delivers it."""

    type: str  # ADDED | MODIFIED | DELETED
    kind: str
    object: dict[str, Any]
    version: int


_Events = list["Event"]


class TooOld(Exception):  # noqa: N818 — the API server's own name for the condition
    """The requested resourceVersion has left the history."""


Key = tuple[str, str, str]
"""(kind, namespace, name); cluster-scoped objects have namespace ``""``."""

Name = tuple[str, str]
"""(namespace, name) within one kind: the list order."""


class _Bucket:
    """Objects in list order ((namespace, name)), as two parallel lists."""

    __slots__ = ("names", "objects")

    def __init__(self) -> None:
        self.names: list[Name] = []
        self.objects: list[dict[str, Any]] = []

    def set(self, name: Name, obj: dict[str, Any]) -> None:
        at = bisect_left(self.names, name)
        if at < len(self.names) and self.names[at] == name:
            self.objects[at] = obj
        else:
            self.names.insert(at, name)
            self.objects.insert(at, obj)

    def remove(self, name: Name) -> None:
        at = bisect_left(self.names, name)
        if at < len(self.names) and self.names[at] == name:
            del self.names[at]
            del self.objects[at]

    def __len__(self) -> int:
        return len(self.names)

    def in_namespace(self, namespace: str | None) -> list[dict[str, Any]]:
        """A copy of the bucket, restricted to one namespace (``None``: all of it)."""
        if namespace is None:
            return list(self.objects)
        return [o for n, o in zip(self.names, self.objects, strict=True) if n[0] == namespace]


# The bucket an object belongs to, per index: ("ns", namespace), ("name", name),
# ("node", nodeName),
# ("label", key), ("label=", key, value). "node" and the label ones are left out for an object
# whose field cannot be read the way the selectors read it; see ``_Kind.exact``.
# For the node simulator and the garbage collector: ("uid", uid), ("deleting",) (a
# deletionTimestamp is set), ("unbound",) (a spec whose nodeName is missing or false),
# ("owned",) (any ownerReferences) and ("owner", uid) per owner;
# "owner" is left out (and scanned for) when the references cannot be read as the collector
# reads them.
BucketKey = tuple[Hashable, ...]
DELETING: BucketKey = ("deleting",)
UNBOUND: BucketKey = ("unbound",)
OWNED: BucketKey = ("owned",)


def _node_name(obj: Mapping[str, Any]) -> str:
    # Exactly the ``spec.nodeName`` field selector's reading (selectors.FIELDS).
    return str(obj.get("spec", {}).get("nodeName", ""))


@dataclass
class _Kind:
    """One kind's objects and indexes."""

    all: _Bucket = field(default_factory=_Bucket)
    by_name: dict[Name, dict[str, Any]] = field(default_factory=dict)
    buckets: dict[BucketKey, _Bucket] = field(default_factory=dict)
    memberships: dict[Name, tuple[BucketKey, ...]] = field(default_factory=dict)
    unindexed: dict[str, int] = field(default_factory=dict)
    """Per index ("node", "label"), how many objects it could not place; lists scan then."""

    def exact(self, index: str) -> bool:
        return not self.unindexed.get(index)

    def _placements(self, name: Name, obj: Mapping[str, Any]) -> tuple[BucketKey, ...]:
        found: list[BucketKey] = [("ns", name[0]), ("name", name[1])]
        try:
            found.append(("node", _node_name(obj)))
        except Exception:  # a malformed spec: the selector itself would fail on it
            found.append(("unindexed", "node"))
        try:
            labels = obj.get("metadata", {}).get("labels") or {}
            placed = []
            for key, value in labels.items():
                placed += [("label", key), ("label=", key, value)]
            hash(tuple(placed))
            found += placed
        except Exception:  # labels that are not a map of hashable values
            found.append(("unindexed", "label"))
        spec = obj.get("spec")
        if isinstance(spec, Mapping) and not spec.get("nodeName"):
            found.append(UNBOUND)  # the node simulator's reading: any false nodeName
        meta = obj.get("metadata")
        if isinstance(meta, Mapping):
            uid = meta.get("uid")  # None too: the collector's set of UIDs holds it then
            try:
                hash(uid)
                found.append(("uid", uid))
            except TypeError:
                found.append(("unindexed", "uid"))
            if meta.get("deletionTimestamp"):
                found.append(DELETING)
            try:
                owners = meta.get("ownerReferences") or ()
                placed = [("owner", ref.get("uid")) for ref in owners]
                hash(tuple(placed))
                if owners:
                    found.append(OWNED)
                found += dict.fromkeys(placed)
            except Exception:  # references that are not a list of maps
                found.append(("unindexed", "owner"))
        return tuple(found)

    def set(self, name: Name, obj: dict[str, Any]) -> None:
        self.all.set(name, obj)
        self.by_name[name] = obj
        old = self.memberships.get(name, ())
        new = self._placements(name, obj)
        for key in old:
            if key not in new:
                self._leave(key, name)
        for key in new:
            if key[0] == "unindexed":
                if key not in old:
                    self.unindexed[str(key[1])] = self.unindexed.get(str(key[1]), 0) + 1
                continue
            self.buckets.setdefault(key, _Bucket()).set(name, obj)
        self.memberships[name] = new

    def remove(self, name: Name) -> None:
        self.all.remove(name)
        self.by_name.pop(name, None)
        for key in self.memberships.pop(name, ()):
            self._leave(key, name)

    def _leave(self, key: BucketKey, name: Name) -> None:
        if key[0] == "unindexed":
            self.unindexed[str(key[1])] -= 1
            return
        bucket = self.buckets[key]
        bucket.remove(name)
        if not bucket:
            del self.buckets[key]

    def bucket(self, key: BucketKey) -> _Bucket:
        return self.buckets.get(key) or _Bucket()


class Store:
    """Objects by kind, with a monotonically increasing resourceVersion."""

    def __init__(self) -> None:
        self._kinds: dict[str, _Kind] = {}
        self._version = 0
        # One event per version, oldest first: ``_events[i].version == _first + i``. Trimmed
        # in chunks, so it may hold more than HISTORY events; only the last HISTORY count.
        self._events: list[Event] = []
        self._first = 1
        self._changed = trio.Event()
        self._kind_changed: dict[str, trio.Event] = {}
        self._memos: dict[str, dict[Hashable, Any]] = {}
        # The same events filed by (kind, spec.nodeName of the object); ``None`` for an object
        # whose node cannot be read. Each list is in version order and trimmed with the
        # history; ``_node_trimmed`` keeps the newest version each list lost to trimming.
        self._node_events: dict[tuple[str, str | None], list[Event]] = {}
        self._node_trimmed: dict[tuple[str, str | None], int] = {}
        self._node_changed: dict[tuple[str, str], trio.Event] = {}
        self._uid_kinds: dict[Hashable, dict[str, int]] = {}

    @property
    def version(self) -> int:
        """The current resourceVersion (of the newest change)."""
        return self._version

    def _notify(self, event: Event) -> None:
        # Watchers read from the history themselves; one event wakes all of them at once.
        self._events.append(event)
        try:
            node: str | None = _node_name(event.object)
        except Exception:  # a malformed spec: every node's watch reads it (and filters it)
            node = None
        self._node_events.setdefault((event.kind, node), []).append(event)
        if len(self._events) > HISTORY + HISTORY // 4:
            drop = len(self._events) - HISTORY
            del self._events[:drop]
            self._first += drop
            self._trim_node_events()
        changed, self._changed = self._changed, trio.Event()
        changed.set()
        waiting = self._kind_changed.pop(event.kind, None)
        if waiting is not None:
            waiting.set()
        if node is not None:
            waiting = self._node_changed.pop((event.kind, node), None)
            if waiting is not None:
                waiting.set()
        else:
            for key in [k for k in self._node_changed if k[0] == event.kind]:
                self._node_changed.pop(key).set()

    def _trim_node_events(self) -> None:
        for key, events in list(self._node_events.items()):
            cut = 0
            while cut < len(events) and events[cut].version < self._first:
                cut += 1
            if cut:
                self._node_trimmed[key] = events[cut - 1].version
                del events[:cut]
                if not events:
                    del self._node_events[key]

    def _commit(self, kind: str, stamped: dict[str, Any], event_type: str) -> dict[str, Any]:
        self._version += 1
        self._memos.pop(kind, None)
        stamped.setdefault("metadata", {})["resourceVersion"] = str(self._version)
        self._notify(Event(event_type, kind, stamped, self._version))
        return stamped

    def put(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object; watchers see ADDED or MODIFIED."""
        return self._put(kind, copy.deepcopy(obj))

    def _put(self, kind: str, own: dict[str, Any]) -> dict[str, Any]:
        """``put`` of an object nobody else holds (stamped and stored as it is)."""
        meta = own.get("metadata", {})
        name = (meta.get("namespace", ""), meta["name"])
        objects = self._kinds.setdefault(kind, _Kind())
        event_type = "MODIFIED" if name in objects.by_name else "ADDED"
        stamped = self._commit(kind, own, event_type)
        self._count_uid(kind, objects.memberships.get(name, ()), -1)
        objects.set(name, stamped)
        self._count_uid(kind, objects.memberships[name], 1)
        return stamped

    def _count_uid(self, kind: str, memberships: tuple[BucketKey, ...], step: int) -> None:
        """Keep ``_uid_kinds`` (UID → kind → how many objects) as an object joins or leaves."""
        for key in memberships:
            if key[0] == "uid":
                kinds = self._uid_kinds.setdefault(key[1], {})
                kinds[kind] = kinds.get(kind, 0) + step
                if not kinds[kind]:
                    del kinds[kind]
                    if not kinds:
                        del self._uid_kinds[key[1]]

    def delete(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Remove an object; watchers see DELETED with its last state."""
        objects = self._kinds.get(kind)
        obj = self.get(kind, namespace, name)
        if objects is None or obj is None:
            return None
        self._count_uid(kind, objects.memberships.get((namespace, name), ()), -1)
        objects.remove((namespace, name))
        return self._commit(kind, copy.deepcopy(obj), "DELETED")

    def update(
        self, kind: str, namespace: str, name: str, mutate: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any]:
        """Change an object in place through ``mutate``; raises ``KeyError`` when absent."""
        found = self.get(kind, namespace, name)
        if found is None:
            raise KeyError((kind, namespace, name))
        current = copy.deepcopy(found)
        mutate(current)
        return self._put(kind, current)

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """One object, as stored (callers must not mutate it)."""
        objects = self._kinds.get(kind)
        return None if objects is None else objects.by_name.get((namespace, name))

    def candidates(
        self, kind: str, namespace: str | None, narrowing: Narrowing = NOTHING
    ) -> list[dict[str, Any]]:
        """``list(kind, namespace)`` narrowed through the indexes, in the same order.

        What it returns is a subsequence of ``list(kind, namespace)`` holding every object
        ``narrowing`` allows: the caller still applies its selectors to it, and gets exactly
        what filtering the whole list would give. The smallest applicable bucket is used.
        """
        objects = self._kinds.get(kind)
        if objects is None:
            return []
        if narrowing.namespace is not None:
            if namespace is not None and namespace != narrowing.namespace:
                return []
            namespace = narrowing.namespace
        choices: list[_Bucket] = [
            objects.all if namespace is None else objects.bucket(("ns", namespace))
        ]
        if narrowing.name is not None:
            choices.append(objects.bucket(("name", narrowing.name)))
        if narrowing.node_name is not None and objects.exact("node"):
            choices.append(objects.bucket(("node", narrowing.node_name)))
        if objects.exact("label"):
            choices += [objects.bucket(("label=", k, v)) for k, v in narrowing.labels]
            choices += [objects.bucket(("label", k)) for k in narrowing.label_keys]
        best = min(choices, key=len)
        return best.in_namespace(namespace if best is not choices[0] else None)

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Objects of a kind (in one namespace, or all), ordered by namespace and name."""
        objects = self._kinds.get(kind)
        if objects is None:
            return []
        if namespace is None:
            return list(objects.all.objects)
        return list(objects.bucket(("ns", namespace)).objects)

    def memo(self, kind: str, key: Hashable, make: Callable[[], T]) -> T:
        """``make()``, kept until the next change to an object of ``kind``.

        For answers computed from that kind's objects alone (an encoded list, given its
        namespace and selectors): a thousand informers listing the same objects between two
        writes cost one encoding.
        """
        memos = self._memos.setdefault(kind, {})
        if key in memos:
            found: T = memos[key]
            return found
        made = memos[key] = make()
        if len(memos) > MEMOS_PER_KIND:
            del memos[next(iter(memos))]
        return made

    def events_since(self, kind: str, version: int) -> Iterator[Event]:
        """Events of a kind after ``version``; ``TooOld`` if the history no longer reaches it."""
        oldest = max(self._first, self._version - HISTORY + 1)
        if self._events and version < oldest - 1 and version < self._version:
            raise TooOld(version)
        start = max(version + 1, oldest) - self._first
        return iter([e for e in self._events[start:] if e.kind == kind])

    def node_events_since(self, kind: str, node: str, version: int) -> _Events:
        """The events of ``kind`` after ``version`` that a ``spec.nodeName=<node>`` watch can match.

        Those whose object (its last state, for a DELETED) is on ``node``, with those whose
        node cannot be read, in version order.

        ``TooOld`` only when the history lost one of those events: an event of another node
        leaving the history takes nothing from this watch.
        """
        found = []
        for key in ((kind, node), (kind, None)):
            if self._node_trimmed.get(key, 0) > version:
                raise TooOld(version)
            events = self._node_events.get(key)
            if events:
                at = bisect_right(events, version, key=lambda e: e.version)
                found.append(events[at:])
        if len(found) == 2:
            return list(heapq.merge(*found, key=lambda e: e.version))
        return found[0] if found else []

    async def wait_changed(self, kind: str | None = None, node: str | None = None) -> None:
        """Block until the next change; callers put a timeout around it.

        Of ``kind``, if named; then of an object on ``node`` too, if named (or of one whose
        node cannot be read).
        """
        if kind is None:
            await self._changed.wait()
            return
        if node is not None:
            at = self._node_changed.get((kind, node))
            if at is None:
                at = self._node_changed[(kind, node)] = trio.Event()
            await at.wait()
            return
        waiting = self._kind_changed.get(kind)
        if waiting is None:
            waiting = self._kind_changed[kind] = trio.Event()
        await waiting.wait()

    # -- what the node simulator and the garbage collector ask ------------------------------

    def with_uid(self, kind: str, uid: str) -> _Objects:
        """The objects of ``kind`` with that ``metadata.uid`` (one, or none), in list order."""
        objects = self._kinds.get(kind)
        if objects is None:
            return []
        if not objects.exact("uid"):
            return [o for o in objects.all.objects if o.get("metadata", {}).get("uid") == uid]
        return list(objects.bucket(("uid", uid)).objects)

    def has_uid(self, kind: str, uid: Any) -> bool:
        """Whether an object of ``kind`` has ``metadata.uid`` equal to ``uid``.

        A missing UID reads as ``None``, as ``metadata.get("uid")`` does.
        """
        objects = self._kinds.get(kind)
        if objects is None:
            return False
        if not objects.exact("uid"):
            return any(o.get("metadata", {}).get("uid") == uid for o in objects.all.objects)
        try:
            return bool(objects.buckets.get(("uid", uid)))
        except TypeError:  # an unhashable value no indexed UID can equal
            return any(o.get("metadata", {}).get("uid") == uid for o in objects.all.objects)

    def uid_in(self, kinds: Collection[str], uid: Any) -> bool:
        """Whether an object of one of ``kinds`` has ``metadata.uid`` equal to ``uid``."""
        try:
            found = self._uid_kinds.get(uid) or {}
        except TypeError:  # unhashable: only an unindexed UID can equal it
            found = {}
        if any(kind in kinds for kind in found):
            return True
        return any(
            self.has_uid(kind, uid)
            for kind in kinds
            if kind in self._kinds and not self._kinds[kind].exact("uid")
        )

    def deleting(self, kind: str) -> _Objects:
        """The objects of ``kind`` with a ``deletionTimestamp``, in list order."""
        objects = self._kinds.get(kind)
        return [] if objects is None else list(objects.bucket(DELETING).objects)

    def unbound(self, kind: str) -> _Objects:
        """The objects of ``kind`` with a ``spec`` and no (or a false) ``spec.nodeName``."""
        objects = self._kinds.get(kind)
        return [] if objects is None else list(objects.bucket(UNBOUND).objects)

    def gc_candidates(self, kind: str) -> _Objects:
        """Every object of ``kind`` being deleted or having owners, in list order.

        That is all the garbage collector can act on; the whole list when some references
        cannot be read.
        """
        objects = self._kinds.get(kind)
        if objects is None:
            return []
        if not objects.exact("owner"):
            return list(objects.all.objects)
        deleting, owned = objects.bucket(DELETING), objects.bucket(OWNED)
        if not deleting:
            return list(owned.objects)
        merged = dict(zip(deleting.names, deleting.objects, strict=True))
        merged.update(zip(owned.names, owned.objects, strict=True))
        return [merged[name] for name in sorted(merged)]

    def owned_by(self, kind: str, uid: Any) -> _Objects | None:
        """The objects of ``kind`` with an ownerReference of that UID, in list order.

        ``None`` when some of the kind's references cannot be read (the caller scans then).
        """
        objects = self._kinds.get(kind)
        if objects is None:
            return []
        if not objects.exact("owner"):
            return None
        return list(objects.bucket(("owner", uid)).objects)


def matches(obj: Mapping[str, Any], namespace: str | None) -> bool:
    """Namespace filter shared by lists and watches."""
    return namespace is None or obj.get("metadata", {}).get("namespace") == namespace
