"""Query-time isolation on real components: prom-label-proxy (from its module) over Prometheus.

The oracle is a second, independent Prometheus holding **only tenant A's series** (the same
samples, the same rules for A). Whatever tenant A asks through the proxy of the cluster
Prometheus (both tenants' series and a node-level one) must answer exactly what the A-only
Prometheus answers to the same query at the same instant — or be refused (4xx). Any extra
series, any value that differs, would be data of another tenant or of the node. Queries are
the ones a tenant would try to widen its view with, and hypothesis-generated ones.

Also through the gateway (``gpustack_worker.metricsgateway``) in process: a second ``namespace``
parameter, one in a form body, a bad name are refused before anything reaches the proxy.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prom_tenancy import (
    EVAL_AT,
    FAMILIES,
    MISSING,
    NODE_SERIES,
    PROMETHEUS,
    STEP_MS,
    A,
    B,
    push,
    rules_for,
    running_label_proxy,
    running_prometheus,
    tenant_series,
)

from gpustack_simulator.controlplane.binaries import BinariesError, locate
from gpustack_worker.metricsgateway import MetricsGateway, Scope, enforced
from patience import HANG

pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason=MISSING)

A_SERIES = tenant_series(A, 100.0)
B_SERIES = tenant_series(B, 200.0)


class Stack:
    """The cluster Prometheus behind prom-label-proxy, and the A-only oracle."""

    def __init__(self, proxy: str, cluster: str, oracle: str) -> None:
        self.proxy = proxy
        self.cluster = cluster
        self.oracle = oracle


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    try:
        binary = locate(("prom-label-proxy",))["prom-label-proxy"]
    except BinariesError as exc:
        pytest.skip(f"prom-label-proxy cannot be built: {exc}")
    root = tmp_path_factory.mktemp("tenancy")
    with (
        running_prometheus(root / "cluster", rules_for(A, B)) as cluster,
        running_prometheus(root / "oracle", rules_for(A)) as oracle,
        running_label_proxy(binary, cluster, root) as proxy,
    ):
        push(cluster, [*A_SERIES, *B_SERIES, *NODE_SERIES])
        push(oracle, A_SERIES)
        # The rules' output, in both, before anything is compared: the recorded series and the
        # ALERTS series stored (a label-names answer lists every name of a stored series). An
        # alert listed by /api/v1/alerts is not yet stored: the rule manager keeps its state
        # first and appends ALERTS after, which under load left one server without the
        # alertname the other had.
        deadline = time.monotonic() + HANG
        for server in (cluster, oracle):
            while not _stored(server, "ALERTS") or not _stored(server, '{__name__=~"tenant:.+"}'):
                assert time.monotonic() < deadline, f"the rules' series not stored in {server}"
                time.sleep(0.3)
        yield Stack(proxy, cluster, oracle)


def _stored(server: str, selector: str) -> bool:
    """Whether ``selector`` selects a stored series at the server's now."""
    answer = httpx.get(f"{server}/api/v1/query", params={"query": selector}).json()
    return bool(answer["data"]["result"])


