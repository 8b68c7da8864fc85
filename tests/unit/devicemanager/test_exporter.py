"""The exporter's round against the subresource's figures, on a replayed scenario node.

The snapshot comes from a real monitor tick (replayed library, the scenario's procfs), the
kubelet summary and Pods from the scenario; the exposition is parsed back and compared, figure
by figure, with what the core computes for ``instances/<name>/metrics``.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpustack_core.kubelet import parse_summary, usage_from_summary
from gpustack_core.modes import AllocationMode
from gpustack_core.pods import Pod, is_instance_pod, pod_from_object
from gpustack_core.sample import instance_sample
from gpustack_core.snapshot import MonitorSnapshot
from gpustack_core.usage import DeclaredTotals
from gpustack_devicemanager.exporter import (
    RoundInputs,
    compose,
    instance_pods,
    publishes_pod_level,
)
from gpustack_devicemanager.exposition import render
from gpustack_devicemanager.monitor import TickContext, tick
from gpustack_simulator.procfs import write_procfs
from gpustack_simulator.recording import load_recording
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.scenario import (
    RECORDINGS_DIR,
    Expanded,
    expand,
    find_scenario,
    load_scenario,
)

NOW = datetime(2026, 11, 29, 8, 0, 5, tzinfo=UTC)
POD_FIELDS = {
    "gpustack_instance_cpu_total_millicores": "cpu_total_milli_cores",
    "gpustack_instance_cpu_used_millicores": "cpu_used_milli_cores",
    "gpustack_instance_memory_total_mib": "memory_total_mib",
    "gpustack_instance_memory_used_mib": "memory_used_mib",
    "gpustack_instance_storage_total_mib": "storage_total_mib",
    "gpustack_instance_storage_used_mib": "storage_used_mib",
}
ACCELERATOR_FIELDS = {
    f"gpustack_instance_accelerator_{name}": name
    for name in (
        "memory_total_mib",
        "memory_used_mib",
        "memory_utilization_percent",
        "cores_utilization_percent",
        "temperature_celsius",
        "power_usage_watts",
        "unhealthy",
    )
}


def expanded_of(name: str) -> Expanded:
    return expand(load_scenario(find_scenario(name)), base=RECORDINGS_DIR)


def snapshot_for(expanded: Expanded, tmp_path: Path, manufacturer: str) -> MonitorSnapshot:
    [dm] = [d for d in expanded.device_managers if d.manufacturer == manufacturer]
    write_procfs(tmp_path / manufacturer, expanded.procs(dm.node))
    backend = replay_backend(load_recording(dm.recording))
    backend.detect()
    return tick(backend, expanded.pods, TickContext(manufacturer, 15, tmp_path / manufacturer), NOW)


def series(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def inputs(
    expanded: Expanded,
    snapshot: MonitorSnapshot | None,
    *,
    manufacturer: str = "nvidia",
    summary: bool = True,
    pods: list[dict[str, Any]] | None = None,
    now: datetime = NOW,
) -> RoundInputs:
    node = expanded.nodes[0]["metadata"]["name"]
    parsed = [pod_from_object(p) for p in (pods if pods is not None else expanded.pods)]
    return RoundInputs(
        node=node,
        manufacturer=manufacturer,
        pods=parsed,
        publisher=publishes_pod_level(
            parsed, namespace="gpustack-system", manufacturer=manufacturer
        ),
        summary=parse_summary(json_bytes(expanded.summary(node, 5.0))) if summary else None,
        kubelet_seconds=0.01,
        snapshot=snapshot,
        now=now,
    )


def json_bytes(obj: Any) -> bytes:
    return json.dumps(obj).encode()


@pytest.fixture(scope="module")
def mixed() -> Expanded:
    return expanded_of("nvidia-mixed")


def labels_of(pod: Pod, node: str) -> dict[str, str]:
    return {
        "namespace": pod.metadata.namespace,
        "instance_name": pod.metadata.name,
        "instance_uid": pod.metadata.labels["app.kubernetes.io/part-of"],
        "node": node,
    }


def test_every_figure_agrees_with_the_subresource(mixed: Expanded, tmp_path: Path) -> None:
    snapshot = snapshot_for(mixed, tmp_path, "nvidia")
    round_inputs = inputs(mixed, snapshot)
    assert round_inputs.publisher
    exposed = series(render(compose(round_inputs).families).text.decode())
    node = round_inputs.node
    assert round_inputs.summary is not None
    checked_modes: set[str] = set()
    for pod in instance_pods(round_inputs.pods or []):
        usage = usage_from_summary(
            round_inputs.summary,
            namespace=pod.metadata.namespace,
            name=pod.metadata.name,
            uid=pod.metadata.uid,
        )
        expected = instance_sample(
            pod=pod,
            fallback=DeclaredTotals(0, 0, 0),
            usage=usage,
            snapshots={"nvidia": snapshot},
            now=NOW,
        )
        labels = labels_of(pod, node)
        for name, field in POD_FIELDS.items():
            value = getattr(expected.sample, field)
            key = (name, frozenset(labels.items()))
            if value is None:
                assert key not in exposed, (name, labels)  # absent: no sample at all
            else:
                assert exposed[key] == value, (name, labels)
        for entry in expected.accelerators:
            checked_modes.add(entry.metrics.mode)
            accelerator = {
                **labels,
                "id": entry.metrics.id,
                "index": str(entry.index),
                "manufacturer": "nvidia",
                "mode": entry.metrics.mode,
            }
            for name, field in ACCELERATOR_FIELDS.items():
                value = getattr(entry.metrics, field)
                key = (name, frozenset(accelerator.items()))
                if value is None:
                    assert key not in exposed, (name, accelerator)
                else:
                    assert exposed[key] == float(value), (name, accelerator)
    assert checked_modes == {"Exclusive", "Shared", "Sliced", "Partitioned"}


def test_label_sets_are_the_specs(mixed: Expanded, tmp_path: Path) -> None:
    text = render(compose(inputs(mixed, snapshot_for(mixed, tmp_path, "nvidia"))).families).text
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            keys = set(sample.labels)
            assert "instance" not in keys  # Prometheus's own target label is never exposed
            if sample.name in POD_FIELDS:
                assert keys == {"namespace", "instance_name", "instance_uid", "node"}
            elif sample.name in ACCELERATOR_FIELDS:
                assert keys == {
                    "namespace",
                    "instance_name",
                    "instance_uid",
                    "node",
                    "id",
                    "index",
                    "manufacturer",
                    "mode",
                }
                assert sample.labels["mode"] in {m.api_name for m in AllocationMode}
            elif sample.name == "gpustack_accelerator_process_capability":
                assert keys == {"node", "manufacturer", "id", "entry_point", "reason"}
                assert sample.labels["entry_point"] in {"memory", "cores"}
                assert (sample.value == 1.0) == (sample.labels["reason"] == "")
            else:
                assert sample.name.startswith("gpustack_instance_metrics_collector_")


def test_stopped_and_terminating_instances_have_no_series(mixed: Expanded, tmp_path: Path) -> None:
    text = render(compose(inputs(mixed, snapshot_for(mixed, tmp_path, "nvidia"))).families)
    decoded = text.text.decode()
    assert 'instance_name="archived-job"' not in decoded  # stopped: no Pod, nothing at all
    assert 'instance_name="embed-b"' not in decoded  # terminating Pod: not an Instance's now


def test_kubelet_failure_keeps_totals_and_accelerators(mixed: Expanded, tmp_path: Path) -> None:
    snapshot = snapshot_for(mixed, tmp_path, "nvidia")
    exposed = series(render(compose(inputs(mixed, snapshot, summary=False)).families).text.decode())
    names = {name for name, _ in exposed}
    assert (
        exposed[("gpustack_instance_metrics_collector_success", frozenset({("source", "kubelet")}))]
        == 0.0
    )
    assert (
        exposed[
            ("gpustack_instance_metrics_collector_success", frozenset({("source", "snapshot")}))
        ]
        == 1.0
    )
    assert "gpustack_instance_cpu_total_millicores" in names
    assert "gpustack_instance_accelerator_memory_total_mib" in names
    # Measured figures go absent; only the never-started Pod reads its answered zeros.
    for family in ("gpustack_instance_cpu_used_millicores", "gpustack_instance_memory_used_mib"):
        holders = {
            dict(labels)["instance_name"]: value
            for (name, labels), value in exposed.items()
            if name == family
        }
        assert holders == {"qwen-pending": 0.0}


def test_stale_snapshot_drops_accelerators_and_capabilities(
    mixed: Expanded, tmp_path: Path
) -> None:
    snapshot = snapshot_for(mixed, tmp_path, "nvidia")
    later = NOW + timedelta(seconds=46)  # three 15 s periods and a second
    exposed = series(render(compose(inputs(mixed, snapshot, now=later)).families).text.decode())
    names = {name for name, _ in exposed}
    assert (
        exposed[
            ("gpustack_instance_metrics_collector_success", frozenset({("source", "snapshot")}))
        ]
        == 0.0
    )
    assert not any(n.startswith("gpustack_instance_accelerator_") for n in names)
    assert "gpustack_accelerator_process_capability" not in names
    assert "gpustack_instance_cpu_used_millicores" in names  # the kubelet half still answers


def test_unknown_pods_fail_the_round_outright(mixed: Expanded) -> None:
    round_inputs = RoundInputs("gpu-node-1", "nvidia", None, True, None, None, None, NOW)
    exposed = series(render(compose(round_inputs).families).text.decode())
    assert {name for name, _ in exposed} == {"gpustack_instance_metrics_collector_success"}


def test_role_goes_to_the_first_ready_manufacturer_and_hands_over(tmp_path: Path) -> None:
    expanded = expanded_of("nvidia-amd")
    pods = [pod_from_object(p) for p in expanded.pods]
    manufacturers = sorted(d.manufacturer for d in expanded.device_managers)
    assert manufacturers == ["amd", "nvidia"]
    assert publishes_pod_level(pods, namespace="gpustack-system", manufacturer="amd")
    assert not publishes_pod_level(pods, namespace="gpustack-system", manufacturer="nvidia")
    unready = []
    for original in expanded.pods:
        raw = copy.deepcopy(original)
        if raw["metadata"].get("labels", {}).get("gpustack.ai/manufacturer") == "amd":
            for condition in raw["status"]["conditions"]:
                if condition["type"] == "Ready":
                    condition["status"] = "False"
        unready.append(pod_from_object(raw))
    assert publishes_pod_level(unready, namespace="gpustack-system", manufacturer="nvidia")
    assert not publishes_pod_level(unready, namespace="gpustack-system", manufacturer="amd")
    # Pod-level families follow the role; each publishes its own accelerators regardless.
    nvidia = snapshot_for(expanded, tmp_path, "nvidia")
    non_publisher = compose(inputs(expanded, nvidia, manufacturer="nvidia"))
    names = {f.name for f in non_publisher.families if f.samples}
    assert "gpustack_instance_cpu_total_millicores" not in names
    assert "gpustack_instance_accelerator_memory_total_mib" in names
    assert all(
        f.samples[0][0][-2] == "nvidia"
        for f in non_publisher.families
        if f.name.startswith("gpustack_instance_accelerator_") and f.samples
    )
    assert all(
        is_instance_pod(p) or not p.metadata.labels.get("app.kubernetes.io/part-of")
        for p in instance_pods(pods)
    )
