"""The stand-in's HTTP surface: the endpoints the daemons and kubectl use, and nothing else.

Every request is authenticated by bearer token and authorized by the scenario's RBAC rules, as
an API server would; a path nothing serves is a ``Status`` 404, never an empty success, so a
missing endpoint is visible in the test that needed it.
"""

from __future__ import annotations

import copy
import math
import re
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import httpx
import msgspec
import trio
from quart import Response, request
from quart_trio import QuartTrio

from gpustack_core.status import StatusError, no_route, not_found
from gpustack_simulator.cluster import discovery, protobuf
from gpustack_simulator.cluster.selectors import SelectorError, field_selector, label_selector
from gpustack_simulator.cluster.services import ENDPOINTS, SERVICE
from gpustack_simulator.cluster.state import (
    AUTH_CONFIGMAP,
    CONFIGMAP,
    INSTANCE,
    NODE,
    POD,
    SYSTEM_NAMESPACE,
    ClockRangeError,
    ClusterState,
)
from gpustack_simulator.cluster.store import TooOld, matches
from gpustack_simulator.scenario import MASTERS, Fault, FaultDoc, UserSpec

JSON = "application/json"
WATCH_BOOKMARK_SECONDS = 5.0
"""How often an idle watch that asked for bookmarks gets one."""
DEFAULT_WATCH_SECONDS = 1800.0
WORKER_GROUP = "worker.gpustack.ai"
ENDPOINTS_DEPRECATED = (
    '299 - "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice"'
)
"""The warning a 1.33+ API server attaches to every v1 Endpoints answer; kubectl prints it."""

Handler = Callable[..., Awaitable[Response]]
B = TypeVar("B")