def _alerts(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return list(answer["data"]["alerts"])


def _canonical(answer: dict[str, Any]) -> Any:
    """A query answer's data, order-free."""
    data = answer["data"]
    if isinstance(data, dict) and "result" in data:
        result = data["result"]
        if data["resultType"] in {"vector", "matrix"}:
            return data["resultType"], sorted(repr(sorted(r.items())) for r in result)
        return data["resultType"], repr(result)
    if isinstance(data, list):
        return sorted(repr(sorted(d.items())) if isinstance(d, dict) else d for d in data)
    return data


def ask(stack: Stack, path: str, params: dict[str, Any]) -> tuple[httpx.Response, httpx.Response]:
    """The same request as tenant A through the proxy, and to the A-only oracle."""
    through = httpx.get(f"{stack.proxy}{path}", params={**params, "namespace": A}, timeout=30)
    oracle = httpx.get(f"{stack.oracle}{path}", params=params, timeout=30)
    return through, oracle


def assert_isolated(stack: Stack, path: str, params: dict[str, Any]) -> httpx.Response:
    """Refused, or exactly what the A-only Prometheus answers."""
    through, oracle = ask(stack, path, params)
    if through.status_code >= 400:
        assert through.status_code < 500, (through.status_code, through.text)
        return through
    assert oracle.status_code == 200, (params, oracle.text)
    assert _canonical(through.json()) == _canonical(oracle.json()), params
    return through


# ---------------------------------------------------------------------------------------------
# Every endpoint, the plain query first: the answer is non-empty and exactly A's
# ---------------------------------------------------------------------------------------------


def test_instant_query_sees_only_a(stack: Stack) -> None:
    q: dict[str, str | float] = {"query": FAMILIES[0], "time": EVAL_AT}
    answer = assert_isolated(stack, "/api/v1/query", q).json()
    assert {r["metric"]["instance"] for r in answer["data"]["result"]} == {
        f"{A}-qwen",
        f"{A}-llama",
    }
    cluster = httpx.get(f"{stack.cluster}/api/v1/query", params=q).json()
    assert len(cluster["data"]["result"]) == 4  # both tenants are there, unfiltered


def test_range_query_series_labels_values(stack: Stack) -> None:
    window = {"start": EVAL_AT - 60, "end": EVAL_AT, "step": STEP_MS / 1000}
    assert_isolated(stack, "/api/v1/query_range", {"query": "{__name__=~'.+'}", **window})
    answer = assert_isolated(stack, "/api/v1/series", {"match[]": "{__name__=~'.+'}", **window})
    assert {s["namespace"] for s in answer.json()["data"]} == {A}
    answer = assert_isolated(stack, "/api/v1/label/namespace/values", window)
    assert answer.json()["data"] == [A]
    instances = assert_isolated(stack, "/api/v1/label/instance/values", window).json()["data"]
    assert sorted(instances) == sorted({f"{A}-qwen", f"{A}-llama"})
    names = assert_isolated(stack, "/api/v1/labels", window).json()["data"]
    assert "node" not in names  # the node-level series' label is not seen


def test_rules_and_alerts_are_a_s_only(stack: Stack) -> None:
    rules = httpx.get(f"{stack.proxy}/api/v1/rules", params={"namespace": A}).json()
    labels = [r["labels"] for g in rules["data"]["groups"] for r in g["rules"]]
    assert labels
    assert {lbl["namespace"] for lbl in labels} == {A}
    alerts = httpx.get(f"{stack.proxy}/api/v1/alerts", params={"namespace": A}).json()
    found = _alerts(alerts)
    assert found
    assert {a["labels"]["namespace"] for a in found} == {A}
    everyone = _alerts(httpx.get(f"{stack.cluster}/api/v1/alerts").json())
    assert {a["labels"]["namespace"] for a in everyone} == {A, B}  # B's alert is there


# ---------------------------------------------------------------------------------------------
# The tricks
# ---------------------------------------------------------------------------------------------

TRICKS = [
    f'{FAMILIES[0]}{{namespace!="{A}"}}',
    '{namespace=~".+"}',
    f'{{namespace="{B}"}}',
    '{__name__=~".+"}',
    '{__name__=~".+", namespace=""}',
    f"{FAMILIES[0]} or gpustack_accelerator_up",
    f'{FAMILIES[0]} unless {FAMILIES[0]}{{namespace="{B}"}}',
    f"max_over_time({FAMILIES[0]}[5m:15s])",
    f'label_replace({FAMILIES[0]}, "namespace", "{B}", "", "")',
    'label_replace({__name__=~"gpustack_.*"}, "x", "$1", "namespace", "(.*)")',
    "count by (namespace) ({__name__=~'.+'})",
    "sum(gpustack_accelerator_up) or vector(0)",
    f'{FAMILIES[0]} * on(instance) group_left() {{instance=~"{B}.*"}}',
    f'absent({FAMILIES[0]}{{namespace="{B}"}})',
    "topk(100, {__name__!=''})",
]


@pytest.mark.parametrize("query", TRICKS)
def test_widening_tricks_are_refused_or_neutralized(stack: Stack, query: str) -> None:
    assert_isolated(stack, "/api/v1/query", {"query": query, "time": EVAL_AT})
    assert_isolated(
        stack, "/api/v1/series", {"match[]": query, "start": EVAL_AT - 60, "end": EVAL_AT}
    )


def test_a_second_namespace_parameter_widens_prom_label_proxy_itself(stack: Stack) -> None:
    """Why the gateway must refuse it: prom-label-proxy alone takes the union of the values."""
    both = httpx.get(
        f"{stack.proxy}/api/v1/query",
        params=[("query", FAMILIES[0]), ("time", EVAL_AT), ("namespace", A), ("namespace", B)],
    ).json()
    assert {r["metric"]["namespace"] for r in both["data"]["result"]} == {A, B}


_LABELS = st.sampled_from(["namespace", "instance", "__name__", "node", "job"])
_OPS = st.sampled_from(["=", "!=", "=~", "!~"])
_VALUES = st.sampled_from(
    [A, B, "", ".+", ".*", "tenant-.*", f"{B}|{A}", FAMILIES[0], "gpustack_.*", f"{B}-qwen"]
)
_MATCHER = st.builds(lambda n, o, v: f'{n}{o}"{v}"', _LABELS, _OPS, _VALUES)
_SELECTOR = st.builds(
    lambda name, ms: f"{name}{{{','.join(ms)}}}",
    st.sampled_from(["", *FAMILIES, "gpustack_accelerator_up"]),
    st.lists(_MATCHER, min_size=1, max_size=3),
)
_WRAP = st.sampled_from(
    [
        "{}",
        "sum by (namespace, instance) ({})",
        "{} or gpustack_accelerator_up",
        "max_over_time({}[2m:15s])",
        'label_replace({}, "namespace", "tenant-b", "", "")',
        "count({})",
        "{} unless on() vector(1)",
    ]
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(wrap=_WRAP, selector=_SELECTOR)
def test_generated_selectors_never_leak(stack: Stack, wrap: str, selector: str) -> None:
    assert_isolated(stack, "/api/v1/query", {"query": wrap.format(selector), "time": EVAL_AT})


# ---------------------------------------------------------------------------------------------
# The gateway in front: one authorized namespace, nothing else
# ---------------------------------------------------------------------------------------------


def _gateway_call(
    stack: Stack, query: str, *, body: bytes = b"", allowed: frozenset[str] = frozenset({A})
) -> tuple[int, str, list[str]]:
    """One request through the gateway (in process); which namespaces the authorizer was asked."""
    asked: list[str] = []

    async def authorize(_scope: Scope, namespace: str) -> tuple[int, str] | None:
        asked.append(namespace)
        return None if namespace in allowed else (403, f"may not read {namespace}")

    async def run() -> tuple[int, str]:
        async with httpx.AsyncClient() as upstream:
            app = MetricsGateway(stack.proxy, authorize, upstream)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
                headers = {"content-type": "application/x-www-form-urlencoded"} if body else {}
                method = "POST" if body else "GET"
                r = await http.request(
                    method, f"/api/v1/query?{query}", content=body, headers=headers
                )
                return r.status_code, r.text

    status, text = trio.run(run)
    return status, text, asked


def test_gateway_passes_one_authorized_namespace(stack: Stack) -> None:
    status, text, asked = _gateway_call(stack, f"query={FAMILIES[0]}&time={EVAL_AT}&namespace={A}")
    assert (status, asked) == (200, [A])
    assert f"{B}-qwen" not in text
    assert f"{A}-qwen" in text


@pytest.mark.parametrize(
    ("query", "body", "status", "line"),
    [
        (f"query=up&namespace={A}&namespace={B}", b"", 400, "exactly one"),
        ("query=up", b"", 400, "exactly one"),
        (f"namespace={A}", f"query=up&namespace={B}".encode(), 400, "not the form body"),
        ("query=up&namespace=Tenant_B", b"", 400, "RFC 1123"),
        (f"query=up&namespace={B}", b"", 403, f"may not read {B}"),
    ],
)
def test_gateway_refuses(stack: Stack, query: str, body: bytes, status: int, line: str) -> None:
    got, text, asked = _gateway_call(stack, query, body=body)
    assert (got, line in text) == (status, True), text
    assert asked in ([], [B])  # authorization is asked only for one valid name


def test_gateway_forwards_a_form_body(stack: Stack) -> None:
    body = f"query={FAMILIES[0]}&time={EVAL_AT}".encode()
    status, text, _ = _gateway_call(stack, f"namespace={A}", body=body)
    assert (status, f"{A}-qwen" in text) == (200, True)
    assert f"{B}-qwen" not in text


def test_gateway_has_only_the_enforced_paths() -> None:
    assert enforced("/api/v1/label/namespace/values")
    for path in ("/api/v1/status/config", "/federate", "/api/v1/admin/tsdb/delete_series",
                 "/api/v1/label/../values", "/api/v1/write"):  # fmt: skip
        assert not enforced(path), path
