"""One connection's failure ends that connection only; the HTTP/2 fix is what hypercorn runs.

The serving loop is driven over real TLS on loopback: a connection whose handler raises (as
hypercorn's HTTP/2 code did on DATA for a stream it had closed) is closed and counted while the
next connection is answered; cancellation (shutdown) still ends everything.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import h2.connection
import httpx
import hypercorn.protocol
import pytest
import trio
import trustme
from h2.config import H2Configuration
from h2.stream import StreamState
from hypercorn.config import Config
from hypercorn.protocol import ProtocolWrapper
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import LifespanState

from gpustack_serving import h2 as hardened
from gpustack_serving.config import hypercorn_config
from gpustack_serving.connections import (
    ConnectionFailures,
    ConnectionHandler,
    bind,
    serve_connections,
    ssl_connections,
)
from patience import HANG


async def hello(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"hello"})


@pytest.fixture
def pki(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    server.set_alpn_protocols(["h2", "http/1.1"])
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


async def test_a_failing_connection_is_closed_and_the_next_one_is_answered(
    pki: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    server_tls, client_tls = pki
    config = hypercorn_config(Config(), "gpustack.test.http")
    real = ssl_connections(hello, config, server_tls)
    calls = 0

    async def first_one_fails(
        worker: WorkerContext, state: LifespanState, transport: trio.SocketStream
    ) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyError(1)  # what hypercorn's h2 raised on DATA for a forgotten stream
        await real(worker, state, transport)

    handler: ConnectionHandler = first_one_fails
    failures = ConnectionFailures()
    shutdown = trio.Event()
    sock = bind("127.0.0.1", 0)
    async with trio.open_nursery() as nursery:
        (url,) = await nursery.start(
            lambda task_status: serve_connections(
                hello,
                config,
                [sock],
                handler,
                shutdown=shutdown,
                failures=failures,
                task_status=task_status,
            )
        )
        async with httpx.AsyncClient(verify=client_tls, trust_env=False) as client:
            with pytest.raises(httpx.TransportError):
                await client.get(url)
        async with httpx.AsyncClient(verify=client_tls, trust_env=False, http2=True) as client:
            response = await client.get(url)
        assert (response.status_code, response.text, response.http_version) == (
            200,
            "hello",
            "HTTP/2",
        )
        assert failures.count == 1
        assert failures.last == "KeyError: 1"
        shutdown.set()
    sock.close()


async def test_shutdown_still_ends_a_connection_that_is_busy() -> None:
    """Containment swallows a connection's exceptions, never the cancellation of shutdown."""
    config = hypercorn_config(Config(), "gpustack.test.http")
    config.graceful_timeout = 0.2
    entered = trio.Event()

    async def hangs(
        worker: WorkerContext, state: LifespanState, transport: trio.SocketStream
    ) -> None:
        entered.set()
        await trio.sleep_forever()

    shutdown = trio.Event()
    failures = ConnectionFailures()
    sock = bind("127.0.0.1", 0)
    with trio.fail_after(HANG):
        async with trio.open_nursery() as nursery:
            (url,) = await nursery.start(
                lambda task_status: serve_connections(
                    hello,
                    config,
                    [sock],
                    hangs,
                    shutdown=shutdown,
                    failures=failures,
                    task_status=task_status,
                )
            )
            host, port = url.removeprefix("https://").rsplit(":", 1)
            stream = await trio.open_tcp_stream(host, int(port))
            await entered.wait()
            shutdown.set()
        await stream.aclose()
    assert failures.count == 0
    sock.close()


def test_hypercorn_negotiating_h2_builds_the_hardened_protocol() -> None:
    """If hypercorn stops choosing its class by that name, the fix would silently not apply."""
    hardened.install()
    hardened.install()  # idempotent
    assert hypercorn.protocol.H2Protocol is hardened.HardenedH2Protocol

    async def send(event: Any) -> None:
        return None

    wrapper = ProtocolWrapper(
        hello,  # type: ignore[arg-type]
        Config(),
        WorkerContext(None),
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        True,
        None,
        None,
        send,
        "h2",
    )
    assert type(wrapper.protocol) is hardened.HardenedH2Protocol


def test_install_refuses_a_hypercorn_whose_class_it_does_not_know(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hypercorn.protocol, "H2Protocol", object)
    with pytest.raises(RuntimeError, match=r"re-check gpustack_serving\.h2"):
        hardened.install()


def test_h2_library_reports_half_closed_local_as_the_fix_reads_it() -> None:
    """The fix resets only once our END_STREAM is out: the state h2 names HALF_CLOSED_LOCAL."""
    client = h2.connection.H2Connection(H2Configuration(client_side=True))
    server = h2.connection.H2Connection(H2Configuration(client_side=False, header_encoding=None))
    client.initiate_connection()
    server.initiate_connection()
    client.send_headers(
        1, [(":method", "POST"), (":path", "/"), (":scheme", "https"), (":authority", "x")]
    )
    server.receive_data(client.data_to_send())
    server.send_headers(1, [(":status", "401")], end_stream=True)
    assert server.streams[1].state_machine.state is StreamState.HALF_CLOSED_LOCAL
