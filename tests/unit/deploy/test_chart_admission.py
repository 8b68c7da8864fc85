"""The chart's admission webhooks (Pods, Instances): both configurations, their TLS, their switch.

kube-apiserver calls a webhook only over a certificate it verifies, so each TLS mode must
give the configurations a CA: the chart-issued one by default (one CA across the Secret, both
webhooks and the APIService), ``worker.tls.caBundle`` with a given Secret, or cert-manager's
injection. The certificate itself is checked with ``cryptography``: issued by that CA, for the
Service name kube-apiserver dials.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from chart_helm import KIND_VALUES, NAMESPACE, find, needs_helm, of_kind, render, render_fails
from cryptography import x509

from gpustack_core import contract, webhooks
from gpustack_core.podmatch import match_conditions
from gpustack_simulator.up import webhook_configurations
from gpustack_worker.admission import MUTATE_PATH, VALIDATE_PATH

pytestmark = needs_helm

WORKER = "gpustack-operator-worker"
KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def pod_hooks(objects: list[dict[str, Any]], prefix: str = "pods.") -> dict[str, dict[str, Any]]:
    """Kind → its one webhook whose name starts with ``prefix`` (the Pod one by default)."""
    out = {}
    for kind in KINDS:
        [hook] = [
            h for h in find(objects, kind, WORKER)["webhooks"] if h["name"].startswith(prefix)
        ]
        out[kind] = hook
    return out


@pytest.mark.parametrize("files", [(), (KIND_VALUES,)], ids=["defaults", "kind-simulation"])
def test_both_webhooks_select_pod_creates_outside_the_system_namespaces(
    files: tuple[Any, ...],
) -> None:
    hooks = pod_hooks(render(files=files))
    paths = {
        "MutatingWebhookConfiguration": MUTATE_PATH,
        "ValidatingWebhookConfiguration": VALIDATE_PATH,
    }
    for kind, hook in hooks.items():
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["sideEffects"] == "None"
        assert hook["failurePolicy"] == "Fail"
        assert hook["timeoutSeconds"] == 10
        assert hook["clientConfig"]["service"] == {
            "name": WORKER,
            "namespace": NAMESPACE,
            "path": paths[kind],
            "port": 443,
        }
        assert hook["rules"] == [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ]
        assert hook["namespaceSelector"] == {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": [NAMESPACE, "kube-system"],
                },
                {"key": "gpustack.ai/pod-webhook", "operator": "NotIn", "values": ["disabled"]},
            ]
        }
    assert hooks["MutatingWebhookConfiguration"]["reinvocationPolicy"] == "IfNeeded"
    assert hooks["MutatingWebhookConfiguration"]["name"] == "pods.mutate.worker.gpustack.ai"
    assert hooks["ValidatingWebhookConfiguration"]["name"] == "pods.validate.worker.gpustack.ai"


def test_another_release_namespace_is_excluded_beside_the_default_one() -> None:
    objects = render(extra=("--namespace", "gpu-ops"))
    for hook in pod_hooks(objects).values():
        assert hook["clientConfig"]["service"]["namespace"] == "gpu-ops"
        expression, _ = hook["namespaceSelector"]["matchExpressions"]
        assert expression["values"] == ["gpu-ops", "gpustack-system", "kube-system"]


def test_the_default_certificate_is_issued_by_the_chart_and_one_ca_verifies_it() -> None:
    objects = render()
    secret = find(objects, "Secret", f"{WORKER}-generated-tls")
    assert secret["type"] == "kubernetes.io/tls"
    ca_b64 = secret["data"]["ca.crt"]
    for hook in pod_hooks(objects).values():
        assert hook["clientConfig"]["caBundle"] == ca_b64
    apiservice = find(objects, "APIService", "v1.worker.gpustack.ai")["spec"]
    assert apiservice["caBundle"] == ca_b64
    assert "insecureSkipTLSVerify" not in apiservice
    ca = x509.load_pem_x509_certificate(base64.b64decode(ca_b64))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{WORKER}.{NAMESPACE}.svc" in names.get_values_for_type(x509.DNSName)
    deployment = find(objects, "Deployment", WORKER)
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == secret["metadata"]["name"]


def test_a_given_secret_and_ca_bundle_serve_the_webhooks() -> None:
    objects = render({"worker": {"tls": {"secretName": "worker-tls", "caBundle": "Q0E="}}})
    assert of_kind(objects, "Secret") == []
    for hook in pod_hooks(objects).values():
        assert hook["clientConfig"]["caBundle"] == "Q0E="


def test_a_given_secret_without_its_ca_is_refused() -> None:
    stderr = render_fails({"worker": {"tls": {"secretName": "worker-tls"}}})
    assert "worker.admissionWebhook needs a CA that verifies the worker" in stderr


def test_cert_manager_injects_the_ca_into_both_webhooks() -> None:
    objects = render({"worker": {"tls": {"certManager": {"enabled": True}}}})
    assert of_kind(objects, "Secret") == []
    for kind in KINDS:
        configuration = find(objects, kind, WORKER)
        assert configuration["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": f"{NAMESPACE}/{WORKER}"
        }
        for hook in configuration["webhooks"]:
            assert "caBundle" not in hook["clientConfig"]


def test_disabled_renders_no_webhook_no_issued_certificate_and_no_devices_grant() -> None:
    # Node capacity, the Instance controller (steering by the ledgers), the InstanceType chain
    # and the node-devices check read the Devices too, each by a grant of its own: off here,
    # so the only Devices grant left would be the webhook's.
    off = {"enabled": False}
    objects = render({"worker": {"admissionWebhook": off, "nodeCapacity": False,
                                 "instanceController": off, "instanceTypes": off,
                                 "nodeDevicesCheck": off}})  # fmt: skip
    for kind in KINDS:
        assert of_kind(objects, kind) == []
    assert of_kind(objects, "Secret") == []
    for role in of_kind(objects, "ClusterRole"):
        if role["metadata"]["name"].startswith(WORKER):
            assert not any("devices" in rule["resources"] for rule in role["rules"])


def test_failure_policy_is_a_value_for_pods_and_fail_for_instances() -> None:
    """Instances keep Fail: with Ignore, a worker outage would let any escape through."""
    objects = render({"worker": {"admissionWebhook": {"failurePolicy": "Ignore"}}})
    for hook in pod_hooks(objects).values():
        assert hook["failurePolicy"] == "Ignore"
    for prefix in ("instances.", "instancetypes."):
        for hook in pod_hooks(objects, prefix).values():
            assert hook["failurePolicy"] == "Fail"
    render_fails({"worker": {"admissionWebhook": {"failurePolicy": "Sometimes"}}})


@pytest.mark.parametrize("files", [(), (KIND_VALUES,)], ids=["defaults", "kind-simulation"])
def test_the_instance_webhooks_judge_every_instance_write(files: tuple[Any, ...]) -> None:
    hooks = pod_hooks(render(files=files), "instances.")
    mutate = hooks["MutatingWebhookConfiguration"]
    validate = hooks["ValidatingWebhookConfiguration"]
    assert mutate["name"] == "instances.mutate.worker.gpustack.ai"
    assert validate["name"] == "instances.validate.worker.gpustack.ai"
    assert mutate["clientConfig"]["service"]["path"] == contract.INSTANCE_MUTATE_PATH
    assert validate["clientConfig"]["service"]["path"] == contract.INSTANCE_VALIDATE_PATH
    rule = {"apiGroups": ["worker.gpustack.ai"], "apiVersions": ["v1alpha1"],
            "resources": ["instances"], "scope": "Namespaced"}  # fmt: skip
    assert mutate["rules"] == [{**rule, "operations": ["CREATE"]}]  # defaults at creation only
    assert validate["rules"] == [{**rule, "operations": ["CREATE", "UPDATE"]}]
    for hook in (mutate, validate):
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["sideEffects"] == "None"
        assert hook["failurePolicy"] == "Fail"
        assert "namespaceSelector" not in hook  # every namespace: a gate has no way around it
    assert mutate["reinvocationPolicy"] == "Never"


@pytest.mark.parametrize("files", [(), (KIND_VALUES,)], ids=["defaults", "kind-simulation"])
def test_the_instancetype_webhooks_judge_every_instancetype_write(files: tuple[Any, ...]) -> None:
    """Both phases on CREATE and UPDATE: defaults at creation, labels and carried fields on an
    update; immutability can only be judged on an update."""
    hooks = pod_hooks(render(files=files), "instancetypes.")
    mutate = hooks["MutatingWebhookConfiguration"]
    validate = hooks["ValidatingWebhookConfiguration"]
    assert mutate["name"] == "instancetypes.mutate.worker.gpustack.ai"
    assert validate["name"] == "instancetypes.validate.worker.gpustack.ai"
    assert mutate["clientConfig"]["service"]["path"] == (
        "/mutate-worker-gpustack-ai-v1alpha1-instancetype"
    )
    assert validate["clientConfig"]["service"]["path"] == (
        "/validate-worker-gpustack-ai-v1alpha1-instancetype"
    )
    rule = {"apiGroups": ["worker.gpustack.ai"], "apiVersions": ["v1alpha1"],
            "operations": ["CREATE", "UPDATE"], "resources": ["instancetypes"],
            "scope": "Cluster"}  # fmt: skip
    for hook in (mutate, validate):
        assert hook["rules"] == [rule]
        assert hook["sideEffects"] == "None"
        assert hook["failurePolicy"] == "Fail"
        assert "namespaceSelector" not in hook
    assert mutate["reinvocationPolicy"] == "Never"


@pytest.mark.parametrize("tenant_metrics", [False, True], ids=["defaults", "multiTenantMetrics"])
def test_the_chart_renders_the_rows_pointed_at_its_service(tenant_metrics: bool) -> None:
    """What the chart renders is :func:`webhooks.configurations` through the worker's Service,
    the MetricAccess hook with its part only; the hook names, written out, are the chart's."""
    values: dict[str, Any] = (
        {"multiTenantMetrics": {"enabled": True, "prometheusURL": "http://p.monitoring:9090"}}
        if tenant_metrics
        else {}
    )
    rendered = render(values)
    validating = find(rendered, "ValidatingWebhookConfiguration", WORKER)["webhooks"]
    bundle = validating[0]["clientConfig"]["caBundle"]

    def service(hook: webhooks.Webhook) -> dict[str, Any]:
        address = {"name": WORKER, "namespace": NAMESPACE, "path": hook.path, "port": 443}
        return {"service": address, "caBundle": bundle}

    parts = [webhooks.MULTI_TENANT_METRICS] if tenant_metrics else []
    for expected in webhooks.configurations(
        service, match_conditions=match_conditions(), release_namespace=NAMESPACE, parts=parts
    ):
        assert find(rendered, str(expected["kind"]), WORKER)["webhooks"] == expected["webhooks"]
    assert [h["name"] for h in validating] == [
        "pods.validate.worker.gpustack.ai",
        "instances.validate.worker.gpustack.ai",
        "instancetypes.validate.worker.gpustack.ai",
        *(["metricaccesses.validate.worker.gpustack.ai"] if tenant_metrics else []),
    ]


