"""The chart's per-tenant metrics part is opt-in: nothing by default, the CRD and roles when on."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from chart_helm import HELM, WHY, find, render, render_fails

from gpustack_core import contract

pytestmark = pytest.mark.skipif(HELM is None, reason=WHY)

REPO = Path(__file__).resolve().parents[3]
CRD = "metricaccesses.observability.gpustack.ai"


def test_off_by_default() -> None:
    assert not [o for o in render() if "metricaccess" in str(o["metadata"]["name"])]


def test_on_installs_the_crd_as_committed_and_the_tenant_roles() -> None:
    objects = render({"multiTenantMetrics": {"enabled": True}})
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
        render({"multiTenantMetrics": {"enabled": True}}),
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
        "multiTenantMetrics": {"enabled": True},
        "worker": {"admissionWebhook": {"enabled": False}},
    }
    assert "worker.admissionWebhook.enabled" in render_fails(values)
