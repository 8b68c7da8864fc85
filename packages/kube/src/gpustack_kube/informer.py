"""A local, always-current copy of one collection: list once, then follow its watch.

The daemons ask "which Pods run on this node" many times a second; asking the API server
each time would load it with one list per question per node. An informer turns that into one
list and one long-lived watch per daemon, and repairs itself when the watch is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast, overload

import trio

from gpustack_kube.backoff import Backoff
from gpustack_kube.client import ApiError, KubeClient, KubeError, MalformedResponseError, Params

log = logging.getLogger(__name__)

__all__ = ["Backoff", "Indexer", "Informer", "InformerStatistics", "Key", "label_index"]

Key = tuple[str, str]
"""(namespace, name); cluster-scoped objects have namespace ``""``."""

T = TypeVar("T")

Indexer = Callable[[T], Iterable[str]]
"""An index function, as client-go's ``cache.IndexFunc``: the values an object is filed under."""


def label_index(label: str) -> Indexer[dict[str, Any]]:
    """Index raw objects by the value of one label (objects without it are not filed)."""

    def values(obj: dict[str, Any]) -> Iterable[str]:
        metadata = obj.get("metadata")
        labels = metadata.get("labels") if isinstance(metadata, dict) else None
        value = labels.get(label) if isinstance(labels, dict) else None
        return (value,) if isinstance(value, str) else ()

    return values


@dataclass(frozen=True)
class InformerStatistics:
    """Counters for health endpoints and tests; ``relists`` excludes the first list."""

    lists: int
    relists: int
    resyncs: int
    expired: int
    watches: int
    events: int
    bookmarks: int
    errors: int
    decodes: int = 0
    """Objects handed to the decode function (zero for an informer of raw objects)."""
    decode_errors: int = 0
    """Objects the decode function refused; they are left out of the view."""


