"""The pieces every route family shares: the caller, authentication, authorization.

Every request is authenticated by bearer token and authorized by the scenario's RBAC rules, as
an API server would, before any family's handler runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from quart import Response, request

from gpustack_core.status import StatusError
from gpustack_simulator.cluster.state import (
    ClusterState,
)
from gpustack_simulator.scenario import UserSpec

JSON = "application/json"


def json_response(obj: Any, status: int = 200) -> Response:
    """``obj`` as an ``application/json`` answer."""
    return Response(msgspec.json.encode(obj), status=status, content_type=JSON)


class Caller:
    """The authenticated user of one request."""

    def __init__(self, user: UserSpec) -> None:
        self.name = user.name
        self.groups = (*user.groups, "system:authenticated")

    def user_info(self) -> dict[str, Any]:
        """The ``userInfo`` an admission review names the requester by."""
        return {"username": self.name, "groups": list(self.groups)}


class RouteBase:
    """The state every family reads and the checks every handler makes first."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def authenticate(self) -> Caller:
        """The scenario user behind the bearer token; 401 for none or an unknown one."""
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
        """Raise the API server's 403 unless the scenario's RBAC allows the request."""
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
    def require_method(*allowed: str) -> None:
        """405 for a method the route does not serve."""
        if request.method not in allowed:
            raise StatusError(
                405,
                f"the server does not allow this method on the requested "
                f"resource ({request.method})",
            )


def list_item(obj: Mapping[str, Any]) -> dict[str, Any]:
    """List items carry no kind/apiVersion, as the API server serializes typed lists."""
    return {k: v for k, v in obj.items() if k not in {"kind", "apiVersion"}}
