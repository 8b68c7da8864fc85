"""The chart's per-tenant metrics part is opt-in: nothing by default; when on, the CRD and roles,
the webhook, and the metrics-gateway Deployment (the gateway, prom-label-proxy on loopback, the
MetricAccess controller) with exactly the permissions its code calls for, and per-tenant Grafana
datasources through the gateway (docs/multi-tenant-metrics.md, "Install")."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helm import HELM, NAMESPACE, WHY, find, render, render_fails
from cryptography import x509

from gpustack_core import contract
from gpustack_simulator.controlplane import promlabelproxy
from gpustack_worker import metricsdaemon

pytestmark = pytest.mark.skipif(HELM is None, reason=WHY)

REPO = Path(__file__).resolve().parents[3]
CRD = "metricaccesses.observability.gpustack.ai"
PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"
ON: dict[str, Any] = {"multiTenantMetrics": {"enabled": True, "prometheusURL": PROMETHEUS}}
GATEWAY = "gpustack-operator-metrics-gateway"
HOST = f"{GATEWAY}.{NAMESPACE}.svc"


def on(**extra: Any) -> dict[str, Any]:
    return {"multiTenantMetrics": {**ON["multiTenantMetrics"], **extra}}


def test_off_by_default() -> None:
    names = [str(o["metadata"]["name"]) for o in render()]
    assert not [n for n in names if "metricaccess" in n or "metrics-gateway" in n]


def test_on_installs_the_crd_as_committed_and_the_tenant_roles() -> None:
    objects = render(ON)
    committed = yaml.safe_load((REPO / "clusters" / "crds" / f"{CRD}.yaml").read_text())
    assert find(objects, "CustomResourceDefinition", CRD) == committed
    edit = find(objects, "ClusterRole", "gpustack-operator:metricaccess-edit")
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert edit["rules"] == [
        {
            "apiGroups": ["observability.gpustack.ai"],
            "resources": ["metricaccesses"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        }
    ]
    view = find(objects, "ClusterRole", "gpustack-operator:metricaccess-view")
    assert "metricaccesses/status" in view["rules"][0]["resources"]
    assert "create" not in view["rules"][0]["verbs"]


def test_the_chart_copy_is_the_committed_crd() -> None:
    chart = REPO / "clusters" / "chart" / "optional-crds" / f"{CRD}.yaml"
    assert chart.read_bytes() == (REPO / "clusters" / "crds" / f"{CRD}.yaml").read_bytes()


def test_on_registers_the_metricaccess_webhook_always_fail() -> None:
    hooks = find(
        render(ON),
        "ValidatingWebhookConfiguration",
        "gpustack-operator-worker",
    )["webhooks"]
    [hook] = [h for h in hooks if h["name"] == "metricaccesses.validate.worker.gpustack.ai"]
    assert hook["failurePolicy"] == "Fail"
    assert hook["clientConfig"]["service"]["path"] == contract.METRIC_ACCESS_VALIDATE_PATH
    assert hook["rules"] == [
        {
            "apiGroups": ["observability.gpustack.ai"],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["metricaccesses"],
            "scope": "Namespaced",
        }
    ]
    off = find(render(), "ValidatingWebhookConfiguration", "gpustack-operator-worker")
    assert not [h for h in off["webhooks"] if h["name"].startswith("metricaccesses.")]


def test_on_without_the_worker_webhooks_fails_naming_why() -> None:
    values = {
        **ON,
        "worker": {"admissionWebhook": {"enabled": False}},
    }
    assert "worker.admissionWebhook.enabled" in render_fails(values)


# -- the metrics-gateway Deployment ------------------------------------------------------------


def _containers(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    pod = find(objects, "Deployment", GATEWAY)["spec"]["template"]["spec"]
    return {c["name"]: c for c in pod["containers"]}


def test_on_without_the_prometheus_url_fails_naming_it() -> None:
    assert "prometheusURL" in render_fails({"multiTenantMetrics": {"enabled": True}})


def test_the_gateway_runs_the_project_image_forwarding_to_the_loopback_sidecar() -> None:
    objects = render(ON)
    deployment = find(objects, "Deployment", GATEWAY)
    assert deployment["spec"]["replicas"] == 2
    containers = _containers(objects)
    assert set(containers) == {"metrics-gateway", "prom-label-proxy"}
    gateway = containers["metrics-gateway"]
    worker = find(objects, "Deployment", "gpustack-operator-worker")
    assert gateway["image"] == worker["spec"]["template"]["spec"]["containers"][0]["image"]
    assert gateway["args"] == [
        "metrics-gateway",
        "--secure-port=8443",
        "--cert-dir=/etc/gpustack-operator/tls",
        f"--label-proxy-url={metricsdaemon.LABEL_PROXY_URL}",
        "--log-level=info",
    ]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in gateway["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    assert gateway["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]
    assert gateway["securityContext"]["readOnlyRootFilesystem"] is True
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_the_sidecar_runs_the_tests_launcher_flags_on_loopback() -> None:
    """One flag set: what the isolation tests prove on real prom-label-proxy is what ships."""
    sidecar = _containers(render(ON))["prom-label-proxy"]
    assert sidecar["image"] == "quay.io/prometheuscommunity/prom-label-proxy:v0.11.1"
    port = int(metricsdaemon.LABEL_PROXY_URL.rsplit(":", 1)[1])
    assert sidecar["args"] == promlabelproxy.command(Path("x"), PROMETHEUS, port)[1:]
    assert "-insecure-listen-address=127.0.0.1:9091" in sidecar["args"]
    assert "ports" not in sidecar  # nothing outside the Pod is offered it


def test_switches_and_unisolated_delivery() -> None:
    args = _containers(render(on(unisolatedDelivery=True, controller=False)))["metrics-gateway"]
    assert f"--cluster-prometheus-url={PROMETHEUS}" in args["args"]
    assert "--no-metricaccess-controller" in args["args"]
    assert "--no-gateway" not in args["args"]
    objects = render(on(gateway=False))
    gateway = _containers(objects)["metrics-gateway"]
    assert "--no-gateway" in gateway["args"]
    assert "ports" not in gateway
    assert not [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == GATEWAY]
    assert "nothing to run" in render_fails(on(gateway=False, controller=False))


def test_the_service_reaches_only_the_gateway_pods() -> None:
    objects = render(ON)
    service = find(objects, "Service", GATEWAY)
    assert service["spec"]["ports"] == [
        {"name": "https", "protocol": "TCP", "port": 443, "targetPort": "https"}
    ]
    selector = service["spec"]["selector"]
    for deployment in (o for o in objects if o["kind"] == "Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        selected = all(labels.get(k) == v for k, v in selector.items())
        assert selected == (deployment["metadata"]["name"] == GATEWAY)


def _certificate(objects: list[dict[str, Any]]) -> tuple[x509.Certificate, x509.Certificate]:
    secret = find(objects, "Secret", f"{GATEWAY}-generated-tls")
    assert secret["type"] == "kubernetes.io/tls"
    pod = find(objects, "Deployment", GATEWAY)["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]

    def load(key: str) -> x509.Certificate:
        return x509.load_pem_x509_certificate(base64.b64decode(secret["data"][key]))

    return load("tls.crt"), load("ca.crt")


def test_the_chart_issued_certificate_names_the_service_and_is_signed_by_its_ca() -> None:
    cert, ca = _certificate(render(ON))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert HOST in names.get_values_for_type(x509.DNSName)
    cert.verify_directly_issued_by(ca)


# -- its permissions: what metricsdaemon's code calls, nothing more -----------------------------


def _bound(objects: list[dict[str, Any]]) -> dict[tuple[str, str], str | None]:
    """Each role bound to the gateway's account: (kind, name) -> the binding's namespace."""
    found: dict[tuple[str, str], str | None] = {}
    for o in objects:
        if o["kind"] not in {"RoleBinding", "ClusterRoleBinding"}:
            continue
        for subject in o.get("subjects") or []:
            if subject["kind"] == "ServiceAccount" and subject["name"] == GATEWAY:
                assert subject["namespace"] == NAMESPACE
                ref = o["roleRef"]
                found[(ref["kind"], ref["name"])] = o["metadata"].get("namespace")
    return found


def test_the_gateway_account_holds_exactly_reviews_metricaccesses_and_its_lease() -> None:
    objects = render(ON)
    assert _bound(objects) == {
        ("ClusterRole", "system:auth-delegator"): None,
        ("ClusterRole", GATEWAY): None,
        ("Role", f"{GATEWAY}:leader-election"): NAMESPACE,
    }
    assert find(objects, "ClusterRole", GATEWAY)["rules"] == [
        {
            "apiGroups": ["observability.gpustack.ai"],
            "resources": ["metricaccesses"],
            "verbs": ["list", "watch"],
        },
        {
            "apiGroups": ["observability.gpustack.ai"],
            "resources": ["metricaccesses/status"],
            "verbs": ["patch"],
        },
    ]
    assert find(objects, "Role", f"{GATEWAY}:leader-election")["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [metricsdaemon.LEASE],
            "verbs": ["get", "update"],
        },
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    ]
    pod = find(objects, "Deployment", GATEWAY)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == GATEWAY


def test_each_part_alone_holds_only_its_own_permissions() -> None:
    assert _bound(render(on(controller=False))) == {("ClusterRole", "system:auth-delegator"): None}
    assert set(_bound(render(on(gateway=False)))) == {
        ("ClusterRole", GATEWAY),
        ("Role", f"{GATEWAY}:leader-election"),
    }


# -- Grafana datasources through the gateway ---------------------------------------------------

TENANT = {"namespace": "gpu-team", "tokenEnv": "GPU_TEAM_METRICS_TOKEN"}


def _datasource(objects: list[dict[str, Any]], namespace: str) -> tuple[dict[str, Any], Any]:
    config = find(objects, "ConfigMap", f"{GATEWAY}-datasource-gpu-team")
    assert config["metadata"]["namespace"] == namespace
    assert config["metadata"]["labels"]["grafana_datasource"] == "1"
    [text] = config["data"].values()
    [source] = yaml.safe_load(text)["datasources"]
    return config, source


def test_a_tenant_datasource_queries_the_gateway_for_its_namespace_with_its_token() -> None:
    objects = render(on(grafanaDatasources={"tenants": [TENANT]}))
    _, source = _datasource(objects, "gpu-team")
    assert source["type"] == "prometheus"
    assert source["url"] == f"https://{HOST}"
    # GET: the parameter stays in the URL (the gateway refuses it in a form body).
    assert source["jsonData"]["httpMethod"] == "GET"
    assert source["jsonData"]["customQueryParameters"] == "namespace=gpu-team"
    assert source["jsonData"]["httpHeaderName1"] == "Authorization"
    assert source["secureJsonData"]["httpHeaderValue1"] == "Bearer ${GPU_TEAM_METRICS_TOKEN}"
    assert source["jsonData"]["tlsAuthWithCACert"] is True
    assert "tlsSkipVerify" not in source["jsonData"]
    cert, _ = _certificate(objects)
    trusted = x509.load_pem_x509_certificate(source["secureJsonData"]["tlsCACert"].encode())
    cert.verify_directly_issued_by(trusted)  # Grafana verifies the gateway it sends a token to


def test_datasources_in_a_shared_grafana_namespace() -> None:
    values = on(grafanaDatasources={"tenants": [TENANT], "namespace": "monitoring"})
    _datasource(render(values), "monitoring")


def test_an_own_certificate_needs_its_ca_for_datasources() -> None:
    own = {"secretName": "gw-tls"}
    assert "caBundle" in render_fails(on(tls=own, grafanaDatasources={"tenants": [TENANT]}))
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n")
    values = on(tls={**own, "caBundle": ca.decode()}, grafanaDatasources={"tenants": [TENANT]})
    objects = render(values)
    _, source = _datasource(objects, "gpu-team")
    assert source["secureJsonData"]["tlsCACert"].startswith("-----BEGIN CERTIFICATE-----\nAA==")
    assert not [o for o in objects if o["metadata"]["name"] == f"{GATEWAY}-generated-tls"]
    pod = find(objects, "Deployment", GATEWAY)["spec"]["template"]["spec"]
    assert {"name": "tls", "secret": {"secretName": "gw-tls", "defaultMode": 288}} in pod["volumes"]


@pytest.mark.parametrize(
    "tenant",
    [
        {"namespace": "Gpu_Team", "tokenEnv": "T"},
        {"namespace": "gpu-team", "tokenEnv": "A B"},
        {"namespace": "gpu-team"},
    ],
)
def test_a_malformed_tenant_is_refused_by_the_schema(tenant: dict[str, str]) -> None:
    assert "grafanaDatasources" in render_fails(on(grafanaDatasources={"tenants": [tenant]}))
