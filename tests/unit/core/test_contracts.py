"""Wire spelling of every contract: camelCase with acronyms, absent keys for absent figures."""

import contextlib
import json
from datetime import UTC, datetime

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpustack_core.allocation import ANNOTATION, grants, parse_allocation
from gpustack_core.decoding import ContractError
from gpustack_core.instance_metrics import AcceleratorMetrics, InstanceMetrics, ObjectMeta, Sample
from gpustack_core.kubelet import parse_summary
from gpustack_core.modes import AllocationMode, Manufacturer, sliced_cores_resource
from gpustack_core.reasons import ALL_REASONS
from gpustack_core.snapshot import parse_snapshot
from gpustack_core.wire import json_name

NOW = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("field", "key"),
    [
        ("cpu_total_milli_cores", "cpuTotalMilliCores"),
        ("memory_used_mib", "memoryUsedMiB"),
        ("pod_uid", "podUID"),
        ("device_id", "deviceID"),
        ("device_ids", "deviceIDs"),
        ("allocated_physical_id", "allocatedPhysicalID"),
        ("period_seconds", "periodSeconds"),
        ("id", "id"),
        ("pod_ip", "podIP"),
    ],
)
def test_json_names(field: str, key: str) -> None:
    assert json_name(field) == key


def test_instance_metrics_keys_and_absence() -> None:
    body = InstanceMetrics.of(
        ObjectMeta(name="llama", namespace="team-a", uid="u-1"),
        Sample(
            timestamp=NOW,
            cpu_total_milli_cores=4000,
            cpu_used_milli_cores=None,  # unmeasured: the key must be absent
            memory_total_mib=16384,
            memory_used_mib=0,  # measured idle: the key must be present and 0
            storage_total_mib=20480,
            accelerators=[
                AcceleratorMetrics(
                    id="GPU-1", mode="Sliced", memory_total_mib=20389, unhealthy=False
                )
            ],
        ),
    )
    wire = json.loads(msgspec.json.encode(body))
    assert wire["kind"] == "InstanceMetrics"
    assert wire["apiVersion"] == "worker.gpustack.ai/v1"
    assert wire["metadata"] == {"name": "llama", "namespace": "team-a", "uid": "u-1"}
    sample = wire["sample"]
    assert set(sample) == {
        "timestamp",
        "cpuTotalMilliCores",
        "memoryTotalMiB",
        "memoryUsedMiB",
        "storageTotalMiB",
        "accelerators",
    }
    assert sample["memoryUsedMiB"] == 0
    assert sample["timestamp"] == "2026-11-29T09:00:00Z"
    assert sample["accelerators"] == [
        {"id": "GPU-1", "mode": "Sliced", "memoryTotalMiB": 20389, "unhealthy": False}
    ]


def test_every_accelerator_key_is_the_specs() -> None:
    entry = AcceleratorMetrics(
        id="x",
        mode="Exclusive",
        memory_total_mib=1,
        memory_used_mib=1,
        memory_utilization_percent=1,
        cores_utilization_percent=1,
        temperature_celsius=1,
        power_usage_watts=1.5,
        unhealthy=True,
    )
    assert list(json.loads(msgspec.json.encode(entry))) == [
        "id",
        "mode",
        "memoryTotalMiB",
        "memoryUsedMiB",
        "memoryUtilizationPercent",
        "coresUtilizationPercent",
        "temperatureCelsius",
        "powerUsageWatts",
        "unhealthy",
    ]


def test_modes_wire_integers_and_api_names() -> None:
    assert [(m.value, m.api_name) for m in AllocationMode] == [
        (1, "Exclusive"),
        (2, "Shared"),
        (3, "Sliced"),
        (4, "Partitioned"),
        (5, "Visibility"),
    ]
    assert AllocationMode.from_api_name("Sliced") is AllocationMode.SLICED
    with pytest.raises(ValueError, match="unknown allocation mode 'Carved'"):
        AllocationMode.from_api_name("Carved")


def test_sliced_cores_resource_per_manufacturer() -> None:
    assert sliced_cores_resource("nvidia") == "nvidia.com/gpu.sliced.cores-percentage"
    assert sliced_cores_resource("thead") == "alibabacloud.com/ppu.sliced.cores-percentage"
    assert sliced_cores_resource("unknown-vendor") is None
    assert {m.value for m in Manufacturer} >= {
        "nvidia",
        "amd",
        "hygon",
        "ascend",
        "thead",
        "cambricon",
        "iluvatar",
        "metax",
    }


