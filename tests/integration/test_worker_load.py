"""The subresource under load: a thousand concurrent reads over ten nodes cost ten kubelet reads.

A console polling every Instance of a cluster must cost each kubelet one summary read per
freshness bound, however many Instances a node runs and however many callers ask at once. This
drives the worker's own fetch path (``instance_metrics``: the uncached Instance and Pod reads,
the node summary through the shared cache) against the stand-in's routes, with the demo
scenario's Instances spread over ten nodes, and counts what reached the node proxy.

The API server is the stand-in's own app behind the client's transport seam (in-process, no
sockets): 3000 uncached API reads through a Python server on TLS would measure this machine's
two cores, not the cache. The worker over real HTTPS is covered by test_worker_api.py.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import httpx
import trio

from gpustack_core.kubelet import Summary, parse_summary
from gpustack_core.pods import pod_from_object
from gpustack_core.sample import pod_started
from gpustack_kube.client import KubeClient
from gpustack_kube.config import load_config
from gpustack_simulator.cluster.app import build_app
from gpustack_simulator.testing import cluster_standin
from gpustack_worker.subresource import Sources, instance_metrics
from gpustack_worker.summaries import SummaryCache

REQUESTS = 1000
NODES = 10


async def test_a_thousand_concurrent_reads_over_ten_nodes_cost_ten_kubelet_reads(
    tmp_path: Path,
) -> None:
    async with cluster_standin("demo", tmp_path / "cluster") as cluster:
        # One started Instance per node, on the first ten nodes that have one.
        per_node: dict[str, tuple[str, str]] = {}
        for raw in cluster.state.expanded.pods:
            pod = pod_from_object(raw)
            node = pod.spec.node_name
            if (
                node
                and node not in per_node
                and pod_started(pod)
                and raw["metadata"].get("labels", {}).get("app.kubernetes.io/part-of")
            ):
                per_node[node] = (pod.metadata.namespace, pod.metadata.name)
        targets = list(per_node.values())[:NODES]
        assert len(targets) == NODES, per_node

        config = load_config(cluster.kubeconfig, context="worker")
        assert config is not None
        reads: Counter[str] = Counter()
        answered: list[str] = []
        transport = httpx.ASGITransport(app=build_app(cluster.state))
        async with (
            KubeClient(config, transport=transport) as client,
            trio.open_nursery() as background,
        ):

            async def read(node: str) -> Summary:
                reads[node] += 1
                body = await client.get_bytes(
                    f"/api/v1/nodes/{node}/proxy/stats/summary", limit=32 << 20
                )
                return parse_summary(body)

            sources = Sources(client, SummaryCache(read, background))

            async def one(namespace: str, name: str) -> None:
                metrics = await instance_metrics(sources, namespace, name)
                assert metrics.sample.cpu_used_milli_cores is not None
                answered.append(name)

            async with trio.open_nursery() as callers:
                for index in range(REQUESTS):
                    callers.start_soon(one, *targets[index % NODES])
            background.cancel_scope.cancel()

    assert len(answered) == REQUESTS
    assert len(reads) == NODES
    assert set(reads.values()) == {1}  # exactly one read per node, shared by 100 callers each
