"""The Device Manager's device plugins over real gRPC on unix sockets, against a fake kubelet.

The plugins register with the fake kubelet, stream their tokens' health, and allocate for
Pods held by the cluster stand-in (real HTTPS, the real kube client): the annotation is read
back from the API server, the injection from the ``Allocate`` answer.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import trio

from gpustack_core import contract
from gpustack_core.allocation import parse_allocation
from gpustack_core.allocator import Partition
from gpustack_core.devices import (
    AcceleratorSpec,
    AcceleratorStatus,
    GroupSpec,
    LogicalSliced,
    PhysicalProfile,
    PhysicalSliced,
    Topology,
)
from gpustack_core.modes import AllocationMode
from gpustack_core.resources import ResourceNames
from gpustack_devicemanager.daemon import Running, ServeOptions, serve
from gpustack_devicemanager.deviceplugin.allocate import Allocator
from gpustack_devicemanager.deviceplugin.injection import DEV
from gpustack_devicemanager.deviceplugin.manager import (
    DevicePlugins,
    PluginOptions,
    follow_pods,
    run_device_plugins,
)
from gpustack_devicemanager.deviceplugin.state import Inventory, PluginState
from gpustack_devicemanager.podview import NodePod, node_pod
from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig, load_config
from gpustack_kube.informer import Informer
from gpustack_kube.paths import PODS
from gpustack_simulator.cluster.server import RunningCluster
from gpustack_simulator.cluster.state import POD
from gpustack_simulator.fakekubelet import FakeKubelet
from gpustack_simulator.fakekubelet.admission import DeviceAdmission
from gpustack_simulator.recording import load_recording
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.testing import cluster_standin
from patience import HANG

NODE = "plugin-node"
RECORDINGS = Path(__file__).resolve().parents[2] / "recordings"
NAMESPACE = "team-p"
H100_MIB = 81_559


def nvidia() -> Inventory:
    def card(index: int, partitions: int) -> AcceleratorSpec:
        return AcceleratorSpec(
            id=f"GPU-{index}",
            index=index,
            topology=Topology(pci_bus_id=f"0000:0{index}:00.0"),
            status=AcceleratorStatus(
                logical_sliced=LogicalSliced(count=4),
                physical_sliced=PhysicalSliced(
                    profiles=(PhysicalProfile(name="1g.10gb", memory_mib=9856, count=partitions),),
                    count=partitions,
                )
                if partitions
                else None,
            ),
        )

    group = GroupSpec(
        id="h100", manufacturer="nvidia", memory=H100_MIB, accelerators=(card(0, 0), card(1, 2))
    )
    return Inventory(
        groups=(group,),
        partitions=(
            Partition("MIG-aaaa", "GPU-1", "1g.10gb"),
            Partition("MIG-bbbb", "GPU-1", "1g.10gb"),
        ),
    )


def amd() -> Inventory:
    group = GroupSpec(
        id="rx7800xt",
        manufacturer="amd",
        memory=16_368,
        accelerators=(
            AcceleratorSpec(id="0000:03:00.0", index=0, topology=Topology(pci_bus_id=AMD_BUS)),
        ),
    )
    return Inventory(groups=(group,))


AMD_BUS = "0000:03:00.0"


def drm_tree(root: Path, bus: str, card: str, render: str) -> Path:
    """A ``/dev`` whose udev ``by-path`` links name ``bus``'s DRM nodes (as on a real node)."""
    by_path = root / "dri" / "by-path"
    by_path.mkdir(parents=True)
    (by_path / f"pci-{bus}-card").symlink_to(f"../{card}")
    (by_path / f"pci-{bus}-render").symlink_to(f"../{render}")
    return root


