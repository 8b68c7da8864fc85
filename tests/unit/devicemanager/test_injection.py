"""Each manufacturer's injection: the variables and device nodes its runtime expects."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpustack_core.allocation import AllocatedAccelerator
from gpustack_core.modes import AllocationMode
from gpustack_devicemanager.deviceplugin.injection import VENDORS, Card, inject, vendor

E, SL, P = AllocationMode.EXCLUSIVE, AllocationMode.SLICED, AllocationMode.PARTITIONED


def test_nvidia_exclusive_selects_by_uuid() -> None:
    cards = [Card("GPU-a", 0), Card("GPU-b", 3)]
    assert inject("nvidia", E, cards).envs == {"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b"}


def test_nvidia_slice_states_its_quota() -> None:
    granted = [AllocatedAccelerator(id="GPU-a", mode=SL, allocated=400_000)]
    envs = inject("nvidia", SL, [Card("GPU-a", 0)], granted, card_mib=24_576, cores_percentage=25)
    assert envs.envs == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-a",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "6144m",
        "CUDA_DEVICE_SM_LIMIT": "25",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "LIBCUDA_LOG_LEVEL": "0",
    }


def test_partitions_are_selected_by_their_own_id() -> None:
    card = Card("GPU-a", 0, partition_id="MIG-1234")
    assert inject("nvidia", P, [card]).envs == {"NVIDIA_VISIBLE_DEVICES": "MIG-1234"}
    hygon = inject("hygon", P, [Card("0000:3b:00.0", 0, partition_id="MIG-9")]).envs
    assert hygon == {"DMI_MIG_VISIBLE_DEVICE": "MIG-9"}


def test_index_selecting_vendors() -> None:
    assert inject("ascend", E, [Card("npu-x", 5)]).envs == {"ASCEND_VISIBLE_DEVICES": "5"}
    cambricon = inject("cambricon", E, [Card("mlu-x", 2)], dev=Path("/dev"))
    assert cambricon.envs == {"CAMBRICON_VISIBLE_DEVICES": "2"}
    assert [d.path for d in cambricon.devices] == ["/dev/cambricon_ctl", "/dev/cambricon_dev2"]
    assert inject("iluvatar", E, [Card("ix-1", 0)]).envs == {"IX_VISIBLE_DEVICES": "ix-1"}


def test_amd_nodes_follow_the_pci_address_when_linked(tmp_path: Path) -> None:
    by_path = tmp_path / "dri" / "by-path"
    by_path.mkdir(parents=True)
    os.symlink("../card2", by_path / "pci-0000:03:00.0-card")
    os.symlink("../renderD130", by_path / "pci-0000:03:00.0-render")
    linked = inject("amd", E, [Card("0000:03:00.0", 0, pci_bus_id="0000:03:00.0")], dev=tmp_path)
    assert [d.path for d in linked.devices] == [
        f"{tmp_path}/kfd",
        f"{tmp_path}/dri/card2",
        f"{tmp_path}/dri/renderD130",
    ]
    unlinked = inject("amd", E, [Card("0000:04:00.0", 1, pci_bus_id="0000:04:00.0")], dev=tmp_path)
    assert [d.path for d in unlinked.devices][1:] == [
        f"{tmp_path}/dri/card1",
        f"{tmp_path}/dri/renderD129",
    ]
    assert linked.envs == {"AMD_VISIBLE_DEVICES": "none"}


def test_every_manufacturer_has_a_row_and_an_unknown_one_is_named() -> None:
    assert set(VENDORS) == {
        "nvidia",
        "amd",
        "hygon",
        "ascend",
        "thead",
        "cambricon",
        "iluvatar",
        "metax",
        "mthreads",
    }
    with pytest.raises(KeyError, match="no injection facts for manufacturer 'acme'"):
        vendor("acme")
