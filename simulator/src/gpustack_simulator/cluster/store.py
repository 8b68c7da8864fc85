"""The object store: resourceVersions, lists and watches, as an API server keeps them.

Every change gets the next resourceVersion and is kept in a bounded history, so a watch can
resume from the version a list returned; asking for one older than the history answers 410 Gone
("too old resource version"), exactly the case informers must handle by relisting.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import trio

HISTORY = 1000
"""Events kept for watch resumption."""


@dataclass(frozen=True)
class Event:
    """One change, as a watch delivers it."""

    type: str  # ADDED | MODIFIED | DELETED
    kind: str
    object: dict[str, Any]
    version: int


class TooOld(Exception):  # noqa: N818 — the API server's own name for the condition
    """The requested resourceVersion has left the history."""


Key = tuple[str, str, str]
"""(kind, namespace, name); cluster-scoped objects have namespace ``""``."""


class Store:
    """Objects by kind, with a monotonically increasing resourceVersion."""

    def __init__(self) -> None:
        self._objects: dict[Key, dict[str, Any]] = {}
        self._version = 0
        self._history: deque[Event] = deque(maxlen=HISTORY)
        self._changed = trio.Event()

    @property
    def version(self) -> int:
        """The current resourceVersion (of the newest change)."""
        return self._version

    def _stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._version += 1
        stamped = copy.deepcopy(obj)
        stamped.setdefault("metadata", {})["resourceVersion"] = str(self._version)
        return stamped

    def _notify(self, event: Event) -> None:
        # Watchers read from the history themselves; one event wakes all of them at once.
        self._history.append(event)
        changed, self._changed = self._changed, trio.Event()
        changed.set()

    def put(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object; watchers see ADDED or MODIFIED."""
        meta = obj.get("metadata", {})
        key = (kind, meta.get("namespace", ""), meta["name"])
        event_type = "MODIFIED" if key in self._objects else "ADDED"
        stamped = self._stamp(obj)
        self._objects[key] = stamped
        self._notify(Event(event_type, kind, stamped, self._version))
        return stamped

    def delete(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Remove an object; watchers see DELETED with its last state."""
        obj = self._objects.pop((kind, namespace, name), None)
        if obj is None:
            return None
        stamped = self._stamp(obj)
        self._notify(Event("DELETED", kind, stamped, self._version))
        return stamped

    def update(
        self, kind: str, namespace: str, name: str, mutate: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any]:
        """Change an object in place through ``mutate``; raises ``KeyError`` when absent."""
        current = copy.deepcopy(self._objects[(kind, namespace, name)])
        mutate(current)
        return self.put(kind, current)

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """One object, as stored (callers must not mutate it)."""
        return self._objects.get((kind, namespace, name))

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Objects of a kind (in one namespace, or all), ordered by namespace and name."""
        return [
            obj
            for (k, ns, _), obj in sorted(self._objects.items())
            if k == kind and (namespace is None or ns == namespace)
        ]

    def events_since(self, kind: str, version: int) -> Iterator[Event]:
        """Events of a kind after ``version``; ``TooOld`` if the history no longer reaches it."""
        if self._history and version < self._history[0].version - 1 and version < self._version:
            raise TooOld(version)
        return (e for e in list(self._history) if e.kind == kind and e.version > version)

    async def wait_changed(self) -> None:
        """Block until the next change (callers put a timeout around it)."""
        await self._changed.wait()


def matches(obj: Mapping[str, Any], namespace: str | None) -> bool:
    """Namespace filter shared by lists and watches."""
    return namespace is None or obj.get("metadata", {}).get("namespace") == namespace