@dataclass
class Stack:
    kubelet: FakeKubelet
    plugins: DevicePlugins
    client: KubeClient
    cluster: RunningCluster
    names: ResourceNames

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Kubelet calls block (they cross into this very trio loop): run them on a thread."""
        return await trio.to_thread.run_sync(fn, *args)

    async def annotation(self, name: str) -> dict[str, Any]:
        pod = await self.client.get(PODS.path(NAMESPACE, name))
        text = pod["metadata"].get("annotations", {}).get(contract.ALLOCATION_ANNOTATION)
        assert text is not None, f"Pod {name} carries no allocation annotation"
        parse_allocation(text)  # the reader accepts what the writer wrote
        decoded: dict[str, Any] = json.loads(text)
        return decoded

    def add_pod(self, name: str, containers: dict[str, dict[str, str]], age: int = 0) -> None:
        add_pod(self.cluster, name, containers, age)


def add_pod(
    cluster: RunningCluster, name: str, containers: dict[str, dict[str, str]], age: int = 0
) -> None:
    """A Pod bound to the node, not started: what the kubelet is admitting."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{name}",
            "creationTimestamp": f"2026-11-29T09:{age:02d}:00Z",
            "resourceVersion": "1",
        },
        "spec": {
            "nodeName": NODE,
            "containers": [
                {"name": c, "resources": {"limits": limits, "requests": limits}}
                for c, limits in containers.items()
            ],
        },
        "status": {"phase": "Pending"},
    }
    cluster.state.store.put(POD, pod)
    cluster.state.pods_changed()


def device_manager(cluster: RunningCluster) -> KubeConfig:
    # The Device Manager's own identity: its role reads Pods and patches their annotation.
    loaded = load_config(cluster.kubeconfig, context="device-manager", environ={})
    assert loaded is not None
    return loaded


@asynccontextmanager
async def stack(
    tmp_path: Path,
    manufacturer: str,
    inventory: Inventory,
    *,
    identify_seconds: float = 1.0,
    dev: Path = DEV,
) -> AsyncIterator[Stack]:
    # Unix socket paths are limited to 108 bytes; pytest's tmp_path can be longer.
    short = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))
    kubelet = FakeKubelet(short / "device-plugins", short / "pod-resources")
    kubelet.start()
    names = ResourceNames.of(manufacturer)
    try:
        async with (
            cluster_standin("nvidia-mixed", tmp_path) as cluster,
            KubeClient(device_manager(cluster)) as client,
            trio.open_nursery() as nursery,
        ):
            informer: Informer[NodePod] = Informer(
                client, PODS.path(), decode=node_pod, field_selector=f"spec.nodeName={NODE}"
            )
            await nursery.start(informer.run)
            allocator = Allocator(
                manufacturer,
                NODE,
                names,
                PluginState(inventory),
                client,
                lambda: informer.objects() if informer.synced else None,
                pod_resources_socket=kubelet.pod_resources_socket,
                identify_seconds=identify_seconds,
                dev=dev,
                sysfs=tmp_path / "no-sysfs",
            )
            nursery.start_soon(follow_pods, informer.wait_changed, allocator)
            options = PluginOptions(
                kubelet_socket=kubelet.socket,
                pod_resources_socket=kubelet.pod_resources_socket,
                watch_period=0.1,
            )
            plugins = await nursery.start(run_device_plugins, options, allocator)
            yield Stack(kubelet, plugins, client, cluster, names)
            nursery.cancel_scope.cancel()
    finally:
        await trio.to_thread.run_sync(kubelet.stop)
        shutil.rmtree(short, ignore_errors=True)


async def wait_for(stack_: Stack, predicate: Callable[[], bool]) -> None:
    await trio.to_thread.run_sync(stack_.kubelet.wait, predicate)


NVIDIA_SIZES = {
    "nvidia.com/gpu": 2,
    "nvidia.com/gpu.shared": 20,
    "nvidia.com/gpu.sliced": 8,
    "nvidia.com/gpu.partitioned": 2,
    "device.gpustack.ai/nvidia.visibility": 1024,
}


