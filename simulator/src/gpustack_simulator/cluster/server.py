"""Running the stand-in: HTTPS on loopback, a kubeconfig once it listens, a clean stop.

As its own process (``simulator cluster``, which ``simulator up`` starts) it is configured
entirely from its command line: where each Device Manager listens, where the worker is, and
a file to write its URL to once it serves, so a parent waits on a file rather than a log.
"""

from __future__ import annotations

import ipaddress
import signal
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import trio
from hypercorn.config import Config

from gpustack_serving.connections import bind, serve_connections, ssl_connections
from gpustack_simulator.cluster.app import build_app
from gpustack_simulator.cluster.kubeconfig import kubeconfig, write_kubeconfig
from gpustack_simulator.cluster.pki import ClusterPKI
from gpustack_simulator.cluster.services import https_port
from gpustack_simulator.cluster.state import POD, ClusterState, ScenarioClock
from gpustack_simulator.scenario import RECORDINGS_DIR, expand, find_scenario, load_scenario

if TYPE_CHECKING:
    from gpustack_simulator.fakekubelet.nodes import NodeKubelets

KUBECONFIG = "kubeconfig"


class StandinError(Exception):
    """The stand-in cannot start as asked; the message names the flag and the value."""


@dataclass(frozen=True)
class PodAddress:
    """``NAMESPACE/NAME=IP:PORT``: where a Pod's process listens (its IP, its https port)."""

    namespace: str
    name: str
    ip: str
    port: int

    @classmethod
    def parse(cls, text: str) -> PodAddress:
        """Read the flag's value; ``StandinError`` saying what is wrong with it otherwise."""
        pod, sep, address = text.partition("=")
        namespace, slash, name = pod.partition("/")
        host, colon, raw_port = address.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not (sep and slash and namespace and name and colon):
            raise StandinError(f"--pod-address {text!r}: expected NAMESPACE/NAME=IP:PORT")
        try:
            ip = str(ipaddress.ip_address(host))
        except ValueError as exc:
            raise StandinError(f"--pod-address {text!r}: {host!r} is not an IP address") from exc
        if not raw_port.isdigit() or not 0 < int(raw_port) < 65536:
            raise StandinError(f"--pod-address {text!r}: {raw_port!r} is not a port (1-65535)")
        return cls(namespace, name, ip, int(raw_port))


def _check_worker(url: str | None, ca: Path | None) -> None:
    if url is None:
        if ca is not None:
            raise StandinError("--worker-ca was given without --worker-url")
        return
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise StandinError(
            f"--worker-url {url!r}: expected https://HOST:PORT (the aggregator speaks TLS)"
        )
    if ca is not None:
        try:
            ssl.create_default_context(cafile=str(ca))
        except (OSError, ssl.SSLError) as exc:
            raise StandinError(f"--worker-ca {ca}: not a readable PEM CA bundle ({exc})") from exc


