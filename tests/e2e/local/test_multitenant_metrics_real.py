"""Per-tenant GPU metrics on the real control plane (issue #34, the first "Must show").

The stand-in suites (``tests/integration/test_metrics_isolation.py``,
``test_metricaccess_delivery.py``, ``test_metrics_daemon.py``) prove isolation and delivery with
real Prometheus servers and a real prom-label-proxy, but the identities, the RBAC and the
MetricAccess objects there are the cluster stand-in's. Here kube-apiserver decides all of them:
etcd and kube-apiserver alone (``apiserver_fixture``), the MetricAccess CRD and the chart's
``multiTenantMetrics`` RBAC applied as ``helm template`` renders them, and
``gpustack-operator metrics-gateway`` run in process with a token of the chart's gateway
ServiceAccount. Its TokenReviews and SubjectAccessReviews, its MetricAccess informer, its Lease
and its status patches all go to the real server with exactly the chart's permissions.

The tenants: a ServiceAccount in each of ``tenant-a`` and ``tenant-b`` holding a Role that grants
``get pods.metrics.k8s.io`` in its own namespace only (tenant-a's is also bound to the chart's
``metricaccess-edit`` role there, so it declares its own slice), and a stranger ServiceAccount
holding nothing. The cluster Prometheus holds both tenants' ``gpustack_instance_*`` series and a
node-level one (``prom_tenancy``); the expected answers are computed from that loaded data, never
from the code under test. Then:

- through the gateway (over prom-label-proxy over the cluster Prometheus) each tenant reads
  exactly its own series; tenant-a naming tenant-b, and the stranger, are 403; no token is 401;
- a MetricAccess tenant-a creates is delivered into tenant-a's own Prometheus (started with
  ``--web.enable-remote-write-receiver``; the controller's Service resolution is the one thing
  replaced, as in the stand-in test, since nothing here runs cluster DNS): queried there, it
  holds exactly tenant-a's series and nothing of tenant-b or the node; the status read back from
  kube-apiserver reports the counts.

Runs with ``GPUSTACK_E2E_CONTROL_PLANE=real``; skipped otherwise.
"""

from __future__ import annotations

import dataclasses
import ssl
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import yaml
from apiserver_fixture import SYSTEM, Server, created, render_chart
from e2e_system import CONTROL_PLANE

from gpustack_core import remotewrite
from gpustack_core.metricaccess import Target
from gpustack_kube.client import KubeClient, NotFound
from gpustack_kube.config import KubeConfig, load_config
from gpustack_simulator.controlplane.binaries import BinariesError, locate
from gpustack_worker.metricaccess.controller import METRIC_ACCESSES
from gpustack_worker.metricsdaemon import MetricsDaemonOptions, Running, controller_for, serve
from patience import HANG

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
from prom_tenancy import (
    EVAL_AT,
    FAMILIES,
    MISSING,
    NODE_SERIES,
    PROMETHEUS,
    A,
    B,
    push,
    running_label_proxy,
    running_prometheus,
    tenant_series,
)

pytestmark = [
    pytest.mark.skipif(
        CONTROL_PLANE != "real",
        reason="TokenReview, SubjectAccessReview and the MetricAccess CRD are a real server's",
    ),
    pytest.mark.skipif(PROMETHEUS is None, reason=MISSING),
]

GATEWAY = "gpustack-operator-metrics-gateway"
READER = "reader"
STRANGER = "stranger"
A_SERIES = tenant_series(A, 100.0)
B_SERIES = tenant_series(B, 200.0)
PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
CLUSTER_SCOPED = {
    "CustomResourceDefinition": CRDS,
    "ClusterRole": f"{RBAC}/clusterroles",
    "ClusterRoleBinding": f"{RBAC}/clusterrolebindings",
}
NAMESPACED = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Role": RBAC + "/namespaces/{ns}/roles",
    "RoleBinding": RBAC + "/namespaces/{ns}/rolebindings",
}
METRICS_READ = {"apiGroups": ["metrics.k8s.io"], "resources": ["pods"], "verbs": ["get"]}


