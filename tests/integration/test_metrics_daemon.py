"""``gpustack-operator metrics-gateway`` as deployed: the gateway over TLS, the controller elected.

Against the cluster stand-in, whose TokenReviews and SubjectAccessReviews come from the
scenario's users: mallory may read team-a's metrics (``get pods.metrics.k8s.io`` there) and
nothing else. The gateway is reached over real HTTPS with real tokens; prom-label-proxy's place
is an address nothing listens on, so a request that passes the checks is answered 502 and one
that does not never gets that far. Two replicas share the Lease: one leads, one follows.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trio
import yaml

from gpustack_kube.client import KubeClient
from gpustack_kube.config import load_config
from gpustack_simulator.cluster.server import RunningCluster
from gpustack_simulator.testing import cluster_standin
from gpustack_worker.metricsdaemon import LEASE, MetricsDaemonOptions, Running, serve
from patience import HANG

REPO = Path(__file__).resolve().parents[2]
USERS = [
    {"name": "mallory", "token": "mallory-token", "groups": ["system:authenticated"],
     "rules": [{"apiGroups": ["metrics.k8s.io"], "resources": ["pods"], "verbs": ["get"],
                "namespaces": ["team-a"]}]},
]  # fmt: skip
LEASES = "/apis/coordination.k8s.io/v1/namespaces/gpustack-system/leases"


def _scenario(path: Path) -> Path:
    document = yaml.safe_load((REPO / "recordings" / "scenarios" / "walkthrough.yaml").read_text())
    document["users"] = [*(document.get("users") or []), *USERS]
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@asynccontextmanager
async def replica(
    cluster: RunningCluster, identity: str, *, gateway: bool = True
) -> AsyncIterator[Running]:
    options = MetricsDaemonOptions(
        secure_port=0,
        bind_address="127.0.0.1",
        label_proxy_url="http://127.0.0.1:1",
        identity=identity,
        gateway=gateway,
    )
    kube = load_config(cluster.kubeconfig, context="admin")
    async with trio.open_nursery() as nursery:
        running: Running = await nursery.start(
            lambda task_status: serve(options, kube=kube, task_status=task_status)
        )
        try:
            yield running
        finally:
            running.shutdown.set()


async def _get(running: Running, query: str, token: str | None) -> httpx.Response:
    assert running.certificate is not None
    verify = ssl.create_default_context(cafile=str(running.certificate))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(verify=verify) as client:
        return await client.get(f"{running.urls[0]}/api/v1/query?{query}", headers=headers)


async def test_the_gateway_serves_over_tls_and_decides_on_the_token(tmp_path: Path) -> None:
    async with (
        cluster_standin(_scenario(tmp_path / "s.yaml"), tmp_path / "cluster") as cluster,
        replica(cluster, "one") as running,
    ):
        assert running.urls[0].startswith("https://")
        no_token = await _get(running, "query=up&namespace=team-a", None)
        assert no_token.status_code == 401
        other = await _get(running, "query=up&namespace=team-b", "mallory-token")
        assert other.status_code == 403
        assert 'User "mallory" cannot get resource "pods" in namespace "team-b"' in other.text
        two = await _get(running, "query=up&namespace=team-a&namespace=team-b", "mallory-token")
        assert two.status_code == 400
        own = await _get(running, "query=up&namespace=team-a", "mallory-token")
        assert own.status_code == 502  # past every check; no prom-label-proxy here


async def test_two_replicas_elect_one_deliverer(tmp_path: Path) -> None:
    async with (
        cluster_standin(_scenario(tmp_path / "s.yaml"), tmp_path / "cluster") as cluster,
        replica(cluster, "one", gateway=False) as first,
        replica(cluster, "two", gateway=False) as second,
    ):
        assert first.urls == []
        controllers = [r.controller for r in (first, second)]
        with trio.fail_after(HANG):
            while not any(c is not None and c.elector and c.elector.leading for c in controllers):
                await trio.sleep(0.1)
        await trio.sleep(1.0)  # a second candidate had its chance to (wrongly) lead too
        leading = [c.elector.leading for c in controllers if c is not None and c.elector]
        assert sorted(leading) == [False, True]
        admin_config = load_config(cluster.kubeconfig, context="admin")
        async with KubeClient(admin_config) as admin:
            lease: dict[str, Any] = await admin.get(f"{LEASES}/{LEASE}")
        holder = "one" if leading[0] else "two"
        assert lease["spec"]["holderIdentity"] == holder
