"""Drive an ASGI app with one hand-built HTTP request, as hypercorn would hand it over.

The test clients of the frameworks build the scope themselves (and normalise what they are
given); the guard and the routes must be probed with exactly the bytes a peer can send, the
raw path and ``Host`` included, and with a chosen socket peer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import unquote_to_bytes

import trio

ASGI = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


async def asgi_get(
    app: Any,
    raw_path: bytes,
    headers: Sequence[tuple[bytes, bytes]] = (),
    *,
    client: tuple[str, int] | None = ("127.0.0.1", 40000),
    method: str = "GET",
) -> tuple[int, bytes]:
    """Send one request to ``app``; return the status and the body it answered."""
    status, _, body = await asgi_exchange(app, raw_path, headers, client=client, method=method)
    return status, body


async def asgi_exchange(
    app: Any,
    raw_path: bytes,
    headers: Sequence[tuple[bytes, bytes]] = (),
    *,
    client: tuple[str, int] | None = ("127.0.0.1", 40000),
    method: str = "GET",
    extensions: dict[str, Any] | None = None,
) -> tuple[int, dict[bytes, bytes], bytes]:
    """Send one request to ``app``; the status, the response headers and the body."""
    path_part, _, query = raw_path.partition(b"?")
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "https",
        "path": unquote_to_bytes(path_part).decode("utf-8", "surrogateescape"),
        "raw_path": path_part,
        "query_string": query,
        "root_path": "",
        "headers": [(k.lower(), v) for k, v in headers],
        "client": client,
        "server": ("127.0.0.1", 32443),
        "extensions": extensions or {},
    }
    sent: list[dict[str, Any]] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await trio.sleep_forever()  # the peer stays connected until the answer is sent
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return int(start["status"]), dict(start.get("headers", [])), body
