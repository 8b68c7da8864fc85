"""Object routes: get, list and watch over the store, with selectors, bookmarks and 410."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import msgspec
import trio
import yaml
from quart import Response, request

from gpustack_core.status import StatusError, no_route, not_found
from gpustack_simulator.cluster.apiserver import FIELD_VALIDATION, WARN, ApiServer
from gpustack_simulator.cluster.paging import parse_limit
from gpustack_simulator.cluster.resources import Resource
from gpustack_simulator.cluster.routes.base import JSON, Caller, RouteBase, json_response, list_item
from gpustack_simulator.cluster.selectors import (
    Narrowing,
    SelectorError,
    field_selector,
    label_selector,
    narrowing,
)
from gpustack_simulator.cluster.store import Event, TooOld, matches

WATCH_BOOKMARK_SECONDS = 5.0
"""How often an idle watch that asked for bookmarks gets one."""
DEFAULT_WATCH_SECONDS = 1800.0
ENDPOINTS_DEPRECATED = (
    '299 - "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice"'
)
"""The warning a 1.33+ API server attaches to every v1 Endpoints answer; kubectl prints it."""


class ObjectRoutes(RouteBase):
    """Every resource in the registry: get, list, watch, create, update, patch, delete."""

    api: ApiServer

    async def objects(
        self,
        caller: Caller,
        plural: str,
        group: str = "",
        version: str = "v1",
        ns: str | None = None,
        name: str | None = None,
        sub: str | None = None,
    ) -> Response:
        """Dispatch on the method; the path's resource decides scope and subresources."""
        resource = self.state.registry.find(group, version, plural)
        if resource is None or (ns is not None and not resource.namespaced):
            raise no_route()
        if sub is not None and (name is None or not resource.status):
            raise no_route()
        method = request.method
        namespace = ns or ""
        if method == "GET":
            response = await self._objects(
                caller, resource.kind, plural, group, resource.api_version, ns, name
            )
            if plural == "endpoints" and not group:
                response.headers["Warning"] = ENDPOINTS_DEPRECATED
            return response
        if resource.namespaced and ns is None:
            raise no_route()
        subresource = sub or ""
        if method == "POST" and name is None:
            self.authorize(caller, "create", plural, group=group, namespace=namespace)
            warned: list[str] = []
            created = await self.api.admitted_create(
                resource,
                namespace,
                await self._body(),
                caller.user_info(),
                dry_run=_dry_run(),
                warnings=warned,
                field_validation=_field_validation(),
            )
            return _warned(json_response(created, 201), warned)
        if name is None:
            if method == "DELETE":
                return await self._delete_collection(caller, resource, namespace)
            raise self._not_allowed()
        if method == "PUT":
            self.authorize(
                caller,
                "update",
                plural,
                group=group,
                subresource=subresource,
                namespace=namespace,
                name=name,
            )
            body = await self._body()
            warned = []
            replaced = await self.api.admitted_replace(
                resource,
                namespace,
                name,
                body,
                caller.user_info(),
                subresource=subresource,
                dry_run=_dry_run(),
                warnings=warned,
                field_validation=_field_validation(),
            )
            return _warned(json_response(replaced), warned)
        if method == "PATCH":
            self.authorize(
                caller,
                "patch",
                plural,
                group=group,
                subresource=subresource,
                namespace=namespace,
                name=name,
            )
            content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
            body = await self._body()
            warned = []
            patched = await self.api.admitted_patch(
                resource,
                namespace,
                name,
                body,
                content_type,
                caller.user_info(),
                subresource=subresource,
                dry_run=_dry_run(),
                warnings=warned,
                field_validation=_field_validation(),
            )
            return _warned(json_response(patched), warned)
        if method == "DELETE" and sub is None:
            self.authorize(caller, "delete", plural, group=group, namespace=namespace, name=name)
            warned = []
            deleted = await self.api.admitted_delete(
                resource,
                namespace,
                name,
                await self._delete_options(),
                caller.user_info(),
                dry_run=_dry_run(),
                warnings=warned,
            )
            return _warned(json_response(deleted), warned)
        raise self._not_allowed()

    async def _delete_collection(
        self, caller: Caller, resource: Resource, namespace: str
    ) -> Response:
        self.authorize(
            caller, "deletecollection", resource.plural, group=resource.group, namespace=namespace
        )
        predicate = self._selectors()
        options = await self._delete_options()
        gone = []
        for obj in self.state.store.candidates(resource.kind, namespace or None, self._narrowing()):
            if predicate(obj):
                meta = obj["metadata"]
                if self.state.store.get(resource.kind, namespace, meta["name"]) is not None:
                    deleted = await self.api.admitted_delete(
                        resource,
                        namespace,
                        meta["name"],
                        options,
                        caller.user_info(),
                        dry_run=_dry_run(),
                    )
                    gone.append(list_item(deleted))
        return json_response(
            {
                "kind": f"{resource.kind}List",
                "apiVersion": resource.api_version,
                "metadata": {"resourceVersion": str(self.state.store.version)},
                "items": gone,
            }
        )

    @staticmethod
    def _not_allowed() -> StatusError:
        return StatusError(
            405,
            f"the server does not allow this method on the requested resource ({request.method})",
            reason="MethodNotAllowed",
        )

    @staticmethod
    async def _raw() -> bytes:
        raw = await request.get_data(as_text=False)
        return raw if isinstance(raw, bytes) else raw.encode()

    async def _body(self) -> Any:
        data = await self._raw()
        if "protobuf" in request.headers.get("Content-Type", ""):
            raise StatusError(
                415, "the stand-in reads JSON bodies only", reason="UnsupportedMediaType"
            )
        try:
            if "yaml" in request.headers.get("Content-Type", ""):
                return yaml.safe_load(data)
            return msgspec.json.decode(data)
        except (msgspec.DecodeError, yaml.YAMLError) as exc:
            raise StatusError(400, f"the request body is not JSON: {exc}") from exc

    async def _delete_options(self) -> dict[str, Any]:
        data = await self._raw()
        options: dict[str, Any] = {}
        if data.strip():
            try:
                decoded = msgspec.json.decode(data)
            except msgspec.DecodeError as exc:
                raise StatusError(400, f"the DeleteOptions body is not JSON: {exc}") from exc
            if not isinstance(decoded, dict):
                raise StatusError(400, "the DeleteOptions body is not an object")
            options.update(decoded)
        for key in ("propagationPolicy", "gracePeriodSeconds"):
            if key in request.args:
                value: Any = request.args[key]
                options[key] = int(value) if key == "gracePeriodSeconds" else value
        return options

    async def _objects(
        self,
        caller: Caller,
        kind: str,
        resource: str,
        group: str,
        api_version: str,
        ns: str | None,
        name: str | None,
    ) -> Response:
        store = self.state.store
        if name is not None:
            self.authorize(caller, "get", resource, group=group, namespace=ns or "", name=name)
            obj = store.get(kind, ns or "", name)
            if obj is None:
                raise not_found(resource, name, group)
            return json_response(obj)
        predicate = self._selectors()
        watching = request.args.get("watch", "").lower() in {"1", "true"}
        self.authorize(
            caller,
            "watch" if watching else "list",
            resource,
            group=group,
            namespace=ns or "",
            name=_selected_name(request.args.get("fieldSelector", "")),
        )
        if watching:
            return self._watch(kind, api_version, ns, predicate, self._narrowing())
        narrowed = self._narrowing()
        selected = (request.args.get("labelSelector", ""), request.args.get("fieldSelector", ""))
        limit = parse_limit(request.args.get("limit"))
        token = request.args.get("continue", "")
        if limit or token:
            scope = (kind, ns or "", *selected)
            if token:
                chunk = self.state.chunks.next(scope, token, limit)
            else:
                found = [o for o in store.candidates(kind, ns, narrowed) if predicate(o)]
                chunk = self.state.chunks.first(scope, found, store.version, limit)
            items = msgspec.json.encode([list_item(o) for o in chunk.objects])
            return Response(
                list_body(
                    f"{kind}List", api_version, chunk.version, items, chunk.token, chunk.remaining
                ),
                content_type=JSON,
            )

        def encoded_items() -> bytes:
            return msgspec.json.encode(
                [list_item(o) for o in store.candidates(kind, ns, narrowed) if predicate(o)]
            )

        items = store.memo(kind, ("list", ns, *selected), encoded_items)
        return Response(
            list_body(f"{kind}List", api_version, store.version, items), content_type=JSON
        )

    def _selectors(self) -> Callable[[Mapping[str, Any]], bool]:
        try:
            labels = label_selector(request.args.get("labelSelector", ""))
            fields = field_selector(request.args.get("fieldSelector", ""))
        except SelectorError as exc:
            raise StatusError(400, str(exc)) from exc
        return lambda obj: labels(obj) and fields(obj)

    @staticmethod
    def _narrowing() -> Narrowing:
        """What of the request's selectors the store's indexes can use (after ``_selectors``)."""
        return narrowing(
            request.args.get("labelSelector", ""), request.args.get("fieldSelector", "")
        )

    def _watch(
        self,
        kind: str,
        api_version: str,
        ns: str | None,
        predicate: Callable[[Mapping[str, Any]], bool],
        narrowed: Narrowing,
    ) -> Response:
        store = self.state.store
        raw_version = request.args.get("resourceVersion", "")
        try:
            since = int(raw_version) if raw_version else 0
        except ValueError as exc:
            raise StatusError(400, f"invalid resourceVersion {raw_version!r}") from exc
        bookmarks = request.args.get("allowWatchBookmarks", "").lower() == "true"
        timeout = float(request.args.get("timeoutSeconds") or DEFAULT_WATCH_SECONDS)
        try:
            list(store.events_since(kind, since))
        except TooOld as exc:
            raise StatusError(
                410, f"too old resource version: {since} ({store.version})", reason="Expired"
            ) from exc

        node = narrowed.node_name

        def pending_since(last: int) -> tuple[list[Event], int]:
            """The events to consider after ``last``, and the version they bring it to.

            A watch narrowed to one node (``spec.nodeName=``) reads only its node's events,
            and wakes only for them: a thousand node watches are not each woken by, and made
            to test, every Pod event. Its reading reaches the store's version, as a scan of
            every event would have.
            """
            if node is None:
                found = list(store.events_since(kind, last))
                return found, found[-1].version if found else last
            reached = store.version
            return store.node_events_since(kind, node, last), reached

        async def stream() -> AsyncIterator[bytes]:
            last = since
            if not raw_version or since == 0:
                # "Start at most recent": the current state as synthetic ADDED events first.
                for obj in store.candidates(kind, ns, narrowed):
                    if predicate(obj):
                        yield _event("ADDED", obj)
                last = store.version
            with trio.move_on_after(timeout):
                while True:
                    pending, reached = pending_since(last)
                    if not pending:
                        last = reached
                        with trio.move_on_after(
                            WATCH_BOOKMARK_SECONDS if bookmarks else DEFAULT_WATCH_SECONDS
                        ) as idle:
                            await store.wait_changed(kind, node)
                        if idle.cancelled_caught and bookmarks:
                            yield _bookmark(kind, api_version, store.version)
                        continue
                    for event in pending:
                        if matches(event.object, ns) and predicate(event.object):
                            yield _event(event.type, event.object)
                    last = max(reached, pending[-1].version)

        response = Response(stream(), status=200, content_type=JSON)
        response.timeout = None
        return response


