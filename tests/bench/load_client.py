"""A closed-loop load client in a process of its own: N clients, each GET after GET, for T s.

The client runs outside the server's process so its TLS and parsing do not share the server's
interpreter (on two cores they still share the machine; the figure is a floor, not a ceiling).
Each client holds one keep-alive HTTP/1.1 connection over TLS (the front-proxy client
certificate presented, the worker's certificate verified) and sends its next GET as soon as the
previous answer has been read in full. The HTTP is written by hand on asyncio's streams: a
general-purpose client (httpx) spent about as much CPU per request as the worker did, so on
two cores the load measured the client as much as the server. Prints one JSON line: requests,
seconds, errors, p50 and p99 latency in ms.

``--paths FILE`` spreads the load: the clients take the file's paths (one per line) in turn
instead of the URL's, every one of them read once before the clock starts (a console that
polls every Instance, measured once its caches are warm).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import statistics
import time
from urllib.parse import urlsplit

HEADERS = {"X-Remote-User": "admin", "X-Remote-Group": "system:masters"}


class Connection:
    """One keep-alive connection, made again when the server ends one (hypercorn does after
    1,000 requests), inside the timing of the request that needs it, as httpx would."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext) -> None:
        self.address = (host, port)
        self.context = context
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def get(self, request: bytes) -> int:
        """The status code, once the body is read (Content-Length or chunked)."""
        if self.streams is None:
            self.streams = await asyncio.open_connection(*self.address, ssl=self.context)
        reader, writer = self.streams
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length: int | None = None
        chunked = False
        closing = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                closing = b"close" in value.lower()
        if chunked:
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                await reader.readexactly(size + 2)
                if size == 0:
                    break
        elif length is not None:
            await reader.readexactly(length)
        if closing:
            self.close()
        return status

    def close(self) -> None:
        """Close the connection, if one is open."""
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


async def _run(args: argparse.Namespace) -> dict[str, float]:
    context = ssl.create_default_context(cafile=args.ca)
    context.load_cert_chain(args.cert)
    url = urlsplit(args.url)
    host, port = url.hostname or "localhost", url.port or 443
    targets = [url.path + (f"?{url.query}" if url.query else "")]
    if args.paths:
        with open(args.paths, encoding="utf-8") as listed:
            targets = [line.strip() for line in listed if line.strip()]

    def request_for(target: str) -> bytes:
        lines = [f"GET {target} HTTP/1.1", f"Host: {url.netloc}", "Accept: */*"]
        lines += [f"{k}: {v}" for k, v in HEADERS.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")

    requests = [request_for(t) for t in targets]
    turn = 0

    def next_request() -> bytes:
        nonlocal turn
        turn += 1
        return requests[turn % len(requests)]

    warming_up = list(requests) if len(requests) > 1 else []
    latencies: list[float] = []
    errors = 0
    warm = 0
    all_warm = asyncio.Event()
    started = asyncio.Event()
    stop_at = 0.0

    async def client() -> None:
        nonlocal errors, warm
        connection = Connection(host, port, context)
        try:
            await connection.get(requests[0])  # connect and warm before the clock starts
            while warming_up:  # every path once, shared among the clients
                await connection.get(warming_up.pop())
            warm += 1
            if warm == args.clients:
                all_warm.set()
            await started.wait()
            while time.perf_counter() < stop_at:
                start = time.perf_counter()
                status = await connection.get(next_request())
                latencies.append(time.perf_counter() - start)
                if status != 200:
                    errors += 1
        finally:
            connection.close()

    tasks = [asyncio.create_task(client()) for _ in range(args.clients)]
    warming = asyncio.create_task(all_warm.wait())
    await asyncio.wait([warming, *tasks], return_when=asyncio.FIRST_COMPLETED)
    if not all_warm.is_set():  # a client failed before the clock started: say why
        warming.cancel()
        await asyncio.gather(*tasks)
    # Every connection made and used once: the clock starts for all clients together.
    await asyncio.sleep(0.2)
    begin = time.perf_counter()
    stop_at = begin + args.seconds
    started.set()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - begin
    ordered = sorted(latencies)
    return {
        "requests": len(ordered),
        "seconds": elapsed,
        "errors": errors,
        "p50_ms": statistics.median(ordered) * 1e3,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3,
    }


def main() -> None:
    """Parse the flags, run the load, print the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("--ca", required=True)
    parser.add_argument("--cert", required=True, help="front-proxy client cert + key (PEM)")
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--paths", help="a file of paths to read in turn instead of the URL's")
    print(json.dumps(asyncio.run(_run(parser.parse_args()))))


if __name__ == "__main__":
    main()
