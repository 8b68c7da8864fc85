"""The Device Manager's secure port: snapshot, probes and loopback-only debug routes.

``/debug/*`` answers only a peer whose *socket* address is loopback: the default bind address is
``0.0.0.0``, so any peer reaching 32443 could otherwise read the daemon's state and change its
log level by sending ``Host: localhost``. Requests whose ``Host`` the framework cannot parse are
answered 400 by :class:`gpustack_kube.guard.RequestGuard` before routing. With
``--authorize-path`` (the chart's default for ``/metrics``), a guarded path needs a Kubernetes
identity RBAC allows (:mod:`gpustack_serving.access`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import msgspec
from quart import Response, request
from quart_trio import QuartTrio

from gpustack_devicemanager.encoded import Served, accepts_gzip
from gpustack_devicemanager.exposition import ExpositionHolder
from gpustack_devicemanager.health import Liveness
from gpustack_devicemanager.holder import SnapshotHolder
from gpustack_kube.guard import RequestGuard, peer_is_loopback, plain_rejection
from gpustack_serving.access import AccessGuard, AccessReviewer

JSON = "application/json"
NOT_FOUND = "404 page not found\n"


def _serve(encoded: Served, content_type: str) -> Response:
    """The pre-made bytes: gzip when the client takes it, 304 when it has them already."""
    headers = {"ETag": encoded.etag, "Vary": "Accept-Encoding"}
    if encoded.matches(request.headers.get("If-None-Match", "")):
        return Response(b"", status=304, headers=headers)
    if accepts_gzip(request.headers.get("Accept-Encoding", "")):
        headers["Content-Encoding"] = "gzip"
        return Response(encoded.gzipped, content_type=content_type, headers=headers)
    return Response(encoded.identity, content_type=content_type, headers=headers)


def build_app(
    holder: SnapshotHolder,
    liveness: Liveness,
    now: Callable[[], float],
    debug_state: Callable[[], dict[str, Any]],
    exposition: ExpositionHolder | None = None,
    *,
    access: AccessReviewer | None = None,
) -> QuartTrio:
    """Routes read memory only: the snapshot bytes were serialized by the monitor tick.

    With ``access``, its guarded paths answer only callers the API server authenticates and
    authorizes (:class:`gpustack_serving.access.AccessGuard`), checked after the request
    itself parsed and before any route runs.
    """
    app = QuartTrio("gpustack-device-manager")
    inner = app.asgi_app if access is None else AccessGuard(app.asgi_app, access)
    app.asgi_app = RequestGuard(inner, plain_rejection)  # type: ignore[method-assign]

    @app.route("/monitor/snapshot", methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"])
    async def snapshot() -> Response:
        if request.method not in {"GET", "HEAD"}:
            return Response("method not allowed\n", status=405, headers={"Allow": "GET"})
        return _serve(holder.current.encoded, JSON)

    @app.route("/metrics")
    async def metrics() -> Response:
        if exposition is None:
            return Response("404 page not found\n", status=404)
        # The round's first scrape of a format makes its bytes off the loop; the rest only
        # hand them over (a 304 still names the body, so its tag is made either way).
        body, content_type = await exposition.prepare(
            request.headers.get("Accept", ""),
            gzipped=accepts_gzip(request.headers.get("Accept-Encoding", "")),
        )
        return _serve(body, content_type)

    @app.route("/readyz")
    async def readyz() -> Response:
        return Response("ok\n", content_type="text/plain")

    @app.route("/livez")
    async def livez() -> Response:
        if liveness.alive(now(), holder.current.completed_at):
            return Response("ok\n", content_type="text/plain")
        return Response(
            "monitor: no completed tick for several periods\n",
            status=500,
            content_type="text/plain",
        )

    @app.route("/debug/state")
    async def debug() -> Response:
        if not peer_is_loopback(request.scope):
            return Response(NOT_FOUND, status=404)
        return Response(msgspec.json.encode(debug_state()), content_type=JSON)

    @app.route("/debug/flags/v", methods=["PUT"])
    async def verbosity() -> Response:
        if not peer_is_loopback(request.scope):
            return Response(NOT_FOUND, status=404)
        text = (await request.get_data(as_text=True)).strip()
        levels = {
            "0": logging.WARNING,
            "1": logging.INFO,
            "2": logging.INFO,
            "3": logging.DEBUG,
            "4": logging.DEBUG,
        }
        if text not in levels:
            return Response(f"verbosity must be 0-4, got {text!r}\n", status=400)
        logging.getLogger("gpustack").setLevel(levels[text])
        return Response(f"verbosity set to {text}\n")

    return app