def list_body(
    kind: str, api_version: str, version: int, items: bytes, token: str = "", remaining: int = 0
) -> bytes:
    """A list's JSON around its already encoded ``items``: the bytes ``json_response`` writes.

    The items of a list change only with its kind's objects (``Store.memo`` keeps them until
    then); the resourceVersion moves with every write, so it is spliced in per request. A
    chunk of a longer list (``paging``) carries its continue ``token`` and how many remain.
    """
    more = b""
    if token:
        more = b',"continue":%s,"remainingItemCount":%d' % (msgspec.json.encode(token), remaining)
    return b"".join(
        (
            b'{"kind":',
            msgspec.json.encode(kind),
            b',"apiVersion":',
            msgspec.json.encode(api_version),
            b',"metadata":{"resourceVersion":',
            msgspec.json.encode(str(version)),
            more,
            b'},"items":',
            items,
            b"}",
        )
    )


def _warned(response: Response, warnings: list[str]) -> Response:
    """Each admission warning as the ``Warning: 299 - "<text>"`` header kubectl prints."""
    for text in warnings:
        quoted = text.replace("\\", "\\\\").replace('"', '\\"')
        response.headers.add("Warning", f'299 - "{quoted}"')
    return response


def _dry_run() -> bool:
    """``?dryRun=All`` (the one value the API defines); anything else is refused."""
    values = request.args.getlist("dryRun")
    unknown = [v for v in values if v != "All"]
    if unknown:
        raise StatusError(
            422,
            f'dryRun: Unsupported value: "{unknown[0]}": supported values: "All"',
            reason="Invalid",
        )
    return bool(values)


