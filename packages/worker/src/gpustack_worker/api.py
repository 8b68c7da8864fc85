"""The aggregated API's HTTP surface: ``worker.gpustack.ai/v1`` as the kube-aggregator sees it.

Every request but the health probes is authenticated (front-proxy, client certificate or bearer
token — :mod:`gpustack_worker.authn`); resource requests are then authorized by a
SubjectAccessReview for exactly what was asked (``get instances/metrics`` is its own
permission). Discovery and OpenAPI need only an authenticated caller, as the cluster's
``system:discovery`` role grants every authenticated user. Every error leaves as a Kubernetes
``Status`` object with the code an API server would use.

Names come from the *raw* request path, split on ``/`` and then unescaped segment by segment,
and are validated before anything is authorized: what is authorized is exactly what is read.
A segment no name can be (``.``, ``..``, one holding ``/``, ``%`` or a control character) is
400, as the apiserver answers; a well-formed segment that is not a DNS-1123 name is 404 with no
upstream request, since no object can carry it. Upstream paths are then built only by
:mod:`gpustack_kube.paths`, from escaped segments.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote, unquote

import msgspec
import trio
from quart import Response, g, request
from quart_trio import QuartTrio
from werkzeug.exceptions import RequestEntityTooLarge, RequestTimeout

from gpustack_core.names import (
    dns1123_label_problem,
    dns1123_subdomain_problem,
    path_segment_problem,
)
from gpustack_core.resources import ResourceNames, default_names
from gpustack_core.settings import Key, Settings
from gpustack_core.status import StatusError, no_route, not_found
from gpustack_kube.client import ApiError, KubeClient, KubeError, PatchType
from gpustack_kube.guard import RequestGuard
from gpustack_kube.paths import INSTANCES
from gpustack_worker import discovery, openapi, settings_v1
from gpustack_worker.admission import MAX_REVIEW_BYTES, PHASES, AdmissionWebhook
from gpustack_worker.authn import Authenticator, Unauthenticated, UserInfo
from gpustack_worker.authz import Attributes, AuthorizationError, Authorizer, forbidden_message
from gpustack_worker.instance_admission import PHASES as INSTANCE_PHASES
from gpustack_worker.instance_admission import InstanceWebhook
from gpustack_worker.instances_v1 import as_v1, storage_body, table, table_version
from gpustack_worker.instancetype_admission import PHASES as INSTANCE_TYPE_PHASES
from gpustack_worker.instancetype_admission import InstanceTypeWebhook
from gpustack_worker.metricaccess_admission import PHASES as METRIC_ACCESS_PHASES
from gpustack_worker.metricaccess_admission import MetricAccessWebhook
from gpustack_worker.settings_api import SettingsStore, Texts, default_texts
from gpustack_worker.subresource import Sources, Unavailable, instance_metrics_json
from gpustack_worker.tls import presented_chain

log = logging.getLogger("gpustack.worker.api")
access = logging.getLogger("gpustack.worker.access")

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
GROUP = discovery.GROUP
V1 = f"/apis/{GROUP}/v1"
SETTINGS_GROUP = discovery.SETTINGS_GROUP
SETTINGS_V1 = f"/apis/{SETTINGS_GROUP}/{discovery.SETTINGS_VERSION}"
HEALTH_PATHS = frozenset({"/healthz", "/livez", "/readyz"})
RESPONSE_TIMEOUT = 30
"""Seconds a response may take to leave (Quart's ``RESPONSE_TIMEOUT``, the fast path's too)."""
LIST_PARAMS = ("labelSelector", "fieldSelector", "limit", "continue", "resourceVersion")


@dataclass
class Surface:
    """What the routes need; the daemon builds it, tests may build it directly."""

    sources: Sources
    authenticator: Callable[[], Authenticator]
    """The current authenticator: the requestheader settings are re-read while serving."""
    authorizer: Authorizer
    ready: Callable[[], str | None] = lambda: None
    """``None`` when ready, else why not (for ``/readyz``)."""
    requests: dict[int, int] = field(default_factory=dict)
    """Answers by status code, for tests and benchmarks."""
    admission: AdmissionWebhook | None = None
    """The Pod webhook; ``None`` builds one over ``sources.client``."""
    settings: Callable[[], Settings] = Settings
    """The operator Settings in force (``OperatorSettings.current``); the defaults without."""
    setting_texts: Texts = default_texts
    """Every key's text in force given the Secret's (``OperatorSettings.texts``): what a
    ``Setting`` shows for a key the Secret lacks."""
    instance_admission: InstanceWebhook | None = None
    """The Instance webhook; ``None`` builds one sharing the Pod webhook's ``Devices`` cache."""
    instance_type_admission: InstanceTypeWebhook | None = None
    """The InstanceType webhook; ``None`` builds one sharing the same cache."""
    metric_access_admission: MetricAccessWebhook | None = None
    """The MetricAccess webhook; ``None`` builds one asking through ``sources.client``."""
    body_timeout: float = 10.0
    """Seconds a request body may take to arrive before the answer is ``408``."""
    fit_labels: bool = False
    """The worker publishes the per-card fit labels, so the Pod webhook may pin to them (with
    the Setting ``workload-fit-affinity``)."""
    names: Sequence[ResourceNames] = field(default_factory=default_names)
    """The resource names the Pod webhook judges: the configured bases
    (``gpustack_core.resourceconfig``), the same the device plugins register; by default
    every manufacturer's at its default base, as the table stands when the surface is built."""


