"""The core group's kinds with rules of their own: Services, Namespaces, Nodes, Events.

(Pods: ``pods``.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from gpustack_simulator.cluster import corerules, nfd
from gpustack_simulator.cluster.strategies.base import Strategy
from gpustack_simulator.cluster.strategies.meta import Cause, NameRule, dns1035, label
from gpustack_simulator.podstatus import canonical_node_quantities

if TYPE_CHECKING:
    from gpustack_simulator.cluster.apiserver import ApiServer, Pending
    from gpustack_simulator.cluster.resources import Resource


class ServiceStrategy(Strategy):
    """A Service: named by a DNS-1035 label; a cluster IP and node ports allocated for it."""

    name_rule: ClassVar[NameRule] = dns1035

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
    """A Namespace: named by a DNS-1123 label, repeated by its name label (``corerules``)."""

    name_rule: ClassVar[NameRule] = label

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


class EventStrategy(Strategy):
    """A core/v1 Event: no object-meta check at all.

    kube-apiserver's ``ValidateEventCreate`` runs only the legacy Event checks for a v1 Event
    (``ValidateObjectMeta`` is for ``events.k8s.io``), so an Event may be named by a
    ``generateName`` of ``<object>.`` — the worker's Events are.
    """

    def validate(self, resource: Resource, obj: dict[str, Any]) -> list[Cause]:
        """Nothing the stand-in checks (the namespace is the path's, already a valid one)."""
        return []