@dataclass
class Tenancy:
    """The running pieces: the proxy, tenant-a's Prometheus, and the identities' kubeconfigs."""

    proxy: str
    tenant_a: str
    tokens: dict[str, str]
    """``tenant-a``, ``tenant-b``: each tenant's reader; ``stranger``: bound to nothing."""
    kubeconfigs: dict[str, Path]
    """``gateway``: the chart's gateway ServiceAccount; ``tenant-a``: tenant-a's reader."""


def _chart_objects() -> list[dict[str, Any]]:
    """The chart's ``multiTenantMetrics`` objects kube-apiserver holds: CRD, account, RBAC.

    Not the Deployment, its Service or its TLS Secret: the gateway runs in this process.
    """
    settings = f"multiTenantMetrics.enabled=true,multiTenantMetrics.prometheusURL={PROMETHEUS_URL}"
    chosen = [d for d in render_chart("--set", settings) if _multitenant(d)]
    names = sorted((d["kind"], d["metadata"]["name"]) for d in chosen)
    assert ("ServiceAccount", GATEWAY) in names, names
    assert ("ClusterRoleBinding", f"{GATEWAY}:auth-delegator") in names, names
    assert ("RoleBinding", f"{GATEWAY}:leader-election") in names, names
    return chosen


def _multitenant(obj: dict[str, Any]) -> bool:
    """The CRD, and the accounts and RBAC of the gateway and of the MetricAccess roles (not
    ``gpustack-metrics-reader``: the Device Manager's scrapers, on by default)."""
    if obj["kind"] == "CustomResourceDefinition":
        return True
    name: str = obj["metadata"]["name"]
    kinds = (*CLUSTER_SCOPED, *NAMESPACED)
    return obj["kind"] in kinds and "metric" in name and name != "gpustack-metrics-reader"


def _apply(admin: httpx.Client, obj: dict[str, Any]) -> None:
    kind, namespace = obj["kind"], obj["metadata"].get("namespace")
    path = CLUSTER_SCOPED.get(kind) or NAMESPACED[kind].format(ns=namespace)
    created(admin, path, obj)


def _established(admin: httpx.Client, name: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        crd = admin.get(f"{CRDS}/{name}").json()
        conditions = (crd.get("status") or {}).get("conditions") or ()
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        assert time.monotonic() < deadline, crd
        time.sleep(0.3)


def _tenant_rbac(admin: httpx.Client, namespace: str, *, declares: bool) -> None:
    """A reader account with ``get pods.metrics.k8s.io`` in ``namespace``; and, if it
    ``declares``, the chart's ``metricaccess-edit`` role there."""
    subject = [{"kind": "ServiceAccount", "name": READER, "namespace": namespace}]
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "metrics-reader", "namespace": namespace},
            "rules": [METRICS_READ]}  # fmt: skip
    _apply(admin, role)
    roles = [("Role", "metrics-reader")]
    if declares:
        roles.append(("ClusterRole", "gpustack-operator:metricaccess-edit"))
    for kind, name in roles:
        binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": name.replace(":", "-"), "namespace": namespace},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind,
                               "name": name},
                   "subjects": subject}  # fmt: skip
        _apply(admin, binding)


def _account(admin: httpx.Client, namespace: str, name: str) -> str:
    """A ServiceAccount and a bound token of it (kube-apiserver signs it)."""
    sa = {"apiVersion": "v1", "kind": "ServiceAccount",
          "metadata": {"name": name, "namespace": namespace}}  # fmt: skip
    if admin.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}").status_code == 404:
        _apply(admin, sa)
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"expirationSeconds": 3600}}  # fmt: skip
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
    token: str = created(admin, path, request)["status"]["token"]
    return token


