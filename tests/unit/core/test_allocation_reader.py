"""The one reader of the allocation annotation: its error policy, its typed result, its codec.

Expected grants are spelled out from the annotation's wire shape (operator-half.md: container
name → devices.groups[].accelerators[], modes as integers), not computed by the reader.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_core import contract
from gpustack_core.allocation import (
    NOTHING,
    AllocatedAccelerator,
    AllocatedDevices,
    AllocatedGroup,
    ContainerAllocation,
    Placement,
    encode_allocation,
    parse_allocation,
    read_allocation,
)
from gpustack_core.decoding import ContractError
from gpustack_core.modes import AllocationMode

KEY = "device.gpustack.ai/accelerator.allocated"  # the spec's spelling, not the constant's
VALUE = {
    "sshd": {
        "devices": {
            "groups": [{"manufacturer": "nvidia", "accelerators": [{"id": "GPU-1", "mode": 5}]}]
        }
    },
    "main": {
        "devices": {
            "groups": [
                {
                    "id": "h100",
                    "manufacturer": "nvidia",
                    "accelerators": [
                        {"id": "GPU-1", "index": 1, "mode": 3, "allocated": 320000},
                        {"id": "GPU-2", "index": 2, "mode": 4, "allocated": 200000,
                         "allocatedPhysicalID": "MIG-a"},
                    ],
                }
            ]
        },
        "deviceIDs": ["h100:GPU-1:0", "h100:GPU-2:1"],
    },
}  # fmt: skip


def test_the_key_is_the_contract_constant() -> None:
    assert contract.ALLOCATION_ANNOTATION == KEY


def test_absent_holds_nothing() -> None:
    for given_annotations in (None, {}, {"other": "x"}):
        read = read_allocation(given_annotations, pod="team/p")
        assert read is NOTHING
        assert (dict(read.containers), read.grants, dict(read.device_ids)) == ({}, (), {})


def test_a_reading_is_typed_grants_in_container_order() -> None:
    read = read_allocation({KEY: json.dumps(VALUE)}, pod="team/p")
    assert [
        (g.container, g.manufacturer, g.accelerator.id, g.accelerator.mode, g.accelerator.allocated)
        for g in read.grants
    ] == [
        ("main", "nvidia", "GPU-1", AllocationMode.SLICED, 320000),
        ("main", "nvidia", "GPU-2", AllocationMode.PARTITIONED, 200000),
        ("sshd", "nvidia", "GPU-1", AllocationMode.VISIBILITY, 0),
    ]
    assert read.grants[1].accelerator.allocated_physical_id == "MIG-a"
    assert dict(read.device_ids) == {"main": ("h100:GPU-1:0", "h100:GPU-2:1"), "sshd": ()}
    assert sorted(read.containers) == ["main", "sshd"]


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("", "not valid JSON"),
        ("{oops", "not valid JSON"),
        ('{"main": {"devices": {"groups": "nope"}}}', "container 'main'"),
        ('{"main": {"devices": {"groups": [{"manufacturer": 7}]}}}', "Expected `str`"),
        (7, "expected a string, got int"),
        (None, "expected a string, got NoneType"),
    ],
)
def test_malformed_is_one_contract_error_naming_the_pod(value: object, complaint: str) -> None:
    with pytest.raises(ContractError) as excinfo:
        read_allocation({KEY: value}, pod="team-a/broken")
    message = str(excinfo.value)
    assert message.startswith(f"pod team-a/broken: annotation {KEY}")
    assert complaint in message
    assert "\n" not in message


@settings(max_examples=300)
@given(
    st.dictionaries(
        st.sampled_from([KEY, "other"]),
        st.none() | st.integers() | st.text(max_size=80) | st.binary(max_size=20),
        max_size=2,
    )
)
def test_the_reader_raises_nothing_but_contract_errors(given: dict[str, object]) -> None:
    problem: ContractError | None = None
    try:
        read = read_allocation(given, pod="ns/p")
    except ContractError as exc:
        problem = exc
    if problem is not None:
        assert str(problem).startswith(f"pod ns/p: annotation {KEY}: ")
        assert "\n" not in str(problem)
    else:
        assert KEY in given or read is NOTHING


_ids = st.text(alphabet="abcGPU-0123:", min_size=1, max_size=8)
_placements = st.lists(
    st.builds(Placement, start=st.integers(0, 8), length=st.integers(1, 8)), max_size=2
).map(tuple)
_accelerators = st.builds(
    AllocatedAccelerator,
    id=_ids,
    mode=st.sampled_from(list(AllocationMode)),
    index=st.integers(0, 15),
    allocated=st.integers(0, 1_600_000),
    remaining=st.integers(0, 1_600_000),
    allocated_physical_profile=st.sampled_from(["", "1g.10gb", "3g.40gb"]),
    allocated_physical_placements=_placements,
    allocated_physical_id=st.sampled_from(["", "MIG-1", "MIG-2"]),
    allocated_logical_placements=_placements,
)
_groups = st.builds(
    AllocatedGroup,
    manufacturer=st.sampled_from(["nvidia", "amd", "ascend"]),
    id=st.sampled_from(["", "h100", "mi300"]),
    accelerators=st.lists(_accelerators, max_size=3).map(tuple),
)
_containers = st.dictionaries(
    st.sampled_from(["main", "sshd", "init", "side car"]),
    st.builds(
        ContainerAllocation,
        devices=st.builds(AllocatedDevices, groups=st.lists(_groups, max_size=2).map(tuple)),
        device_ids=st.lists(_ids, max_size=3, unique=True).map(tuple),
    ),
    max_size=3,
)


def _without_remaining(containers: dict[str, ContainerAllocation]) -> dict[str, Any]:
    """The wire form with ``remaining`` zeroed: what the encoder promises to keep."""
    body: dict[str, Any] = msgspec.to_builtins(containers)
    for entry in body.values():
        for group in entry.get("devices", {}).get("groups", []):
            for accelerator in group.get("accelerators", []):
                accelerator.pop("remaining", None)
    return body


@settings(max_examples=200)
@given(_containers)
def test_the_reader_inverts_the_encoder(containers: dict[str, ContainerAllocation]) -> None:
    text = encode_allocation(containers)
    read = read_allocation({KEY: text}, pod="ns/p")
    assert _without_remaining(dict(read.containers)) == _without_remaining(containers)
    assert all(g.accelerator.remaining == 0 for g in read.grants)
    assert encode_allocation(read.containers) == text  # one allocation, one spelling
    assert len(read.grants) == sum(
        len(g.accelerators) for c in containers.values() for g in c.devices.groups
    )
    assert parse_allocation(text).keys() == containers.keys()