def test_reason_tokens_are_the_specs() -> None:
    assert {
        "unsupported",
        "permission",
        "transient_driver_error",
        "truncated",
        "invalid_data",
        "bounded",
        "version_skew",
        "exited",
        "unreadable",
        "zombie",
        "unstable",
        "pid_namespace_invisible",
        "mediated",
        "no_pod_component",
        "ambiguous_pod",
        "no_container_component",
        "ambiguous_container",
        "unknown_pod",
        "unknown_container",
    } == ALL_REASONS


ANNOTATION_VALUE = {
    "sshd": {
        "devices": {
            "groups": [
                {
                    "id": "g",
                    "manufacturer": "nvidia",
                    "accelerators": [{"id": "GPU-1", "index": 1, "mode": 5}],
                }
            ]
        },
    },
    "main": {
        "devices": {
            "groups": [
                {
                    "id": "g",
                    "manufacturer": "nvidia",
                    "accelerators": [
                        {
                            "id": "GPU-1",
                            "index": 1,
                            "mode": 3,
                            "allocated": 400000,
                            "remaining": 1200000,
                            "allocatedLogicalPlacements": [{"start": 0, "length": 1}],
                        },
                        {
                            "id": "GPU-2",
                            "index": 2,
                            "mode": 4,
                            "allocatedPhysicalProfile": "1g.10gb",
                            "allocatedPhysicalPlacements": [{"start": 6, "length": 1}],
                            "allocatedPhysicalID": "MIG-abc",
                        },
                    ],
                },
            ]
        },
        "deviceIDs": ["g:GPU-1:0", "g:GPU-2:0"],
    },
}


def test_annotation_parses_and_flattens_in_container_name_order() -> None:
    allocation = parse_allocation(json.dumps(ANNOTATION_VALUE))
    assert allocation["main"].device_ids == ("g:GPU-1:0", "g:GPU-2:0")
    flat = grants(allocation)
    assert [(g.container, g.accelerator.id, g.accelerator.mode) for g in flat] == [
        ("main", "GPU-1", AllocationMode.SLICED),
        ("main", "GPU-2", AllocationMode.PARTITIONED),
        ("sshd", "GPU-1", AllocationMode.VISIBILITY),
    ]
    assert flat[1].accelerator.allocated_physical_id == "MIG-abc"
    assert flat[1].accelerator.allocated_physical_placements[0].start == 6


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        (
            '{"main": {"devices": {"groups": [{"manufacturer": "nvidia", "accelerators": '
            '[{"id": "GPU-1", "mode": 7}]}]}}}',
            "container 'main': Invalid enum value 7 - at "
            "`$.devices.groups[0].accelerators[0].mode`",
        ),
        (
            '{"main": {"devices": {"groups": [{"manufacturer": "nvidia", "accelerators": '
            '[{"id": "GPU-1", "mode": "3"}]}]}}}',
            "Expected `int`, got `str`",
        ),
        (
            '{"main": {"devices": {"groups": [{"accelerators": []}]}}}',
            "missing required field `manufacturer`",
        ),
        ("not json", "not valid JSON"),
        ("[]", "Expected `object`, got `array`"),
    ],
)
def test_malformed_annotation_names_the_field(value: str, complaint: str) -> None:
    with pytest.raises(ContractError) as excinfo:
        parse_allocation(value)
    assert complaint in str(excinfo.value)
    assert ANNOTATION in str(excinfo.value)


@given(st.text(max_size=200) | st.binary(max_size=200))
def test_annotation_fuzz_raises_only_contract_errors(value: str | bytes) -> None:
    with contextlib.suppress(ContractError):
        parse_allocation(value)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "main",
                        "devices",
                        "groups",
                        "id",
                        "mode",
                        "manufacturer",
                        "accelerators",
                        "deviceIDs",
                    ]
                ),
                children,
                max_size=4,
            )
        ),
        max_leaves=20,
    )
)
def test_annotation_structural_fuzz(value: object) -> None:
    with contextlib.suppress(ContractError):
        parse_allocation(json.dumps(value))


def test_hostile_nesting_and_bad_unicode_are_contract_errors() -> None:
    deep = '{"pods": [], "node": {"nodeName": "n", "x": ' + "[" * 5000 + "]" * 5000 + "}}"
    with pytest.raises(ContractError, match="nested too deeply"):
        parse_summary(deep)
    with pytest.raises(ContractError, match="not valid Unicode"):
        parse_snapshot('{"timestamp": "\ud800"}')
