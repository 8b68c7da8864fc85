"""The tenant's door to the cluster Prometheus: one authorized namespace, then prom-label-proxy.

docs/multi-tenant-metrics.md, "Isolate". prom-label-proxy (on loopback beside this) rewrites
every query to carry ``namespace="<value of the namespace parameter>"``, but it trusts that
parameter and takes the *union* of several. This gateway is what makes the parameter a verified
claim, as kube-rbac-proxy does for OpenShift's tenancy port:

1. only the Prometheus read APIs prom-label-proxy enforces are passed (query, query_range,
   series, labels, label values, rules, alerts); anything else is 404;
2. exactly one ``namespace`` query parameter, a DNS-1123 label, is required; none in a form
   body (Go's ``ParseForm`` would merge it into the union). Anything else is 400, one line;
3. the caller must be allowed to read that namespace's metrics: :data:`Authorize`, the identity
   guard's SubjectAccessReview with the namespace taken from the parameter (``get
   pods.metrics.k8s.io`` in it, as OpenShift's tenancy port asks). Refused: its status and line;
4. the request is re-sent with a canonical query string (the one namespace, last) and only the
   body and its content type; no credential goes upstream.

Pure ASGI, so the guard's middleware composes in front of it and a test drives it in-process.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode

import httpx

from gpustack_core.names import dns1123_label_problem
from gpustack_kube.reviews import Attributes
from gpustack_serving.access import AccessReviewer, AccessSettings, Refusal, check

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Authorize = Callable[[Scope, str], Awaitable[tuple[int, str] | None]]
"""``(scope, namespace)`` → ``None`` when the verified caller may read it, else (status, line)."""

NAMESPACE_PARAM: Final = "namespace"
METRICS_READ: Final = Attributes(verb="get", group="metrics.k8s.io", resource="pods")
"""What reading a namespace's metrics is, in SubjectAccessReview terms (OpenShift's choice);
the namespace comes from the request."""
PATHS: Final = frozenset(
    {
        "/api/v1/query",
        "/api/v1/query_range",
        "/api/v1/series",
        "/api/v1/labels",
        "/api/v1/rules",
        "/api/v1/alerts",
    }
)
_LABEL_VALUES: Final = re.compile(r"/api/v1/label/[a-zA-Z_][a-zA-Z0-9_]*/values")
MAX_BODY: Final = 1 << 20
FORM: Final = "application/x-www-form-urlencoded"


def enforced(path: str) -> bool:
    """Whether ``path`` is one of the read APIs prom-label-proxy puts the matcher on."""
    return path in PATHS or _LABEL_VALUES.fullmatch(path) is not None


def tenant_of(query: str, body: bytes, content_type: str) -> str | tuple[int, str]:
    """The one namespace the request names, or ``(400, why)``."""
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=False, errors="strict")
    except UnicodeDecodeError:
        return 400, "the query string is not UTF-8"
    values = [v for k, v in pairs if k == NAMESPACE_PARAM]
    if len(values) != 1:
        return 400, f"exactly one {NAMESPACE_PARAM!r} query parameter is required"
    if body:
        if content_type.split(";", maxsplit=1)[0].strip().lower() != FORM:
            return 400, f"a request body must be {FORM}"
        try:
            form = parse_qsl(body.decode(), keep_blank_values=True)
        except UnicodeDecodeError:
            return 400, "the form body is not UTF-8"
        if any(k == NAMESPACE_PARAM for k, _ in form):
            return 400, f"{NAMESPACE_PARAM!r} belongs in the query string, not the form body"
    if why := dns1123_label_problem(values[0]):
        return 400, f"namespace {values[0][:64]!r}: {why}"
    return values[0]


def access_settings(ttl: float = 10.0) -> AccessSettings:
    """The guard's settings for the gateway: :data:`METRICS_READ` in the parameter's namespace.

    ``ttl``: seconds a verdict stands (a revoked RoleBinding stops working within it).
    """
    return AccessSettings(
        paths=PATHS,
        resource=METRICS_READ,
        namespace_parameter=NAMESPACE_PARAM,
        allowed_ttl=ttl,
        denied_ttl=ttl,
        token_ttl=ttl,
    )


def guarded(reviewer: AccessReviewer) -> Authorize:
    """The gateway's :data:`Authorize`, made of the identity guard: the wiring is this one call.

    TokenReview (or a verified client certificate), then the SubjectAccessReview of
    :func:`access_settings` in the namespace the query names.
    """
    if reviewer.settings.namespace_parameter != NAMESPACE_PARAM:
        raise ValueError("the gateway's reviewer must take the namespace from its parameter")

    async def authorize(scope: Scope, namespace: str) -> tuple[int, str] | None:
        verdict = await check(reviewer, scope)
        if isinstance(verdict, Refusal):
            return verdict.status, verdict.line
        if verdict[1].namespace != namespace:  # both read the same query string; never differ
            return 403, f"authorized for {verdict[1].namespace!r}, asked for {namespace!r}"
        return None

    return authorize


def canonical_query(query: str, namespace: str) -> str:
    """The query string as sent upstream: every other parameter as it was, the namespace last."""
    pairs = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != NAMESPACE_PARAM]
    return urlencode([*pairs, (NAMESPACE_PARAM, namespace)])


class MetricsGateway:
    """The ASGI app in front of prom-label-proxy at ``upstream`` (its loopback base URL)."""

    def __init__(self, upstream: str, authorize: Authorize, http: httpx.AsyncClient) -> None:
        self.upstream = upstream.rstrip("/")
        self.authorize = authorize
        self.http = http

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check, authorize, forward; every refusal one line of text."""
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method = str(scope["method"])
        path = str(scope["path"])
        if method not in {"GET", "POST"}:
            await _answer(send, 405, "only GET and POST reach the metrics APIs")
            return
        if not enforced(path):
            await _answer(send, 404, f"{path[:80]!r} is not a tenant metrics API")
            return
        body = await _body(receive)
        if body is None:
            await _answer(send, 413, f"a request body is limited to {MAX_BODY} bytes")
            return
        headers = _headers(scope)
        query = bytes(scope.get("query_string", b"")).decode("latin-1")
        tenant = tenant_of(query, body, headers.get("content-type", ""))
        if isinstance(tenant, tuple):
            await _answer(send, *tenant)
            return
        refused = await self.authorize(scope, tenant)
        if refused is not None:
            await _answer(send, *refused)
            return
        forward = {"content-type": headers["content-type"]} if body else {}
        try:
            response = await self.http.request(
                method,
                f"{self.upstream}{path}?{canonical_query(query, tenant)}",
                content=body,
                headers=forward,
            )
        except httpx.HTTPError as exc:
            await _answer(send, 502, f"the metrics backend did not answer: {type(exc).__name__}")
            return
        kind = response.headers.get("content-type", "application/json")
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": [(b"content-type", kind.encode("latin-1"))],
            }
        )
        await send({"type": "http.response.body", "body": response.content})


def _headers(scope: Mapping[str, Any]) -> dict[str, str]:
    return {bytes(k).decode("latin-1").lower(): bytes(v).decode("latin-1") for k, v in
            scope.get("headers", ())}  # fmt: skip


async def _body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunk = bytes(message.get("body", b""))
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _lifespan(receive: Receive, send: Send) -> None:
    """Nothing to start or stop; a server (hypercorn) waits for both answers."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _answer(send: Send, status: int, line: str) -> None:
    body = (line + "\n").encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8")],
        }
    )
    await send({"type": "http.response.body", "body": body})
