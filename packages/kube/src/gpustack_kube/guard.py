"""What both daemons check about a request before their web framework sees it.

Two rules live here, because each daemon got them wrong in the same way:

- **Access is decided on the socket's peer address**, never on a header. ``Host`` is whatever
  the client typed; only the ASGI ``client`` (the TCP peer hypercorn accepted) says where the
  request came from. :func:`peer_is_loopback` is that decision.
- **A request the framework cannot parse is refused here with 400**, not left to raise deep in
  the framework. Quart hands ``Host`` to werkzeug, which IDNA-encodes it and raises on a label
  over 63 characters; that surfaced as a 500 with a logged traceback per request (log flooding
  by any peer). :class:`RequestGuard` is an ASGI middleware that answers such a request itself.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Generic, TypeVar, cast

ScopeT = TypeVar("ScopeT", bound=Mapping[str, Any])
ReceiveT = TypeVar("ReceiveT")
SendT = TypeVar("SendT")
Send = Callable[[dict[str, Any]], Awaitable[None]]
"""The two messages the guard itself sends; the app's own send type passes through untouched."""
Rejection = Callable[[int, str], tuple[bytes, str]]
"""``(status, why)`` → ``(body, content type)``: each daemon answers in its own dialect."""

HOST_MAX: Final = 253
LABEL_MAX: Final = 63
MAX_HEADER_BYTES: Final = 16 * 1024
"""A single header value longer than this is refused: no legitimate client sends one."""

_LABEL: Final = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?")
_PORT: Final = re.compile(r"[0-9]{1,5}")
_FORBIDDEN: Final = re.compile(rb"[\r\n\x00]")


def _split_host(value: str) -> tuple[str | None, str | None] | str:
    """``(name, port)`` (name ``None`` for a valid IPv6 literal), or why it cannot be split."""
    if value.startswith("["):
        literal, bracket, rest = value[1:].partition("]")
        if not bracket:
            return "IPv6 literal without its closing bracket"
        try:
            ipaddress.IPv6Address(literal)
        except ValueError:
            return f"{literal!r} is not an IPv6 address"
        if rest and not rest.startswith(":"):
            return "junk after the IPv6 literal"
        return None, (rest[1:] if rest else None)
    name, colon, port = value.partition(":")
    if ":" in port:
        return "an IPv6 address in Host must be bracketed"
    return name, (port if colon else None)


def _name_problem(name: str) -> str | None:
    if len(name) > HOST_MAX:
        return f"host name longer than {HOST_MAX} characters"
    labels = name[:-1].split(".") if name.endswith(".") else name.split(".")
    for label in labels:
        if len(label) > LABEL_MAX:
            return f"host name label longer than {LABEL_MAX} characters"
        if not _LABEL.fullmatch(label):
            return f"{name!r} is not a host name"
    return None


def host_problem(value: str) -> str | None:
    """Why a ``Host`` value is not ``host[:port]`` per RFC 9110, or ``None`` when it is.

    ``host`` is an IPv4 address, a bracketed IPv6 address (``[::1]``) or a DNS name whose
    labels are 1–63 characters (underscores allowed: they occur in real internal names);
    ``port`` is 0–65535.
    """
    if value == "":
        return "empty Host header"
    split = _split_host(value)
    if isinstance(split, str):
        return split
    name, port = split
    if port is not None and (not _PORT.fullmatch(port) or int(port) > 65535):
        return f"port {port!r} is not a number from 0 to 65535"
    return None if name is None else _name_problem(name)


def _headers(scope: Mapping[str, Any]) -> list[tuple[bytes, bytes]]:
    raw = scope.get("headers") or []
    return [(bytes(k), bytes(v)) for k, v in raw]


def request_problem(scope: Mapping[str, Any]) -> str | None:
    """Why a request must be refused before routing, or ``None``."""
    hosts: list[bytes] = []
    for name, value in _headers(scope):
        if len(value) > MAX_HEADER_BYTES:
            return f"header {name.decode('latin-1')!r} longer than {MAX_HEADER_BYTES} bytes"
        if _FORBIDDEN.search(value):
            # The HTTP/1.1 and HTTP/2 parsers refuse these already; werkzeug raises on them,
            # so a server that let one through would answer 500. Refused here whatever the
            # protocol layer did.
            return f"header {name.decode('latin-1')!r} holds CR, LF or NUL"
        if name.lower() == b"host":
            hosts.append(value)
    if len(hosts) > 1:
        return "more than one Host header"
    if hosts:
        try:
            text = hosts[0].decode("ascii")
        except UnicodeDecodeError:
            return "Host header is not ASCII"
        problem = host_problem(text)
        if problem is not None:
            return f"invalid Host header: {problem}"
    path = scope.get("path", "")
    if not isinstance(path, str) or not path.startswith("/"):
        return "request target is not an absolute path"
    if "\x00" in path:
        return "request path contains a NUL"
    return None


def peer_is_loopback(scope: Mapping[str, Any]) -> bool:
    """True only when the TCP peer is a loopback address (127.0.0.0/8 or ::1).

    No peer (a unix socket, a test scope without one) is *not* loopback: deny by default.
    IPv4-mapped IPv6 (``::ffff:127.0.0.1``) counts as what it maps.
    """
    client = scope.get("client")
    if not client:
        return False
    try:
        address = ipaddress.ip_address(str(client[0]).split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


class RequestGuard(Generic[ScopeT, ReceiveT, SendT]):
    """ASGI middleware: a request :func:`request_problem` refuses never reaches the app.

    Generic in the app's own scope/receive/send types, so wrapping keeps the framework's
    signature (Quart's ``asgi_app``, hypercorn's ``ASGIFramework``) instead of widening it.
    """

    def __init__(
        self, app: Callable[[ScopeT, ReceiveT, SendT], Awaitable[None]], reject: Rejection
    ) -> None:
        self.app = app
        self.reject = reject
        self.refused = 0
        """How many requests were answered here; for tests and debug state."""

    async def __call__(self, scope: ScopeT, receive: ReceiveT, send: SendT) -> None:
        """Pass the request on, or answer 400 with the daemon's own error body."""
        if scope.get("type") == "http":
            problem = request_problem(scope)
            if problem is not None:
                self.refused += 1
                body, content_type = self.reject(400, problem)
                respond = cast(Send, send)
                await respond(
                    {
                        "type": "http.response.start",
                        "status": 400,
                        "headers": [
                            (b"content-type", content_type.encode("latin-1")),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await respond({"type": "http.response.body", "body": body, "more_body": False})
                return
        await self.app(scope, receive, send)


def plain_rejection(status: int, why: str) -> tuple[bytes, str]:
    """The Device Manager's error dialect: one line of text."""
    return f"{status} Bad Request: {why}\n".encode(), "text/plain; charset=utf-8"


__all__ = [
    "RequestGuard",
    "host_problem",
    "peer_is_loopback",
    "plain_rejection",
    "request_problem",
]