def _json(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    data = body if isinstance(body, bytes) else msgspec.json.encode(body)
    return Response(data, status=status, content_type=JSON, headers=dict(headers or {}))


def _status(error: StatusError) -> Response:
    return Response(error.body(), status=error.code, content_type=JSON)


def _status_rejection(status: int, why: str) -> tuple[bytes, str]:
    """The guard's refusals leave as ``Status`` objects too."""
    return StatusError(status, why).body(), JSON


def _raw_path() -> str:
    """The request path as sent, still escaped (hypercorn's ``raw_path``, query excluded)."""
    raw = request.scope.get("raw_path")
    if isinstance(raw, bytes | bytearray) and raw.startswith(b"/"):
        return bytes(raw).decode("latin-1")
    return quote(request.path, safe="/")


def _segments(path: str) -> list[str]:
    """``/a/b%2Fc/`` → ``["a", "b/c"]``: split first, unescape each segment after."""
    parts = path.strip("/").split("/")
    return [unquote(part, errors="strict") for part in parts]


def _v1_parts(path: str, root: str = V1) -> list[str] | None:
    """The decoded segments under ``root`` (``/apis/worker.gpustack.ai/v1/``); ``None`` outside."""
    if not path.startswith(root + "/"):
        return None
    try:
        return _segments(path[len(root) + 1 :])
    except UnicodeDecodeError as exc:
        raise StatusError(400, "the request path is not valid UTF-8") from exc


Handler = Callable[..., Awaitable[Response]]

_METRICS_PREFIX = V1 + "/namespaces/"


def _metrics_target(path: str) -> tuple[str, str] | None:
    """``(namespace, name)``, still escaped, of ``…/namespaces/<ns>/instances/<name>/metrics``.

    Only that exact shape, segment by segment as sent: any other spelling (an escaped
    ``instances``, an empty segment) is left to the general route, which decides it the same
    way it always has.
    """
    if not path.startswith(_METRICS_PREFIX):
        return None
    parts = path[len(_METRICS_PREFIX) :].split("/")
    if len(parts) != 4 or parts[1] != "instances" or parts[3] != "metrics":
        return None
    if not parts[0] or not parts[2]:
        return None
    return parts[0], parts[2]


def _count_and_log(
    surface: Surface, method: str, target: str, status: int, user: str, started: float
) -> None:
    surface.requests[status] = surface.requests.get(status, 0) + 1
    if access.isEnabledFor(logging.INFO):
        elapsed = (time.perf_counter() - started) * 1000
        access.info("%s %s %d %s %.1fms", method, target, status, user, elapsed)


class _FastPath:
    """The hot GETs (health probes, ``instances/<name>/metrics``) answered in front of Quart.

    A console polling its Instances reads ``metrics`` many times a second; building Quart's
    request and response objects, its URL map and its two tasks per request cost more CPU
    than the answer. Here the same steps run in the same order, through the same functions —
    authenticate (the connection's own chain and the request's headers), decode and validate
    the names, authorize exactly them, read — and the answer leaves with the same status,
    body and headers, counted and logged alike. Everything else goes on to Quart.
    """

    def __init__(self, app: Any, routes: _Routes) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        if scope.get("method") != "GET" or not isinstance(raw, bytes) or not raw.startswith(b"/"):
            await self.app(scope, receive, send)
            return
        path = raw.decode("latin-1").rstrip("/") or "/"
        health = path in HEALTH_PATHS
        target = None if health else _metrics_target(path)
        if not health and target is None:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        while True:  # the body a GET does not have (drained, as Quart would read it)
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            if not message.get("more_body"):
                break
        user = "-"
        content_type = JSON
        try:
            if health:
                body, status, content_type = self.routes.health_answer(path)
            else:
                assert target is not None
                headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
                caller = await self.routes.authenticate_parts(
                    presented_chain(scope), headers, "GET", scope["path"]
                )
                user = caller.name  # for the access log, whatever the answer
                try:
                    namespace, name = (unquote(part, errors="strict") for part in target)
                except UnicodeDecodeError as exc:
                    raise StatusError(400, "the request path is not valid UTF-8") from exc
                body, status = await self.routes.metrics_answer(caller, namespace, name)
        except StatusError as error:
            body, status = error.body(), error.code
        except Exception as error:  # a bug or an undecodable object: still a Status, logged
            log.exception("GET %s failed", scope["path"])
            failure = StatusError(500, f"Internal error occurred: {error}")
            body, status = failure.body(), failure.code
        query = scope.get("query_string") or b""
        shown = scope["path"] + ("?" + query.decode("latin-1") if query else "")
        _count_and_log(self.routes.surface, "GET", shown, status, user, started)
        headers = [
            (b"content-type", content_type.encode("latin-1")),
            (b"content-length", str(len(body)).encode("ascii")),
        ]
        with trio.move_on_after(RESPONSE_TIMEOUT):
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body, "more_body": False})


