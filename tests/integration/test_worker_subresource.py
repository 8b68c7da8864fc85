"""The subresource's fetch path against the stand-in and a live Device Manager over HTTPS.

Two surfaces, two fetch paths, one calculation: the worker-side ``instance_metrics`` reads the
Instance, its Pod, the kubelet summary (through the shared cache) and the Device Manager's
snapshot over TLS; the Device Manager's exporter reads its own. Their figures must agree.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trio
from dm_stack import Stack, open_stack
from prometheus_client.parser import text_string_to_metric_families

from gpustack_core.kubelet import Summary, parse_summary
from gpustack_kube.client import ApiError, KubeClient
from gpustack_kube.config import load_config
from gpustack_simulator.scenario import Fault
from gpustack_worker.subresource import Sources, Unavailable, instance_metrics
from gpustack_worker.summaries import SummaryCache
from patience import HANG

NODE = "gpu-node-1"


@dataclass
class Worker:
    stack: Stack
    sources: Sources
    reads: list[str]


@pytest.fixture
async def worker(tmp_path: Path) -> AsyncIterator[Worker]:
    async with open_stack("nvidia-mixed", tmp_path) as stack:
        state = stack.cluster.state
        [dm] = state.expanded.device_managers
        port = int(stack.daemon.urls[0].rsplit(":", 1)[1])
        state.bind_pod_address(dm.namespace, dm.name, "127.0.0.1", port)
        config = load_config(stack.cluster.kubeconfig, context="worker")
        assert config is not None
        reads: list[str] = []
        async with KubeClient(config) as client, trio.open_nursery() as background:

            async def read(node: str) -> Summary:
                reads.append(node)
                body = await client.get_bytes(
                    f"/api/v1/nodes/{node}/proxy/stats/summary", limit=32 << 20
                )
                return parse_summary(body)

            yield Worker(stack, Sources(client, SummaryCache(read, background)), reads)
            background.cancel_scope.cancel()


async def exported(stack: Stack) -> dict[tuple[str, str, str], float]:
    """(family, instance_name, accelerator id or "") → value, from the live /metrics."""
    async with httpx.AsyncClient(verify=False, trust_env=False) as client:
        text = (await client.get(stack.url + "/metrics")).text
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "instance_name" in sample.labels:
                key = (sample.name, sample.labels["instance_name"], sample.labels.get("id", ""))
                found[key] = sample.value
    return found


POD_FIGURES = {
    "gpustack_instance_cpu_total_millicores": "cpu_total_milli_cores",
    "gpustack_instance_cpu_used_millicores": "cpu_used_milli_cores",
    "gpustack_instance_memory_total_mib": "memory_total_mib",
    "gpustack_instance_memory_used_mib": "memory_used_mib",
    "gpustack_instance_storage_total_mib": "storage_total_mib",
    "gpustack_instance_storage_used_mib": "storage_used_mib",
}
ACCELERATOR_FIGURES = (
    "memory_total_mib",
    "memory_used_mib",
    "memory_utilization_percent",
    "cores_utilization_percent",
    "temperature_celsius",
    "unhealthy",
)


async def test_both_surfaces_report_the_same_figures(worker: Worker) -> None:
    await worker.stack.next_tick()
    instances = (
        ("team-a", "llama-70b"),
        ("team-a", "embed-a"),
        ("team-a", "qwen-a"),
        ("team-b", "qwen-b"),
        ("team-a", "mig-3g"),
    )
    # An exporter round after that tick has published every Instance: wait for it, not for a
    # fixed second (under load a round can come late, and reading before it fails the test).
    metrics: dict[tuple[str, str, str], float] = {}
    with trio.fail_after(HANG):
        while not all(("gpustack_instance_cpu_total_millicores", n, "") in metrics
                      for _, n in instances):  # fmt: skip
            await trio.sleep(0.05)
            metrics = await exported(worker.stack)
    modes = set()
    for namespace, name in instances:
        body = await instance_metrics(worker.sources, namespace, name)
        sample = body.sample
        for family, field in POD_FIGURES.items():
            value = getattr(sample, field)
            assert value is not None, (name, field)
            assert metrics[(family, name, "")] == value, (name, family)
        for entry in sample.accelerators or []:
            modes.add(entry.mode)
            for field in ACCELERATOR_FIGURES:
                value = getattr(entry, field)
                key = (f"gpustack_instance_accelerator_{field}", name, entry.id)
                if value is None:
                    assert key not in metrics, key
                else:
                    assert metrics[key] == float(value), key
    assert modes == {"Exclusive", "Shared", "Sliced", "Partitioned"}
    assert worker.reads.count(NODE) == 1  # five Instances of one node: one kubelet read


async def test_stopped_and_never_started_read_totals_and_zeros(worker: Worker) -> None:
    stopped = (await instance_metrics(worker.sources, "team-c", "archived-job")).sample
    assert (stopped.cpu_total_milli_cores, stopped.memory_total_mib) == (2000, 4096)
    assert (stopped.cpu_used_milli_cores, stopped.memory_used_mib, stopped.storage_used_mib) == (
        0,
        0,
        0,
    )
    assert stopped.accelerators is None
    pending = (await instance_metrics(worker.sources, "team-b", "qwen-pending")).sample
    assert (pending.cpu_used_milli_cores, pending.memory_used_mib) == (0, 0)
    assert worker.reads == []  # the gate: nothing started, no upstream reads


async def test_a_recreated_instance_never_reads_the_old_pods_figures(worker: Worker) -> None:
    worker.stack.cluster.state.update_pod(
        "team-a",
        "llama-70b",
        lambda pod: pod["metadata"]["labels"].update({"app.kubernetes.io/part-of": "old-uid"}),
    )
    sample = (await instance_metrics(worker.sources, "team-a", "llama-70b")).sample
    assert sample.cpu_used_milli_cores == 0  # the Pod is another incarnation's: not ours
    assert sample.accelerators is None


async def test_kubelet_down_falls_back_then_both_down_is_unavailable(worker: Worker) -> None:
    state = worker.stack.cluster.state
    state.add_fault(Fault("kubelet-unreachable", NODE, 0.0, None))
    sample = (await instance_metrics(worker.sources, "team-a", "llama-70b")).sample
    assert sample.cpu_used_milli_cores is not None  # from metrics.k8s.io
    assert sample.storage_used_mib is None  # which has no storage figure
    state.add_fault(Fault("metrics-api-absent", None, 0.0, None))
    with pytest.raises(Unavailable) as excinfo:
        await instance_metrics(worker.sources, "team-a", "embed-a")
    message = str(excinfo.value)
    assert "kubelet summary of node gpu-node-1" in message
    assert "metrics.k8s.io" in message


async def test_unknown_instance_is_a_404(worker: Worker) -> None:
    with pytest.raises(ApiError) as excinfo:
        await instance_metrics(worker.sources, "team-a", "no-such-instance")
    assert excinfo.value.status == 404