class ClockAdvance(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    """``POST /simulator/v1/clock``'s body."""

    advance_seconds: float


def _json(obj: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(obj), status=status, content_type=JSON)


class Caller:
    """The authenticated user of one request."""

    def __init__(self, user: UserSpec) -> None:
        self.name = user.name
        self.groups = (*user.groups, "system:authenticated")


def build_app(state: ClusterState) -> QuartTrio:
    """The Quart app serving ``state``."""
    app = QuartTrio(__name__)
    app.config["RESPONSE_TIMEOUT"] = None  # watches stream for as long as they ask
    app.config["BODY_TIMEOUT"] = 30
    routes = Routes(state)

    @app.route("/", defaults={"path": ""}, methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    @app.route("/<path:path>", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def dispatch(path: str) -> Response:
        try:
            return await routes.dispatch("/" + path)
        except StatusError as error:
            return Response(error.body(), status=error.code, content_type=JSON)

    return app


class Routes:
    """Path dispatch; one method per endpoint family."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.table: list[tuple[re.Pattern[str], Handler]] = [
            (re.compile(p), h)
            for p, h in (
                (r"^/version/?$", self.version),
                (r"^/api/?$", self.discover),
                (r"^/api/v1/?$", self.discover),
                (r"^/apis/?$", self.discover),
                (r"^/apis/worker\.gpustack\.ai/v1(?P<rest>/.*)?$", self.aggregate),
                (r"^/apis/(?P<group>[^/]+)/?$", self.discover),
                (r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/?$", self.discover),
                (r"^/api/v1/pods$", self.pods),
                (r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods$", self.pods),
                (r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)$", self.pods),
                (r"^/api/v1/services$", self.services),
                (r"^/api/v1/namespaces/(?P<ns>[^/]+)/services$", self.services),
                (r"^/api/v1/namespaces/(?P<ns>[^/]+)/services/(?P<name>[^/]+)$", self.services),
                (r"^/api/v1/endpoints$", self.endpoints),
                (r"^/api/v1/namespaces/(?P<ns>[^/]+)/endpoints$", self.endpoints),
                (r"^/api/v1/namespaces/(?P<ns>[^/]+)/endpoints/(?P<name>[^/]+)$", self.endpoints),
                (r"^/api/v1/nodes$", self.nodes),
                (r"^/api/v1/nodes/(?P<name>[^/]+)$", self.nodes),
                (r"^/api/v1/nodes/(?P<name>[^/]+)/proxy/(?P<rest>.*)$", self.node_proxy),
                (r"^/api/v1/namespaces/(?P<ns>[^/]+)/configmaps/(?P<name>[^/]+)$", self.configmap),
                (r"^/apis/metrics\.k8s\.io/v1beta1/pods$", self.pod_metrics),
                (
                    r"^/apis/metrics\.k8s\.io/v1beta1/namespaces/(?P<ns>[^/]+)/pods$",
                    self.pod_metrics,
                ),
                (
                    r"^/apis/metrics\.k8s\.io/v1beta1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)$",
                    self.pod_metrics,
                ),
                (r"^/apis/authorization\.k8s\.io/v1/subjectaccessreviews$", self.sar),
                (r"^/apis/authorization\.k8s\.io/v1/selfsubjectaccessreviews$", self.self_sar),
                (r"^/apis/authentication\.k8s\.io/v1/tokenreviews$", self.token_review),
                (r"^/apis/worker\.gpustack\.ai/v1alpha1/instances$", self.instances),
                (
                    r"^/apis/worker\.gpustack\.ai/v1alpha1/namespaces/(?P<ns>[^/]+)/instances$",
                    self.instances,
                ),
                (
                    r"^/apis/worker\.gpustack\.ai/v1alpha1/namespaces/(?P<ns>[^/]+)/instances/"
                    r"(?P<name>[^/]+)$",
                    self.instances,
                ),
                (r"^/simulator/v1/clock$", self.control_clock),
                (r"^/simulator/v1/faults$", self.control_faults),
                (r"^/simulator/v1/state$", self.control_state),
            )
        ]

    async def dispatch(self, path: str) -> Response:
        caller = self.authenticate()
        for pattern, handler in self.table:
            match = pattern.match(path)
            if match is not None:
                params = {k: v for k, v in match.groupdict().items() if v is not None}
                return await handler(caller, **params)
        raise no_route()

    # -- authentication and authorization ---------------------------------------------------

    def authenticate(self) -> Caller:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        user = self.state.user_for_token(token) if scheme.lower() == "bearer" else None
        if user is None:
            raise StatusError(401, "Unauthorized")
        return Caller(user)

    def authorize(
        self,
        caller: Caller,
        verb: str,
        resource: str,
        *,
        group: str = "",
        subresource: str = "",
        namespace: str = "",
        name: str = "",
    ) -> None:
        allowed, _ = self.state.expanded.allowed(
            caller.name,
            caller.groups,
            verb=verb,
            group=group,
            resource=resource,
            subresource=subresource,
            namespace=namespace,
            name=name,
        )
        if not allowed:
            what = f"{resource}/{subresource}" if subresource else resource
            scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
            raise StatusError(
                403,
                f'{what}{"." + group if group else ""} "{name}" is forbidden: User '
                f'"{caller.name}" cannot {verb} resource "{what}" in API group "{group}" {scope}',
                kind=resource,
                name=name,
                group=group,
            )

    @staticmethod
    def _method(*allowed: str) -> None:
        if request.method not in allowed:
            raise StatusError(
                405,
                f"the server does not allow this method on the requested "
                f"resource ({request.method})",
            )

    # -- discovery --------------------------------------------------------------------------

    async def version(self, caller: Caller) -> Response:
        return _json(discovery.VERSION)

    async def discover(self, caller: Caller, group: str = "", version: str = "") -> Response:
        metrics = self.state.fault_active("metrics-api-absent") is None
        path = request.path.rstrip("/")
        document = discovery.document(
            path, group, version, metrics_api=metrics, aggregated=self.state.worker_url is not None
        )
        if document is None:
            raise no_route()
        return _json(document)

    # -- core objects -----------------------------------------------------------------------

    async def pods(
        self, caller: Caller, ns: str | None = None, name: str | None = None
    ) -> Response:
        self._method("GET")
        return await self._objects(caller, POD, "pods", "", "v1", ns, name)

    async def services(
        self, caller: Caller, ns: str | None = None, name: str | None = None
    ) -> Response:
        self._method("GET")
        return await self._objects(caller, SERVICE, "services", "", "v1", ns, name)

    async def endpoints(
        self, caller: Caller, ns: str | None = None, name: str | None = None
    ) -> Response:
        self._method("GET")
        response = await self._objects(caller, ENDPOINTS, "endpoints", "", "v1", ns, name)
        response.headers["Warning"] = ENDPOINTS_DEPRECATED
        return response

    async def nodes(self, caller: Caller, name: str | None = None) -> Response:
        self._method("GET")
        return await self._objects(caller, NODE, "nodes", "", "v1", None, name)

    async def instances(
        self, caller: Caller, ns: str | None = None, name: str | None = None
    ) -> Response:
        self._method("GET")
        return await self._objects(
            caller, INSTANCE, "instances", WORKER_GROUP, f"{WORKER_GROUP}/v1alpha1", ns, name
        )

    async def configmap(self, caller: Caller, ns: str, name: str) -> Response:
        self._method("GET")
        self.authorize(caller, "get", "configmaps", namespace=ns, name=name)
        obj = self.state.store.get(CONFIGMAP, ns, name)
        if obj is None:
            raise not_found("configmaps", name)
        return _json(obj)

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
            return _json(obj)
        predicate = self._selectors()
        watching = request.args.get("watch", "").lower() in {"1", "true"}
        self.authorize(
            caller, "watch" if watching else "list", resource, group=group, namespace=ns or ""
        )
        if watching:
            return self._watch(kind, ns, predicate)
        items = [_item(o) for o in store.list(kind, ns) if predicate(o)]
        return _json(
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

    # -- node proxy: the kubelet ------------------------------------------------------------

    async def node_proxy(self, caller: Caller, name: str, rest: str) -> Response:
        self._method("GET")
        self.authorize(caller, "get", "nodes", subresource="proxy", name=name)
        node = self.state.store.get(NODE, "", name)
        if node is None:
            raise not_found("nodes", name)
        if rest.rstrip("/") != "stats/summary":
            raise StatusError(404, f"the kubelet stand-in serves only stats/summary, not {rest!r}")
        if self.state.fault_active("kubelet-unreachable", name) is not None:
            address = _internal_ip(node)
            raise StatusError(
                503,
                f"error trying to reach service: dial tcp {address}:10250: "
                "connect: connection refused",
            )
        return _json(self.state.expanded.summary(name, self.state.clock()))

    # -- metrics.k8s.io ---------------------------------------------------------------------

    async def pod_metrics(
        self, caller: Caller, ns: str | None = None, name: str | None = None
    ) -> Response:
        self._method("GET")
        if self.state.fault_active("metrics-api-absent") is not None:
            raise no_route()
        group = "metrics.k8s.io"
        now = self.state.clock()
        if name is not None:
            self.authorize(caller, "get", "pods", group=group, namespace=ns or "", name=name)
            metrics = self.state.expanded.pod_metrics(ns or "", name, now)
            if metrics is None:
                raise not_found("pods", name, group)
            return _json(metrics)
        self.authorize(caller, "list", "pods", group=group, namespace=ns or "")
        items = []
        for pod in self.state.store.list(POD, ns):
            meta = pod["metadata"]
            metrics = self.state.expanded.pod_metrics(meta["namespace"], meta["name"], now)
            if metrics is not None:
                items.append(_item(metrics))
        return _json(
            {
                "kind": "PodMetricsList",
                "apiVersion": f"{group}/v1beta1",
                "metadata": {},
                "items": items,
            }
        )

    # -- authorization and authentication reviews -------------------------------------------

    async def _review_body(self) -> dict[str, Any]:
        raw = await request.get_data(as_text=False)
        data = raw if isinstance(raw, bytes) else raw.encode()
        try:
            if "protobuf" in request.headers.get("Content-Type", ""):
                body: dict[str, Any] = protobuf.decode_review(data)
            else:
                body = msgspec.json.decode(data)
        except (msgspec.DecodeError, protobuf.ProtobufError, UnicodeDecodeError) as exc:
            raise StatusError(400, f"the request body is not a review: {exc}") from exc
        if not isinstance(body, dict) or not isinstance(body.get("spec"), dict):
            raise StatusError(400, "the review has no spec")
        return body

    async def sar(self, caller: Caller) -> Response:
        self._method("POST")
        self.authorize(caller, "create", "subjectaccessreviews", group="authorization.k8s.io")
        body = await self._review_body()
        spec = body["spec"]
        user = str(spec.get("user", ""))
        groups = tuple(spec.get("groups") or ())
        return _json(self._decide(body, user, groups, spec.get("resourceAttributes") or {}))

    async def self_sar(self, caller: Caller) -> Response:
        self._method("POST")
        body = await self._review_body()
        return _json(
            self._decide(
                body, caller.name, caller.groups, body["spec"].get("resourceAttributes") or {}
            )
        )

    def _decide(
        self,
        body: dict[str, Any],
        user: str,
        groups: tuple[str, ...],
        attributes: Mapping[str, Any],
    ) -> dict[str, Any]:
        allowed, reason = self.state.expanded.allowed(
            user,
            groups,
            verb=str(attributes.get("verb", "")),
            group=str(attributes.get("group", "")),
            resource=str(attributes.get("resource", "")),
            subresource=str(attributes.get("subresource", "")),
            namespace=str(attributes.get("namespace", "")),
            name=str(attributes.get("name", "")),
        )
        status: dict[str, Any] = {"allowed": allowed}
        if reason:
            status["reason"] = reason
        if not allowed:
            status["denied"] = False  # no rule denies explicitly; RBAC only allows
        review = copy.deepcopy(body)
        review["status"] = status
        review.setdefault("metadata", {})["creationTimestamp"] = None
        return review

    async def token_review(self, caller: Caller) -> Response:
        self._method("POST")
        self.authorize(caller, "create", "tokenreviews", group="authentication.k8s.io")
        body = await self._review_body()
        user = self.state.user_for_token(str(body["spec"].get("token", "")))
        review = copy.deepcopy(body)
        review["status"] = (
            {
                "authenticated": True,
                "user": {"username": user.name, "groups": [*user.groups, "system:authenticated"]},
            }
            if user is not None
            else {"authenticated": False, "error": "invalid bearer token"}
        )
        return _json(review)

    # -- the simulator's own control surface ------------------------------------------------

    def _master(self, caller: Caller) -> None:
        """The control surface moves time and breaks sources: the cluster admin's alone."""
        if MASTERS not in caller.groups:
            raise StatusError(
                403,
                f'User "{caller.name}" cannot use the simulator control endpoints: they are '
                f'open to group "{MASTERS}" only',
            )

    async def _control_body(self, kind: type[B], what: str) -> B:
        raw = await request.get_data(as_text=False)
        data = raw if isinstance(raw, bytes) else raw.encode()
        try:
            return msgspec.json.decode(data, type=kind)
        except msgspec.ValidationError as exc:
            raise StatusError(400, f"the {what} is malformed: {exc}") from exc
        except msgspec.DecodeError as exc:
            raise StatusError(400, f"the {what} is not JSON: {exc}") from exc

    async def control_clock(self, caller: Caller) -> Response:
        self._method("POST")
        self._master(caller)
        body = await self._control_body(ClockAdvance, "clock request")
        try:
            self.state.clock.advance(body.advance_seconds)
        except ClockRangeError as exc:
            raise StatusError(400, str(exc)) from exc
        return _json({"now": self.state.clock()})

    async def control_faults(self, caller: Caller) -> Response:
        self._method("POST", "DELETE")
        self._master(caller)
        if request.method == "DELETE":
            self.state.clear_faults()
        else:
            doc = await self._control_body(FaultDoc, "fault")
            problems = self._fault_problems(doc)
            if problems:
                raise StatusError(400, "the fault is malformed: " + "; ".join(problems))
            self.state.add_fault(Fault(doc.kind, doc.node, doc.start, doc.end))
        return _json({"faults": [_fault(f) for f in self.state.faults]})

    def _fault_problems(self, doc: FaultDoc) -> list[str]:
        """The checks a scenario's ``faults`` entry gets, with the same wording."""
        problems = [
            f"{name}: {value} is not a finite number of seconds"
            for name, value in (("from", doc.start), ("to", doc.end))
            if value is not None and not math.isfinite(value)
        ]
        if doc.node is not None and self.state.store.get(NODE, "", doc.node) is None:
            problems.append(f"node: unknown node {doc.node!r}")
        if doc.kind == "metrics-api-absent" and doc.node is not None:
            problems.append("node: metrics.k8s.io is cluster-wide; it has no node")
        if doc.end is not None and doc.end <= doc.start:
            problems.append(f"to: {doc.end} must be after 'from' ({doc.start})")
        return problems

    async def control_state(self, caller: Caller) -> Response:
        self._method("GET")
        self._master(caller)
        return _json(
            {
                "now": self.state.clock(),
                "faults": [_fault(f) for f in self.state.faults],
                "worker": self.state.worker_url,
            }
        )

    # -- the kube-aggregator ----------------------------------------------------------------

    async def aggregate(self, caller: Caller, rest: str = "") -> Response:
        url = self.state.worker_url
        if url is None:
            raise StatusError(503, "the server is currently unable to handle the request")
        # The path as the client sent it, still escaped: forwarding the decoded one would turn
        # an escaped ``#`` or ``?`` in a name into a fragment or a query on the worker's side.
        raw_path = request.scope.get("raw_path") or request.path.encode()
        target = url.rstrip("/") + raw_path.decode("ascii", "replace")
        if request.query_string:
            target += "?" + request.query_string.decode()
        headers = [("X-Remote-User", caller.name)]
        headers += [("X-Remote-Group", group) for group in caller.groups]
        for name in ("Accept", "Content-Type", "User-Agent"):
            if name in request.headers:
                headers.append((name, request.headers[name]))
        try:
            async with httpx.AsyncClient(
                verify=self._worker_tls(), timeout=15, trust_env=False
            ) as client:
                answer = await client.request(
                    request.method, target, headers=headers, content=await request.get_data()
                )
        except httpx.HTTPError as exc:
            raise StatusError(503, f"error trying to reach service: {exc}") from exc
        keep = {
            k: v
            for k, v in answer.headers.items()
            if k.lower() in {"content-type", "cache-control", "audit-id"}
        }
        return Response(answer.content, status=answer.status_code, headers=keep)

    def _worker_tls(self) -> ssl.SSLContext:
        """Present the front-proxy client certificate; verify the worker if its CA is known.

        Without a CA this matches an ``APIService`` with ``insecureSkipTLSVerify``.
        """
        context = ssl.create_default_context(cafile=self.state.worker_ca)
        if self.state.worker_ca is None:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        context.load_cert_chain(str(self.state.pki.front_proxy_client))
        return context


def _item(obj: Mapping[str, Any]) -> dict[str, Any]:
    """List items carry no kind/apiVersion, as the API server serializes typed lists."""
    return {k: v for k, v in obj.items() if k not in {"kind", "apiVersion"}}


def _event(kind: str, obj: Mapping[str, Any]) -> bytes:
    return msgspec.json.encode({"type": kind, "object": obj}) + b"\n"


def _bookmark(kind: str, version: int) -> bytes:
    api_version = f"{WORKER_GROUP}/v1alpha1" if kind == INSTANCE else "v1"
    return _event(
        "BOOKMARK",
        {"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": str(version)}},
    )


def _fault(fault: Fault) -> dict[str, Any]:
    """A fault spelled as a scenario's ``faults`` entry is."""
    return {"kind": fault.kind, "node": fault.node, "from": fault.start, "to": fault.end}


def _internal_ip(node: Mapping[str, Any]) -> str:
    for address in node.get("status", {}).get("addresses", []):
        if address.get("type") == "InternalIP":
            return str(address.get("address"))
    return str(node["metadata"]["name"])


__all__ = ["AUTH_CONFIGMAP", "SYSTEM_NAMESPACE", "build_app"]
