"""The chart's APIService ``v1.gpustack.ai`` (the Setting resource) and who it grants nothing.

The reference serves its Settings as ``gpustack.ai/v1`` (``shared/reference/instancetypes.md``,
"Settings the chain reads"); here the worker serves them, so the APIService points at the same
Service as ``v1.worker.gpustack.ai`` and is verified the same way. Settings are operator-wide:
no role the chart renders may grant ``settings.gpustack.ai`` (docs/settings.md says to bind a
Role in the release namespace instead).
"""

from __future__ import annotations

from typing import Any

from chart_helm import KIND_VALUES, NAMESPACE, find, needs_helm, of_kind, render

pytestmark = needs_helm

WORKER = "gpustack-operator-worker"


def test_both_group_versions_point_at_the_workers_service_verified_alike() -> None:
    for values, files in (
        ({}, ()),  # the default: a chart-issued certificate the aggregator verifies
        ({"worker": {"admissionWebhook": {"enabled": False}}}, (KIND_VALUES,)),  # self-signed
        ({"worker": {"tls": {"secretName": "worker-tls", "caBundle": "Q0E="}}}, ()),
    ):
        objects = render(values, files=files)
        instances = find(objects, "APIService", "v1.worker.gpustack.ai")["spec"]
        settings = find(objects, "APIService", "v1.gpustack.ai")["spec"]
        assert settings["group"] == "gpustack.ai"
        assert settings["version"] == "v1"
        assert settings["service"] == {"name": WORKER, "namespace": NAMESPACE, "port": 443}
        unlike = {"group"}
        assert {k: v for k, v in settings.items() if k not in unlike} == {
            k: v for k, v in instances.items() if k not in unlike
        }
    assert len(of_kind(objects, "APIService")) == 2


def _grants_settings(rule: dict[str, Any]) -> bool:
    groups = rule.get("apiGroups") or []
    resources = rule.get("resources") or []
    return ("gpustack.ai" in groups or "*" in groups) and (
        "settings" in resources or "*" in resources
    )


def test_no_role_the_chart_renders_grants_the_settings() -> None:
    objects = render({})
    roles = of_kind(objects, "ClusterRole") + of_kind(objects, "Role")
    assert roles
    granting = [r["metadata"]["name"] for r in roles if any(map(_grants_settings, r["rules"]))]
    assert granting == []