def build_app(surface: Surface, *, fast_path: bool = True) -> QuartTrio:
    """The Quart app; one catch-all route dispatching on the raw path, as an API server does.

    ``fast_path``: the hot GETs are answered in front of Quart (:class:`_FastPath`); off, every
    request goes through Quart, which tests use to hold the two to the same answers.
    """
    app = QuartTrio(__name__)
    app.config["RESPONSE_TIMEOUT"] = RESPONSE_TIMEOUT
    app.config["BODY_TIMEOUT"] = surface.body_timeout
    # Bodies read: admission reviews (one Pod each) and Instance writes, both under 3 MiB
    # (kube-apiserver's own request limit).
    app.config["MAX_CONTENT_LENGTH"] = MAX_REVIEW_BYTES
    if surface.admission is None:
        surface.admission = AdmissionWebhook.of(
            surface.sources.client,
            names=surface.names,
            fit_affinity=lambda: surface.fit_labels and surface.settings().workload_fit_affinity,
        )
    if surface.instance_admission is None:
        surface.instance_admission = InstanceWebhook(
            surface.sources.client,
            surface.admission.devices,
            surface.settings,
            surface.sources.system_namespace,
        )
    if surface.instance_type_admission is None:
        surface.instance_type_admission = InstanceTypeWebhook(
            surface.sources.client, surface.admission.devices
        )
    if surface.metric_access_admission is None:
        surface.metric_access_admission = MetricAccessWebhook.of(surface.sources.client)
    routes = _Routes(surface)
    inner = _FastPath(app.asgi_app, routes) if fast_path else app.asgi_app
    app.asgi_app = RequestGuard(inner, _status_rejection)  # type: ignore[method-assign]

    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

    @app.route("/", defaults={"path": ""}, methods=methods, provide_automatic_options=False)
    @app.route("/<path:path>", methods=methods, provide_automatic_options=False)
    async def dispatch(path: str) -> Response:
        started = time.perf_counter()
        try:
            response = await routes.dispatch(_raw_path())
        except StatusError as error:
            response = _status(error)
        except Exception as error:  # a bug or an undecodable object: still a Status, logged
            log.exception("%s %s failed", request.method, request.path)
            response = _status(StatusError(500, f"Internal error occurred: {error}"))
        _count_and_log(
            surface,
            request.method,
            request.full_path.rstrip("?"),
            response.status_code,
            g.get("user", "-"),
            started,
        )
        return response

    @app.errorhandler(404)
    async def unrouted(_: Exception) -> Response:
        # A path werkzeug's ``path`` converter does not match (one holding an escaped newline)
        # is decided from its raw path like any other, not answered werkzeug's HTML page.
        return await dispatch("")

    @app.errorhandler(405)
    async def other_method(_: Exception) -> Response:
        # A method no route lists (TRACE, PROPFIND, …) would get werkzeug's HTML page.
        return _status(
            StatusError(
                405,
                f"the server does not allow this method on the requested resource "
                f"({request.method})",
            )
        )

    return app


ADMISSION_PATHS: Final = frozenset(
    {*PHASES, *INSTANCE_PHASES, *INSTANCE_TYPE_PHASES, *METRIC_ACCESS_PHASES}
)
"""Every webhook's path: kube-apiserver calls them presenting no credential."""


