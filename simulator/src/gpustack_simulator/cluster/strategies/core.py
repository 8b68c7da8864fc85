"""The core group's kinds with rules of their own: Pods, Services, Namespaces and Nodes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from gpustack_simulator.cluster import corerules, nfd
from gpustack_simulator.cluster.strategies.base import Strategy
from gpustack_simulator.cluster.strategies.meta import Cause
from gpustack_simulator.podstatus import (
    canonical_node_quantities,
    canonical_pod_quantities,
    qos_class,
)

if TYPE_CHECKING:
    from gpustack_simulator.cluster.apiserver import ApiServer, Pending
    from gpustack_simulator.cluster.resources import Resource


class PodStrategy(Strategy):
    """A Pod: quantities stored canonically, a spec that may barely change, run by a node."""

    def validate_update(
        self, resource: Resource, obj: dict[str, Any], old: Mapping[str, Any]
    ) -> list[Cause]:
        """``ValidatePodUpdate``: only a few spec fields may change (``corerules``)."""
        return corerules.pod_update(old, obj) + super().validate_update(resource, obj, old)

    def canonicalize(
        self,
        api: ApiServer,
        resource: Resource,
        obj: dict[str, Any],
        previous: Mapping[str, Any] | None,
    ) -> None:
        """Quantities as the server stores them; a new Pod's phase and QoS class."""
        canonical_pod_quantities(obj)
        if "status" not in obj:
            # The QoS class is the API server's, fixed at creation (kube-apiserver refuses
            # a later change): computed from the requests, not BestEffort for every Pod.
            obj["status"] = {"phase": "Pending", "qosClass": qos_class(obj.get("spec") or {})}

    def before_commit(self, api: ApiServer, pending: Pending) -> None:
        """A Pod created through the API is the node simulator's to run."""
        if pending.operation == "CREATE":
            # Even when it names its node already (scenario Pods, put into the store
            # directly, are never adopted).
            api.nodes.managed.add(str(pending.obj["metadata"]["uid"]))

    def after_write(self, api: ApiServer, resource: Resource, stored: Mapping[str, Any]) -> None:
        """The node simulator binds, starts or finishes it; what derives from Pods follows."""
        api.nodes.reconcile(api)
        api.state.pods_changed()

    def after_remove(self, api: ApiServer, resource: Resource, gone: Mapping[str, Any]) -> None:
        """What derives from Pods (the Device Manager Endpoints) follows."""
        api.state.pods_changed()

    def graceful(self, api: ApiServer, obj: Mapping[str, Any], options: Mapping[str, Any]) -> bool:
        """A bound Pod terminates through its kubelet unless the delete asks for no grace."""
        return api.nodes.graceful(obj, options)


class ServiceStrategy(Strategy):
    """A Service: a cluster IP and node ports allocated by the server."""

    def canonicalize(
        self,
        api: ApiServer,
        resource: Resource,
        obj: dict[str, Any],
        previous: Mapping[str, Any] | None,
    ) -> None:
        """Cluster IP, port defaults and node ports (the Service REST's allocation)."""
        api.nodes.service_defaults(obj, previous)

    def before_commit(self, api: ApiServer, pending: Pending) -> None:
        """Allocated again: a node port may have been taken while the write was admitted."""
        api.nodes.service_defaults(pending.obj, pending.current)


class NamespaceStrategy(Strategy):
    """A Namespace: its ``kubernetes.io/metadata.name`` label is its name (``corerules``)."""

    def canonicalize(
        self,
        api: ApiServer,
        resource: Resource,
        obj: dict[str, Any],
        previous: Mapping[str, Any] | None,
    ) -> None:
        """Force the name label, whatever the request carried."""
        corerules.name_namespace(obj)


class NodeStrategy(Strategy):
    """A Node: registered with its status; its Pods and NFD labels follow its writes."""

    keeps_status_on_create: ClassVar[bool] = True

    def canonicalize(
        self,
        api: ApiServer,
        resource: Resource,
        obj: dict[str, Any],
        previous: Mapping[str, Any] | None,
    ) -> None:
        """Capacity and allocatable as the server stores them."""
        canonical_node_quantities(obj)

    def after_write(self, api: ApiServer, resource: Resource, stored: Mapping[str, Any]) -> None:
        """Pods waiting for a node are placed; nfd-master's labels are put back on it."""
        api.nodes.reconcile(api)
        nfd.sync(api.store)
