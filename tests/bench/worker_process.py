"""The benchmarked worker in a process of its own, as it runs in its Pod.

``worker.py`` keeps the cluster stand-in and the Device Manager in its own process and starts
this one: a worker sharing their interpreter shared its event loop with the Device Manager's
monitor pass and the stand-in's API server (and its garbage collector with their heaps), which
is no part of what a worker costs. Prints one JSON line once it listens (its URL and the CA
that verifies it), serves until its standard input closes, then prints a second line with its
summary-cache counters.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trio

from gpustack_kube.config import load_config
from gpustack_worker.daemon import Running, WorkerOptions, serve


async def _main(kubeconfig: Path) -> None:
    async with trio.open_nursery() as nursery:
        worker: Running = await nursery.start(
            lambda task_status: serve(
                WorkerOptions(secure_port=0, bind_address="127.0.0.1", settle_heap=True),
                kube=load_config(kubeconfig, context="worker"),
                task_status=task_status,
            )
        )
        print(json.dumps({"url": worker.urls[0], "ca": str(worker.certificate)}), flush=True)
        stdin = trio.lowlevel.FdStream(sys.stdin.fileno())
        while await stdin.receive_some():
            pass
        statistics = worker.summaries.statistics()
        print(json.dumps({"reads": statistics.reads, "hits": statistics.hits}), flush=True)
        worker.shutdown.set()


if __name__ == "__main__":
    trio.run(_main, Path(sys.argv[1]))
