"""A closed-loop load client in a process of its own: N clients, each GET after GET, for T s.

The client runs outside the server's process so its TLS and parsing do not share the server's
interpreter (on two cores they still share the machine; the figure is a floor, not a ceiling).
Prints one JSON line: requests, seconds, errors, p50 and p99 latency in ms.
"""

from __future__ import annotations

import argparse
import json
import ssl
import statistics
import time

import httpx
import trio


async def _run(args: argparse.Namespace) -> dict[str, float]:
    context = ssl.create_default_context(cafile=args.ca)
    context.load_cert_chain(args.cert)
    headers = {"X-Remote-User": "admin", "X-Remote-Group": "system:masters"}
    latencies: list[float] = []
    errors = 0
    stop_at = 0.0

    async def client() -> None:
        nonlocal errors
        async with httpx.AsyncClient(
            verify=context, headers=headers, trust_env=False, timeout=30
        ) as http:
            await http.get(args.url)  # connect and warm before the clock starts
            await started.wait()
            while time.perf_counter() < stop_at:
                start = time.perf_counter()
                response = await http.get(args.url)
                latencies.append(time.perf_counter() - start)
                if response.status_code != 200:
                    errors += 1

    started = trio.Event()
    async with trio.open_nursery() as nursery:
        for _ in range(args.clients):
            nursery.start_soon(client)
        await trio.sleep(0.5)
        begin = time.perf_counter()
        stop_at = begin + args.seconds
        started.set()
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
    print(json.dumps(trio.run(_run, parser.parse_args())))


if __name__ == "__main__":
    main()
