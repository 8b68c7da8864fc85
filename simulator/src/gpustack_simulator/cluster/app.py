"""The stand-in's HTTP surface: the endpoints the daemons and kubectl use, and nothing else.

Every request is authenticated by bearer token and authorized by the scenario's RBAC rules, as
an API server would; a path nothing serves is a ``Status`` 404, never an empty success, so a
missing endpoint is visible in the test that needed it.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from quart import Response
from quart_trio import QuartTrio

from gpustack_core.status import StatusError, no_route
from gpustack_simulator.cluster.apiserver import ApiServer
from gpustack_simulator.cluster.routes.aggregator import AggregatorRoutes
from gpustack_simulator.cluster.routes.base import JSON, Caller
from gpustack_simulator.cluster.routes.control import ControlRoutes
from gpustack_simulator.cluster.routes.discovery import DiscoveryRoutes
from gpustack_simulator.cluster.routes.kubelet import KubeletRoutes
from gpustack_simulator.cluster.routes.objects import ObjectRoutes
from gpustack_simulator.cluster.routes.reviews import ReviewRoutes
from gpustack_simulator.cluster.state import (
    AUTH_CONFIGMAP,
    SYSTEM_NAMESPACE,
    ClusterState,
)

Handler = Callable[..., Awaitable[Response]]


def build_app(state: ClusterState) -> QuartTrio:
    """The Quart app serving ``state``."""
    app = QuartTrio(__name__)
    app.config["RESPONSE_TIMEOUT"] = None  # watches stream for as long as they ask
    app.config["BODY_TIMEOUT"] = 30
    routes = Routes(state)

    @app.route("/", defaults={"path": ""}, methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    @app.route("/<path:path>", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def dispatch(path: str) -> Response:
        """Authenticate, then hand the request to the first route whose pattern matches."""
        try:
            return await routes.dispatch("/" + path)
        except StatusError as error:
            return Response(error.body(), status=error.code, content_type=JSON)

    return app


class Routes(
    DiscoveryRoutes, ObjectRoutes, KubeletRoutes, ReviewRoutes, ControlRoutes, AggregatorRoutes
):
    """Path dispatch over every endpoint family; each family's handlers live in its module."""

    def __init__(self, state: ClusterState) -> None:
        super().__init__(state)
        self.api = ApiServer(state)
        self.state = state
        state.node_changed = lambda: self.api.nodes.reconcile(self.api)
        self.table: list[tuple[re.Pattern[str], Handler]] = [
            (re.compile(p), h)
            for p, h in (
                (r"^/version/?$", self.version),
                (r"^/api/?$", self.discover),
                (r"^/api/v1/?$", self.discover),
                (r"^/apis/?$", self.discover),
                (r"^/apis/worker\.gpustack\.ai/v1(?P<rest>/.*)?$", self.aggregate),
                (r"^/apis/gpustack\.ai/v1(?P<rest>/.*)?$", self.aggregate),  # the Settings
                (r"^/apis/(?P<group>[^/]+)/?$", self.discover),
                (r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/?$", self.discover),
                (r"^/api/v1/nodes/(?P<name>[^/]+)/proxy/(?P<rest>.*)$", self.node_proxy),
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
                (r"^/simulator/v1/clock$", self.control_clock),
                (
                    r"^/api/(?P<version>v1)(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)"
                    r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>status))?$",
                    self.objects,
                ),
                (
                    r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)(?:/namespaces/(?P<ns>[^/]+))?"
                    r"/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>status))?$",
                    self.objects,
                ),
                (r"^/simulator/v1/faults$", self.control_faults),
                (r"^/simulator/v1/state$", self.control_state),
            )
        ]

    async def dispatch(self, path: str) -> Response:
        """Authenticate, then hand the request to the first route whose pattern matches."""
        caller = self.authenticate()
        for pattern, handler in self.table:
            match = pattern.match(path)
            if match is not None:
                params = {k: v for k, v in match.groupdict().items() if v is not None}
                return await handler(caller, **params)
        raise no_route()


__all__ = ["AUTH_CONFIGMAP", "SYSTEM_NAMESPACE", "Caller", "Routes", "build_app"]