class _Routes:
    def __init__(self, surface: Surface) -> None:
        self.surface = surface
        self.settings = SettingsStore(
            surface.sources.client, surface.sources.system_namespace, surface.setting_texts
        )

    async def dispatch(self, raw_path: str) -> Response:
        path = raw_path.rstrip("/") or "/"
        if path in HEALTH_PATHS:
            return self.health(path)
        if path in ADMISSION_PATHS:
            # kube-apiserver presents no credential
            return await self.admission(path)
        user = await self.authenticate()
        g.user = user.name  # for the access log, whatever the answer
        if request.method != "GET":
            return await self.write(path, user)
        return await self.route(path, user)

    # -- health -----------------------------------------------------------------------------

    def health(self, path: str) -> Response:
        body, status, content_type = self.health_answer(path)
        return Response(body, status=status, content_type=content_type)

    def health_answer(self, path: str) -> tuple[bytes, int, str]:
        """Body, status and content type of a health probe."""
        problem = self.surface.ready() if path == "/readyz" else None
        if problem is not None:
            return f"[-]{problem}\nreadyz check failed\n".encode(), 500, TEXT
        return b"ok", 200, TEXT

    # -- the admission webhooks (gpustack_worker.admission, .instance_admission, ------------
    # -- .instancetype_admission) ----------------------------------------------------------

    async def admission(self, path: str) -> Response:
        """One review: a JSON ``AdmissionReview`` body, else a one-line 4xx (never a 500).

        kube-apiserver always sends ``Content-Type: application/json``; anything else is not
        a review (400), as a body that is not one is.
        """
        if request.method != "POST":
            raise StatusError(
                405, f"the admission webhook {path} accepts POST only ({request.method})"
            )
        content_type = _media_type()
        if content_type != JSON:
            return _text(
                400,
                f"AdmissionReview: the content type must be {JSON}, not {content_type or '(none)'}",
            )
        try:
            body = await _raw_body()
        except StatusError as exc:
            if exc.code == 413:
                return _text(413, f"AdmissionReview: body larger than {MAX_REVIEW_BYTES} bytes")
            return _text(exc.code, f"AdmissionReview: {exc.message}")
        assert self.surface.admission is not None  # build_app made one
        assert self.surface.instance_admission is not None
        assert self.surface.instance_type_admission is not None
        assert self.surface.metric_access_admission is not None
        webhook: AdmissionWebhook | InstanceWebhook | InstanceTypeWebhook | MetricAccessWebhook
        if path in PHASES:
            webhook = self.surface.admission
        elif path in INSTANCE_PHASES:
            webhook = self.surface.instance_admission
        elif path in METRIC_ACCESS_PHASES:
            webhook = self.surface.metric_access_admission
        else:
            webhook = self.surface.instance_type_admission
        status, answer = await webhook.handle(path, body)
        if status != 200:
            return Response(answer, status=status, content_type="text/plain; charset=utf-8")
        return Response(answer, status=200, content_type=JSON)

    # -- authentication and authorization ---------------------------------------------------

    async def authenticate(self) -> UserInfo:
        return await self.authenticate_parts(
            presented_chain(request.scope),
            list(request.headers.items()),
            request.method,
            request.path,
        )

    async def authenticate_parts(
        self, chain: list[bytes], headers: list[tuple[str, str]], method: str, path: str
    ) -> UserInfo:
        """Who sent the request (its connection's chain, its headers); a 401 or 500 if none."""
        try:
            return await self.surface.authenticator().authenticate(chain, headers)
        except Unauthenticated as exc:
            log.info("401 for %s %s: %s", method, path, exc)
            raise StatusError(401, "Unauthorized") from exc
        except KubeError as exc:  # the TokenReview itself failed: not the caller's fault
            log.warning("authenticating %s %s failed: %s", method, path, exc)
            raise StatusError(500, f"Internal error occurred: token review: {exc}") from exc

    async def authorize(self, user: UserInfo, attributes: Attributes) -> None:
        try:
            decision = await self.surface.authorizer.authorize(user, attributes)
        except AuthorizationError as exc:
            log.warning("authorization of %s failed: %s", user.name, exc)
            raise StatusError(500, f"Internal error occurred: {exc}") from exc
        if not decision.allowed:
            raise StatusError(
                403,
                forbidden_message(user, attributes, decision.reason),
                kind=attributes.resource,
                name=attributes.name,
                group=attributes.group,
            )

    # -- routing ----------------------------------------------------------------------------

    async def route(self, path: str, user: UserInfo) -> Response:
        if path == "/apis":
            return _group_list()
        static = STATIC.get(path)
        if static is not None:
            return static()
        settings = _v1_parts(path, SETTINGS_V1)
        if settings is not None:
            return await self.setting_read(user, settings)
        parts = _v1_parts(path)
        if parts is None:
            raise no_route()
        match parts:
            case ["instances"]:
                return await self.instances(user, None, None)
            case ["namespaces", namespace, "instances"]:
                return await self.instances(user, namespace, None)
            case ["namespaces", namespace, "instances", name]:
                return await self.instances(user, namespace, name)
            case ["namespaces", namespace, "instances", name, "metrics"]:
                return await self.metrics(user, namespace, name)
        raise no_route()

    # -- Instances: writes, proxied to the CRD ---------------------------------------------

    async def write(self, path: str, user: UserInfo) -> Response:
        """POST, PUT, PATCH and DELETE of Instances (nothing else here takes a write)."""
        method = request.method
        match method, _v1_parts(path, SETTINGS_V1):
            case (("PUT" | "PATCH"), ["namespaces", namespace, "settings", name]):
                return await self.setting_write(user, namespace, name)
        match method, _v1_parts(path):
            case "POST", ["namespaces", namespace, "instances"]:
                return await self.instance_write(user, "create", namespace, None)
            case ("PUT", ["namespaces", namespace, "instances", name]):
                return await self.instance_write(user, "update", namespace, name)
            case ("PATCH", ["namespaces", namespace, "instances", name]):
                return await self.instance_write(user, "patch", namespace, name)
            case ("DELETE", ["namespaces", namespace, "instances", name]):
                return await self.instance_write(user, "delete", namespace, name)
        raise StatusError(
            405,
            f"the server does not allow this method on the requested resource ({method})",
        )

    async def instance_write(
        self, user: UserInfo, verb: str, namespace: str, name: str | None
    ) -> Response:
        _check_names(namespace, name)
        await self.authorize(
            user,
            Attributes(
                verb=verb, group=GROUP, resource="instances", namespace=namespace, name=name or ""
            ),
        )
        client = self.surface.sources.client
        params = {k: request.args[k] for k in WRITE_PARAMS if k in request.args}
        patch_type = _patch_type() if verb == "patch" else None
        body = await _body(writes_object=verb in {"create", "update"})
        try:
            if verb == "create":
                stored = storage_body(body, namespace, None)
                answer = await client.create(INSTANCES.path(namespace), stored, params=params)
                return _json(as_v1(answer), status=201)
            assert name is not None
            path = INSTANCES.path(namespace, name)
            if verb == "update":
                answer = await client.update(path, storage_body(body, namespace, name))
            elif verb == "patch":
                assert patch_type is not None
                answer = await client.patch(
                    path, _patch_body(body, patch_type), patch_type, params=params
                )
            else:
                answer = await _delete(client, path, body, params)
        except ApiError as exc:
            return _upstream_error(exc)
        except KubeError as exc:
            raise StatusError(503, f"the Instance store is unavailable: {exc}") from exc
        return _json(as_v1(answer))

    # -- Settings: the Secret gpustack-settings, one object per key (settings_v1) ----------

    async def setting_read(self, user: UserInfo, parts: list[str]) -> Response:
        """``get``, ``list`` and ``watch`` of Settings, all namespaces or one."""
        namespace: str | None
        name: str | None
        match parts:
            case ["settings"]:
                namespace, name = None, None
            case ["namespaces", namespace, "settings"]:
                name = None
            case ["namespaces", namespace, "settings", name]:
                pass
            case _:
                raise no_route()
        _check_names(namespace, None)
        key = None if name is None else self._setting_key(namespace, name)
        watching = request.args.get("watch", "").lower() in {"1", "true"}
        if watching and name is not None:
            raise StatusError(405, "watch one Setting with fieldSelector=metadata.name=…")
        fields = settings_v1.field_selector(request.args.get("fieldSelector", ""))
        settings_v1.label_selector(request.args.get("labelSelector", ""))
        verb = "get" if name is not None else "watch" if watching else "list"
        await self.authorize(user, _setting_attributes(verb, namespace, name or fields.name))
        version = table_version(request.headers.get("Accept", ""))
        here = namespace in (None, self.settings.namespace)
        if watching:
            return self._setting_watch(fields if here else None, version)
        if key is not None:
            obj = await self.settings.get(key)
            return _json(settings_v1.table([obj], version) if version else obj)
        if here:
            listed = await self.settings.list(fields)
        else:  # a namespace with no Settings: an empty list, as for any namespaced resource
            listed = {"apiVersion": settings_v1.API_VERSION, "kind": settings_v1.LIST_KIND,
                      "metadata": {}, "items": []}  # fmt: skip
        if version is not None:
            return _json(settings_v1.table(listed["items"], version, listed["metadata"]))
        return _json(listed)

    def _setting_key(self, namespace: str | None, name: str) -> Key:
        """The key a Setting path names, checked before anything is authorized or read.

        A name that is no key, or a namespace other than the release's, is 404: neither answer
        depends on any state, so it tells nobody anything the documentation does not.
        """
        _check_names(namespace, None)
        problem = path_segment_problem(name)
        if problem is not None:
            raise StatusError(400, f"invalid resource name {name!r}: {problem}")
        key = settings_v1.known_key(name)
        if namespace != self.settings.namespace:
            raise settings_v1.not_found(name)
        return key

    def _setting_watch(self, fields: settings_v1.Fields | None, version: str | None) -> Response:
        """The Settings' watch, streamed from the Secret's (``fields=None``: nothing here)."""
        try:
            wanted_seconds = int(request.args.get("timeoutSeconds", MAX_WATCH_SECONDS))
        except ValueError as exc:
            raise StatusError(400, "timeoutSeconds is not a whole number") from exc
        seconds = max(1, min(wanted_seconds, MAX_WATCH_SECONDS))
        resource_version = request.args.get("resourceVersion", "")
        bookmarks = request.args.get("allowWatchBookmarks", "").lower() in {"1", "true"}

        async def relay() -> AsyncIterator[bytes]:
            if fields is None:
                await trio.sleep(seconds)  # nothing lives here: an empty watch, then its end
                return
            events = self.settings.watch(fields, resource_version, seconds, bookmarks)
            async with aclosing(events):
                async for event in events:
                    sent = event
                    if version is not None and event["type"] in {"ADDED", "MODIFIED"}:
                        sent = {**event, "object": settings_v1.table([event["object"]], version)}
                    elif version is not None and event["type"] == "BOOKMARK":
                        continue
                    yield json.dumps(sent, separators=(",", ":")).encode() + b"\n"

        response = Response(relay(), status=200, content_type="application/json;stream=watch")
        response.timeout = None  # the stream lasts as long as the Secret's watch
        return response

    async def setting_write(self, user: UserInfo, namespace: str, name: str) -> Response:
        """``update`` (PUT) or ``patch`` (merge patch) of one Setting: one key of the Secret."""
        key = self._setting_key(namespace, name)
        verb = "patch" if request.method == "PATCH" else "update"
        await self.authorize(user, _setting_attributes(verb, namespace, name))
        if verb == "patch":
            if _media_type() != PatchType.MERGE.value:
                raise StatusError(
                    415,
                    f"the patch type {_media_type() or '(none)'} is not supported for Settings: "
                    f"use {PatchType.MERGE.value} (kubectl patch --type=merge)",
                    reason="UnsupportedMediaType",
                )
            patch = _patch_body(await _body(), PatchType.MERGE)

            def decide(current: dict[str, Any]) -> settings_v1.Wanted:
                return settings_v1.wanted(key, current, settings_v1.merge_patch(current, patch))
        else:
            body = await _body(writes_object=True)

            def decide(current: dict[str, Any]) -> settings_v1.Wanted:
                return settings_v1.updated(key, current, body, namespace)

        dry_run = request.args.get("dryRun", "") == "All"
        return _json(await self.settings.write(key, decide, dry_run=dry_run))

    # -- Instances: proxied to the CRD ------------------------------------------------------

    async def instances(self, user: UserInfo, namespace: str | None, name: str | None) -> Response:
        _check_names(namespace, name)
        verb = "get" if name is not None else "list"
        watching = request.args.get("watch", "").lower() in {"1", "true"}
        if watching:
            if name is not None:
                raise StatusError(405, "watch one Instance with fieldSelector=metadata.name=…")
            verb = "watch"
        await self.authorize(
            user,
            Attributes(
                verb=verb,
                group=GROUP,
                resource="instances",
                namespace=namespace or "",
                name=name or "",
            ),
        )
        path = INSTANCES.path(namespace, name)
        params = {k: request.args[k] for k in LIST_PARAMS if k in request.args and name is None}
        if watching:
            return await _watch(self.surface.sources.client, path, params)
        try:
            stored = await self.surface.sources.client.get(path, params)
        except ApiError as exc:
            return _upstream_error(exc)
        except KubeError as exc:
            raise StatusError(503, f"the Instance store is unavailable: {exc}") from exc
        version = table_version(request.headers.get("Accept", ""))
        if version is not None:
            return _json(table(stored, version))
        return _json(as_v1(stored))

    # -- the subresource --------------------------------------------------------------------

    async def metrics(self, user: UserInfo, namespace: str, name: str) -> Response:
        body, status = await self.metrics_answer(user, namespace, name)
        return Response(body, status=status, content_type=JSON)

    async def metrics_answer(self, user: UserInfo, namespace: str, name: str) -> tuple[bytes, int]:
        """The subresource's JSON body and status; ``StatusError`` for what is no answer."""
        _check_names(namespace, name)
        await self.authorize(
            user,
            Attributes(
                verb="get",
                group=GROUP,
                resource="instances",
                subresource="metrics",
                namespace=namespace,
                name=name,
            ),
        )
        try:
            body = await instance_metrics_json(self.surface.sources, namespace, name)
        except ApiError as exc:
            return _upstream_parts(exc)
        except Unavailable as exc:
            raise StatusError(503, str(exc)) from exc
        except trio.TooSlowError as exc:
            raise StatusError(
                504, f"the metrics of Instance {namespace}/{name} took longer than 10s"
            ) from exc
        except KubeError as exc:
            raise StatusError(503, f"reading Instance {namespace}/{name} failed: {exc}") from exc
        return body, 200


