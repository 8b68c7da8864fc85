"""The worker's TLS termination: the client certificate reaches the app from the handshake itself.

An aggregated API server trusts ``X-Remote-User`` only from a caller whose client certificate
chains to the front-proxy CA. Hypercorn terminates TLS with the standard library and hands the
application no peer certificate, and the standard library can only *reject* a certificate from
an unknown CA at the handshake — it cannot accept it and let the server answer ``401`` as the
kube-apiserver does. So the worker terminates TLS itself, with OpenSSL through pyOpenSSL:

* the server *requests* a client certificate and lets any through the handshake (the handshake
  still proves the client holds the certificate's private key); judging the chain is the
  authenticator's job, against whichever CA the identity claims (front-proxy or client CA);
* session resumption is off, so every connection carries its own certificate;
* each connection gets its own ASGI wrapper that puts the presented chain into the standard
  ``scope["extensions"]["tls"]`` — set by the server for that connection, so no request header
  can forge it;
* the HTTP/1.1 and HTTP/2 protocol work stays hypercorn's (its per-connection ``TCPServer``).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import trio
from cryptography.hazmat.primitives.serialization import Encoding
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.config import Config
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ASGIFramework, ConnectionState, LifespanState
from OpenSSL import SSL

from gpustack_serving.config import ALPN as SERVING_ALPN
from gpustack_serving.connections import (
    ConnectionFailures,
    ConnectionHandler,
    peer_of,
    serve_connections,
)

log = logging.getLogger("gpustack.worker.tls")

RECEIVE_SIZE = 65536
HANDSHAKE_TIMEOUT = 10.0
CLOSE_TIMEOUT = 1.0
ALPN = tuple(protocol.encode("ascii") for protocol in SERVING_ALPN)
"""What the worker offers, as OpenSSL spells it: the same protocols as the Device Manager."""


def _request_any_certificate(
    connection: SSL.Connection, certificate: Any, errno: int, depth: int, ok: int
) -> bool:
    """Let every presented chain through the handshake; the authenticator judges it."""
    return True


def _select_alpn(connection: SSL.Connection, offered: list[bytes]) -> bytes | Any:
    for protocol in ALPN:
        if protocol in offered:
            return protocol
    return SSL.NO_OVERLAPPING_PROTOCOLS


def server_context(cert: Path, key: Path) -> SSL.Context:
    """A TLS ≥ 1.2 server context for ``cert``/``key`` that asks every client for a certificate.

    Raises ``SSL.Error`` (or ``OSError``) when the pair does not load or does not match.
    """
    context = SSL.Context(SSL.TLS_SERVER_METHOD)
    context.set_min_proto_version(SSL.TLS1_2_VERSION)
    context.set_options(SSL.OP_NO_TICKET | SSL.OP_NO_COMPRESSION)
    context.set_session_cache_mode(SSL.SESS_CACHE_OFF)  # no resumption: no chain-less sessions
    context.use_certificate_chain_file(str(cert))
    context.use_privatekey_file(str(key))
    context.check_privatekey()
    context.set_verify(SSL.VERIFY_PEER, _request_any_certificate)
    context.set_alpn_select_callback(_select_alpn)
    return context


class TLSStream(trio.abc.Stream):
    """A server-side TLS stream over OpenSSL memory BIOs, shaped as hypercorn expects.

    hypercorn reads on one task and writes on others, so the socket is written under one lock
    (ciphertext leaves in the order OpenSSL produced it) and read under another; a task that
    waited for the read lock while another task read does not read again before retrying, since
    the bytes it needed may already be in OpenSSL's buffer.
    """

    def __init__(self, transport: trio.SocketStream, context: SSL.Context) -> None:
        self.transport_stream = transport
        self._connection = SSL.Connection(context, None)
        self._connection.set_accept_state()
        self._write_lock = trio.Lock()
        self._read_lock = trio.Lock()
        self._arrivals = 0
        self._eof = False

    # -- plumbing ---------------------------------------------------------------------------

    async def _flush(self) -> bool:
        """Send what OpenSSL has written; whether anything was (then a checkpoint was too).

        Ciphertext is taken from OpenSSL in order and sent under the write lock, so a task
        that took a later chunk waits behind the task sending an earlier one. A task that
        finds nothing to send returns at once: what it wrote was taken, and is being sent,
        by the task holding the lock. The locks are taken without a checkpoint when free
        (the socket operation under them is one); each costs as much as a small send.
        """
        try:
            data = self._connection.bio_read(RECEIVE_SIZE)
        except SSL.WantReadError:
            return False
        await _acquire(self._write_lock)
        try:
            while True:
                await self.transport_stream.send_all(data)
                try:
                    data = self._connection.bio_read(RECEIVE_SIZE)
                except SSL.WantReadError:
                    return True
        finally:
            self._write_lock.release()

    async def _fill(self, seen: int) -> None:
        await _acquire(self._read_lock)
        try:
            if self._arrivals != seen:
                await trio.lowlevel.checkpoint()
                return  # someone else read meanwhile: retry with what they brought
            data = await self.transport_stream.receive_some(RECEIVE_SIZE)
            self._arrivals += 1
            if data:
                self._connection.bio_write(data)
            else:
                self._eof = True
                self._connection.bio_shutdown()
        finally:
            self._read_lock.release()

    async def _drive(self, operation: Callable[[], Any]) -> Any:
        waited = False
        while True:
            seen = self._arrivals
            try:
                result = operation()
            except SSL.WantReadError:
                await self._flush()
                if self._eof:
                    raise trio.BrokenResourceError("the peer closed during TLS") from None
                await self._fill(seen)
                waited = True
                continue
            except SSL.ZeroReturnError:
                await self._flush()
                raise
            except SSL.Error as exc:
                raise trio.BrokenResourceError(f"TLS: {exc}") from exc
            if not await self._flush() and not waited:
                await trio.lowlevel.checkpoint()  # a trio stream operation always is one
            return result

    # -- the Stream interface hypercorn uses --------------------------------------------------

    async def do_handshake(self) -> None:
        """Complete the handshake; idempotent, as hypercorn calls it again."""
        await self._drive(self._connection.do_handshake)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Plaintext; ``b""`` on close_notify or on a bare TCP close (HTTPS-compatible)."""
        try:
            data: bytes = await self._drive(
                partial(self._connection.recv, max_bytes or RECEIVE_SIZE)
            )
        except SSL.ZeroReturnError:
            return b""
        except trio.BrokenResourceError:
            if self._eof:
                return b""  # truncation without close_notify: HTTP framing guards the body
            raise
        return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt and send all of ``data`` (hypercorn sends an empty chunk per response)."""
        if not data:
            await trio.lowlevel.checkpoint()
            return
        await self._drive(partial(self._connection.sendall, bytes(data)))

    async def wait_send_all_might_not_block(self) -> None:
        """Delegate to the socket: plaintext is buffered in memory."""
        await self.transport_stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        """Send close_notify if the peer may still listen, then close the socket."""
        try:
            with trio.move_on_after(CLOSE_TIMEOUT) as scope:
                scope.shield = True
                if not self._eof:
                    self._connection.shutdown()
                    await self._flush()
                async with self._write_lock:  # a send still under way (close_notify too) ends
                    pass
        except (SSL.Error, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            await self.transport_stream.aclose()

    def selected_alpn_protocol(self) -> str | None:
        """The negotiated ALPN protocol name, as ``ssl.SSLObject`` reports it."""
        chosen = self._connection.get_alpn_proto_negotiated()
        return chosen.decode("ascii") if chosen else None

    def peer_chain(self) -> list[bytes]:
        """The client's certificates as presented (DER, leaf first); empty without one."""
        leaf = self._connection.get_peer_certificate(as_cryptography=True)
        if leaf is None:
            return []
        chain = [leaf.public_bytes(Encoding.DER)]
        for cert in self._connection.get_peer_cert_chain(as_cryptography=True) or []:
            der = cert.public_bytes(Encoding.DER)
            if der not in chain:
                chain.append(der)
        return chain

    def tls_version(self) -> str:
        """``TLSv1.3`` and the like, for logs."""
        return str(self._connection.get_protocol_version_name())


