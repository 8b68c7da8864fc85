"""A scenario's stand-in cluster plus the real Device Manager daemon over HTTPS on loopback.

Shared by the integration tests that talk to the daemon (its snapshot, its ``/metrics``, a real
Prometheus scraping it), so each starts the daemon exactly as ``--simulate`` does: the stand-in
serves the scenario's cluster, the fake ``/proc`` lines the recording's processes up with the
scenario's containers, and the replayed library answers for the hardware.

Test modules use the fixtures by importing them (``from dm_stack import scenario, stack``);
``open_stack`` is the same thing as an async context manager, for a test that needs several.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from gpustack_core.snapshot import MonitorSnapshot, parse_snapshot
from gpustack_devicemanager.daemon import Running, ServeOptions, serve
from gpustack_kube.config import load_config
from gpustack_simulator.cluster.server import RunningCluster
from gpustack_simulator.procfs import write_procfs
from gpustack_simulator.recording import ProcEntry, load_recording
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.testing import cluster_standin
from patience import HANG

RECORDINGS = Path(__file__).resolve().parents[2] / "recordings"
SCENARIOS = RECORDINGS / "scenarios"
NODE = "gpu-node-1"


@dataclass
class Stack:
    cluster: RunningCluster
    daemon: Running
    proc_root: Path
    procs: dict[str, ProcEntry]

    @property
    def url(self) -> str:
        return self.daemon.urls[0].replace("http://", "https://")

    @property
    def address(self) -> str:
        """``host:port`` of the secure port, as a Prometheus static target names it."""
        return self.url.removeprefix("https://").rstrip("/")

    async def get(self, path: str, **kwargs: Any) -> httpx.Response:
        async with httpx.AsyncClient(verify=False, trust_env=False) as client:
            return await client.get(self.url + path, **kwargs)

    async def snapshot(self) -> tuple[bytes, MonitorSnapshot]:
        response = await self.get("/monitor/snapshot")
        assert response.status_code == 200
        return response.content, parse_snapshot(response.content)

    async def next_tick(self) -> MonitorSnapshot:
        """Wait for a tick that started after now (the informer has synced by then)."""
        before = self.daemon.holder.current.completed_at
        with trio.fail_after(HANG):
            while self.daemon.holder.current.completed_at == before:
                await trio.sleep(0.05)
        return (await self.snapshot())[1]


@asynccontextmanager
async def open_stack(scenario: str | Path, tmp_path: Path) -> AsyncIterator[Stack]:
    """The stand-in for ``scenario`` and its first Device Manager, after one synced tick."""
    async with cluster_standin(scenario, tmp_path / "cluster") as cluster:
        expanded = cluster.state.expanded
        dm = expanded.device_managers[0]
        procs = dict(expanded.procs(dm.node))
        proc_root = tmp_path / "proc"
        write_procfs(proc_root, procs)
        options = ServeOptions(
            manufacturer=dm.manufacturer,
            node_name=dm.node,
            monitor_period=0.5,
            secure_port=0,
            bind_address="127.0.0.1",
            proc_root=proc_root,
        )
        kube = load_config(cluster.kubeconfig, context="device-manager")
        backend = replay_backend(load_recording(dm.recording))
        async with trio.open_nursery() as nursery:
            running: Running = await nursery.start(
                lambda task_status: serve(options, backend, kube=kube, task_status=task_status)
            )
            try:
                stack = Stack(cluster, running, proc_root, procs)
                with trio.fail_after(HANG):
                    while running.informer is None or not running.informer.synced:
                        await trio.sleep(0.05)
                await stack.next_tick()
                yield stack
            finally:
                running.shutdown.set()


@pytest.fixture
def scenario() -> str:
    return "nvidia-mixed"


@pytest.fixture
async def stack(scenario: str, tmp_path: Path) -> AsyncIterator[Stack]:
    async with open_stack(scenario, tmp_path) as opened:
        yield opened
