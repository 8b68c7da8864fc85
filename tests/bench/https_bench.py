"""Serving a Quart app over HTTPS on loopback and timing GETs: shared by the route benchmarks."""

from __future__ import annotations

import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from quart_trio import QuartTrio

from gpustack_kube.certs import self_signed


@asynccontextmanager
async def serving(app: QuartTrio) -> AsyncIterator[str]:
    """The app on a free loopback port with a self-signed certificate; yields its URL."""
    with tempfile.TemporaryDirectory() as folder:
        cert, key = self_signed(["127.0.0.1"], Path(folder))
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.certfile, config.keyfile = str(cert), str(key)
        config.accesslog = config.errorlog = None
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(
                lambda task_status: serve(
                    app, config, shutdown_trigger=stop.wait, task_status=task_status
                )
            )
            try:
                yield binds[0].replace("http://", "https://")
            finally:
                stop.set()


async def time_gets(client: httpx.AsyncClient, url: str, repeat: int) -> tuple[list[float], bytes]:
    """Warm the route once, then time ``repeat`` sequential GETs; the last body comes back."""
    await client.get(url)
    samples = []
    body = b""
    for _ in range(repeat):
        start = time.perf_counter()
        response = await client.get(url)
        samples.append(time.perf_counter() - start)
        assert response.status_code == 200
        body = response.content
    return samples, body
