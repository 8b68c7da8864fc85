"""The worker's node-capacity patch: companions set, stale ones removed, the rest untouched."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_core.decoding import ContractError
from gpustack_worker.nodecapacity import status_patch, wanted

DEVICES: dict[str, Any] = {
    "metadata": {"name": "gpu-node-1"},
    "spec": {
        "groups": [
            {
                "id": "h100",
                "manufacturer": "nvidia",
                "memory": 81559,
                "accelerators": [
                    {"id": "GPU-0", "index": 0, "status": {"logicalSliced": {"count": 8}}}
                ],
            }
        ]
    },
}


def node(capacity: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "gpu-node-1"},
        "status": {"capacity": dict(capacity), "allocatable": dict(capacity)},
    }


def test_a_bare_node_gets_every_companion_in_both_maps() -> None:
    offered = wanted(DEVICES, {})
    assert offered == {
        "nvidia.com/gpu.sliced.cores-percentage": "100",
        "nvidia.com/gpu.sliced.memory-mib": "81559",
        "nvidia.com/gpu.sliced.memory-percentage": "100",
        "nvidia.com/gpu.sliced.units": "1600000",
    }
    patch = status_patch(node({"cpu": "8", "nvidia.com/gpu": "1"}), offered, {})
    assert patch == {"status": {"capacity": offered, "allocatable": offered}}


def test_in_step_is_no_patch_and_stale_companions_are_removed() -> None:
    offered = wanted(DEVICES, {})
    assert status_patch(node({"cpu": "8", **offered}), offered, {}) is None
    stale = node(
        {
            "cpu": "8",
            "nvidia.com/gpu.sliced": "8",  # the kubelet's (the plugin's): never touched
            "nvidia.com/gpu.partitioned.mig-1g.10gb": "2",  # the partitions were destroyed
            "example.com/dongle": "4",  # someone else's extended resource
            **offered,
        }
    )
    patch = status_patch(stale, offered, {})
    assert patch == {
        "status": {
            "capacity": {"nvidia.com/gpu.partitioned.mig-1g.10gb": None},
            "allocatable": {"nvidia.com/gpu.partitioned.mig-1g.10gb": None},
        }
    }


def test_a_devices_object_that_does_not_decode_names_itself() -> None:
    with pytest.raises(ContractError, match="Devices gpu-node-1 spec"):
        wanted({"metadata": {"name": "gpu-node-1"}, "spec": {"groups": "many"}}, {})
