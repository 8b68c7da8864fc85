"""Object routes: get, list and watch over the store, with selectors, bookmarks and 410."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import msgspec
import trio
from quart import Response, request

from gpustack_core.status import StatusError, not_found
from gpustack_simulator.cluster.routes.base import JSON, Caller, RouteBase, json_response, list_item
from gpustack_simulator.cluster.selectors import SelectorError, field_selector, label_selector
from gpustack_simulator.cluster.services import ENDPOINTS, SERVICE
from gpustack_simulator.cluster.state import (
    CONFIGMAP,
    INSTANCE,
    NODE,
    POD,
)
from gpustack_simulator.cluster.store import TooOld, matches

WATCH_BOOKMARK_SECONDS = 5.0
"""How often an idle watch that asked for bookmarks gets one."""
DEFAULT_WATCH_SECONDS = 1800.0
WORKER_GROUP = "worker.gpustack.ai"
ENDPOINTS_DEPRECATED = (
    '299 - "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice"'
)
"""The warning a 1.33+ API server attaches to every v1 Endpoints answer; kubectl prints it."""


class ObjectRoutes(RouteBase):
    """Pods, Services, Endpoints, Nodes, Instances and ConfigMaps from the store."""

    async def pods(
        self, caller: Caller, ns: str | None = None, name: str | None = None
    ) -> Response:
        """Pods: get, list or watch."""
        self.require_method("GET")
        return await self._objects(caller, POD, "pods", "", "v1", ns, name)

    async def services(
        self, caller: Caller, ns: str | None = None, name: str | None = None
    ) -> Response:
        """Services: get, list or watch."""
        self.require_method("GET")
        return await self._objects(caller, SERVICE, "services", "", "v1", ns, name)

    async def endpoints(
        self, caller: Caller, ns: str | None = None, name: str | None = None
    ) -> Response:
        """Endpoints, with the deprecation warning a 1.33+ API server attaches."""
        self.require_method("GET")
        response = await self._objects(caller, ENDPOINTS, "endpoints", "", "v1", ns, name)
        response.headers["Warning"] = ENDPOINTS_DEPRECATED
        return response

    async def nodes(self, caller: Caller, name: str | None = None) -> Response:
        """Nodes: get, list or watch."""
        self.require_method("GET")
        return await self._objects(caller, NODE, "nodes", "", "v1", None, name)

    async def instances(
        self, caller: Caller, ns: str | None = None, name: str | None = None
    ) -> Response:
        """``worker.gpustack.ai/v1alpha1`` Instances: get, list or watch."""
        self.require_method("GET")
        return await self._objects(
            caller, INSTANCE, "instances", WORKER_GROUP, f"{WORKER_GROUP}/v1alpha1", ns, name
        )

    async def configmap(self, caller: Caller, ns: str, name: str) -> Response:
        """One ConfigMap (the front-proxy CA the worker reads)."""
        self.require_method("GET")
        self.authorize(caller, "get", "configmaps", namespace=ns, name=name)
        obj = self.state.store.get(CONFIGMAP, ns, name)
        if obj is None:
            raise not_found("configmaps", name)
        return json_response(obj)

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
            caller, "watch" if watching else "list", resource, group=group, namespace=ns or ""
        )
        if watching:
            return self._watch(kind, ns, predicate)
        items = [list_item(o) for o in store.list(kind, ns) if predicate(o)]
        return json_response(
            {
                "kind": f"{kind}List",
                "apiVersion": api_version,
                "metadata": {"resourceVersion": str(store.version)},
                "items": items,
            }
        )

    def _selectors(self) -> Callable[[Mapping[str, Any]], bool]:
        try:
            labels = label_selector(request.args.get("labelSelector", ""))
            fields = field_selector(request.args.get("fieldSelector", ""))
        except SelectorError as exc:
            raise StatusError(400, str(exc)) from exc
        return lambda obj: labels(obj) and fields(obj)

    def _watch(
        self, kind: str, ns: str | None, predicate: Callable[[Mapping[str, Any]], bool]
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

        async def stream() -> AsyncIterator[bytes]:
            last = since
            if not raw_version or since == 0:
                # "Start at most recent": the current state as synthetic ADDED events first.
                for obj in store.list(kind, ns):
                    if predicate(obj):
                        yield _event("ADDED", obj)
                last = store.version
            with trio.move_on_after(timeout):
                while True:
                    pending = list(store.events_since(kind, last))
                    if not pending:
                        with trio.move_on_after(
                            WATCH_BOOKMARK_SECONDS if bookmarks else DEFAULT_WATCH_SECONDS
                        ) as idle:
                            await store.wait_changed()
                        if idle.cancelled_caught and bookmarks:
                            yield _bookmark(kind, store.version)
                        continue
                    for event in pending:
                        last = event.version
                        if matches(event.object, ns) and predicate(event.object):
                            yield _event(event.type, event.object)

        response = Response(stream(), status=200, content_type=JSON)
        response.timeout = None
        return response


def _event(kind: str, obj: Mapping[str, Any]) -> bytes:
    return msgspec.json.encode({"type": kind, "object": obj}) + b"\n"


def _bookmark(kind: str, version: int) -> bytes:
    api_version = f"{WORKER_GROUP}/v1alpha1" if kind == INSTANCE else "v1"
    return _event(
        "BOOKMARK",
        {"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": str(version)}},
    )
