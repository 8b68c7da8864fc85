"""Discovery routes: ``/version``, ``/api``, ``/apis`` and each group's resource list."""

from __future__ import annotations

from quart import Response, request

from gpustack_core.status import no_route
from gpustack_simulator.cluster import discovery
from gpustack_simulator.cluster.routes.base import Caller, RouteBase, json_response


class DiscoveryRoutes(RouteBase):
    """What clients read before they call anything else."""

    async def version(self, caller: Caller) -> Response:
        """``/version``, as kubectl prints it."""
        return json_response(discovery.VERSION)

    async def discover(self, caller: Caller, group: str = "", version: str = "") -> Response:
        """The discovery document at the path; 404 for a group nothing serves."""
        metrics = self.state.fault_active("metrics-api-absent") is None
        path = request.path.rstrip("/")
        document = discovery.document(
            path,
            group,
            version,
            metrics_api=metrics,
            aggregated=self.state.worker_url is not None,
            registry=self.state.registry,
        )
        if document is None:
            raise no_route()
        return json_response(document)