def test_a_release_elsewhere_excludes_its_own_namespace_first() -> None:
    hook = pod_hooks(render(extra=("--namespace", "gpu-ops")))["MutatingWebhookConfiguration"]
    [names, _] = hook["namespaceSelector"]["matchExpressions"]
    assert names["values"] == ["gpu-ops", "gpustack-system", "kube-system"]


def test_simulator_up_registers_what_the_chart_renders() -> None:
    """``simulator up`` names the worker by URL; every other field is the chart's."""
    rendered = render()
    for registered in webhook_configurations("https://127.0.0.1:1", b"CA"):
        chart = find(rendered, registered["kind"], WORKER)["webhooks"]
        assert [h["name"] for h in registered["webhooks"]] == [h["name"] for h in chart]
        for ours, theirs in zip(registered["webhooks"], chart, strict=True):
            path = theirs["clientConfig"]["service"]["path"]
            assert ours["clientConfig"]["url"] == f"https://127.0.0.1:1{path}"
            # Every field but the address, matchPolicy included (it once went missing here).
            assert {k: v for k, v in ours.items() if k != "clientConfig"} == {
                k: v for k, v in theirs.items() if k != "clientConfig"
            }


def test_the_webhooks_read_devices_nodes_and_types_and_nothing_else() -> None:
    objects = render()
    role = find(objects, "ClusterRole", f"{WORKER}:admission")
    assert role["rules"] == [
        {"apiGroups": ["worker.gpustack.ai"], "resources": ["devices"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
        {"apiGroups": ["worker.gpustack.ai"], "resources": ["instancetypes"], "verbs": ["get"]},
    ]
    binding = find(objects, "ClusterRoleBinding", f"{WORKER}:admission")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": f"{WORKER}:admission",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": WORKER, "namespace": NAMESPACE}
    ]