def _field_validation() -> str:
    """``?fieldValidation=``: ``Ignore``, ``Warn`` (the default) or ``Strict``; else a 422."""
    value = request.args.get("fieldValidation", "") or WARN
    if value not in FIELD_VALIDATION:
        supported = ", ".join(f'"{v}"' for v in FIELD_VALIDATION)
        raise StatusError(
            422,
            f'fieldValidation: Unsupported value: "{value}": supported values: {supported}',
            reason="Invalid",
        )
    return value


def _event(kind: str, obj: Mapping[str, Any]) -> bytes:
    return msgspec.json.encode({"type": kind, "object": obj}) + b"\n"


def _bookmark(kind: str, api_version: str, version: int) -> bytes:
    return _event(
        "BOOKMARK",
        {"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": str(version)}},
    )


def _selected_name(selector: str) -> str:
    """The one name a list or watch selects (``metadata.name=<n>``), else ``""``.

    kube-apiserver's ``RequestInfoFactory`` sets the request's name from such a selector, so a
    rule with ``resourceNames`` can grant list and watch of exactly one object (client-go's
    single-object informers rely on it).
    """
    names = {
        found.group(1)
        for term in selector.split(",")
        if (found := _NAME_TERM.fullmatch(term.strip())) is not None
    }
    return names.pop() if len(names) == 1 else ""


_NAME_TERM = re.compile(r"metadata\.name\s*==?\s*([^=!\s]+)")
