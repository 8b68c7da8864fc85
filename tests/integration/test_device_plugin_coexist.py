"""Another device plugin already holds our resource name on this kubelet (issue #31, item 1).

A fake kubelet directory as the NVIDIA GPU Operator leaves it: its plugin's socket
(``nvidia-gpu.sock``, a real listening unix socket) beside ``kubelet.sock`` and the kubelet's
``kubelet_internal_checkpoint`` recording ``nvidia.com/gpu`` with that plugin's device IDs. The
Device Manager must register nothing and say so in one line naming the other endpoint; once
the other plugin is gone, register; with ``force``, register at once; and on other names
(``GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME``) coexist.
"""

from __future__ import annotations

import json
import logging
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from gpustack_core.devices import AcceleratorSpec, AcceleratorStatus, GroupSpec, LogicalSliced
from gpustack_core.resources import ResourceNames
from gpustack_devicemanager.deviceplugin.allocate import Allocator
from gpustack_devicemanager.deviceplugin.manager import (
    DevicePlugins,
    PluginOptions,
    run_device_plugins,
)
from gpustack_devicemanager.deviceplugin.service import resource_names
from gpustack_devicemanager.deviceplugin.state import Inventory, PluginState
from gpustack_simulator.fakekubelet import FakeKubelet
from patience import HANG

NVIDIA = {
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/gpu.sliced",
    "device.gpustack.ai/nvidia.visibility",
}


def inventory() -> Inventory:
    card = AcceleratorSpec(
        id="GPU-0", index=0, status=AcceleratorStatus(logical_sliced=LogicalSliced(count=4))
    )
    return Inventory(groups=(GroupSpec(id="h100", manufacturer="nvidia", accelerators=(card,)),))


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    short = Path(tempfile.mkdtemp(prefix="dpc-", dir="/tmp"))  # unix paths: 108 bytes at most
    fake = FakeKubelet(short / "device-plugins", short / "pod-resources")
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
        shutil.rmtree(short, ignore_errors=True)


def the_gpu_operator_is_there(directory: Path) -> socket.socket:
    """NVIDIA's plugin: its socket listening, and the kubelet's record of its registration."""
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(str(directory / "nvidia-gpu.sock"))
    other.listen(1)
    checkpoint = {
        "Data": {
            "PodDeviceEntries": None,
            "RegisteredDevices": {
                "nvidia.com/gpu": ["GPU-8f2c1e0a-51d4-4b8e-9a3c-0d6f7e2b1c44"],
                "example.com/other": ["x"],
            },
        },
        "Checksum": 1234,
    }
    (directory / "kubelet_internal_checkpoint").write_text(json.dumps(checkpoint))
    return other


@asynccontextmanager
async def plugins(
    kubelet: FakeKubelet, names: ResourceNames, *, force: bool = False
) -> AsyncIterator[DevicePlugins]:
    allocator = Allocator("nvidia", "node-a", names, PluginState(inventory()), None, list)
    options = PluginOptions(
        kubelet_socket=kubelet.socket,
        pod_resources_socket=kubelet.pod_resources_socket,
        watch_period=0.1,
        force=force,
        conflict_recheck=0.1,
    )
    async with trio.open_nursery() as nursery:
        yield await nursery.start(run_device_plugins, options, allocator)
        nursery.cancel_scope.cancel()


async def registered(kubelet: FakeKubelet, wanted: set[str]) -> None:
    with trio.fail_after(HANG):
        while set(kubelet.plugins) != wanted:
            await trio.sleep(0.05)


async def test_nothing_is_registered_while_another_plugin_holds_the_name(
    kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    other = the_gpu_operator_is_there(kubelet.socket.parent)
    caplog.set_level(logging.INFO, logger="gpustack.devicemanager.deviceplugin")
    async with plugins(kubelet, ResourceNames.of("nvidia")) as handle:
        await trio.sleep(0.5)  # several rechecks
        assert kubelet.registrations == []
        assert handle.blocked is not None
        assert handle.blocked.resources == ("nvidia.com/gpu",)
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1, errors  # said once, not every recheck
        assert errors[0].startswith(
            "nvidia.com/gpu already registered with the kubelet by another device plugin"
            " (endpoint 'nvidia-gpu.sock')"
        )
        assert "--force-device-plugin" in errors[0]
        # The GPU Operator's plugin goes (its socket removed): ours registers every mode.
        other.close()
        (kubelet.socket.parent / "nvidia-gpu.sock").unlink()
        await registered(kubelet, NVIDIA)
        assert handle.blocked is None


async def test_after_a_kubelet_restart_it_does_not_take_the_name_back(
    kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    """Ours registered first; the GPU Operator's plugin came later and took nvidia.com/gpu. At
    the kubelet's restart both re-register, and whichever is last would hold the name: ours
    looks first and holds off."""
    caplog.set_level(logging.INFO, logger="gpustack.devicemanager.deviceplugin")
    directory = kubelet.socket.parent
    async with plugins(kubelet, ResourceNames.of("nvidia")) as handle:
        await registered(kubelet, NVIDIA)
        before = len(kubelet.registrations)
        the_gpu_operator_is_there(directory).close()  # its registration, in the checkpoint
        # The kubelet restarts: it removes every socket in its directory but keeps its
        # checkpoint; the other plugin serves its socket again, and the kubelet comes back.
        await trio.to_thread.run_sync(kubelet._stop_registration)
        for entry in directory.iterdir():
            if entry.name != "kubelet_internal_checkpoint":
                entry.unlink()
        other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        other.bind(str(directory / "nvidia-gpu.sock"))
        try:
            await trio.to_thread.run_sync(kubelet.start)
            with trio.fail_after(HANG):
                while handle.blocked is None:
                    await trio.sleep(0.05)
            await trio.sleep(0.5)
            assert len(kubelet.registrations) == before  # not one mode registered again
            assert handle.blocked.resources == ("nvidia.com/gpu",)
            errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
            assert len(errors) == 1, errors
            assert "(endpoint 'nvidia-gpu.sock')" in errors[0]
        finally:
            other.close()


async def test_force_registers_at_once(kubelet: FakeKubelet) -> None:
    other = the_gpu_operator_is_there(kubelet.socket.parent)
    try:
        async with plugins(kubelet, ResourceNames.of("nvidia"), force=True) as handle:
            await registered(kubelet, NVIDIA)
            assert handle.blocked is None
    finally:
        other.close()


async def test_a_stale_checkpoint_does_not_block(kubelet: FakeKubelet) -> None:
    other = the_gpu_operator_is_there(kubelet.socket.parent)
    other.close()
    (kubelet.socket.parent / "nvidia-gpu.sock").unlink()  # the record stays, the plugin is gone
    async with plugins(kubelet, ResourceNames.of("nvidia")):
        await registered(kubelet, NVIDIA)


async def test_on_other_names_both_run(kubelet: FakeKubelet) -> None:
    other = the_gpu_operator_is_there(kubelet.socket.parent)
    names = resource_names(
        "nvidia", {"GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME": "gpustack.ai/nvidia-gpu"}
    )
    try:
        async with plugins(kubelet, names):
            await registered(
                kubelet,
                {
                    "gpustack.ai/nvidia-gpu",
                    "gpustack.ai/nvidia-gpu.shared",
                    "gpustack.ai/nvidia-gpu.sliced",
                    "device.gpustack.ai/nvidia.visibility",
                },
            )
    finally:
        other.close()
