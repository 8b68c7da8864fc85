"""The worker's subresource on a summary-cache hit, against its trivial route on the same server.

Both requests travel the same path — the worker's TLS listener, hypercorn's HTTP, the ASGI
dispatch — so the difference is what a warm ``metrics`` read costs on top: the front-proxy
authentication, the decision cache, the informer-fed Instance and Pod, the summary and snapshot
caches, and the core's arithmetic (or the answer those inputs already produced). The kubelet
summary is a cache hit after the first request, as it is for a console polling every Instance
of a node.

The worker runs in a process of its own (``worker_process.py``), as in its Pod; the cluster
stand-in and the Device Manager run in this one, and the load comes from a third
(``load_client.py``). On the two-core machine all three still share the cores.
"""

from __future__ import annotations

import json
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import trio

from gpustack_devicemanager.daemon import Running as DeviceManager
from gpustack_devicemanager.daemon import ServeOptions
from gpustack_devicemanager.daemon import serve as serve_device_manager
from gpustack_kube.config import load_config
from gpustack_simulator.cluster.state import ClusterState
from gpustack_simulator.procfs import write_procfs
from gpustack_simulator.recording import load_recording
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.testing import cluster_standin

PATH = "/apis/worker.gpustack.ai/v1/namespaces/team-a/instances/qwen-a/metrics"


CLIENT = Path(__file__).with_name("load_client.py")
WORKER = Path(__file__).with_name("worker_process.py")


class _Lines:
    """Lines from a child's standard output, one at a time."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.buffer = b""

    async def next(self) -> dict[str, str | int]:
        while b"\n" not in self.buffer:
            data = await self.stream.receive_some()
            if not data:
                raise RuntimeError("the worker process ended without answering")
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        answer: dict[str, str | int] = json.loads(line)
        return answer


def _report(name: str, samples: list[float]) -> float:
    samples.sort()
    p95 = samples[min(len(samples) - 1, int(len(samples) * 0.95))]
    median = statistics.median(samples)
    print(
        f"{name:<52} median {median * 1e6:10.1f} µs   p95 {p95 * 1e6:10.1f} µs   (n={len(samples)})"
    )
    return median


async def _throughput(
    url: str, ca: Path, cert: Path, clients: int, seconds: float
) -> dict[str, float]:
    """Run the load client in its own process against ``url``; its JSON figures."""
    done = await trio.run_process(
        [
            sys.executable,
            str(CLIENT),
            url,
            "--ca",
            str(ca),
            "--cert",
            str(cert),
            "--clients",
            str(clients),
            "--seconds",
            str(seconds),
        ],
        capture_stdout=True,
    )
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


async def _bench(repeat: int, figures: dict[str, float], load_seconds: float) -> None:
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        async with cluster_standin("nvidia-mixed", tmp / "cluster") as cluster:
            state = cluster.state
            [dm] = state.expanded.device_managers
            write_procfs(tmp / "proc", dict(state.expanded.procs(dm.node)))
            async with trio.open_nursery() as nursery:
                manager: DeviceManager = await nursery.start(
                    lambda task_status: serve_device_manager(
                        ServeOptions(
                            manufacturer=dm.manufacturer,
                            node_name=dm.node,
                            monitor_period=1.0,
                            secure_port=0,
                            bind_address="127.0.0.1",
                            proc_root=tmp / "proc",
                        ),
                        replay_backend(load_recording(dm.recording)),
                        kube=load_config(cluster.kubeconfig, context="device-manager"),
                        task_status=task_status,
                    )
                )
                port = int(manager.urls[0].rsplit(":", 1)[1])
                state.bind_pod_address(dm.namespace, dm.name, "127.0.0.1", port)
                process = await trio.lowlevel.open_process(
                    [sys.executable, str(WORKER), str(cluster.kubeconfig)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
                try:
                    await _measure(
                        process, state, repeat=repeat, figures=figures, load_seconds=load_seconds
                    )
                finally:
                    if process.returncode is None:
                        process.kill()
                manager.shutdown.set()


async def _measure(
    process: trio.Process,
    state: ClusterState,
    *,
    repeat: int,
    figures: dict[str, float],
    load_seconds: float,
) -> None:
    assert process.stdin is not None
    assert process.stdout is not None
    lines = _Lines(process.stdout)
    started = await lines.next()
    base, certificate = str(started["url"]), Path(str(started["ca"]))
    await trio.sleep(1.5)  # a first monitor tick with the Pods known
    context = ssl.create_default_context(cafile=str(certificate))
    context.load_cert_chain(str(state.pki.front_proxy_client))
    headers = {"X-Remote-User": "admin", "X-Remote-Group": "system:masters"}
    async with httpx.AsyncClient(verify=context, headers=headers, trust_env=False) as client:
        medians = {}
        for name, path in (
            ("worker /healthz (trivial route)", "/healthz"),
            ("worker instances/<name>/metrics (cache hit)", PATH),
        ):
            await client.get(base + path)
            samples = []
            for _ in range(repeat):
                start = time.perf_counter()
                response = await client.get(base + path)
                samples.append(time.perf_counter() - start)
                assert response.status_code == 200, response.text
            medians[path] = _report(name, samples)
    figures["healthz_us"] = medians["/healthz"] * 1e6
    figures["subresource_us"] = medians[PATH] * 1e6
    print(f"{'  warm subresource / healthz':<52} {medians[PATH] / medians['/healthz']:.2f}x")
    for clients in (1, 8, 32):
        load = await _throughput(
            base + PATH,
            certificate,
            state.pki.front_proxy_client,
            clients,
            load_seconds,
        )
        rate = load["requests"] / load["seconds"]
        figures[f"throughput_{clients}_rps"] = rate
        figures[f"throughput_{clients}_p99_ms"] = load["p99_ms"]
        print(
            f"{f'worker subresource, {clients} concurrent clients':<52} "
            f"{rate:8.0f} req/s   p50 {load['p50_ms']:7.1f} ms   "
            f"p99 {load['p99_ms']:7.1f} ms   (errors {load['errors']:.0f})"
        )
    await process.stdin.aclose()  # the worker's cue to print its counters and stop
    counters = await lines.next()
    await process.wait()
    print(f"{'  kubelet reads / cache hits':<52} {counters['reads']} / {counters['hits']}")


def bench_worker_routes(repeat: int, load_seconds: float = 5.0) -> dict[str, float]:
    """Both routes over HTTPS with keep-alive, then closed-loop load at 1, 8 and 32 clients."""
    figures: dict[str, float] = {}
    trio.run(_bench, repeat, figures, load_seconds)
    return figures


if __name__ == "__main__":
    bench_worker_routes(100, 3.0)
