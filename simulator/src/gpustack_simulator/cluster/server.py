"""Running the stand-in: HTTPS on loopback, a kubeconfig once it listens, a clean stop."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from gpustack_simulator.cluster.app import build_app
from gpustack_simulator.cluster.kubeconfig import kubeconfig, write_kubeconfig
from gpustack_simulator.cluster.pki import ClusterPKI
from gpustack_simulator.cluster.state import ClusterState, ScenarioClock
from gpustack_simulator.scenario import RECORDINGS_DIR, expand, find_scenario, load_scenario

KUBECONFIG = "kubeconfig"


@dataclass
class RunningCluster:
    """What a caller gets once the stand-in listens."""

    url: str
    kubeconfig: Path
    state: ClusterState
    shutdown: trio.Event


async def serve_cluster(
    scenario: str | Path,
    state_dir: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    clock: ScenarioClock | None = None,
    task_status: trio.TaskStatus[RunningCluster] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``scenario`` until ``RunningCluster.shutdown`` is set; report once listening.

    The kubeconfig is written only after the socket is bound, so a reader that waits for the
    file can use it at once.
    """
    path = find_scenario(str(scenario))
    expanded = expand(load_scenario(path), base=RECORDINGS_DIR)
    pki = ClusterPKI.create(state_dir / "pki")
    state = ClusterState(expanded=expanded, pki=pki, clock=clock or ScenarioClock())
    config = Config()
    config.bind = [f"{host}:{port}"]
    config.certfile = config.keyfile = str(pki.server)
    config.alpn_protocols = ["h2", "http/1.1"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 1.0
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            lambda task_status: serve(
                build_app(state), config, shutdown_trigger=shutdown.wait, task_status=task_status
            )
        )
        url = binds[0].replace("http://", "https://", 1)
        config_path = state_dir / KUBECONFIG
        users = [(u.name, u.token) for u in expanded.users]
        write_kubeconfig(config_path, kubeconfig(url, pki.ca, users, current="admin"))
        task_status.started(RunningCluster(url, config_path, state, shutdown))


async def run_until_signalled(scenario: str, state_dir: Path, port: int) -> None:
    """Foreground mode for ``simulator cluster``: serve until SIGINT or SIGTERM."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            running: RunningCluster = await nursery.start(
                lambda task_status: serve_cluster(
                    scenario, state_dir, port=port, task_status=task_status
                )
            )
            print(f"cluster stand-in for {scenario} at {running.url}", flush=True)
            print(f"kubeconfig: {running.kubeconfig}", flush=True)
            async for _ in signals:
                running.shutdown.set()
                break
