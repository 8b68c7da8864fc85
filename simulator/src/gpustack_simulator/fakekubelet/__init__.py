"""A kubelet's device-plugin half over real gRPC on unix sockets, for the plugin tests.

It serves ``Registration`` on ``<dir>/kubelet.sock`` and ``PodResourcesLister`` on its own
socket; on each ``Register`` it dials the plugin's endpoint, asks its options and follows its
``ListAndWatch`` stream on a thread, as the kubelet's device manager does. ``allocate`` makes
the call the kubelet makes when it admits a container, and records the assignment in
PodResources only after the plugin answered (the kubelet's order). ``restart`` wipes the
device-plugin directory and serves a new ``kubelet.sock``, which is what a kubelet restart
looks like to a plugin.

It speaks :mod:`gpustack_kube.kubeletapi`, the same typed API the Device Manager serves, so a
local run (and the plugin tests) exercise the real gRPC wire on real unix sockets.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from gpustack_kube.kubeletapi import deviceplugin_v1beta1_pb2 as dp
from gpustack_kube.kubeletapi import podresources_v1_pb2 as pr
from gpustack_kube.kubeletapi.api import (
    DevicePluginClient,
    add_pod_resources,
    add_registration,
    unix_target,
)


@dataclass
class Plugin:
    """One registered resource as the kubelet knows it."""

    request: dp.RegisterRequest
    channel: grpc.Channel
    client: DevicePluginClient
    options: dp.DevicePluginOptions
    devices: dict[str, str] = field(default_factory=dict)
    """Device ID → health, from the latest ListAndWatch message."""
    updates: int = 0


class FakeKubelet:
    """Registration + PodResources servers and the calls a kubelet makes."""

    def __init__(self, plugin_dir: Path, pod_resources_dir: Path) -> None:
        self.plugin_dir = plugin_dir
        self.socket = plugin_dir / "kubelet.sock"
        self.pod_resources_socket = pod_resources_dir / "kubelet.sock"
        self._condition = threading.Condition()
        self.plugins: dict[str, Plugin] = {}
        self.registrations: list[dp.RegisterRequest] = []
        self.assigned: dict[tuple[str, str, str], dict[str, list[str]]] = {}
        self.owners: dict[tuple[str, str], str] = {}
        """(namespace, pod) → the UID its assignments belong to: a Pod recreated under the
        same name starts with none, as on a kubelet that dropped the deleted Pod's."""
        self._server: grpc.Server | None = None
        self._pod_resources: grpc.Server | None = None

    # -- servers ---------------------------------------------------------------------------

    def start(self) -> None:
        """Serve Registration (and PodResources, once) on the configured sockets."""
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.pod_resources_socket.parent.mkdir(parents=True, exist_ok=True)
        self._server = grpc.server(ThreadPoolExecutor(max_workers=4))
        add_registration(self._server, self)
        self._server.add_insecure_port(unix_target(self.socket))
        self._server.start()
        if self._pod_resources is None:
            self._pod_resources = grpc.server(ThreadPoolExecutor(max_workers=2))
            add_pod_resources(self._pod_resources, self)
            self._pod_resources.add_insecure_port(unix_target(self.pod_resources_socket))
            self._pod_resources.start()

    def restart(self) -> None:
        """Stop, wipe the device-plugin directory (every plugin socket with it), serve anew."""
        self._stop_registration()
        with self._condition:
            plugins, self.plugins = self.plugins, {}
        for plugin in plugins.values():
            plugin.channel.close()
        shutil.rmtree(self.plugin_dir)
        self.start()

    def stop(self) -> None:
        """Stop both servers and drop the plugin channels."""
        self._stop_registration()
        for plugin in self.plugins.values():
            plugin.channel.close()
        if self._pod_resources is not None:
            self._pod_resources.stop(None)

    def _stop_registration(self) -> None:
        if self._server is not None:
            self._server.stop(None)
            self._server = None

    # -- Registration ----------------------------------------------------------------------

    def register(self, request: dp.RegisterRequest, context: grpc.ServicerContext) -> None:
        """Accept a plugin: dial its endpoint, read its options, follow its ListAndWatch."""
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"version {request.version!r}")
        channel = grpc.insecure_channel(unix_target(self.plugin_dir / request.endpoint))
        client = DevicePluginClient(channel)
        plugin = Plugin(request, channel, client, client.options(timeout=5))
        with self._condition:
            self.registrations.append(request)
            old = self.plugins.get(request.resource_name)
            self.plugins[request.resource_name] = plugin
            self._condition.notify_all()
        if old is not None:
            old.channel.close()
        threading.Thread(target=self._follow, args=(plugin,), daemon=True).start()

    def _follow(self, plugin: Plugin) -> None:
        try:
            for message in plugin.client.list_and_watch():
                with self._condition:
                    plugin.devices = {d.ID: d.health for d in message.devices}
                    plugin.updates += 1
                    self._condition.notify_all()
        except grpc.RpcError:
            return  # the channel was closed, or the plugin went away

    def wait(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Block until ``predicate()`` holds (under the lock), or fail after ``timeout``."""
        with self._condition:
            if not self._condition.wait_for(predicate, timeout=timeout):
                raise TimeoutError("the fake kubelet did not see the expected state in time")

    def devices(self, resource: str) -> dict[str, str]:
        """The latest device list of ``resource`` (ID → health); empty when unregistered."""
        with self._condition:
            plugin = self.plugins.get(resource)
            return dict(plugin.devices) if plugin is not None else {}

    def assigned_ids(self, resource: str) -> set[str]:
        """Device IDs of ``resource`` some container holds (PodResources' view)."""
        with self._condition:
            return {i for held in self.assigned.values() for i in held.get(resource, ())}

    # -- the calls a kubelet makes -------------------------------------------------------------

    def forget(self, namespace: str, name: str) -> None:
        """Drop a Pod's assignments (it was deleted), freeing its devices."""
        with self._condition:
            self.owners.pop((namespace, name), None)
            for key in [k for k in self.assigned if k[:2] == (namespace, name)]:
                del self.assigned[key]

    def adopt(self, namespace: str, name: str, uid: str) -> None:
        """Assignments of ``namespace/name`` belong to ``uid`` from now; a predecessor's go."""
        with self._condition:
            known = self.owners.get((namespace, name))
        if known is not None and known != uid:
            self.forget(namespace, name)
        with self._condition:
            self.owners[(namespace, name)] = uid

    def allocate(
        self, resource: str, ids: list[str], pod: tuple[str, str], container: str
    ) -> dp.ContainerAllocateResponse:
        """Allocate ``ids`` for one container; recorded in PodResources once answered."""
        plugin = self.plugins[resource]
        request = dp.AllocateRequest()
        request.container_requests.add(devices_ids=ids)
        answer = plugin.client.allocate(request, timeout=15)
        with self._condition:
            self.assigned.setdefault((*pod, container), {})[resource] = list(ids)
        return answer.container_responses[0]

    def preferred(self, resource: str, available: list[str], size: int) -> list[str]:
        """The plugin's ``GetPreferredAllocation`` answer for one container."""
        request = dp.PreferredAllocationRequest()
        request.container_requests.add(available_deviceIDs=available, allocation_size=size)
        answer = self.plugins[resource].client.preferred_allocation(request, timeout=5)
        return list(answer.container_responses[0].deviceIDs)

    # -- PodResources ------------------------------------------------------------------------

    def list(self) -> pr.ListPodResourcesResponse:
        """Every recorded assignment, per Pod and container."""
        response = pr.ListPodResourcesResponse()
        with self._condition:
            assigned = {k: dict(v) for k, v in self.assigned.items()}
        pods: dict[tuple[str, str], pr.PodResources] = {}
        for (namespace, name, container), resources in assigned.items():
            pod = pods.get((namespace, name))
            if pod is None:
                pod = response.pod_resources.add(name=name, namespace=namespace)
                pods[(namespace, name)] = pod
            entry = pod.containers.add(name=container)
            for resource, ids in resources.items():
                entry.devices.add(resource_name=resource, device_ids=ids)
        return response

    def get(
        self, request: pr.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.GetPodResourcesResponse:
        """One Pod's assignments, or ``NOT_FOUND``."""
        for pod in self.list().pod_resources:
            if (pod.namespace, pod.name) == (request.pod_namespace, request.pod_name):
                return pr.GetPodResourcesResponse(pod_resources=pod)
        context.abort(grpc.StatusCode.NOT_FOUND, f"pod {request.pod_namespace}/{request.pod_name}")
        raise AssertionError("abort raises")

    def allocatable(self) -> pr.AllocatableResourcesResponse:
        """Every device each registered plugin advertises."""
        response = pr.AllocatableResourcesResponse()
        with self._condition:
            for resource, plugin in self.plugins.items():
                response.devices.add(resource_name=resource, device_ids=list(plugin.devices))
        return response