async def nvidia_ready(s: Stack) -> None:
    """Every plugin registered and its first ListAndWatch list in (each on its own stream)."""
    await wait_for(s, lambda: all(len(s.kubelet.devices(r)) == n for r, n in NVIDIA_SIZES.items()))


ALL_NVIDIA = {
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/gpu.sliced",
    "nvidia.com/gpu.partitioned",
    "device.gpustack.ai/nvidia.visibility",
}


async def test_registers_every_mode_and_again_after_a_kubelet_restart(tmp_path: Path) -> None:
    async with stack(tmp_path, "nvidia", nvidia()) as s:
        kubelet = s.kubelet
        await wait_for(s, lambda: set(kubelet.plugins) == ALL_NVIDIA)
        first = {r.resource_name: r for r in kubelet.registrations}
        assert {r.version for r in first.values()} == {"v1beta1"}
        assert first["nvidia.com/gpu.sliced"].endpoint == "gpustack-nvidia-sliced.sock"
        preferring = {n for n, r in first.items() if r.options.get_preferred_allocation_available}
        assert preferring == {
            "nvidia.com/gpu.shared",
            "nvidia.com/gpu.sliced",
            "nvidia.com/gpu.partitioned",
            "device.gpustack.ai/nvidia.visibility",
        }
        # Each plugin's first ListAndWatch message arrives on its own stream: wait for all.
        await nvidia_ready(s)
        assert kubelet.devices("nvidia.com/gpu") == {
            "h100:GPU-0:0000": "Healthy",
            "h100:GPU-1:0000": "Healthy",
        }
        assert sorted(kubelet.devices("nvidia.com/gpu.partitioned")) == [
            "h100:GPU-1:0000",
            "h100:GPU-1:0001",
        ]

        await s.call(kubelet.restart)
        await wait_for(s, lambda: len(kubelet.registrations) == 10)
        await nvidia_ready(s)
        assert set(kubelet.plugins) == ALL_NVIDIA
        with trio.fail_after(HANG):
            while s.plugins.registrations < 10:  # counted once the kubelet's answer is back
                await trio.sleep(0.05)
        assert s.plugins.registrations == 10


