"""Sample composition: the gate, the degradation rules, and the accelerators' path."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from gpustack_core.allocation import ANNOTATION
from gpustack_core.pods import pod_from_object
from gpustack_core.sample import instance_sample, totals_from_resources
from gpustack_core.snapshot import (
    CardFigures,
    MonitorSnapshot,
    SliceDevice,
    SliceSection,
    SliceUsage,
    SnapshotGroup,
)
from gpustack_core.usage import DeclaredTotals, PodUsage, UsageSource

NOW = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
MEASURED = PodUsage(UsageSource.KUBELET, NOW - timedelta(seconds=3), 1250, 700, 12)
FALLBACK = DeclaredTotals(cpu_millicores=2000, memory_mib=4096, storage_mib=10240)


def pod_object(
    *, statuses: list[dict[str, Any]] | None = None, allocation: dict[str, Any] | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": "llama",
        "namespace": "team-a",
        "uid": "pod-1",
        "creationTimestamp": "2026-11-29T08:00:00Z",
        "labels": {"app.kubernetes.io/part-of": "inst-1"},
        "ownerReferences": [
            {
                "apiVersion": "worker.gpustack.ai/v1alpha1",
                "kind": "Instance",
                "name": "llama",
                "uid": "inst-1",
                "controller": True,
            }
        ],
    }
    if allocation is not None:
        metadata["annotations"] = {ANNOTATION: json.dumps(allocation)}
    return {
        "metadata": metadata,
        "spec": {
            "nodeName": "n1",
            "initContainers": [{"name": "init", "resources": {"limits": {"cpu": "8"}}}],
            "containers": [
                {
                    "name": "main",
                    "resources": {
                        "limits": {
                            "cpu": "1500m",
                            "memory": "1.5Mi",
                            "ephemeral-storage": "1Gi",
                            "nvidia.com/gpu.sliced.cores-percentage": "25",
                        }
                    },
                },
                {"name": "sidecar", "resources": {"limits": {"cpu": "250m", "memory": "1.5Mi"}}},
            ],
        },
        "status": {
            "containerStatuses": statuses
            if statuses is not None
            else [{"name": "main", "state": {"running": {}}}]
        },
    }


SLICED = {
    "main": {
        "devices": {
            "groups": [
                {
                    "manufacturer": "nvidia",
                    "accelerators": [{"id": "GPU-0", "index": 0, "mode": 3, "allocated": 400000}],
                }
            ]
        }
    }
}


def nvidia_snapshot(at: datetime = NOW) -> MonitorSnapshot:
    card = CardFigures(
        id="GPU-0",
        memory=81_559,
        memory_usage=40_000,
        cores_utilization=60,
        temperature=70,
        power_usage=300.0,
        unhealthy=False,
    )
    return MonitorSnapshot(
        timestamp=at,
        period_seconds=15,
        groups=(SnapshotGroup(manufacturer="nvidia", timestamp=at, accelerators=(card,)),),
    )


def test_totals_exclude_init_and_round_once() -> None:
    result = instance_sample(
        pod=pod_from_object(pod_object()), fallback=FALLBACK, usage=MEASURED, snapshots={}, now=NOW
    )
    sample = result.sample
    assert sample.cpu_total_milli_cores == 1750  # init's 8 cores are not the Instance's
    assert sample.memory_total_mib == 3  # 1.5Mi + 1.5Mi summed first: 3, not 2 + 2
    assert sample.storage_total_mib == 1024
    assert (sample.cpu_used_milli_cores, sample.memory_used_mib, sample.storage_used_mib) == (
        1250,
        700,
        12,
    )
    assert sample.timestamp == MEASURED.timestamp
    assert sample.accelerators == []  # started, nothing allocated


def test_never_started_reads_totals_and_present_zeros() -> None:
    waiting = [{"name": "main", "state": {"waiting": {"reason": "ContainerCreating"}}}]
    pod = pod_from_object(pod_object(statuses=waiting, allocation=SLICED))
    result = instance_sample(
        pod=pod, fallback=FALLBACK, usage=MEASURED, snapshots={"nvidia": nvidia_snapshot()}, now=NOW
    )
    sample = result.sample
    assert (sample.cpu_used_milli_cores, sample.memory_used_mib, sample.storage_used_mib) == (
        0,
        0,
        0,
    )
    assert sample.cpu_total_milli_cores == 1750
    assert sample.accelerators is None  # nothing ran: no upstream reads, no accelerators
    assert sample.timestamp == NOW


def test_no_pod_reads_the_instances_own_declaration() -> None:
    result = instance_sample(pod=None, fallback=FALLBACK, usage=None, snapshots={}, now=NOW)
    assert result.sample.cpu_total_milli_cores == 2000
    assert result.sample.memory_used_mib == 0


def test_started_but_unmeasured_is_absent_not_zero() -> None:
    # The exporter's round when the kubelet failed: totals stay, used figures go absent.
    result = instance_sample(
        pod=pod_from_object(pod_object()), fallback=FALLBACK, usage=None, snapshots={}, now=NOW
    )
    sample = result.sample
    assert sample.cpu_used_milli_cores is None
    assert sample.memory_used_mib is None
    assert sample.storage_used_mib is None
    assert sample.memory_total_mib == 3


def test_partial_measurement_keeps_its_absences() -> None:
    metrics_api = PodUsage(UsageSource.METRICS_API, NOW, 10, 20, None)
    result = instance_sample(
        pod=pod_from_object(pod_object()),
        fallback=FALLBACK,
        usage=metrics_api,
        snapshots={},
        now=NOW,
    )
    assert result.sample.storage_used_mib is None
    assert result.sample.cpu_used_milli_cores == 10


def test_sliced_pod_reads_its_cap_from_its_own_request() -> None:
    snapshot = nvidia_snapshot()
    section = SliceSection(
        schema_version=1,
        devices=(SliceDevice(manufacturer="nvidia", device_id="GPU-0"),),
        usages=(
            SliceUsage(
                manufacturer="nvidia",
                pod_uid="pod-1",
                container="main",
                device_id="GPU-0",
                memory_used_mib=1000,
                cores_utilization_percent=11,
            ),
        ),
    )
    snapshot = MonitorSnapshot(
        timestamp=snapshot.timestamp, period_seconds=15, groups=snapshot.groups, slices=section
    )
    result = instance_sample(
        pod=pod_from_object(pod_object(allocation=SLICED)),
        fallback=FALLBACK,
        usage=MEASURED,
        snapshots={"nvidia": snapshot},
        now=NOW,
    )
    [entry] = result.sample.accelerators or []
    assert entry.cores_utilization_percent == 44
    assert entry.memory_total_mib == 20_389
    assert result.accelerators[0].index == 0


def test_stale_snapshot_drops_accelerators_but_keeps_the_sample() -> None:
    pod = pod_from_object(pod_object(allocation=SLICED))
    result = instance_sample(
        pod=pod,
        fallback=FALLBACK,
        usage=MEASURED,
        snapshots={"nvidia": nvidia_snapshot(NOW - timedelta(seconds=46))},
        now=NOW,
    )
    assert result.sample.accelerators is None
    assert result.sample.cpu_used_milli_cores == 1250
    assert any("stale" in note for note in result.notes)


def test_missing_device_manager_drops_accelerators() -> None:
    pod = pod_from_object(pod_object(allocation=SLICED))
    result = instance_sample(pod=pod, fallback=FALLBACK, usage=MEASURED, snapshots={}, now=NOW)
    assert result.sample.accelerators is None
    assert any("no fresh snapshot" in note for note in result.notes)


def test_malformed_annotation_costs_only_the_accelerators() -> None:
    pod = pod_from_object(pod_object(allocation={"main": {"devices": {"groups": "nope"}}}))
    result = instance_sample(
        pod=pod, fallback=FALLBACK, usage=MEASURED, snapshots={"nvidia": nvidia_snapshot()}, now=NOW
    )
    assert result.sample.accelerators is None
    assert result.sample.memory_used_mib == 700
    assert "Pod team-a/llama" in result.notes[0] or "pod team-a/llama" in result.notes[0]
    assert "devices.groups" in result.notes[0]


def test_visibility_only_pod_has_no_accelerators_of_its_own() -> None:
    visibility = {
        "sshd": {
            "devices": {
                "groups": [{"manufacturer": "nvidia", "accelerators": [{"id": "GPU-0", "mode": 5}]}]
            }
        }
    }
    result = instance_sample(
        pod=pod_from_object(pod_object(allocation=visibility)),
        fallback=FALLBACK,
        usage=MEASURED,
        snapshots={},
        now=NOW,
    )
    assert result.sample.accelerators == []


def test_totals_from_resources() -> None:
    totals = totals_from_resources(
        {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "10Gi"}, what="Instance team-c/archived"
    )
    assert totals == DeclaredTotals(2000, 4096, 10240)
    assert totals_from_resources({}, what="x") == DeclaredTotals(0, 0, 0)