def _check_names(namespace: str | None, name: str | None) -> None:
    """400 for a segment no name can be, 404 for one that is no DNS-1123 name; else nothing.

    Runs before authorization, so a request is authorized for exactly the name that will be
    read; neither answer depends on what exists, so nothing leaks to a caller not allowed to
    read it.
    """
    for value in (namespace, name):
        if value is None:
            continue
        problem = path_segment_problem(value)
        if problem is not None:
            raise StatusError(400, f"invalid resource name {value!r}: {problem}")
    if namespace is not None and dns1123_label_problem(namespace) is not None:
        raise not_found("namespaces", namespace)
    if name is not None and dns1123_subdomain_problem(name) is not None:
        raise not_found("instances", name, GROUP)


def _setting_attributes(verb: str, namespace: str | None, name: str) -> Attributes:
    """What a Setting request asks of RBAC: ``<verb> settings.gpustack.ai`` in the namespace."""
    return Attributes(
        verb=verb,
        group=discovery.SETTINGS_GROUP,
        resource=discovery.SETTINGS,
        namespace=namespace or "",
        name=name,
    )


def _group_list() -> Response:
    """``/apis``: aggregated discovery v2 (or 1.27's v2beta1) when asked, else the legacy list."""
    version = discovery.aggregated_discovery_version(request.headers.get("Accept", ""))
    if version is not None:
        response = Response(
            msgspec.json.encode(discovery.aggregated_discovery(version)),
            content_type=discovery.aggregated_content_type(version),
        )
    else:
        response = _json(discovery.api_group_list())
    response.headers["Vary"] = "Accept"
    return response