async def test_sliced_allocation_is_annotated_injected_and_turns_the_card_unhealthy(
    tmp_path: Path,
) -> None:
    async with stack(tmp_path, "nvidia", nvidia()) as s:
        kubelet = s.kubelet
        await nvidia_ready(s)
        s.add_pod(
            "slice",
            {
                "main": {
                    "nvidia.com/gpu.sliced": "1",
                    "nvidia.com/gpu.sliced.units": "400000",
                    "nvidia.com/gpu.sliced.cores-percentage": "50",
                },
                "sshd": {"device.gpustack.ai/nvidia.visibility": "1"},
            },
        )
        answer = await s.call(
            kubelet.allocate,
            "nvidia.com/gpu.sliced",
            ["h100:GPU-0:0002"],
            (NAMESPACE, "slice"),
            "main",
        )
        assert dict(answer.envs) == {
            "NVIDIA_VISIBLE_DEVICES": "GPU-0",
            "CUDA_DEVICE_MEMORY_LIMIT_0": f"{400_000 * H100_MIB // 1_600_000}m",
            "CUDA_DEVICE_SM_LIMIT": "50",
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "LIBCUDA_LOG_LEVEL": "0",
        }
        assert list(answer.devices) == []

        sidecar = await s.call(
            kubelet.allocate,
            "device.gpustack.ai/nvidia.visibility",
            ["h100:GPU-1:0100"],
            (NAMESPACE, "slice"),
            "sshd",
        )
        assert dict(sidecar.envs) == {"NVIDIA_VISIBLE_DEVICES": "GPU-0"}

        assert await s.annotation("slice") == {
            "main": {
                "devices": {
                    "groups": [
                        {
                            "id": "h100",
                            "manufacturer": "nvidia",
                            "accelerators": [{"id": "GPU-0", "mode": 3, "allocated": 400_000}],
                        }
                    ]
                },
                "deviceIDs": ["h100:GPU-0:0002"],
            },
            "sshd": {
                "devices": {
                    "groups": [
                        {
                            "id": "h100",
                            "manufacturer": "nvidia",
                            "accelerators": [{"id": "GPU-0", "mode": 5}],
                        }
                    ]
                },
                "deviceIDs": ["h100:GPU-1:0100"],
            },
        }

        # Another mode's tokens of GPU-0 turn Unhealthy on the kubelet's open streams.
        await wait_for(
            s, lambda: kubelet.devices("nvidia.com/gpu")["h100:GPU-0:0000"] == "Unhealthy"
        )
        assert kubelet.devices("nvidia.com/gpu")["h100:GPU-1:0000"] == "Healthy"
        await wait_for(
            s, lambda: kubelet.devices("nvidia.com/gpu.shared")["h100:GPU-0:0000"] == "Unhealthy"
        )
        shared = kubelet.devices("nvidia.com/gpu.shared")
        assert {h for i, h in shared.items() if ":GPU-0:" in i} == {"Unhealthy"}
        assert {h for i, h in kubelet.devices("nvidia.com/gpu.sliced").items()} == {"Healthy"}

        # An Exclusive ask for the sliced card is refused, naming the holder.
        s.add_pod("whole", {"main": {"nvidia.com/gpu": "1"}}, age=1)
        with pytest.raises(grpc.RpcError) as refused:
            await s.call(
                kubelet.allocate,
                "nvidia.com/gpu",
                ["h100:GPU-0:0000"],
                (NAMESPACE, "whole"),
                "main",
            )
        assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert refused.value.details() == (
            "card GPU-0 (index 0) is held Sliced by team-p/slice container 'main'; "
            "refusing Exclusive"
        )


async def test_partitioned_allocation_records_the_partition_and_selects_it(
    tmp_path: Path,
) -> None:
    async with stack(tmp_path, "nvidia", nvidia()) as s:
        kubelet = s.kubelet
        await nvidia_ready(s)
        s.add_pod(
            "mig",
            {
                "main": {
                    "nvidia.com/gpu.partitioned": "1",
                    "nvidia.com/gpu.partitioned.mig-1g.10gb": "1",
                    "nvidia.com/gpu.partitioned.units": "197120",
                }
            },
        )
        preferred = await s.call(
            kubelet.preferred,
            "nvidia.com/gpu.partitioned",
            ["h100:GPU-1:0001", "h100:GPU-1:0000"],
            1,
        )
        assert preferred == ["h100:GPU-1:0000"]
        answer = await s.call(
            kubelet.allocate,
            "nvidia.com/gpu.partitioned",
            preferred,
            (NAMESPACE, "mig"),
            "main",
        )
        assert dict(answer.envs) == {"NVIDIA_VISIBLE_DEVICES": "MIG-aaaa"}
        entry = (await s.annotation("mig"))["main"]["devices"]["groups"][0]["accelerators"][0]
        assert entry == {
            "id": "GPU-1",
            "index": 1,
            "mode": 4,
            "allocated": 197_120,
            "allocatedPhysicalProfile": "1g.10gb",
            "allocatedPhysicalID": "MIG-aaaa",
        }
        # The PodResources path: a retried Allocate for the same IDs finds the same container.
        again = await s.call(
            kubelet.allocate,
            "nvidia.com/gpu.partitioned",
            preferred,
            (NAMESPACE, "mig"),
            "main",
        )
        assert dict(again.envs) == {"NVIDIA_VISIBLE_DEVICES": "MIG-aaaa"}


