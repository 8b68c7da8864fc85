"""The Pod webhooks send kube-apiserver only the Pods they must judge (issue #31, item 2).

The chart's file of ``matchConditions`` is what :mod:`gpustack_core.podmatch` derives from the
resource names (one place), both Pod hooks carry it and the namespace opt-out, and both stay
``Fail``. That the conditions select what they mean is shown by a real kube-apiserver
evaluating them (``tests/e2e/local/test_pod_webhook_outage_real.py``); here every name the
resource contract spells (``shared/reference/operator-half.md``, "Resource names") is checked
to stand in them, written out by hand.
"""

from __future__ import annotations

import json

import pytest
from chart_helm import CHART, KIND_VALUES, find, needs_helm, render

from gpustack_core import contract, webhooks
from gpustack_core.modes import Manufacturer
from gpustack_core.podmatch import ASKS, NOT_OPTED_OUT, match_conditions, match_conditions_json

FILE = CHART / "admission" / "pod-match-conditions.json"
KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
ROWS = CHART / "admission" / "webhooks.json"


def test_the_charts_webhook_rows_are_cores() -> None:
    """The chart's webhooks range over a file generated from :mod:`gpustack_core.webhooks`."""
    assert ROWS.read_text() == webhooks.chart_json(), (
        "regenerate: .venv/bin/python -c 'from gpustack_core.webhooks import chart_json as m;"
        f' open("clusters/chart/admission/{ROWS.name}", "w").write(m())\''
    )


def test_the_charts_file_is_what_core_derives() -> None:
    assert FILE.read_text() == match_conditions_json(), (
        "regenerate: .venv/bin/python -c 'from gpustack_core.podmatch import "
        f'match_conditions_json as m; open("{FILE.relative_to(CHART.parents[1])}", "w")'
        ".write(m())'"
    )


def test_every_base_visibility_slice_and_partition_is_named() -> None:
    conditions = {c["name"]: c["expression"] for c in json.loads(FILE.read_text())}
    asks, opted = conditions[ASKS], conditions[NOT_OPTED_OUT]
    # The contract's bases, by hand; one per manufacturer the project knows.
    bases = {
        "nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu", "hygon": "hygon.com/dcu",
        "ascend": "huawei.com/npu", "thead": "alibabacloud.com/ppu",
        "cambricon": "cambricon.com/mlu", "iluvatar": "iluvatar.com/gpu",
        "metax": "metax-tech.com/gpu", "mthreads": "mthreads.com/gpu",
    }  # fmt: skip
    assert set(bases) == {m.value for m in Manufacturer}
    for manufacturer, base in bases.items():
        assert f"'{base}'" in asks
        assert f"'device.gpustack.ai/{manufacturer}.visibility'" in asks
        assert f"'{base}.sliced'" in opted
        assert f"'{base}.partitioned'" in opted
    assert "k.startsWith(b + '.')" in asks  # every suffix of a base: .shared, .sliced.units, …
    assert f"object.metadata.labels['{contract.POD_WEBHOOK_LABEL}'] == 'disabled'" in opted
    for expression in (asks, opted):
        # Both lists, limits and requests, each read only where present (no evaluation error,
        # which Fail would turn into a refusal).
        assert "has(object.spec.initContainers) ? object.spec.initContainers : []" in expression
        assert "has(c.resources.requests) ? c.resources.requests : {}" in expression


@needs_helm
@pytest.mark.parametrize("files", [(), (KIND_VALUES,)], ids=["defaults", "kind-simulation"])
def test_both_pod_hooks_send_only_accelerator_pods_and_stay_fail(
    files: tuple[object, ...],
) -> None:
    objects = render(files=files)  # type: ignore[arg-type]
    for kind in KINDS:
        [hook] = [
            h
            for h in find(objects, kind, "gpustack-operator-worker")["webhooks"]
            if h["name"].startswith("pods.")
        ]
        assert hook["failurePolicy"] == "Fail"
        assert hook["matchConditions"] == match_conditions()
        assert {
            "key": contract.POD_WEBHOOK_LABEL,
            "operator": "NotIn",
            "values": [contract.POD_WEBHOOK_DISABLED],
        } in hook["namespaceSelector"]["matchExpressions"]
        assert "objectSelector" not in hook  # the Pod's label is read by a condition instead


@needs_helm
def test_the_instance_hooks_get_no_pod_conditions() -> None:
    objects = render()
    for kind in KINDS:
        for hook in find(objects, kind, "gpustack-operator-worker")["webhooks"]:
            if not hook["name"].startswith("pods."):
                assert "matchConditions" not in hook, hook["name"]
