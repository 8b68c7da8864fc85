"""The Grafana dashboard, as a tenant sees it through the isolating gateway (issue #34, "Chart").

Every query of ``clusters/chart/dashboards/gpustack-instances.json`` (its variables' and its
panels') is sent as Grafana sends it for tenant A through real prom-label-proxy (the launcher's
flags, the ones the chart's sidecar runs) over a real Prometheus holding tenants A and B and
node-level series. Each must be answered (never refused: ``-error-on-replace`` would make a
panel an error) and equal what a Prometheus holding only A's series answers: the Instance panels
show exactly A's figures, the node-level panels nothing (documented in
docs/multi-tenant-metrics.md, "The dashboard for a tenant"). The gateway passes every path
Grafana uses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prom_tenancy import (
    MISSING,
    NOW_MS,
    PROMETHEUS,
    STEP_MS,
    A,
    B,
    push,
    running_label_proxy,
    running_prometheus,
)

from gpustack_core import remotewrite
from gpustack_simulator.controlplane.binaries import BinariesError, locate
from gpustack_worker.metricsgateway import enforced

pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason=MISSING)

DASHBOARD = (
    Path(__file__).resolve().parents[2] / "clusters/chart/dashboards/gpustack-instances.json"
)
NAME = re.compile(r"\b(gpustack_[a-z_]+)\b")
START, END = NOW_MS / 1000 - 60, NOW_MS / 1000


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def _variables() -> dict[str, str]:
    return {
        v["name"]: v["definition"]
        for v in _dashboard()["templating"]["list"]
        if v["type"] == "query"
    }


def _panel_queries() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            found.extend((panel["title"], t["expr"]) for t in panel.get("targets", ()))
            walk(panel.get("panels", []))

    walk(_dashboard()["panels"])
    return found


def _series(name: str, labels: dict[str, str], value: float) -> remotewrite.Series:
    samples = [(NOW_MS - k * STEP_MS, value + k) for k in range(4, -1, -1)]
    return remotewrite.Series({"__name__": name, **labels}, samples)


def _instance_series(namespace: str, base: float) -> list[remotewrite.Series]:
    """Every gpustack_instance_* family the dashboard names, two Instances of ``namespace``."""
    names = sorted(
        {n for _, q in _panel_queries() for n in NAME.findall(q)}
        | {n for q in _variables().values() for n in NAME.findall(q)}
    )
    return [
        _series(name, {"namespace": namespace, "instance_name": i, "mode": "Sliced"}, base)
        for name in names
        if name.startswith("gpustack_instance_") and "collector" not in name
        for i in (f"{namespace}-qwen", f"{namespace}-llama")
    ]


# Node- and exporter-level series: no Instance's namespace, so no tenant's.
NODE = [
    _series("gpustack_accelerator_process_capability", {"node": "node-1"}, 1.0),
    _series(
        "gpustack_instance_metrics_collector_success",
        {"job": "exporter", "instance": "node-1", "source": "kubelet"},
        1.0,
    ),
    _series(
        "gpustack_instance_metrics_collector_duration_seconds",
        {"job": "exporter", "instance": "node-1", "source": "kubelet"},
        0.2,
    ),
]


class Stack:
    def __init__(self, proxy: str, oracle: str) -> None:
        self.proxy = proxy
        self.oracle = oracle


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    try:
        binary = locate(("prom-label-proxy",))["prom-label-proxy"]
    except BinariesError as exc:
        pytest.skip(f"prom-label-proxy cannot be built: {exc}")
    root = tmp_path_factory.mktemp("dashboard")
    with (
        running_prometheus(root / "cluster") as cluster,
        running_prometheus(root / "oracle") as oracle,
        running_label_proxy(binary, cluster, root) as proxy,
    ):
        push(cluster, [*_instance_series(A, 100.0), *_instance_series(B, 200.0), *NODE])
        push(oracle, _instance_series(A, 100.0))
        yield Stack(proxy, oracle)


def grafana(expr: str, namespace: str) -> str:
    """``expr`` with the variables as Grafana fills them (``All`` is each one's allValue)."""
    return expr.replace("$namespace", namespace).replace("$instance", ".*").replace("$node", ".*")


def _data(response: httpx.Response) -> Any:
    assert response.status_code == 200, (response.status_code, response.text)
    data = response.json()["data"]
    if isinstance(data, dict):
        return sorted(json.dumps(r, sort_keys=True) for r in data["result"])
    return sorted(data)


def as_tenant(stack: Stack, path: str, params: dict[str, Any]) -> Any:
    """Tenant A's answer through prom-label-proxy; it must equal the A-only Prometheus's."""
    assert enforced(path)  # the gateway forwards it
    through = httpx.get(f"{stack.proxy}{path}", params={**params, "namespace": A}, timeout=30)
    oracle = httpx.get(f"{stack.oracle}{path}", params=params, timeout=30)
    found = _data(through)
    assert found == _data(oracle), (path, params)
    return found


def _label_values(definition: str) -> tuple[str, str]:
    """``label_values(<selector>, <label>)`` → (selector, label), as Grafana splits it."""
    match = re.fullmatch(r"label_values\((?P<selector>.+),\s*(?P<label>\w+)\)", definition)
    assert match, definition
    return match["selector"], match["label"]


def test_the_namespace_variable_offers_only_the_tenants_own(stack: Stack) -> None:
    selector, label = _label_values(_variables()["namespace"])
    values = as_tenant(
        stack, f"/api/v1/label/{label}/values", {"match[]": selector, "start": START, "end": END}
    )
    assert values == [A]


@pytest.mark.parametrize("namespace", [".*", A], ids=["all", "selected"])
def test_the_instance_variable_offers_only_the_tenants_instances(
    stack: Stack, namespace: str
) -> None:
    selector, label = _label_values(grafana(_variables()["instance"], namespace))
    values = as_tenant(
        stack, f"/api/v1/label/{label}/values", {"match[]": selector, "start": START, "end": END}
    )
    assert values == sorted([f"{A}-llama", f"{A}-qwen"])


def test_the_node_variable_is_empty_for_a_tenant(stack: Stack) -> None:
    selector, label = _label_values(_variables()["node"])
    params = {"match[]": selector, "start": START, "end": END}
    assert as_tenant(stack, f"/api/v1/label/{label}/values", params) == []


NODE_PANELS = {"Per-process capability (why figures are absent)", "Collector health"}
NODE_PANELS |= {"Kubelet poll duration"}


@pytest.mark.parametrize("namespace", [".*", A], ids=["all", "selected"])
@pytest.mark.parametrize(("title", "expr"), _panel_queries(), ids=lambda v: str(v)[:40])
def test_every_panel_answers_the_tenant_exactly_its_own(
    stack: Stack, namespace: str, title: str, expr: str
) -> None:
    params = {"query": grafana(expr, namespace), "start": START, "end": END, "step": 15}
    result = as_tenant(stack, "/api/v1/query_range", params)
    if title in NODE_PANELS:
        assert result == []  # node-level figures are no tenant's
    else:
        assert result
        assert {json.loads(r)["metric"].get("namespace", A) for r in result} == {A}
