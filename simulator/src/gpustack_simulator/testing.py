"""Testing tools: the cluster stand-in as a pytest-trio fixture building block.

Like ``trio.testing``, this is a public module a test suite imports on purpose; nothing in the
product imports it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from gpustack_simulator.cluster.server import RunningCluster, serve_cluster
from gpustack_simulator.cluster.state import ScenarioClock


@asynccontextmanager
async def cluster_standin(scenario: str | Path, state_dir: Path) -> AsyncIterator[RunningCluster]:
    """Serve ``scenario`` on a free loopback port for the duration of the block.

    The yielded handle carries the URL, the kubeconfig path and ``state`` — advance its
    ``clock``, add faults, update Pods (watches see it), point the aggregator at a worker.
    """
    async with trio.open_nursery() as nursery:
        running: RunningCluster = await nursery.start(
            lambda task_status: serve_cluster(
                scenario, state_dir, clock=ScenarioClock(), task_status=task_status
            )
        )
        try:
            yield running
        finally:
            running.shutdown.set()