def _kubeconfig(api: Server, token: str, path: Path) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "real", "cluster": {"server": api.url,
                                                  "certificate-authority": str(api.ca)}}],
        "users": [{"name": "user", "user": {"token": token}}],
        "contexts": [{"name": "real", "context": {"cluster": "real", "user": "user"}}],
        "current-context": "real",
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def tenancy(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenancy]:
    try:
        binary = locate(("prom-label-proxy",))["prom-label-proxy"]
    except BinariesError as exc:
        pytest.skip(f"prom-label-proxy cannot be built: {exc}")
    root = tmp_path_factory.mktemp("multitenant")
    objects = _chart_objects()
    with server.client() as admin:
        for name in (SYSTEM, A, B):
            made = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            created(admin, "/api/v1/namespaces", made)
        for obj in objects:
            _apply(admin, obj)
        for crd in (o for o in objects if o["kind"] == "CustomResourceDefinition"):
            _established(admin, crd["metadata"]["name"])
        for namespace in (A, B):
            _tenant_rbac(admin, namespace, declares=namespace == A)
        tokens = {A: _account(admin, A, READER), B: _account(admin, B, READER)}
        tokens[STRANGER] = _account(admin, A, STRANGER)
        kubeconfigs = {
            "gateway": _kubeconfig(server, _account(admin, SYSTEM, GATEWAY), root / "gateway"),
            A: _kubeconfig(server, tokens[A], root / "tenant-a"),
        }
    with ExitStack() as stack:
        cluster = stack.enter_context(running_prometheus(root / "cluster"))
        tenant_a = stack.enter_context(running_prometheus(root / "tenant-a-prometheus"))
        proxy = stack.enter_context(running_label_proxy(binary, cluster, root))
        push(cluster, [*A_SERIES, *B_SERIES, *NODE_SERIES])
        yield Tenancy(proxy, tenant_a, tokens, kubeconfigs)


def _config(path: Path) -> KubeConfig:
    config = load_config(path)
    assert config is not None
    return config


@asynccontextmanager
async def metrics_gateway(tenancy: Tenancy) -> AsyncIterator[Running]:
    """``gpustack-operator metrics-gateway`` in this process, as the chart's account."""
    options = MetricsDaemonOptions(
        secure_port=0,
        bind_address="127.0.0.1",
        label_proxy_url=tenancy.proxy,
        controller=False,  # the delivery test runs the deployed controller with its resolver
    )
    async with trio.open_nursery() as nursery:
        running: Running = await nursery.start(
            lambda task_status: serve(
                options, kube=_config(tenancy.kubeconfigs["gateway"]), task_status=task_status
            )
        )
        try:
            yield running
        finally:
            running.shutdown.set()


async def _query(running: Running, namespace: str, token: str | None) -> httpx.Response:
    assert running.certificate is not None
    verify = ssl.create_default_context(cafile=str(running.certificate))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # A selector that would match every tenant's series, and the node's, were it not rewritten.
    params = {"query": '{__name__=~"gpustack_.+"}', "time": str(EVAL_AT), "namespace": namespace}
    async with httpx.AsyncClient(verify=verify, timeout=30, trust_env=False) as client:
        return await client.get(f"{running.urls[0]}/api/v1/query", params=params, headers=headers)


def _newest(series: list[remotewrite.Series]) -> dict[frozenset[tuple[str, str]], float]:
    """What an instant query at :data:`EVAL_AT` must answer: each series' newest sample."""
    return {frozenset(s.labels.items()): s.samples[-1][1] for s in series}


def _answered(response: httpx.Response) -> dict[frozenset[tuple[str, str]], float]:
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "success", body
    return {frozenset(r["metric"].items()): float(r["value"][1]) for r in body["data"]["result"]}


