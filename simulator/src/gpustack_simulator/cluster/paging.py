"""Lists in chunks (``limit`` / ``continue``), as kube-apiserver serves them.

An informer (client-go's reflector, and ``gpustack_kube.informer``) lists a large collection
500 objects at a time. kube-apiserver answers every chunk of one list from the same snapshot
(etcd at the first chunk's revision) and hands back an opaque ``metadata.continue`` token, with
``remainingItemCount``; a token whose revision was compacted meanwhile is refused with ``410
Expired``, and the client lists again. The stand-in keeps, per first chunk, the list it
answered — references to the store's objects, ordered by namespace and name as etcd's keys
are — for a while, and refuses a token it no longer holds the same way.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpustack_core.status import StatusError

KEEP_SECONDS = 300.0
"""How long a list's snapshot answers its continue tokens (etcd's default compaction: 5 min)."""
KEEP_LISTS = 64
"""Snapshots kept at once; the oldest goes first."""
TOKEN_VERSION = "meta.k8s.io/v1"
EXPIRED_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter."
)

Key = tuple[str, str]


@dataclass(frozen=True)
class Token:
    """What a continue token says: the list's snapshot and the last key it answered."""

    snapshot: int
    version: int
    after: Key

    def encode(self) -> str:
        """Opaque to clients; shaped like kube-apiserver's (base64 of a small JSON object)."""
        raw = {
            "v": TOKEN_VERSION,
            "rv": self.version,
            "id": self.snapshot,
            "start": f"{self.after[0]}/{self.after[1]}\x00",
        }
        return base64.urlsafe_b64encode(json.dumps(raw).encode()).decode()

    @classmethod
    def decode(cls, text: str) -> Token:
        """The token, or a ``400`` naming why it is not one (as kube-apiserver refuses it)."""
        try:
            raw = json.loads(base64.urlsafe_b64decode(text.encode("ascii")))
            known = isinstance(raw, dict) and raw.get("v") == TOKEN_VERSION
            if known:
                namespace, _, name = str(raw["start"]).rstrip("\x00").partition("/")
                token = cls(int(raw["id"]), int(raw["rv"]), (namespace, name))
        except (ValueError, KeyError, TypeError, binascii.Error, UnicodeError) as exc:
            why = f"continue key is not valid: {exc}"
            raise StatusError(400, why, reason="BadRequest") from exc
        if not known:
            raise StatusError(400, "continue key is not valid: unknown", reason="BadRequest")
        return token


def parse_limit(text: str | None) -> int:
    """``limit`` as kube-apiserver reads it: absent, empty, zero or negative mean no limit."""
    if not text:
        return 0
    try:
        value = int(text)
    except ValueError as exc:
        raise StatusError(400, f"invalid limit {text!r}: not an integer") from exc
    return max(value, 0)


@dataclass
class _Snapshot:
    scope: tuple[str, ...]
    version: int
    keys: list[Key]
    objects: list[dict[str, Any]]
    taken: float


@dataclass
class Chunk:
    """One answer of a chunked list."""

    objects: Sequence[dict[str, Any]]
    version: int
    """The resourceVersion of the list (its first chunk's), on every chunk alike."""
    token: str
    """``""`` on the last chunk."""
    remaining: int


@dataclass
class ListChunks:
    """The snapshots that answer continue tokens; one per list being read in chunks."""

    clock: Callable[[], float] = time.monotonic
    keep_seconds: float = KEEP_SECONDS
    limit: int = KEEP_LISTS
    _snapshots: OrderedDict[int, _Snapshot] = field(default_factory=OrderedDict)
    _next: int = 1

    def first(
        self, scope: tuple[str, ...], objects: list[dict[str, Any]], version: int, limit: int
    ) -> Chunk:
        """The first ``limit`` of ``objects`` (ordered by key), keeping the rest for later.

        ``scope`` names the list (kind, namespace, selectors): a token continues only it.
        """
        self._expire()
        if limit <= 0 or len(objects) <= limit:
            return Chunk(objects, version, "", 0)
        keys = [_key(o) for o in objects]
        snapshot_id = self._next
        self._next += 1
        self._snapshots[snapshot_id] = _Snapshot(scope, version, keys, objects, self.clock())
        while len(self._snapshots) > self.limit:
            self._snapshots.popitem(last=False)
        return self._chunk(snapshot_id, 0, limit)

    def next(self, scope: tuple[str, ...], token: str, limit: int) -> Chunk:
        """The chunk after ``token``; ``410 Expired`` when its snapshot is gone."""
        parsed = Token.decode(token)
        self._expire()
        snapshot = self._snapshots.get(parsed.snapshot)
        if snapshot is None or snapshot.version != parsed.version:
            raise StatusError(410, EXPIRED_MESSAGE, reason="Expired")
        if snapshot.scope != scope:
            raise StatusError(
                400, "continue key is not valid: it continues another list", reason="BadRequest"
            )
        start = bisect.bisect_right(snapshot.keys, parsed.after)  # the keys are sorted
        return self._chunk(parsed.snapshot, start, limit if limit > 0 else len(snapshot.keys))

    def _chunk(self, snapshot_id: int, start: int, limit: int) -> Chunk:
        snapshot = self._snapshots[snapshot_id]
        end = min(start + limit, len(snapshot.objects))
        remaining = len(snapshot.objects) - end
        token = ""
        if remaining:
            token = Token(snapshot_id, snapshot.version, snapshot.keys[end - 1]).encode()
        else:
            del self._snapshots[snapshot_id]  # read to the end: nobody continues it
        return Chunk(snapshot.objects[start:end], snapshot.version, token, remaining)

    def _expire(self) -> None:
        now = self.clock()
        while self._snapshots:
            oldest = next(iter(self._snapshots.values()))
            if now - oldest.taken < self.keep_seconds:
                return
            self._snapshots.popitem(last=False)

    def __len__(self) -> int:
        return len(self._snapshots)


def _key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
