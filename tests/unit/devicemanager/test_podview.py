"""The node's Pods are decoded once per change: the monitor, exporter and PID binding reuse it.

The counters wrap the real decode and annotation parse, so a consumer that decoded again
would show up as a second call.
"""

from __future__ import annotations

import copy
import dataclasses
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from test_pidbind import DEVICE, MFR, POD_A, POD_A_SLICED

from gpustack_core import sample
from gpustack_core.pods import ObjectMeta
from gpustack_devicemanager import podview
from gpustack_devicemanager.exporter import ExporterSource, compose, read_inputs
from gpustack_devicemanager.holder import SnapshotHolder
from gpustack_devicemanager.monitor import TickContext, _node_pods
from gpustack_devicemanager.podview import NodePod, node_pod
from gpustack_simulator.pidbind import holders


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    calls = {"decode": 0, "grants": 0, "round_grants": 0}
    decode, parse, round_parse = (
        podview.pod_from_object,
        podview.read_allocation,
        sample.pod_grants,
    )

    def counting_decode(obj: dict[str, Any]) -> Any:
        calls["decode"] += 1
        return decode(obj)

    def counting_parse(annotations: Any, *, pod: str) -> Any:
        calls["grants"] += 1
        return parse(annotations, pod=pod)

    def counting_round_parse(pod: Any) -> Any:
        calls["round_grants"] += 1
        return round_parse(pod)

    monkeypatch.setattr(podview, "pod_from_object", counting_decode)
    monkeypatch.setattr(podview, "read_allocation", counting_parse)
    monkeypatch.setattr(sample, "pod_grants", counting_round_parse)  # the exporter's compose
    return calls


def running_pod() -> dict[str, Any]:
    """The sliced Pod with its container running, so the exporter resolves its grants."""
    obj = copy.deepcopy(POD_A_SLICED)
    obj["status"]["phase"] = "Running"
    for status in obj["status"]["containerStatuses"]:
        status["state"] = {"running": {"startedAt": "2026-11-29T09:01:00Z"}}
    return obj


async def test_consumers_reuse_the_decoded_pod(counted: dict[str, int], tmp_path: Path) -> None:
    entries: list[NodePod] = [node_pod(running_pod())]  # what the informer does per event
    assert counted == {"decode": 1, "grants": 1, "round_grants": 0}
    source = ExporterSource("n1", MFR, "gpustack-system", lambda: entries, None, SnapshotHolder(15))
    context = TickContext(MFR, 15, tmp_path)
    for _ in range(3):  # three rounds of every consumer
        records, grants = _node_pods(entries, context)
        assert list(records) == [POD_A]
        assert [g.pod_uid for g in grants] == [POD_A]
        assert list(holders(entries, MFR)) == [DEVICE]
        inputs = await read_inputs(source, datetime.now(UTC))
        assert inputs.pods is not None
        assert [p.metadata.uid for p in inputs.pods] == [POD_A]
        compose(inputs)
    assert counted == {"decode": 1, "grants": 1, "round_grants": 0}


async def test_the_counters_see_a_round_that_parses(
    counted: dict[str, int], tmp_path: Path
) -> None:
    """The same rounds over raw objects: every round decodes and parses again."""
    raw = [running_pod()]
    source = ExporterSource("n1", MFR, "gpustack-system", lambda: raw, None, SnapshotHolder(15))
    for _ in range(3):
        compose(await read_inputs(source, datetime.now(UTC)))
    assert counted == {"decode": 3, "grants": 3, "round_grants": 0}
    inputs = await read_inputs(source, datetime.now(UTC))
    compose(dataclasses.replace(inputs, grants={}))
    assert counted["round_grants"] == 1  # without the parsed grants, the round parses


def test_raw_objects_are_still_decoded_on_the_spot(counted: dict[str, int], tmp_path: Path) -> None:
    records, _ = _node_pods([POD_A_SLICED], TickContext(MFR, 15, tmp_path))
    assert list(records) == [POD_A]
    assert counted == {"decode": 1, "grants": 1, "round_grants": 0}


def test_managed_fields_are_not_kept() -> None:
    obj = copy.deepcopy(POD_A_SLICED)
    obj["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    entry = node_pod(obj)
    assert "managed_fields" not in ObjectMeta.__struct_fields__
    assert entry == node_pod(POD_A_SLICED)  # nothing of it reached the decoded form


def test_a_bad_annotation_costs_only_the_grants() -> None:
    obj = copy.deepcopy(POD_A_SLICED)
    obj["metadata"]["annotations"]["device.gpustack.ai/accelerator.allocated"] = "{not json"
    entry = node_pod(obj)
    assert entry.pod.metadata.uid == POD_A
    assert entry.grants == ()
    assert entry.grant_error is not None
