"""The grant confirmation withholds an unrecorded claim at once, and reports it only if it lasts.

The plugin writes its annotation inside ``Allocate``; the kubelet records the assignment once
``Allocate`` answered. So the first List after a grant may not hold it yet: the claim is
withheld, but a warning is due only when it stays unconfirmed across two fresh Lists.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from gpustack_core import contract
from gpustack_devicemanager.confirmation import PATIENCE, GrantConfirmation
from gpustack_devicemanager.podview import node_pod

ID = "h100:GPU-1:0000"


def pod() -> dict[str, object]:
    allocation = {"main": {"deviceIDs": [ID], "devices": {"groups": [{
        "id": "h100", "manufacturer": "nvidia",
        "accelerators": [{"id": "GPU-1", "index": 1, "mode": 1, "allocated": 1600000}],
    }]}}}  # fmt: skip
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u",
                     "creationTimestamp": "2026-12-01T00:00:00Z",
                     "annotations": {contract.ALLOCATION_ANNOTATION: json.dumps(allocation)}},
        "spec": {"nodeName": "n", "containers": [{"name": "main"}]},
    }  # fmt: skip


def test_an_unrecorded_claim_is_withheld_at_once_and_told_only_if_it_lasts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "gpustack.devicemanager.confirmation")
    confirmation = GrantConfirmation(Path("/nonexistent"), 1.0)
    entry = node_pod(pod())
    assert entry.grants
    confirmation.assigned, confirmation.reads = {}, 1
    for _ in range(PATIENCE):
        assert confirmation.filter([entry])[0].grants == ()
        assert not caplog.records, "the kubelet may still record it"
        confirmation.reads += 1
    assert confirmation.filter([entry])[0].grants == ()
    assert [r.getMessage() for r in caplog.records if "not believed" in r.getMessage()]
    caplog.clear()
    confirmation.filter([entry])
    assert not caplog.records, "told once"


def test_a_claim_recorded_in_time_is_believed_and_never_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "gpustack.devicemanager.confirmation")
    confirmation = GrantConfirmation(Path("/nonexistent"), 1.0)
    entry = node_pod(pod())
    confirmation.assigned, confirmation.reads = {}, 1
    assert confirmation.filter([entry])[0].grants == ()
    confirmation.assigned = {("ns", "p", "main"): frozenset({ID})}
    confirmation.reads = 1 + PATIENCE
    assert confirmation.filter([entry])[0].grants == entry.grants
    assert not caplog.records
