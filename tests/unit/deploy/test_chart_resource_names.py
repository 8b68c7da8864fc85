"""resourceNames: ours beside another device plugin for the same name (issue #31, item 1).

The chart row passes ``GPUSTACK_<MANUFACTURER>_ACCELERATABLE_RESOURCE_NAME`` (the reference's
variable) to every daemon, and the Pod webhooks' ``matchConditions`` follow the override: what
the chart renders equals what :mod:`gpustack_core.podmatch` derives for the renamed bases, so
a Pod asking for the new names is sent and one asking only for ``nvidia.com/gpu`` (the GPU
Operator's) is not.
"""

from __future__ import annotations

from typing import Any

import pytest
from chart_helm import CHART, find, needs_helm, of_kind, render, render_fails

from gpustack_core.modes import Manufacturer
from gpustack_core.podmatch import ASKS, default_bases_json, match_conditions
from gpustack_core.resources import ResourceNames

VARIABLE = "GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME"
MOVED = {"resourceNames": {"nvidia": "gpustack.ai/nvidia-gpu", "amd": "gpustack.ai/amd-gpu"}}


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def test_the_charts_default_bases_are_cores() -> None:
    path = CHART / "admission" / "resource-bases.json"
    assert path.read_text() == default_bases_json(), (
        "regenerate: .venv/bin/python -c 'from gpustack_core.podmatch import default_bases_json"
        f' as m; open("clusters/chart/admission/{path.name}", "w").write(m())\''
    )


@needs_helm
def test_every_daemon_gets_the_variable() -> None:
    objects = render(MOVED)
    daemonsets = of_kind(objects, "DaemonSet")
    assert {d["metadata"]["name"] for d in daemonsets} == {
        "gpustack-operator-device-manager-nvidia",
        "gpustack-operator-device-manager-amd",
    }
    worker = find(objects, "Deployment", "gpustack-operator-worker")
    for workload in [*daemonsets, worker]:
        [container] = workload["spec"]["template"]["spec"]["containers"]
        env = _env(container)
        assert env[VARIABLE] == "gpustack.ai/nvidia-gpu", workload["metadata"]["name"]
        assert env["GPUSTACK_AMD_ACCELERATABLE_RESOURCE_NAME"] == "gpustack.ai/amd-gpu"


@needs_helm
def test_no_variable_by_default() -> None:
    for workload in [*of_kind(render(), "DaemonSet"), *of_kind(render(), "Deployment")]:
        for container in workload["spec"]["template"]["spec"]["containers"]:
            assert not any(k.endswith("_RESOURCE_NAME") for k in _env(container))


@needs_helm
def test_the_pod_hooks_conditions_follow_the_override() -> None:
    moved = MOVED["resourceNames"]
    names = [ResourceNames.of(m.value, moved.get(m.value)) for m in Manufacturer]
    objects = render(MOVED)
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        [hook] = [
            h
            for h in find(objects, kind, "gpustack-operator-worker")["webhooks"]
            if h["name"].startswith("pods.")
        ]
        assert hook["matchConditions"] == match_conditions(names)
        asks = next(c["expression"] for c in hook["matchConditions"] if c["name"] == ASKS)
        assert "'gpustack.ai/nvidia-gpu'" in asks
        assert "'nvidia.com/gpu'" not in asks  # the GPU Operator's Pods are not sent
        assert "'hygon.com/dcu'" in asks  # the others keep their default


@needs_helm
def test_force_is_passed_only_when_set() -> None:
    def args(values: dict[str, Any]) -> list[str]:
        ds = find(render(values), "DaemonSet", "gpustack-operator-device-manager-nvidia")
        [container] = ds["spec"]["template"]["spec"]["containers"]
        return list(container["args"])

    assert "--force-device-plugin" not in args({})
    assert "--force-device-plugin" in args({"deviceManager": {"devicePlugin": {"force": True}}})


@needs_helm
@pytest.mark.parametrize(
    ("values", "said"),
    [
        ({"resourceNames": {"nvidia": "gpu"}}, "does not match pattern"),
        ({"resourceNames": {"nvidia": "x.com/gpu'"}}, "does not match pattern"),
        ({"resourceNames": {"intel": "x.com/gpu"}}, "invalid propertyName 'intel'"),
    ],
)
def test_a_bad_row_is_refused(values: dict[str, Any], said: str) -> None:
    assert said in render_fails(values)
