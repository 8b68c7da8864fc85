"""A MetricAccess delivers tenant A's slice into A's own Prometheus; nothing of B arrives.

Real components: the cluster-wide Prometheus holds both tenants' ``gpustack_instance_*`` series
and a node-level one; prom-label-proxy (built from its module) isolates reads; tenant A's
Prometheus is started with ``--web.enable-remote-write-receiver`` and is queried afterwards.
The MetricAccess objects live in the cluster stand-in (which serves the CRD from
``clusters/crds``); the controller runs against it. Expected series, values and counts come from
the loaded data (``prom_tenancy.tenant_series``), never from the controller.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from prom_tenancy import (
    FAMILIES,
    MISSING,
    NODE_SERIES,
    PROMETHEUS,
    A,
    B,
    free_port,
    push,
    running_label_proxy,
    running_prometheus,
    tenant_series,
)

from gpustack_core.metricaccess import Target
from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig, load_config
from gpustack_simulator.controlplane.binaries import BinariesError, locate
from gpustack_simulator.testing import cluster_standin
from gpustack_worker.metricaccess.controller import (
    METRIC_ACCESSES,
    MetricAccessController,
    MetricAccessOptions,
)
from patience import HANG

pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason=MISSING)

A_SERIES = tenant_series(A, 100.0)


@dataclass
class Proms:
    proxy: str
    tenant_a: str


@pytest.fixture
def proms(tmp_path: Path) -> Iterator[Proms]:
    try:
        binary = locate(("prom-label-proxy",))["prom-label-proxy"]
    except BinariesError as exc:
        pytest.skip(f"prom-label-proxy cannot be built: {exc}")
    with (
        running_prometheus(tmp_path / "cluster") as cluster,
        running_prometheus(tmp_path / "tenant-a") as tenant_a,
        running_label_proxy(binary, cluster, tmp_path) as proxy,
    ):
        push(cluster, [*A_SERIES, *tenant_series(B, 200.0), *NODE_SERIES])
        yield Proms(proxy, tenant_a)


def _admin(kubeconfig: Path) -> KubeConfig:
    config = load_config(kubeconfig, context="admin")
    assert config is not None
    return config


def _access(name: str, metrics: list[str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "observability.gpustack.ai/v1",
        "kind": "MetricAccess",
        "metadata": {"name": name, "namespace": A},
        "spec": {
            "source": A,
            "metricIsolation": True,
            "metrics": metrics,
            "remoteWrite": {
                "enabled": True,
                "interval": "1h",  # one delivery in the test; the window holds all samples
                "target": {
                    "type": "prometheus",
                    "prometheus": {"serviceName": "prometheus-operated", "servicePort": 9090},
                    "extraLabels": {"tenant": "gpu-team-a"},
                },
            },
            **spec,
        },
    }


async def _status(kube: KubeClient, name: str, reason: str) -> dict[str, Any]:
    with trio.fail_after(HANG):
        while True:
            obj = await kube.get(METRIC_ACCESSES.path(A, name))
            status: dict[str, Any] = obj.get("status") or {}
            if any(c.get("reason") == reason for c in status.get("conditions") or ()):
                return status
            await trio.sleep(0.2)


async def test_a_metricaccess_delivers_a_s_slice_and_nothing_of_b(
    proms: Proms, tmp_path: Path
) -> None:
    def resolve(target: Target) -> str:
        assert (target.namespace, target.service, target.port) == (A, "prometheus-operated", 9090)
        return proms.tenant_a

    async with (
        cluster_standin("walkthrough", tmp_path / "standin") as cluster,
        KubeClient(_admin(cluster.kubeconfig)) as kube,
    ):
        options = MetricAccessOptions(isolating_url=proms.proxy, resolve=resolve)
        controller = MetricAccessController(kube, options)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(controller.run)
            # Every kind of entry; the last would also match B's series and the node's.
            slice_ = [FAMILIES[0], "gpustack_instance_cores_.*", '{__name__=~"gpustack_.*"}']
            await kube.create(METRIC_ACCESSES.path(A), _access("gpu-team-metrics", slice_))
            naming_b = _access("naming-b", [f'{FAMILIES[0]}{{namespace="{B}"}}'])
            await kube.create(METRIC_ACCESSES.path(A), naming_b)

            status = await _status(kube, "gpu-team-metrics", "Delivered")
            refused = await _status(kube, "naming-b", "InvalidSpec")
            deliveries = list(controller.writes)
            await controller.drain()
            nursery.cancel_scope.cancel()

    # What A's own Prometheus holds now: exactly A's series, with A's values, and the label.
    answer = httpx.get(
        f"{proms.tenant_a}/api/v1/query",
        params={
            "query": '{__name__=~".+"}[2h]',
            "time": max(t for s in A_SERIES for t, _ in s.samples) / 1000,
        },
    ).json()
    got = {
        (r["metric"]["__name__"], r["metric"]["instance"]): [
            (round(float(t) * 1000), float(v)) for t, v in r["values"]
        ]
        for r in answer["data"]["result"]
    }
    expected = {(s.labels["__name__"], s.labels["instance"]): sorted(s.samples) for s in A_SERIES}
    assert got == expected
    assert {r["metric"]["namespace"] for r in answer["data"]["result"]} == {A}
    assert {r["metric"]["tenant"] for r in answer["data"]["result"]} == {"gpu-team-a"}

    assert len(deliveries) == 1  # its own status write does not deliver again
    assert status["series"] == len(A_SERIES)
    assert status["samples"] == sum(len(s.samples) for s in A_SERIES)
    assert status["lastDeliveryTime"]
    assert not status.get("lastError")
    assert refused["lastError"].startswith("spec.metrics[0]")
    assert "names other namespaces than the source" in refused["lastError"]


async def test_an_unreachable_target_is_reported_and_retried(proms: Proms, tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    async with (
        cluster_standin("walkthrough", tmp_path / "standin") as cluster,
        KubeClient(_admin(cluster.kubeconfig)) as kube,
    ):
        options = MetricAccessOptions(isolating_url=proms.proxy, resolve=lambda _t: closed)
        controller = MetricAccessController(kube, options)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(controller.run)
            await kube.create(METRIC_ACCESSES.path(A), _access("down", [FAMILIES[0]]))
            status = await _status(kube, "down", "DeliveryFailed")
            await controller.drain()
            nursery.cancel_scope.cancel()
    assert status["lastError"] == f"writing to {closed}/api/v1/write: ConnectError"
    assert "series" not in status  # absent, not zero: nothing was delivered