async def test_each_tenant_reads_only_its_own_series_through_the_gateway(
    tenancy: Tenancy,
) -> None:
    async with metrics_gateway(tenancy) as running:
        own_a = await _query(running, A, tenancy.tokens[A])
        own_b = await _query(running, B, tenancy.tokens[B])
        a_asks_b = await _query(running, B, tenancy.tokens[A])
        stranger = await _query(running, A, tenancy.tokens[STRANGER])
        anonymous = await _query(running, A, None)
        unknown = await _query(running, A, "not-a-token-anyone-issued")

    assert _answered(own_a) == _newest(A_SERIES)
    assert _answered(own_b) == _newest(B_SERIES)

    reader_a = f"system:serviceaccount:{A}:{READER}"
    assert a_asks_b.status_code == 403, a_asks_b.text
    assert f'User "{reader_a}" cannot get resource "pods"' in a_asks_b.text
    assert f'in namespace "{B}"' in a_asks_b.text
    assert stranger.status_code == 403, stranger.text
    assert f'User "system:serviceaccount:{A}:{STRANGER}"' in stranger.text
    for refused in (anonymous, unknown):
        assert refused.status_code == 401, refused.text
    for refused in (a_asks_b, stranger, anonymous, unknown):
        assert "gpustack_" not in refused.text


def _access(name: str) -> dict[str, Any]:
    # Every kind of entry; the last would match tenant-b's series and the node's, unisolated.
    metrics = [FAMILIES[0], "gpustack_instance_cores_.*", '{__name__=~"gpustack_.*"}']
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
                },
            },
        },
    }


async def _delivered(kube: KubeClient, name: str) -> dict[str, Any]:
    """The object's status, as kube-apiserver holds it, once it reports a delivery."""
    with trio.fail_after(HANG):  # the Lease is taken first (its create, then the first term)
        while True:
            try:
                obj = await kube.get(METRIC_ACCESSES.path(A, name))
            except NotFound:  # the CRD's endpoint a moment after it is Established
                obj = {}
            status: dict[str, Any] = obj.get("status") or {}
            if any(c.get("reason") == "Delivered" for c in status.get("conditions") or ()):
                return status
            await trio.sleep(0.3)


async def test_a_metricaccess_delivers_tenant_a_slice_and_nothing_of_b(
    tenancy: Tenancy,
) -> None:
    def resolve(target: Target) -> str:
        assert (target.namespace, target.service, target.port) == (A, "prometheus-operated", 9090)
        return tenancy.tenant_a

    async with (
        KubeClient(_config(tenancy.kubeconfigs["gateway"])) as gateway_client,
        KubeClient(_config(tenancy.kubeconfigs[A])) as tenant_a,
    ):
        # The deployed wiring (its Lease, its proxy), with cluster DNS replaced by ``resolve``.
        deployed = MetricsDaemonOptions(label_proxy_url=tenancy.proxy, identity="replica-0")
        controller = controller_for(gateway_client, deployed)
        controller.options = dataclasses.replace(controller.options, resolve=resolve)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(controller.run)
            with trio.fail_after(HANG):
                while True:  # the CRD's endpoint may lag its Established condition
                    try:
                        await tenant_a.create(METRIC_ACCESSES.path(A), _access("gpu-team"))
                        break
                    except NotFound:
                        await trio.sleep(0.3)
            status = await _delivered(tenant_a, "gpu-team")
            await controller.drain()
            nursery.cancel_scope.cancel()

    # What tenant-a's own Prometheus holds: exactly tenant-a's samples, nothing of b or the node.
    answer = httpx.get(
        f"{tenancy.tenant_a}/api/v1/query",
        params={"query": '{__name__=~".+"}[2h]', "time": str(EVAL_AT)},
    ).json()
    got = {
        frozenset(r["metric"].items()): [(round(float(t) * 1000), float(v)) for t, v in r["values"]]
        for r in answer["data"]["result"]
    }
    assert got == {frozenset(s.labels.items()): sorted(s.samples) for s in A_SERIES}

    assert status["series"] == len(A_SERIES)
    assert status["samples"] == sum(len(s.samples) for s in A_SERIES)
    assert status["lastDeliveryTime"]
    assert not status.get("lastError")
