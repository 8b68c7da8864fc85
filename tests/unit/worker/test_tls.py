"""The worker's own TLS termination: the presented chain reaches the app, and only from TLS."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trustme
from cryptography import x509
from hypercorn.config import Config

from gpustack_serving.connections import bind
from gpustack_worker.tls import ContextHolder, presented_chain, serve_tls, server_context
from patience import HANG

seen: list[dict[str, Any]] = []


async def echo_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers with how many certificates the connection presented, and the leaf's CN."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    await receive()
    chain = presented_chain(scope)
    seen.append(scope)
    cn = ""
    if chain:
        leaf = x509.load_der_x509_certificate(chain[0])
        cn = str(leaf.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": f"{len(chain)} {cn}".encode()})


@dataclass
class Served:
    url: str
    ca: trustme.CA
    tmp: Path
    holder: ContextHolder

    def client(self, cert: Path | None = None, *, http2: bool = False) -> httpx.AsyncClient:
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        if cert is not None:
            context.load_cert_chain(str(cert))
        return httpx.AsyncClient(verify=context, http2=http2, trust_env=False)


def _write(ca: trustme.CA, tmp: Path, host: str) -> tuple[Path, Path]:
    leaf = ca.issue_cert(host)
    cert, key = tmp / f"{host}.crt", tmp / f"{host}.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    return cert, key


def _client_pem(tmp: Path, cn: str) -> Path:
    path = tmp / f"client-{cn}.pem"
    trustme.CA().issue_cert(
        "client.invalid", common_name=cn
    ).private_key_and_cert_chain_pem.write_to_path(str(path))
    return path


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    ca = trustme.CA()
    holder = ContextHolder(server_context(*_write(ca, tmp_path, "127.0.0.1")))
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: serve_tls(
                echo_app,
                Config(),
                [bind("127.0.0.1", 0)],
                holder,
                shutdown=shutdown,
                task_status=task_status,
            )
        )
        yield Served(urls[0], ca, tmp_path, holder)
        shutdown.set()


async def test_the_presented_chain_reaches_the_app(served: Served) -> None:
    async with served.client() as anonymous:
        assert (await anonymous.get(served.url)).text == "0 "
    async with served.client(_client_pem(served.tmp, "front-proxy-client")) as client:
        assert (await client.get(served.url)).text == "1 front-proxy-client"


async def test_http2_and_http11_both_carry_it(served: Served) -> None:
    cert = _client_pem(served.tmp, "h2-client")
    async with served.client(cert, http2=True) as client:
        response = await client.get(served.url)
        assert response.http_version == "HTTP/2"
        assert response.text == "1 h2-client"
        replies: list[str] = []

        async def one() -> None:
            replies.append((await client.get(served.url)).text)

        async with trio.open_nursery() as nursery:
            for _ in range(25):
                nursery.start_soon(one)
        assert replies == ["1 h2-client"] * 25  # multiplexed streams of one connection


async def test_a_header_cannot_stand_in_for_the_handshake(served: Served) -> None:
    async with served.client() as client:
        response = await client.get(served.url, headers={"tls": "client_cert_chain"})
    assert response.text == "0 "


async def test_every_connection_presents_again(served: Served) -> None:
    """No session resumption: a resumed session would carry no certificate at all."""
    cert = _client_pem(served.tmp, "again")
    for _ in range(3):
        async with served.client(cert) as client:
            assert (await client.get(served.url)).text == "1 again"


async def test_a_broken_handshake_does_not_hurt_the_server(served: Served) -> None:
    host, port = served.url.removeprefix("https://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    await stream.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # plaintext at a TLS port
    with trio.fail_after(HANG):
        assert await stream.receive_some(1024) is not None
    await stream.aclose()
    async with served.client() as client:
        assert (await client.get(served.url)).status_code == 200


async def test_a_swapped_context_serves_new_connections(served: Served) -> None:
    other = trustme.CA()
    served.holder.current = server_context(*_write(other, served.tmp, "127.0.0.1"))
    async with served.client() as old_trust:
        with pytest.raises(httpx.ConnectError):
            await old_trust.get(served.url)
    context = ssl.create_default_context()
    other.configure_trust(context)
    async with httpx.AsyncClient(verify=context, trust_env=False) as new_trust:
        assert (await new_trust.get(served.url)).status_code == 200


def test_a_mismatched_pair_does_not_load(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert, _ = _write(ca, tmp_path, "a.example")
    _, other_key = _write(ca, tmp_path, "b.example")
    with pytest.raises(Exception, match=r"(?i)mismatch"):
        server_context(cert, other_key)