def _v3_group() -> Response:
    response = _document(openapi.openapi_v3_group_bytes())
    if request.args.get("hash") == openapi.v3_group_hash():
        response.headers["Cache-Control"] = "public, immutable"
    return response


STATIC: dict[str, Callable[[], Response]] = {
    f"/apis/{GROUP}": lambda: _json(discovery.api_group()),
    V1: lambda: _json(discovery.api_resource_list()),
    f"/apis/{SETTINGS_GROUP}": lambda: _json(discovery.api_group(SETTINGS_GROUP)),
    SETTINGS_V1: lambda: _json(discovery.settings_resource_list()),
    "/openapi/v2": lambda: _document(openapi.openapi_v2_bytes()),
    "/openapi/v3": lambda: _document(openapi.openapi_v3_index_bytes()),
    f"/openapi/v3/apis/{GROUP}/v1": _v3_group,
}
"""Documents that depend on nothing but the build: any authenticated caller may read them."""


def _document(body: bytes) -> Response:
    """A static document with its ETag; the aggregator re-downloads only when it changes."""
    tag = openapi.etag(body)
    if tag in request.headers.get("If-None-Match", ""):
        return Response(b"", status=304, headers={"ETag": tag})
    return _json(body, headers={"ETag": tag})


def _upstream_error(error: ApiError) -> Response:
    """The store's own ``Status`` passes through (404 stays 404, with its message)."""
    body, status = _upstream_parts(error)
    return Response(body, status=status, content_type=JSON)


