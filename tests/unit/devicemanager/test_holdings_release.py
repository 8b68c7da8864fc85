"""A terminating Pod's grants end when the kubelet frees its devices, not when the watch says.

Found on the real control plane (``simulator up --control-plane real``): an Instance stopped and
started again got a new Pod under the same name; the kubelet, having dropped the old Pod's
assignment, gave the new one the same card — and the Device Manager refused it, "already held
Exclusive by team-ops/ops-life", because its own record of the old grant outlived the kubelet's.
"""

from __future__ import annotations

from typing import Any

from gpustack_core.allocation import AllocatedAccelerator
from gpustack_core.modes import AllocationMode
from gpustack_core.pods import pod_from_object
from gpustack_devicemanager.deviceplugin.holdings import Ledger

CARD = AllocatedAccelerator(id="GPU-a", mode=AllocationMode.EXCLUSIVE, index=6, allocated=1600000)


def old_pod(*, deleting: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "ops-life", "namespace": "team-ops", "uid": "old-uid",
                            "creationTimestamp": "2026-12-03T13:00:00Z"}  # fmt: skip
    if deleting:
        meta["deletionTimestamp"] = "2026-12-03T14:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": "n", "containers": [{"name": "main"}]},
            "status": {"phase": "Running"}}  # fmt: skip


def ledger_with_grant() -> Ledger:
    ledger = Ledger("nvidia")
    ledger.record("old-uid", "team-ops/ops-life", "main", AllocationMode.EXCLUSIVE, (CARD,))
    return ledger


def test_a_deleting_pod_the_kubelet_released_holds_nothing() -> None:
    ledger = ledger_with_grant()
    ledger.assigned = {}  # PodResources: no container of team-ops/ops-life any more
    assert ledger.pod(pod_from_object(old_pod(deleting=True)), [], {}) == []


def test_a_deleting_pod_whose_containers_still_run_keeps_its_card() -> None:
    ledger = ledger_with_grant()
    ledger.assigned = {("team-ops", "ops-life", "main"): frozenset({"g:GPU-a:0000"})}
    held = ledger.pod(pod_from_object(old_pod(deleting=True)), [], {})
    assert [h.accelerator.id for h in held] == ["GPU-a"]


def test_a_running_pod_keeps_its_own_grant_whatever_podresources_says() -> None:
    ledger = ledger_with_grant()
    ledger.assigned = {}  # between Allocate answering and the kubelet recording it
    held = ledger.pod(pod_from_object(old_pod(deleting=False)), [], {})
    assert [h.accelerator.id for h in held] == ["GPU-a"]


def test_without_a_podresources_answer_nothing_is_released() -> None:
    ledger = ledger_with_grant()  # assigned is None: never answered
    held = ledger.pod(pod_from_object(old_pod(deleting=True)), [], {})
    assert [h.accelerator.id for h in held] == ["GPU-a"]