class Informer(Generic[T]):
    """List+watch of one collection, keyed by (namespace, name), each object decoded once.

    ``decode`` turns the API's JSON object into the consumer's typed form when the object
    arrives (in a list or a watch event), so readers never decode again; without it the view
    holds the raw objects. An object ``decode`` refuses (``ValueError``, which every
    ``ContractError`` is) is left out of the view and logged, so one malformed object costs
    only itself. ``indexers`` name index functions over the typed objects, as client-go's
    ``cache.Indexers``; :meth:`by_index` answers from them without a scan.

    Run it with ``await nursery.start(informer.run)``: the start returns once the first list
    has succeeded, so the caller never serves an empty view that merely hasn't loaded yet.
    It retries the first list forever; wrap the start in ``trio.fail_after`` to give up.
    """

    @overload
    def __init__(
        self: Informer[dict[str, Any]],
        client: KubeClient,
        path: str,
        *,
        decode: None = None,
        indexers: Mapping[str, Indexer[dict[str, Any]]] | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        resync: float = 300.0,
        watch_timeout: int = 240,
        backoff: Backoff | None = None,
        min_watch_seconds: float = 1.0,
        page_size: int = 500,
    ) -> None: ...

    @overload
    def __init__(
        self,
        client: KubeClient,
        path: str,
        *,
        decode: Callable[[dict[str, Any]], T],
        indexers: Mapping[str, Indexer[T]] | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        resync: float = 300.0,
        watch_timeout: int = 240,
        backoff: Backoff | None = None,
        min_watch_seconds: float = 1.0,
        page_size: int = 500,
    ) -> None: ...

    def __init__(
        self,
        client: KubeClient,
        path: str,
        *,
        decode: Callable[[dict[str, Any]], T] | None = None,
        indexers: Mapping[str, Indexer[T]] | Mapping[str, Indexer[dict[str, Any]]] | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        resync: float = 300.0,
        watch_timeout: int = 240,
        backoff: Backoff | None = None,
        min_watch_seconds: float = 1.0,
        page_size: int = 500,
    ) -> None:
        self.client = client
        self.path = path
        self.field_selector = field_selector
        self.label_selector = label_selector
        self.resync = resync
        self.watch_timeout = watch_timeout
        self.backoff = backoff or Backoff()
        self.min_watch_seconds = min_watch_seconds
        self.page_size = page_size
        """Objects per list request (``limit``); ``0`` lists the whole collection at once."""
        self._decode = decode
        # Without ``decode`` T is dict[str, Any], which is what the first overload's take.
        self._indexers = cast(dict[str, Indexer[T]], dict(indexers or {}))
        self._objects: dict[Key, T] = {}
        self._versions: dict[Key, str] = {}
        """Key → the resourceVersion of the object in the view (where it had one)."""
        self._indices: dict[str, dict[str, set[Key]]] = {name: {} for name in self._indexers}
        self._version = ""
        self._synced = False
        self._last_error: str | None = None
        self._changed = trio.Event()
        self._handlers: list[Callable[[Key], None]] = []
        self._generation = 0
        self._failures = 0
        self._progress_since_list = False
        self._keep_backoff = False
        self._counts = dict.fromkeys(
            (
                "lists",
                "relists",
                "resyncs",
                "expired",
                "watches",
                "events",
                "bookmarks",
                "errors",
                "decodes",
                "decode_errors",
            ),
            0,
        )

    # -- the view ----------------------------------------------------------------------------

    def objects(self) -> list[T]:
        """The objects now, as a new list that later changes never touch.

        Events replace stored objects rather than editing them, so holding them is safe
        too — as long as the caller does not mutate them, which would corrupt the view.
        """
        return list(self._objects.values())

    def get(self, namespace: str, name: str) -> T | None:
        """One object by key, or ``None``."""
        return self._objects.get((namespace, name))

    def by_index(self, index: str, value: str) -> list[T]:
        """The objects ``index`` files under ``value`` (client-go's ``ByIndex``)."""
        try:
            keys = self._indices[index].get(value, set())
        except KeyError:
            raise KeyError(f"no indexer named {index!r}") from None
        return [self._objects[key] for key in sorted(keys)]

    def index_values(self, index: str) -> list[str]:
        """Every value ``index`` has objects under now (client-go's ``ListIndexFuncValues``)."""
        return sorted(self._indices[index])

    @property
    def synced(self) -> bool:
        """Whether a list has ever succeeded: before that, an empty view means nothing."""
        return self._synced

    @property
    def last_error(self) -> str | None:
        """The most recent failure, cleared by the next successful list or watch event."""
        return self._last_error

    @property
    def version(self) -> str:
        """The resourceVersion the view reflects (``""`` before the first list)."""
        return self._version

    @property
    def generation(self) -> int:
        """Bumped on every change to the view, so a poller can tell whether to recompute."""
        return self._generation

    async def wait_changed(self) -> None:
        """Block until the view next changes.

        Trio switches tasks only at checkpoints, so reading ``objects()`` and then calling
        this without an ``await`` in between cannot miss a change.
        """
        await self._changed.wait()

    def statistics(self) -> InformerStatistics:
        """A frozen copy of the counters."""
        return InformerStatistics(**self._counts)

    # -- the loop ----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """List, then watch; relist on expiry and every ``resync`` seconds. Never returns."""
        started = False
        while True:
            if not await self._list():
                continue
            if not started:
                started = True
                task_status.started()
            # The periodic relist repairs any drift a lost or misapplied event left behind.
            with trio.move_on_after(self.resync) as resync:
                await self._watch_until_expired()
            if resync.cancelled_caught:
                self._counts["resyncs"] += 1

    def _selectors(self) -> dict[str, str | int | bool]:
        params: dict[str, str | int | bool] = {}
        if self.field_selector:
            params["fieldSelector"] = self.field_selector
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        return params

    async def _list(self) -> bool:
        """One list, in pages; on failure record it, back off and say so."""
        try:
            fresh, versions, version = await self._pages()
        except ApiError as exc:
            await self._failed(f"list {self.path}: {exc}")
            return False
        except KubeError as exc:
            await self._failed(str(exc))  # transport and decoding errors name the path
            return False
        if self._synced:
            self._counts["relists"] += 1
        self._counts["lists"] += 1
        # An object kept from the view (same resourceVersion) is the same object: ``is``
        # decides it without comparing two trees.
        touched = [
            k
            for k in fresh.keys() | self._objects.keys()
            if (old := self._objects.get(k)) is not (new := fresh.get(k)) and old != new
        ]
        changed = bool(touched) or not self._synced
        self._objects = fresh
        self._versions = versions
        self._reindex()
        self._version = version
        self._synced = True
        if self._keep_backoff:
            self._keep_backoff = False  # listing works; whether watching does is still open
        else:
            self._failures = 0
        self._last_error = None
        self._progress_since_list = False
        if changed:
            self._notify()
        self._tell(sorted(touched))
        return True

    async def _pages(self) -> tuple[dict[Key, T], dict[Key, str], str]:
        """The whole collection, ``page_size`` objects per request, and its resourceVersion.

        As client-go's reflector does (its pager's 500): a list of 10,000 Pods in one answer
        held the whole JSON and its whole decoded tree at once, next to the view being built
        — a peak several times the view that the process kept as resident memory. Each page
        is decoded and dropped before the next is asked for. The API server serves every page
        of one list from the same snapshot; a continue token it no longer honours (``410``,
        compacted meanwhile) restarts the list once without pages, as client-go's
        ``FullListIfExpired`` does. An object whose resourceVersion is the one in the view is
        kept as it is, not decoded again: a relist of an unchanged collection changes nothing
        and costs no decoding.
        """
        fresh: dict[Key, T] = {}
        versions: dict[Key, str] = {}
        token = ""
        whole = self.page_size <= 0
        while True:
            params = self._selectors()
            if not whole:
                params["limit"] = self.page_size
                if token:
                    params["continue"] = token
            try:
                answer = await self.client.get(self.path, params)
            except ApiError as exc:
                if not (token and exc.expired):
                    raise
                log.info("list %s: the continue token expired; listing whole", self.path)
                fresh, versions, token, whole = {}, {}, "", True
                continue
            items, version, token = _parse_list(answer, self.path)
            del answer
            for item in items:
                key = _key(item)
                if key is None:
                    continue
                typed = self._kept(item, key, versions)
                if typed is not None:
                    fresh[key] = typed
            if whole or not token:
                return fresh, versions, version

    def _kept(self, item: dict[str, Any], key: Key, versions: dict[Key, str]) -> T | None:
        """The view's own object when ``item``'s resourceVersion is the one it has, else decoded.

        ``versions`` gets the resourceVersion of what is returned.
        """
        version = item["metadata"].get("resourceVersion")
        if not isinstance(version, str) or not version:
            return self._decoded(item, key)  # nothing to compare: decoded, never kept
        known = self._objects.get(key)
        if known is None or self._versions.get(key) != version:
            known = self._decoded(item, key)
        if known is not None:
            versions[key] = version
        return known

    async def _watch_until_expired(self) -> None:
        """Watch from ``version``, re-watching as streams end, until the version expires."""
        while True:
            params: Params = {
                **self._selectors(),
                "resourceVersion": self._version,
                "allowWatchBookmarks": True,
                "timeoutSeconds": self.watch_timeout,
            }
            opened = trio.current_time()
            delivered = 0
            self._counts["watches"] += 1
            try:
                async with aclosing(self.client.watch(self.path, params)) as events:
                    async for event in events:
                        delivered += 1
                        self._apply(event)
            except ApiError as exc:
                if not exc.expired:
                    await self._failed(f"watch {self.path}: {exc}")
                    continue
                self._counts["expired"] += 1
                if not self._progress_since_list:
                    # Expired on the very version a list just gave: relisting at once would
                    # spin list→410→list against a server whose history is broken.
                    self._keep_backoff = True
                    await self._failed(f"watch {self.path}: expired right after listing: {exc}")
                log.info("watch of %s expired at %s; relisting", self.path, self._version)
                return
            except KubeError as exc:
                await self._failed(str(exc))  # transport and decoding errors name the path
                continue
            if delivered == 0 and trio.current_time() - opened < self.min_watch_seconds:
                # A proxy that closes every stream at once would otherwise be re-watched in a
                # tight loop.
                await self._failed(f"watch {self.path}: the stream ended at once")

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        obj: dict[str, Any] = event["object"]
        metadata = obj.get("metadata")
        version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        self._counts["events"] += 1
        self._failures = 0
        self._last_error = None
        self._progress_since_list = True
        if kind == "BOOKMARK":
            self._counts["bookmarks"] += 1
        elif kind in {"ADDED", "MODIFIED", "DELETED"}:
            key = _key(obj)
            if key is not None:
                self._unindex(key)
                typed = None if kind == "DELETED" else self._decoded(obj, key)
                self._versions.pop(key, None)
                if typed is None:
                    self._objects.pop(key, None)  # deleted, or now undecodable: not in view
                else:
                    self._objects[key] = typed
                    if isinstance(version, str) and version:
                        self._versions[key] = version
                    self._index(key, typed)
                self._notify()
                self._tell([key])
        else:
            log.warning("watch of %s: ignoring an event of type %r", self.path, kind)
        if isinstance(version, str) and version:
            self._version = version

    def _decoded(self, obj: dict[str, Any], key: Key) -> T | None:
        """The typed form of ``obj``; ``None`` (logged, counted) when the decoder refuses it."""
        if self._decode is None:
            return cast(T, obj)  # an informer of raw objects: T is dict[str, Any]
        self._counts["decodes"] += 1
        try:
            return self._decode(obj)
        except ValueError as exc:
            self._counts["decode_errors"] += 1
            log.warning("%s: leaving %s/%s out of the view: %s", self.path, *key, exc)
            return None

    def _index(self, key: Key, obj: T) -> None:
        for name, function in self._indexers.items():
            for value in function(obj):
                self._indices[name].setdefault(value, set()).add(key)

    def _unindex(self, key: Key) -> None:
        old = self._objects.get(key)
        if old is None:
            return
        for name, function in self._indexers.items():
            index = self._indices[name]
            for value in function(old):
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

    def _reindex(self) -> None:
        self._indices = {name: {} for name in self._indexers}
        for key, obj in self._objects.items():
            self._index(key, obj)

    async def _failed(self, message: str) -> None:
        self._counts["errors"] += 1
        self._failures += 1
        self._last_error = message
        delay = self.backoff.delay(self._failures)
        log.warning("%s; retrying in %.1fs", message, delay)
        await trio.sleep(delay)

    def add_handler(self, handler: Callable[[Key], None]) -> None:
        """Call ``handler`` with the key of every object that is added, changed or removed.

        client-go's event handler, reduced to what a level-triggered controller needs: *which*
        key to look at again (it reads the object itself from the view). A relist reports every
        key whose object differs from the view it replaces, so a missed event is still told.
        Handlers run in the informer's task and must not block (enqueue and return).
        """
        self._handlers.append(handler)

    def _tell(self, keys: list[Key]) -> None:
        for key in keys:
            for handler in self._handlers:
                handler(key)

    def _notify(self) -> None:
        self._generation += 1
        changed, self._changed = self._changed, trio.Event()
        changed.set()


def _key(obj: dict[str, Any]) -> Key | None:
    """The object's key, or ``None`` for one without a name.

    Such an object is skipped, not fatal, so one bad object cannot wedge the watch replaying it.
    """
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
        log.warning("skipping an object without metadata.name: %.200r", obj)
        return None
    namespace = metadata.get("namespace")
    return (namespace if isinstance(namespace, str) else "", metadata["name"])


def _parse_list(answer: dict[str, Any], path: str) -> tuple[list[dict[str, Any]], str, str]:
    """A list's items, resourceVersion and continue token (``""`` on its last page)."""
    items = answer.get("items")
    metadata = answer.get("metadata")
    version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    token = metadata.get("continue") if isinstance(metadata, dict) else None
    if items is None:
        items = []  # the API server omits an empty list's items
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise MalformedResponseError(f"list {path}: items is not a list of objects")
    if not isinstance(version, str) or not version:
        raise MalformedResponseError(f"list {path}: no metadata.resourceVersion to watch from")
    if token is not None and not isinstance(token, str):
        raise MalformedResponseError(f"list {path}: metadata.continue is not a string")
    return items, version, token or ""