def _upstream_parts(error: ApiError) -> tuple[bytes, int]:
    if error.body.startswith(b"{"):
        return error.body, error.status
    status = StatusError(error.status, error.message or error.reason)
    return status.body(), status.code


WRITE_PARAMS = ("dryRun", "fieldManager", "fieldValidation")
WATCH_PARAMS = (*LIST_PARAMS, "timeoutSeconds", "allowWatchBookmarks")
MAX_WATCH_SECONDS = 1800
"""The longest one watch stream lasts; the client re-watches from its last version."""
PATCH_TYPES = {t.value: t for t in (PatchType.MERGE, PatchType.JSON)}
PROPAGATION_POLICIES = ("Orphan", "Background", "Foreground")


def _text(status: int, line: str) -> Response:
    """A webhook's refusal: one line of text (kube-apiserver reads only the code)."""
    return Response(f"{line}\n", status=status, content_type=TEXT)


def _media_type() -> str:
    """The request's ``Content-Type`` without parameters, lower-cased (``""`` when absent)."""
    return request.headers.get("Content-Type", "").split(";")[0].strip().lower()


async def _raw_body() -> bytes:
    """The whole body, or a ``StatusError``: 413 past the size limit, 408 past the deadline."""
    try:
        raw = await request.get_data(cache=False, as_text=False)
    except RequestEntityTooLarge as exc:
        raise StatusError(
            413,
            f"the request body is larger than {MAX_REVIEW_BYTES} bytes",
            reason="RequestEntityTooLarge",
        ) from exc
    except RequestTimeout as exc:
        raise StatusError(408, "the request body did not arrive in time", reason="Timeout") from exc
    return raw if isinstance(raw, bytes) else raw.encode()


class _NotFiniteError(ValueError):
    pass


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _NotFiniteError(f"the number {text[:32]} is out of range")
    return value


def _constant(name: str) -> float:
    raise _NotFiniteError(f"{name} is not JSON")