async def _acquire(lock: trio.Lock) -> None:
    """Take ``lock``: at once when it is free, else waiting in line."""
    try:
        lock.acquire_nowait()
    except trio.WouldBlock:
        await lock.acquire()


# -- the ASGI side --------------------------------------------------------------------------


TLS_EXTENSION = "tls"


def tls_extension(stream: TLSStream) -> dict[str, Any]:
    """The ASGI TLS extension of one connection (client chain as DER, not PEM: we verify it)."""
    return {"client_cert_chain": stream.peer_chain(), "tls_version": stream.tls_version()}


def presented_chain(scope: Mapping[str, Any]) -> list[bytes]:
    """The chain this request's connection presented; empty for none (or no TLS at all)."""
    chain = scope.get("extensions", {}).get(TLS_EXTENSION, {}).get("client_cert_chain", [])
    return list(chain)


def _with_tls(app: ASGIFramework, extension: dict[str, Any]) -> ASGIFramework:
    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") in {"http", "websocket"}:
            scope = {**scope, "extensions": {**(scope.get("extensions") or {}), "tls": extension}}
        await app(scope, receive, send)

    return wrapped


SHUTDOWN_POLL = 0.05
"""Seconds between looks at a busy connection once the server is shutting down."""


class IdleTimer:
    """hypercorn's keep-alive timer of one connection, one task for its lifetime.

    ``TCPServer`` stops its timer when a request arrives and, once the answer is sent, starts
    it again as a new task (``TrioSingleTask``): a task spawned and cancelled per request,
    with a lock around each. This has the same two methods and the same effect — a
    connection idle for ``timeout`` seconds, or idle while the server shuts down, is closed
    by ``close`` (hypercorn's own) — with one task that sleeps until that can be due.
    """

    def __init__(
        self,
        timeout: float,
        terminated: Any,
        close: Callable[[], Any],
    ) -> None:
        self.timeout = timeout
        self.terminated = terminated
        self.close = close
        self.idle_since: float | None = None
        """When the connection last fell idle; ``None`` while a request is in progress."""
        self._watching = False

    async def restart(self, task_group: Any, action: Any) -> None:
        """The connection is idle from now (``action`` is the timer hypercorn would start)."""
        self.idle_since = trio.current_time()
        if not self._watching:
            self._watching = True
            task_group._nursery.start_soon(self._watch)

    async def stop(self) -> None:
        """A request is in progress: no idle time counts until the next ``restart``."""
        self.idle_since = None

    async def _watch(self) -> None:
        while True:
            since = self.idle_since
            shutting_down = self.terminated.is_set()
            now = trio.current_time()
            if since is not None and (shutting_down or now - since >= self.timeout):
                break
            if shutting_down:
                await trio.sleep(SHUTDOWN_POLL)  # busy: close it once its answer is out
                continue
            wait = self.timeout if since is None else self.timeout - (now - since)
            with trio.move_on_after(wait):
                await self.terminated.wait()
        with trio.CancelScope(shield=True):
            await self.close()


