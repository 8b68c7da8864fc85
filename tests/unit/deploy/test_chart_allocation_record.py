"""The chart's allocation-record policy: only the Device Manager writes a Pod's grant annotation.

What the policy decides is proven on a real kube-apiserver
(``tests/e2e/local/test_allocation_record_policy_real.py``); here, that the chart renders it
against the contract's annotation and this release's Device Manager account, by default, and
leaves it out when asked.
"""

from __future__ import annotations

import pytest
from chart_helm import HELM, NAMESPACE, WHY, find, render

from gpustack_core import contract

pytestmark = pytest.mark.skipif(HELM is None, reason=WHY)

DM = "gpustack-operator-device-manager"
NAME = f"{DM}-allocation-record"


def test_the_policy_names_the_contracts_annotation() -> None:
    """The chart writes the annotation out (a template cannot import it): held equal here."""
    spec = find(render(), "ValidatingAdmissionPolicy", NAME)["spec"]
    quoted = f"'{contract.ALLOCATION_ANNOTATION}'"
    expressions = [v["expression"] for v in spec["variables"] + spec["validations"]]
    assert quoted in spec["variables"][0]["expression"]
    assert quoted in spec["variables"][1]["expression"]
    assert all("device.gpustack.ai/" not in e or quoted in e for e in expressions)
    for validation in spec["validations"]:
        assert contract.ALLOCATION_ANNOTATION in validation["message"]


def test_everyone_but_the_device_manager_is_judged_on_pod_create_and_update() -> None:
    spec = find(render(), "ValidatingAdmissionPolicy", NAME)["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["pods"],  # not pods/status nor any other subresource
        }
    ]
    assert spec["matchConditions"] == [
        {
            "name": "not-the-device-manager",
            "expression": f"request.userInfo.username != 'system:serviceaccount:{NAMESPACE}:{DM}'",
        }
    ]
    assert [v["name"] for v in spec["variables"]] == ["recorded", "wasRecorded"]
    # Absent metadata.annotations is tested with has() before any lookup; oldObject is null
    # on CREATE.
    assert spec["variables"][0]["expression"].startswith("has(object.metadata.annotations) && ")
    assert spec["variables"][1]["expression"].startswith(
        "oldObject != null && has(oldObject.metadata.annotations) && "
    )
    assert {v["reason"] for v in spec["validations"]} == {"Forbidden"}
    binding = find(render(), "ValidatingAdmissionPolicyBinding", NAME)
    assert binding["spec"] == {"policyName": NAME, "validationActions": ["Deny"]}


def test_the_account_follows_the_release_namespace() -> None:
    objects = render(extra=("--namespace", "gpu-ops"))
    spec = find(objects, "ValidatingAdmissionPolicy", NAME)["spec"]
    assert spec["matchConditions"][0]["expression"] == (
        f"request.userInfo.username != 'system:serviceaccount:gpu-ops:{DM}'"
    )


@pytest.mark.parametrize(
    "values",
    [
        {"deviceManager": {"devicePlugin": {"allocationRecordPolicy": False}}},
        {"deviceManager": {"devicePlugin": {"enabled": False}}},  # no plugin, no annotation
    ],
)
def test_left_out_when_asked(values: dict[str, object]) -> None:
    names = {(o["kind"], o["metadata"]["name"]) for o in render(values)}
    assert ("ValidatingAdmissionPolicy", NAME) not in names
    assert ("ValidatingAdmissionPolicyBinding", NAME) not in names


def test_the_own_node_policy_is_independent_of_it() -> None:
    names = {
        (o["kind"], o["metadata"]["name"])
        for o in render({"deviceManager": {"devicePlugin": {"ownNodePolicy": False}}})
    }
    assert ("ValidatingAdmissionPolicy", NAME) in names
    assert ("ValidatingAdmissionPolicy", f"{DM}-own-node") not in names