def _parse_json(data: bytes) -> object:
    """Strict JSON: ``NaN``, ``Infinity`` and numbers past a double (``1e400``) are refused.

    Python's parser accepts all three and the answer would then fail to encode: a 500 for
    what is the caller's mistake.
    """
    try:
        return json.loads(data, parse_float=_finite, parse_constant=_constant)
    except _NotFiniteError as exc:
        raise StatusError(400, f"the request body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise StatusError(400, "the request body is nested too deeply") from exc
    except ValueError as exc:
        raise StatusError(400, f"the request body is not JSON: {exc}") from exc


async def _body(*, writes_object: bool = False) -> object:
    """The request's JSON body (``None`` when empty); a 4xx naming the problem otherwise.

    ``writes_object``: a create or update, whose body must be sent as ``application/json``
    (415 otherwise, as an API server answers a media type it does not decode).
    """
    if writes_object and _media_type() not in (JSON, ""):
        raise StatusError(
            415,
            f"the body's content type {_media_type()} is not supported: send {JSON}",
            reason="UnsupportedMediaType",
        )
    data = await _raw_body()
    if not data.strip():
        return None
    return _parse_json(data)


def _patch_type() -> PatchType:
    """Merge or JSON patch; a strategic or apply patch is refused as for any custom resource."""
    content_type = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    found = PATCH_TYPES.get(content_type)
    if found is None:
        raise StatusError(
            415,
            f"the patch type {content_type or '(none)'} is not supported for Instances, a "
            f"custom resource: use {PatchType.MERGE.value} or {PatchType.JSON.value} "
            "(kubectl patch --type=merge or --type=json)",
        )
    return found


def _patch_body(body: object, patch_type: PatchType) -> dict[str, Any] | list[dict[str, Any]]:
    """The body the patch type takes: a merge patch is an object, a JSON patch a list of them."""
    if patch_type is PatchType.JSON:
        if isinstance(body, list) and all(isinstance(op, dict) for op in body):
            return body
        raise StatusError(
            400, "a JSON patch (application/json-patch+json) is a list of operation objects"
        )
    if isinstance(body, dict):
        return body
    raise StatusError(400, "a merge patch (application/merge-patch+json) is a JSON object")


def _whole(name: str, value: object) -> int | None:
    """A whole-number option (``gracePeriodSeconds``) from the query or body; 400 otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise StatusError(400, f"{name} must be a whole number of seconds, not {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise StatusError(
            400, f"{name} must be a whole number of seconds, not {str(value)[:32]!r}"
        ) from None
    if number < 0:
        raise StatusError(400, f"{name} must not be negative, not {number}")
    return number


async def _delete(
    client: KubeClient, path: str, body: object, params: Mapping[str, str]
) -> dict[str, Any]:
    """DELETE with the caller's ``DeleteOptions`` (body or query) carried over."""
    if body is not None and not isinstance(body, dict):
        raise StatusError(400, "the DeleteOptions body is not a JSON object")
    options = body or {}
    policy = options.get("propagationPolicy") or request.args.get("propagationPolicy")
    if policy is not None and policy not in PROPAGATION_POLICIES:
        raise StatusError(
            400,
            f"propagationPolicy must be one of {', '.join(PROPAGATION_POLICIES)}, "
            f"not {str(policy)[:32]!r}",
        )
    grace = _whole(
        "gracePeriodSeconds",
        options.get("gracePeriodSeconds", request.args.get("gracePeriodSeconds")),
    )
    preconditions = options.get("preconditions")
    return await client.delete(
        path,
        propagation_policy=str(policy) if policy else None,
        preconditions=preconditions if isinstance(preconditions, dict) else None,
        grace_period_seconds=grace,
        params=dict(params) or None,
    )


async def _watch(client: KubeClient, path: str, params: Mapping[str, str]) -> Response:
    """The CRD's watch, relayed event by event with each object at ``v1``."""
    query: dict[str, str | int | bool] = {
        k: request.args[k] for k in WATCH_PARAMS if k in request.args
    }
    query.update(params)
    try:
        wanted = int(query.get("timeoutSeconds", MAX_WATCH_SECONDS))
    except ValueError as exc:
        raise StatusError(400, "timeoutSeconds is not a whole number") from exc
    query["timeoutSeconds"] = max(1, min(wanted, MAX_WATCH_SECONDS))
    events = client.watch(path, query)
    try:
        first = await events.__anext__()
    except StopAsyncIteration:
        first = None
    except ApiError as exc:
        await events.aclose()
        return _upstream_error(exc)

    async def relay() -> AsyncIterator[bytes]:
        async with aclosing(events):
            if first is not None:
                yield _event_line(first)
            try:
                async for event in events:
                    yield _event_line(event)
            except ApiError as exc:
                status = exc.body if exc.body.startswith(b"{") else b"{}"
                yield b'{"type":"ERROR","object":' + status + b"}\n"
            except KubeError:
                return  # the store went away: the client re-watches

    response = Response(relay(), status=200, content_type="application/json;stream=watch")
    response.timeout = None  # the stream lasts as long as the store's watch
    return response


def _event_line(event: Mapping[str, Any]) -> bytes:
    obj = event.get("object")
    converted = {**event, "object": as_v1(obj) if isinstance(obj, dict) else obj}
    return json.dumps(converted, separators=(",", ":")).encode() + b"\n"
