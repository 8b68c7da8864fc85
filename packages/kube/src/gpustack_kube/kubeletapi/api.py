"""Typed doors onto the generated kubelet API modules: servers, clients, and the messages.

protoc's gRPC glue (``*_pb2_grpc.py``) is unannotated and names its methods in CamelCase; the
rest of the project talks to it only through this module, which states every request and
response type. A service is written as a plain object with snake_case methods (a Protocol
below) and mounted on a ``grpc.Server`` by ``add_*``; a client is a small class whose methods
return the typed message. Unix-socket addresses are spelled once, by :func:`unix_target`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import grpc

from gpustack_kube.kubeletapi import deviceplugin_v1beta1_pb2 as dp
from gpustack_kube.kubeletapi import deviceplugin_v1beta1_pb2_grpc as dp_grpc
from gpustack_kube.kubeletapi import podresources_v1_pb2 as pr
from gpustack_kube.kubeletapi import podresources_v1_pb2_grpc as pr_grpc

VERSION = "v1beta1"
"""The device-plugin API version a plugin registers with."""
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


def unix_target(path: Path) -> str:
    """The gRPC address of a unix socket (absolute path, ``unix:`` scheme)."""
    return f"unix:{path.resolve()}"


# --- device plugin: served by us, called by the kubelet -------------------------------------


class DevicePluginService(Protocol):
    """What one plugin server answers; each call runs on a gRPC worker thread."""

    def options(self) -> dp.DevicePluginOptions:
        """``GetDevicePluginOptions``."""
        ...

    def list_and_watch(self, context: grpc.ServicerContext) -> Iterator[dp.ListAndWatchResponse]:
        """``ListAndWatch``: the full device list now, then again on every change."""
        ...

    def preferred_allocation(
        self, request: dp.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> dp.PreferredAllocationResponse:
        """``GetPreferredAllocation``: which of the available IDs the plugin would pick."""
        ...

    def allocate(
        self, request: dp.AllocateRequest, context: grpc.ServicerContext
    ) -> dp.AllocateResponse:
        """``Allocate``: grant the IDs and answer each container's injection."""
        ...


