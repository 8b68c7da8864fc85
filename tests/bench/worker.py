"""The worker's subresource on a summary-cache hit, against its trivial route on the same server.

Both requests travel the same path — the worker's TLS listener, the front-proxy authentication,
one Quart dispatch — so the difference is what a ``metrics`` read costs on top: the decision
cache, the uncached Instance and Pod reads from the API server, the Device Manager list and
snapshot fetch, and the core's arithmetic. The kubelet summary is a cache hit after the first
request, as it is for a console polling every Instance of a node.
"""

from __future__ import annotations

import json
import ssl
import statistics
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
from gpustack_simulator.procfs import write_procfs
from gpustack_simulator.recording import load_recording
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.testing import cluster_standin
from gpustack_worker.daemon import Running, WorkerOptions, serve

PATH = "/apis/worker.gpustack.ai/v1/namespaces/team-a/instances/qwen-a/metrics"


CLIENT = Path(__file__).with_name("load_client.py")


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
                worker: Running = await nursery.start(
                    lambda task_status: serve(
                        WorkerOptions(secure_port=0, bind_address="127.0.0.1"),
                        kube=load_config(cluster.kubeconfig, context="worker"),
                        task_status=task_status,
                    )
                )
                await trio.sleep(1.5)  # a first monitor tick with the Pods known
                context = ssl.create_default_context(cafile=str(worker.certificate))
                context.load_cert_chain(str(state.pki.front_proxy_client))
                headers = {"X-Remote-User": "admin", "X-Remote-Group": "system:masters"}
                async with httpx.AsyncClient(
                    verify=context, headers=headers, trust_env=False
                ) as client:
                    medians = {}
                    for name, path in (
                        ("worker /healthz (trivial route)", "/healthz"),
                        ("worker instances/<name>/metrics (cache hit)", PATH),
                    ):
                        await client.get(worker.urls[0] + path)
                        samples = []
                        for _ in range(repeat):
                            start = time.perf_counter()
                            response = await client.get(worker.urls[0] + path)
                            samples.append(time.perf_counter() - start)
                            assert response.status_code == 200, response.text
                        medians[path] = _report(name, samples)
                figures["healthz_us"] = medians["/healthz"] * 1e6
                figures["subresource_us"] = medians[PATH] * 1e6
                print(
                    f"{'  warm subresource / healthz':<52} "
                    f"{medians[PATH] / medians['/healthz']:.2f}x"
                )
                for clients in (1, 8, 32):
                    load = await _throughput(
                        worker.urls[0] + PATH,
                        worker.certificate,
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
                statistics_ = worker.summaries.statistics()
                print(
                    f"{'  kubelet reads / cache hits':<52} {statistics_.reads} / {statistics_.hits}"
                )
                worker.shutdown.set()
                manager.shutdown.set()


def bench_worker_routes(repeat: int, load_seconds: float = 5.0) -> dict[str, float]:
    """Both routes over HTTPS with keep-alive, then closed-loop load at 1, 8 and 32 clients."""
    figures: dict[str, float] = {}
    trio.run(_bench, repeat, figures, load_seconds)
    return figures


if __name__ == "__main__":
    bench_worker_routes(100, 3.0)
