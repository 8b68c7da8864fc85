"""Serving an ASGI app where one connection's failure ends that connection, never the server.

hypercorn's own ``serve`` runs every connection in one handler nursery under
``trio.serve_listeners``: an exception that escapes a connection's protocol code (a defect of
hypercorn's, a peer's malformed frames meeting one) cancels that nursery, and with it every other
connection, the accept loop and whatever daemon awaited ``serve``. A daemon must outlive any one
peer, so both daemons' secure ports serve through :func:`serve_connections` instead:

* it mirrors hypercorn's trio worker (lifespan first, then the accept loop, then a graceful
  close bounded by ``config.graceful_timeout``);
* each accepted socket runs its ``ConnectionHandler`` (which terminates TLS the daemon's way
  and runs hypercorn's per-connection ``TCPServer``) inside :func:`contained`: an ``Exception``
  raised by it is logged as one line, counted, and the socket closed; cancellation still
  propagates, so shutdown stays nursery-driven;
* it installs :mod:`gpustack_serving.h2`, so the known HTTP/2 defect does not even cost the
  connection.
"""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

import trio
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.config import Config
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ASGIFramework, ConnectionState, LifespanState

from gpustack_serving import h2

log = logging.getLogger("gpustack.serving.connections")


class ConnectionHandler(Protocol):
    """Serve one accepted TCP connection to its end (TLS, then hypercorn's protocol work)."""

    def __call__(
        self, worker: WorkerContext, state: LifespanState, transport: trio.SocketStream
    ) -> Awaitable[None]:
        """Serve ``transport`` with the server's ``worker`` context and lifespan ``state``."""
        ...


@dataclass
class ConnectionFailures:
    """How many connections ended in an exception of the server's, and the last one's text.

    Read by tests and ``/debug``; the log has each failure as one line.
    """

    count: int = 0
    last: str | None = field(default=None)


def peer_of(transport: trio.SocketStream) -> str:
    """The connection's remote address for a log line (``?`` once the socket is gone)."""
    try:
        return str(transport.socket.getpeername())
    except OSError:
        return "?"


async def contained(
    handler: Callable[[trio.SocketStream], Awaitable[None]],
    failures: ConnectionFailures,
    transport: trio.SocketStream,
) -> None:
    """Run one connection; an exception it raises closes it and goes no further.

    ``except*`` splits a group: the exceptions are this connection's failure; a ``Cancelled``
    beside them (the server shutting down) is re-raised untouched.
    """
    peer = peer_of(transport)
    try:
        await handler(transport)
    except* Exception as group:
        failures.count += 1
        first = group.exceptions[0]
        failures.last = f"{type(first).__name__}: {first}"
        log.warning(
            "connection from %s failed and was closed (the server keeps serving): %s",
            peer,
            failures.last,
        )
        log.debug("connection from %s failed", peer, exc_info=group)
    finally:
        await trio.aclose_forcefully(transport)


def bind(host: str, port: int, backlog: int = 1024) -> socket.socket:
    """A listening socket (port 0 picks one); dual-stack when ``host`` is ``::``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and host == "::":
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def url_of(sock: socket.socket, scheme: str = "https") -> str:
    """The URL a bound socket answers on (IPv6 hosts bracketed)."""
    host, port = sock.getsockname()[:2]
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


async def serve_connections(
    app: ASGIFramework,
    config: Config,
    sockets: Sequence[socket.socket],
    handler: ConnectionHandler,
    *,
    shutdown: trio.Event,
    failures: ConnectionFailures | None = None,
    scheme: str = "https",
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``sockets`` until ``shutdown``; reports the URLs bound.

    ``handler`` serves one connection; its failures are contained to that connection.
    """
    h2.install()
    failures = failures if failures is not None else ConnectionFailures()
    state: LifespanState = {}
    lifespan = Lifespan(ASGIWrapper(app), config, state)
    worker = WorkerContext(None)
    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        async with trio.open_nursery() as connections:
            listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(s)) for s in sockets]
            one = partial(handler, worker, state)
            async with trio.open_nursery() as accepting:
                accepting.start_soon(
                    partial(
                        trio.serve_listeners,
                        partial(contained, one, failures),
                        listeners,
                        handler_nursery=connections,
                    )
                )
                task_status.started([url_of(s, scheme) for s in sockets])
                await shutdown.wait()
                accepting.cancel_scope.cancel()
            await worker.terminated.set()
            connections.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()


def ssl_connections(
    app: ASGIFramework, config: Config, context: ssl.SSLContext
) -> ConnectionHandler:
    """Connections terminated by the standard library's TLS, as hypercorn's ``serve`` does.

    ``context`` is used for every handshake, so a certificate loaded into it later (a rotation)
    reaches every new connection.
    """
    wrapped = ASGIWrapper(app)

    async def handle(
        worker: WorkerContext, state: LifespanState, transport: trio.SocketStream
    ) -> None:
        stream = trio.SSLStream(transport, context, server_side=True, https_compatible=True)
        server = TCPServer(wrapped, config, worker, ConnectionState(state.copy()), stream)
        await server.run()

    return handle