class _DevicePluginServicer(dp_grpc.DevicePluginServicer):
    """Maps the generated CamelCase methods onto a :class:`DevicePluginService`."""

    def __init__(self, service: DevicePluginService) -> None:
        self._service = service

    def GetDevicePluginOptions(  # noqa: N802 - the generated servicer's method name
        self, request: dp.Empty, context: grpc.ServicerContext
    ) -> dp.DevicePluginOptions:
        return self._service.options()

    def ListAndWatch(  # noqa: N802
        self, request: dp.Empty, context: grpc.ServicerContext
    ) -> Iterator[dp.ListAndWatchResponse]:
        return self._service.list_and_watch(context)

    def GetPreferredAllocation(  # noqa: N802
        self, request: dp.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> dp.PreferredAllocationResponse:
        return self._service.preferred_allocation(request, context)

    def Allocate(  # noqa: N802
        self, request: dp.AllocateRequest, context: grpc.ServicerContext
    ) -> dp.AllocateResponse:
        return self._service.allocate(request, context)

    def PreStartContainer(  # noqa: N802
        self, request: dp.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> dp.PreStartContainerResponse:
        # Never asked for (pre_start_required is false), answered empty if a kubelet calls.
        return dp.PreStartContainerResponse()


def add_device_plugin(server: grpc.Server, service: DevicePluginService) -> None:
    """Mount ``service`` as ``v1beta1.DevicePlugin`` on ``server``."""
    dp_grpc.add_DevicePluginServicer_to_server(_DevicePluginServicer(service), server)


class DevicePluginClient:
    """The kubelet's side of a plugin (the fake kubelet, tests)."""

    def __init__(self, channel: grpc.Channel) -> None:
        self._stub = dp_grpc.DevicePluginStub(channel)

    def options(self, timeout: float) -> dp.DevicePluginOptions:
        """``GetDevicePluginOptions``."""
        answer: dp.DevicePluginOptions = self._stub.GetDevicePluginOptions(
            dp.Empty(), timeout=timeout
        )
        return answer

    def list_and_watch(self) -> Iterator[dp.ListAndWatchResponse]:
        """``ListAndWatch``; the iterator ends when the plugin closes the stream.

        The returned object is also a ``grpc.Call``: ``cancel()`` it to stop watching.
        """
        stream: Iterator[dp.ListAndWatchResponse] = self._stub.ListAndWatch(dp.Empty())
        return stream

    def preferred_allocation(
        self, request: dp.PreferredAllocationRequest, timeout: float
    ) -> dp.PreferredAllocationResponse:
        """``GetPreferredAllocation``."""
        answer: dp.PreferredAllocationResponse = self._stub.GetPreferredAllocation(
            request, timeout=timeout
        )
        return answer

    def allocate(self, request: dp.AllocateRequest, timeout: float) -> dp.AllocateResponse:
        """``Allocate``; a refusal raises ``grpc.RpcError`` with the plugin's status code."""
        answer: dp.AllocateResponse = self._stub.Allocate(request, timeout=timeout)
        return answer


# --- registration: served by the kubelet, called by us ---------------------------------------


class RegistrationService(Protocol):
    """The kubelet's ``Registration`` service (implemented by the fake kubelet)."""

    def register(self, request: dp.RegisterRequest, context: grpc.ServicerContext) -> None:
        """Accept a plugin, or abort the call with a status naming why not."""
        ...


class _RegistrationServicer(dp_grpc.RegistrationServicer):
    def __init__(self, service: RegistrationService) -> None:
        self._service = service

    def Register(  # noqa: N802
        self, request: dp.RegisterRequest, context: grpc.ServicerContext
    ) -> dp.Empty:
        self._service.register(request, context)
        return dp.Empty()


def add_registration(server: grpc.Server, service: RegistrationService) -> None:
    """Mount ``service`` as ``v1beta1.Registration`` on ``server``."""
    dp_grpc.add_RegistrationServicer_to_server(_RegistrationServicer(service), server)


def register(channel: grpc.Channel, request: dp.RegisterRequest, timeout: float) -> None:
    """Register one plugin with the kubelet; raises ``grpc.RpcError`` when it refuses."""
    dp_grpc.RegistrationStub(channel).Register(request, timeout=timeout)


# --- PodResources: served by the kubelet, read by us ------------------------------------------


class PodResourcesService(Protocol):
    """The kubelet's ``PodResourcesLister`` (implemented by the fake kubelet)."""

    def list(self) -> pr.ListPodResourcesResponse:
        """Every Pod's containers and the device IDs assigned to each."""
        ...

    def get(
        self, request: pr.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.GetPodResourcesResponse:
        """One Pod's, or abort with ``NOT_FOUND``."""
        ...

    def allocatable(self) -> pr.AllocatableResourcesResponse:
        """Every device the kubelet may assign."""
        ...


class _PodResourcesServicer(pr_grpc.PodResourcesListerServicer):
    def __init__(self, service: PodResourcesService) -> None:
        self._service = service

    def List(  # noqa: N802
        self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.ListPodResourcesResponse:
        return self._service.list()

    def Get(  # noqa: N802
        self, request: pr.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.GetPodResourcesResponse:
        return self._service.get(request, context)

    def GetAllocatableResources(  # noqa: N802
        self, request: pr.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pr.AllocatableResourcesResponse:
        return self._service.allocatable()


def add_pod_resources(server: grpc.Server, service: PodResourcesService) -> None:
    """Mount ``service`` as ``v1.PodResourcesLister`` on ``server``."""
    pr_grpc.add_PodResourcesListerServicer_to_server(_PodResourcesServicer(service), server)


def list_pod_resources(channel: grpc.Channel, timeout: float) -> pr.ListPodResourcesResponse:
    """``PodResourcesLister.List``; raises ``grpc.RpcError`` when the kubelet does not answer."""
    answer: pr.ListPodResourcesResponse = pr_grpc.PodResourcesListerStub(channel).List(
        pr.ListPodResourcesRequest(), timeout=timeout
    )
    return answer


PodResourcesKey = tuple[str, str, str]
"""(namespace, pod, container), as PodResources names each container."""


def read_pod_resources(socket: Path, timeout: float) -> dict[PodResourcesKey, dict[str, set[str]]]:
    """Every container's assigned device IDs per resource, from the kubelet at ``socket``.

    Blocking (run it in a thread); raises ``grpc.RpcError`` when the kubelet does not answer.
    """
    with grpc.insecure_channel(unix_target(socket)) as channel:
        listed = list_pod_resources(channel, timeout)
    answer: dict[PodResourcesKey, dict[str, set[str]]] = {}
    for pod in listed.pod_resources:
        for container in pod.containers:
            devices = answer.setdefault((pod.namespace, pod.name, container.name), {})
            for assigned in container.devices:
                devices.setdefault(assigned.resource_name, set()).update(assigned.device_ids)
    return answer