def _bind(state: ClusterState, addresses: Sequence[PodAddress]) -> None:
    for address in addresses:
        pod = state.store.get(POD, address.namespace, address.name)
        if pod is None:
            known = ", ".join(
                f"{p['metadata']['namespace']}/{p['metadata']['name']}"
                for p in state.store.list(POD)
                if https_port(p) is not None
            )
            raise StandinError(
                f"--pod-address: the scenario has no Pod {address.namespace}/{address.name}; "
                f"Pods with an https port: {known or 'none'}"
            )
        if https_port(pod) is None:
            raise StandinError(
                f"--pod-address: Pod {address.namespace}/{address.name} has no container port "
                "named https to bind"
            )
    # One Service and Endpoints sync for them all (nothing watches yet): a sync per Pod
    # recomputed a thousand Device Managers' Endpoints a thousand times.
    state.bind_pod_addresses(
        [(address.namespace, address.name, address.ip, address.port) for address in addresses]
    )


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
    pod_addresses: Sequence[PodAddress] = (),
    worker_url: str | None = None,
    worker_ca: Path | None = None,
    kubelet_dir: Path | None = None,
    task_status: trio.TaskStatus[RunningCluster] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``scenario`` until ``RunningCluster.shutdown`` is set; report once listening.

    Every argument is checked before the socket is bound (``StandinError``), so a bad flag
    never leaves a half-started stand-in behind. The kubeconfig is written only after the
    socket is bound, so a reader that waits for the file can use it at once.

    ``kubelet_dir``: one fake kubelet per Device Manager node, its sockets under
    ``kubelet_dir/<node>/`` (:mod:`gpustack_simulator.fakekubelet.nodes`).
    """
    _check_worker(worker_url, worker_ca)
    path = find_scenario(str(scenario))
    expanded = expand(load_scenario(path), base=RECORDINGS_DIR)
    pki = ClusterPKI.create(state_dir / "pki")
    state = ClusterState(expanded=expanded, pki=pki, clock=clock or ScenarioClock())
    _bind(state, pod_addresses)
    state.set_worker(worker_url, str(worker_ca) if worker_ca is not None else None)
    config = Config()
    config.certfile = config.keyfile = str(pki.server)
    config.alpn_protocols = ["h2", "http/1.1"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 1.0
    shutdown = trio.Event()
    kubelets = None
    if kubelet_dir is not None:
        from gpustack_simulator.fakekubelet.nodes import NodeKubelets  # noqa: PLC0415 — gRPC

        kubelets = NodeKubelets(state, kubelet_dir)
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise StandinError(f"cannot listen on {host}:{port}: {exc}") from exc
    with sock:  # closed however serving ends
        async with trio.open_nursery() as nursery:
            if kubelets is not None:
                await trio.to_thread.run_sync(kubelets.start)
                nursery.start_soon(_kubelets_until, kubelets, shutdown)
            app = build_app(state)
            tls = config.create_ssl_context()
            assert tls is not None  # certfile and keyfile are set above
            binds = await nursery.start(
                lambda task_status: serve_connections(
                    app,
                    config,
                    [sock],
                    ssl_connections(app, config, tls),
                    shutdown=shutdown,
                    task_status=task_status,
                )
            )
            url = binds[0]
            config_path = state_dir / KUBECONFIG
            users = [(u.name, u.token) for u in expanded.users]
            write_kubeconfig(config_path, kubeconfig(url, pki.ca, users, current="admin"))
            task_status.started(RunningCluster(url, config_path, state, shutdown))


async def _kubelets_until(kubelets: NodeKubelets, shutdown: trio.Event) -> None:
    """Run the fake kubelets until the stand-in shuts down, then stop their servers."""
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(kubelets.run)
            await shutdown.wait()
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(kubelets.stop)


def _write_ready(path: Path, url: str) -> None:
    """Write atomically: a reader polling for the file never sees it half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(url + "\n")
    partial.replace(path)


async def run_until_signalled(
    scenario: str,
    state_dir: Path,
    port: int,
    *,
    pod_addresses: Sequence[PodAddress] = (),
    worker_url: str | None = None,
    worker_ca: Path | None = None,
    ready_file: Path | None = None,
    kubelet_dir: Path | None = None,
) -> None:
    """Foreground mode for ``simulator cluster``: serve until SIGINT or SIGTERM.

    ``ready_file`` gets the URL once the stand-in serves and the kubeconfig is written, and is
    removed again on the way out: it means "listening now", which a stopped stand-in is not.
    """
    if ready_file is not None:
        ready_file.unlink(missing_ok=True)  # a previous run's URL must not read as this one's
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            running: RunningCluster = await nursery.start(
                lambda task_status: serve_cluster(
                    scenario,
                    state_dir,
                    port=port,
                    pod_addresses=pod_addresses,
                    worker_url=worker_url,
                    worker_ca=worker_ca,
                    kubelet_dir=kubelet_dir,
                    task_status=task_status,
                )
            )
            try:
                print(f"cluster stand-in for {scenario} at {running.url}", flush=True)
                print(f"kubeconfig: {running.kubeconfig}", flush=True)
                if ready_file is not None:
                    _write_ready(ready_file, running.url)
                async for _ in signals:
                    break
            finally:
                running.shutdown.set()
                if ready_file is not None:
                    ready_file.unlink(missing_ok=True)