async def test_amd_exclusive_mounts_the_device_nodes(tmp_path: Path) -> None:
    # The card's DRM minors are not its index (card1/renderD129 for card index 0, as when an
    # integrated GPU took the first minors): the nodes come from its PCI address, never the index.
    dev = drm_tree(tmp_path / "dev", AMD_BUS, "card1", "renderD129")
    async with stack(tmp_path, "amd", amd(), dev=dev) as s:
        kubelet = s.kubelet
        await wait_for(s, lambda: len(kubelet.devices("amd.com/gpu")) == 1)
        assert "amd.com/gpu.sliced" not in kubelet.plugins, "no AMD slice count is stated"
        s.add_pod("rocm", {"main": {"amd.com/gpu": "1"}})
        answer = await s.call(
            kubelet.allocate,
            "amd.com/gpu",
            ["rx7800xt:0000:03:00.0:0000"],
            (NAMESPACE, "rocm"),
            "main",
        )
        assert dict(answer.envs) == {"AMD_VISIBLE_DEVICES": "none"}
        expected = [str(dev / "kfd"), str(dev / "dri" / "card1"), str(dev / "dri" / "renderD129")]
        assert [(d.container_path, d.host_path, d.permissions) for d in answer.devices] == [
            (path, path, "rw") for path in expected
        ]
        groups = (await s.annotation("rocm"))["main"]["devices"]["groups"]
        assert groups == [
            {
                "id": "rx7800xt",
                "manufacturer": "amd",
                "accelerators": [{"id": "0000:03:00.0", "mode": 1, "allocated": 1_600_000}],
            }
        ]


async def test_foreign_ids_and_unknown_pods_are_refused(tmp_path: Path) -> None:
    async with stack(tmp_path, "nvidia", nvidia()) as s:
        kubelet = s.kubelet
        await nvidia_ready(s)
        s.add_pod("foreign", {"main": {"nvidia.com/gpu": "1"}})
        with pytest.raises(grpc.RpcError) as foreign:
            await s.call(
                kubelet.allocate,
                "nvidia.com/gpu",
                ["a10g:GPU-9:0000"],
                (NAMESPACE, "foreign"),
                "main",
            )
        assert foreign.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert foreign.value.details() == (
            "1 of 1 device IDs were not advertised as Exclusive tokens of this node: "
            "'a10g:GPU-9:0000'"
        )

        with pytest.raises(grpc.RpcError) as nobody:
            await s.call(
                kubelet.allocate,
                "nvidia.com/gpu.shared",
                ["h100:GPU-0:0001", "h100:GPU-1:0001"],
                (NAMESPACE, "nobody"),
                "main",
            )
        assert nobody.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert nobody.value.details() == (
            "no Pod on node plugin-node awaits 2 nvidia.com/gpu.shared "
            "(device IDs 'h100:GPU-0:0001', 'h100:GPU-1:0001')"
        )
        pod = await s.client.get(PODS.path(NAMESPACE, "foreign"))
        assert contract.ALLOCATION_ANNOTATION not in pod["metadata"].get("annotations", {})