@dataclass
class ContextHolder:
    """The context new connections use; swapped whole when the certificate rotates."""

    current: SSL.Context
    connections: int = field(default=0)


def _handle(app: ASGIFramework, config: Config, holder: ContextHolder) -> ConnectionHandler:
    """One connection: our TLS handshake, then hypercorn's protocol work with the chain in scope."""

    async def handle(
        worker: WorkerContext, state: LifespanState, transport: trio.SocketStream
    ) -> None:
        stream = TLSStream(transport, holder.current)
        try:
            with trio.fail_after(HANDSHAKE_TIMEOUT):
                await stream.do_handshake()
        except (
            trio.BrokenResourceError,
            trio.TooSlowError,
            trio.ClosedResourceError,
            OSError,
        ) as exc:
            log.debug("TLS handshake with %s failed: %s", peer_of(transport), exc)
            await stream.aclose()
            return
        holder.connections += 1
        per_connection = ASGIWrapper(_with_tls(app, tls_extension(stream)))
        server = TCPServer(per_connection, config, worker, ConnectionState(state.copy()), stream)  # type: ignore[arg-type]
        server.idle_task = IdleTimer(  # type: ignore[assignment]
            config.keep_alive_timeout, worker.terminated, server._initiate_server_close
        )
        await server.run()

    return handle


async def serve_tls(
    app: ASGIFramework,
    config: Config,
    sockets: Sequence[socket.socket],
    holder: ContextHolder,
    *,
    shutdown: trio.Event,
    failures: ConnectionFailures | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` over our TLS on ``sockets`` until ``shutdown``; reports the URLs bound.

    Each connection is contained (:func:`gpustack_serving.connections.serve_connections`): a
    failure in one closes that one only.
    """
    await serve_connections(
        app,
        config,
        sockets,
        _handle(app, config, holder),
        shutdown=shutdown,
        failures=failures,
        task_status=task_status,
    )
