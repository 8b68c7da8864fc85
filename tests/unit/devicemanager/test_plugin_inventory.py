"""Recorded detections as the device plugin's inventory: groups, pools, partitions."""

from __future__ import annotations

from pathlib import Path

from gpustack_core.modes import AllocationMode
from gpustack_core.tokens import pool
from gpustack_devicemanager.deviceplugin.inventory import inventory_of
from gpustack_devicemanager.deviceplugin.service import resource_names
from gpustack_simulator.recording import load_recording
from gpustack_simulator.replay.backends import replay_backend

RECORDINGS = Path(__file__).resolve().parents[3] / "recordings"


def pools(recording: str) -> tuple[dict[str, int], list[tuple[str, str]]]:
    inventory = inventory_of(replay_backend(load_recording(RECORDINGS / recording)).detect())
    (group,) = inventory.groups
    sizes = {mode.api_name: len(pool(group, mode)) for mode in AllocationMode}
    return sizes, [(p.profile, p.parent_id) for p in inventory.partitions]


def test_a_mig_card_offers_its_partitions_and_128_slices() -> None:
    sizes, partitions = pools("nvidia/h100-mig.yaml")
    assert sizes == {
        "Exclusive": 1,
        "Shared": 10,
        "Sliced": 128,
        "Partitioned": 3,
        "Visibility": 512,
    }
    assert [profile for profile, _ in partitions] == ["3g.40gb", "1g.10gb", "1g.10gb"]
    assert {parent for _, parent in partitions} == {"GPU-4f1b2c3d-0e9a-4b8c-9d7e-6a5b4c3d2e1f"}


def test_an_amd_card_offers_no_slices_or_partitions() -> None:
    sizes, partitions = pools("amd/rx7800xt.yaml")
    assert (sizes["Sliced"], sizes["Partitioned"], partitions) == (0, 0, [])


def test_the_resource_base_can_be_overridden() -> None:
    names = resource_names("nvidia", {"GPUSTACK_NVIDIA_RESOURCE_NAME": "example.com/gpu"})
    assert names.sliced == "example.com/gpu.sliced"
    assert resource_names("amd", {}).exclusive == "amd.com/gpu"