async def test_the_daemon_serves_the_plugins_of_its_recording(tmp_path: Path) -> None:
    """``device-manager serve`` with the plugin on: a replayed H100 in MIG mode, Sliced off."""
    short = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))
    kubelet = FakeKubelet(short / "device-plugins", short / "pod-resources")
    kubelet.start()
    recording = load_recording(RECORDINGS / "nvidia/h100-mig.yaml")
    options = ServeOptions(
        manufacturer="nvidia",
        node_name=NODE,
        monitor_period=0.5,
        secure_port=0,
        bind_address="127.0.0.1",
        publish=False,
        device_plugin=True,
        kube_socket=kubelet.socket,
        pod_resources_socket=kubelet.pod_resources_socket,
        plugin_modes=frozenset(AllocationMode) - {AllocationMode.SLICED},
    )
    try:
        async with (
            cluster_standin("nvidia-mixed", tmp_path) as cluster,
            trio.open_nursery() as nursery,
        ):
            running: Running = await nursery.start(
                lambda task_status: serve(
                    options,
                    replay_backend(recording),
                    kube=device_manager(cluster),
                    task_status=task_status,
                )
            )
            assert running.plugins is not None
            assert AllocationMode.SLICED not in running.plugins.sockets
            expected = ALL_NVIDIA - {"nvidia.com/gpu.sliced"}
            await trio.to_thread.run_sync(kubelet.wait, lambda: set(kubelet.plugins) == expected)
            await trio.to_thread.run_sync(
                kubelet.wait, lambda: len(kubelet.devices("nvidia.com/gpu.partitioned")) == 3
            )
            partitioned = sorted(kubelet.devices("nvidia.com/gpu.partitioned"))
            card = "GPU-4f1b2c3d-0e9a-4b8c-9d7e-6a5b4c3d2e1f"
            assert partitioned[0] == f"h100-80gb-hbm3:{card}:0000"
            add_pod(
                cluster,
                "mig-3g",
                {
                    "main": {
                        "nvidia.com/gpu.partitioned": "1",
                        "nvidia.com/gpu.partitioned.mig-3g.40gb": "1",
                    }
                },
            )
            answer = await trio.to_thread.run_sync(
                kubelet.allocate,
                "nvidia.com/gpu.partitioned",
                [partitioned[0]],
                (NAMESPACE, "mig-3g"),
                "main",
            )
            assert dict(answer.envs) == {
                "NVIDIA_VISIBLE_DEVICES": "MIG-1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
            }
            running.shutdown.set()
    finally:
        await trio.to_thread.run_sync(kubelet.stop)
        shutil.rmtree(short, ignore_errors=True)


async def test_pods_created_through_the_api_are_admitted_by_the_fake_kubelet(
    tmp_path: Path,
) -> None:
    """The stand-in starts a Pod only after the fake kubelet's Allocate calls; no annotation
    is written by anyone but the Device Manager's plugin."""
    async with stack(tmp_path, "nvidia", nvidia()) as s, trio.open_nursery() as nursery:
        config = load_config(s.cluster.kubeconfig, context="admin", environ={})
        assert config is not None
        user = KubeClient(config)  # a user creates the Pods; the plugin writes as itself
        await nvidia_ready(s)
        admission = DeviceAdmission(s.cluster.state, {NODE: s.kubelet}, nursery)
        s.cluster.state.device_admission = admission

        def pod(name: str, limits: dict[str, str]) -> dict[str, Any]:
            return {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {
                    "nodeName": NODE,
                    "containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}],
                },
            }

        sliced = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "800000"}
        await user.create(PODS.path(NAMESPACE), pod("api-slice", sliced))
        with trio.fail_after(HANG):
            while True:
                got = await s.client.get(PODS.path(NAMESPACE, "api-slice"))
                if got.get("status", {}).get("phase") == "Running":
                    break
                await trio.sleep(0.05)
        entry = (await s.annotation("api-slice"))["main"]
        (accelerator,) = entry["devices"]["groups"][0]["accelerators"]
        assert (accelerator["mode"], accelerator["allocated"]) == (3, 800_000)
        assert entry["deviceIDs"] == [f"h100:{accelerator['id']}:0000"]

        # Two whole cards are asked while one is sliced: the kubelet cannot pick, the Pod fails.
        await user.create(PODS.path(NAMESPACE), pod("api-two", {"nvidia.com/gpu": "2"}))
        with trio.fail_after(HANG):
            while True:
                got = await s.client.get(PODS.path(NAMESPACE, "api-two"))
                if got.get("status", {}).get("phase") == "Failed":
                    break
                await trio.sleep(0.05)
        assert got["status"]["reason"] == "UnexpectedAdmissionError"
        assert "nvidia.com/gpu: 2 asked, 1 healthy and free" in got["status"]["message"]
        await user.aclose()
        nursery.cancel_scope.cancel()
