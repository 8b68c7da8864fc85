"""Kubernetes ``Status`` objects: how every error leaves an API server (worker and stand-in)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    410: "Expired",
    429: "TooManyRequests",
    500: "InternalError",
    504: "Timeout",
    503: "ServiceUnavailable",
}


class StatusError(Exception):
    """Raised by a handler; rendered as a ``Status`` body with the same code."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        kind: str = "",
        name: str = "",
        group: str = "",
        reason: str = "",
        causes: Sequence[Mapping[str, str]] = (),
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details: dict[str, Any] = {
            k: v for k, v in (("name", name), ("group", group), ("kind", kind)) if v
        }
        if causes:  # ``{reason, message, field}`` each: kubectl prints "<field>: <message>"
            self.details["causes"] = [dict(cause) for cause in causes]
        self.reason = reason or REASONS.get(code, "InternalError")

    def body(self) -> bytes:
        """The JSON an API server sends for this failure."""
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            status["details"] = self.details
        return msgspec.json.encode(status)


def not_found(resource: str, name: str, group: str = "") -> StatusError:
    """``pods "x" not found``, with the API server's details."""
    qualified = f"{resource}.{group}" if group else resource
    return StatusError(
        404, f'{qualified} "{name}" not found', kind=resource, name=name, group=group
    )


def no_route() -> StatusError:
    """What an API server answers for a path nothing serves."""
    return StatusError(404, "the server could not find the requested resource")
