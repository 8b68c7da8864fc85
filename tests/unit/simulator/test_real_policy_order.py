"""``simulator up --control-plane real`` applies the allocation-record policy after the scenario.

A scenario's running Pods are created by the administrator with the grants they already hold
(the allocation annotation); the chart's allocation-record policy refuses that to anyone but the
Device Manager. So the bootstrap holds exactly that policy and its binding back until the
scenario's Pods exist, and applies everything else (the own-node policy included) up front.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpustack_core import contract
from gpustack_simulator.controlplane import bootstrap

REPO = Path(__file__).resolve().parents[3]
CACHED = REPO / ".tools" / "helm" / "helm"
HELM = str(CACHED) if CACHED.is_file() else shutil.which("helm")
DM = "gpustack-operator-device-manager"


@pytest.mark.skipif(HELM is None, reason="helm renders the chart: run `just tools-helm`")
def test_only_the_allocation_record_policy_waits_for_the_scenario() -> None:
    assert HELM is not None
    rendered = bootstrap.render_chart(
        Path(HELM), REPO / "clusters" / "chart", contract.SYSTEM_NAMESPACE
    )
    now, later = bootstrap.after_scenario(rendered)
    assert sorted((o["kind"], o["metadata"]["name"]) for o in later) == [
        ("ValidatingAdmissionPolicy", f"{DM}-allocation-record"),
        ("ValidatingAdmissionPolicyBinding", f"{DM}-allocation-record"),
    ]
    assert len(now) + len(later) == len(rendered)
    applied_now = {(o["kind"], o["metadata"]["name"]) for o in now}
    assert ("ValidatingAdmissionPolicy", f"{DM}-own-node") in applied_now
    assert ("ValidatingAdmissionPolicyBinding", f"{DM}-own-node") in applied_now


def test_nothing_else_is_held_back() -> None:
    objects = [
        {"kind": "ClusterRole", "metadata": {"name": f"{DM}-allocation-record"}},
        {"kind": "ValidatingAdmissionPolicy", "metadata": {"name": "someone-elses"}},
    ]
    now, later = bootstrap.after_scenario(objects)
    assert (now, later) == (objects, [])
