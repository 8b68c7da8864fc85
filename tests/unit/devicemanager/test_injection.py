"""Each manufacturer's injection: the variables and device nodes its runtime expects."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from gpustack_core.allocation import AllocatedAccelerator
from gpustack_core.modes import AllocationMode
from gpustack_devicemanager.deviceplugin.injection import Card, inject, vendor

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
    assert linked.envs == {"AMD_VISIBLE_DEVICES": "none"}


def _sysfs_drm(sysfs: Path, bus: str, *names: str) -> None:
    """The kernel's record of a PCI function's DRM minors: ``/sys/bus/pci/devices/<bdf>/drm``."""
    drm = sysfs / "bus" / "pci" / "devices" / bus / "drm"
    drm.mkdir(parents=True)
    for name in names:
        (drm / name).mkdir()


def test_without_a_by_path_link_the_card_is_found_through_sysfs(tmp_path: Path) -> None:
    # Issue #31 item 4: no udev by-path links, and probe order differs from the library's
    # enumeration: the library's card 0 is the kernel's card1/renderD129. The old fallback
    # guessed card0/renderD128 by index: another card's nodes.
    dev, sysfs = tmp_path / "dev", tmp_path / "sys"
    (dev / "dri").mkdir(parents=True)
    _sysfs_drm(sysfs, "0000:04:00.0", "card1", "renderD129")
    _sysfs_drm(sysfs, "0000:03:00.0", "card0", "renderD128")
    card = Card("0000:04:00.0", 0, pci_bus_id="0000:04:00.0")
    got = inject("amd", E, [card], dev=dev, sysfs=sysfs)
    assert [d.path for d in got.devices] == [
        f"{dev}/kfd",
        f"{dev}/dri/card1",
        f"{dev}/dri/renderD129",
    ]


def test_a_card_nothing_names_gets_no_drm_node_and_the_log_says_why_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dev, sysfs = tmp_path / "dev", tmp_path / "sys"
    (dev / "dri").mkdir(parents=True)
    (dev / "dri" / "card0").touch()  # another card's node, present on the host
    (dev / "dri" / "renderD128").touch()
    _sysfs_drm(sysfs, "0000:03:00.0", "card0", "renderD128")
    card = Card("0000:09:00.0", 0, pci_bus_id="0000:09:00.0")
    with caplog.at_level(logging.WARNING, logger="gpustack.devicemanager.deviceplugin"):
        first = inject("metax", E, [card], dev=dev, sysfs=sysfs)
        again = inject("metax", E, [card], dev=dev, sysfs=sysfs)
    assert [d.path for d in first.devices] == [f"{dev}/mxcd"]
    assert again.devices == first.devices
    said = [r.getMessage() for r in caplog.records if "0000:09:00.0" in r.getMessage()]
    assert len(said) == 1, said
    assert "no DRM node is injected" in said[0]
    assert f"{sysfs}/bus/pci/devices/0000:09:00.0/drm" in said[0]


def test_an_unknown_manufacturer_is_named() -> None:
    with pytest.raises(KeyError, match="no injection facts for manufacturer 'acme'"):
        vendor("acme")
