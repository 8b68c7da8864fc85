"""The worker's warm path: Instances, their Pods and the Device Manager Pods, kept by informers.

The subresource needs three objects per read (the Instance, its backing Pod, the node's Device
Manager Pods). Fetching them live costs three API-server round trips per read and loads the API
server with every dashboard refresh; client-go answers such reads from a cache fed by one watch
per collection. So does the worker: three label- or namespace-scoped informers, each object
decoded once as it arrives.

Scoping stays exact: a Pod only backs an Instance when its part-of label is the UID of the
Instance being answered for (checked on every read by the subresource), and the answer names
that UID in its metadata, so figures are never attributed across incarnations. A recreated
Instance is seen within the Instance watch's delay (the stated bound; the reference read it live
at the price of one API request per read); until then the answer is the previous incarnation's,
labelled as such. A key the cache does not hold is read live (read-through): an object created a
moment ago is never reported missing because its watch event is still in flight, and a view
that has not synced is never consulted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import trio

from gpustack_core import contract
from gpustack_core.decoding import ContractError
from gpustack_core.instance import resources_of
from gpustack_core.pods import Pod, pod_from_object
from gpustack_core.sample import totals_from_resources
from gpustack_core.usage import DeclaredTotals
from gpustack_kube.client import KubeClient
from gpustack_kube.informer import Informer
from gpustack_kube.paths import INSTANCES, PODS

NODE_INDEX = "node"


def _by_node(pod: Pod) -> Iterable[str]:
    return (pod.spec.node_name,) if pod.spec.node_name else ()


@dataclass(frozen=True)
class InstanceFacts:
    """What the subresource reads of an Instance: its UID and the totals its spec declares.

    Decoded once per Instance version (the informer keeps the same object while the
    resourceVersion stands, which is what lets the subresource reuse an answer). Holding the
    whole Instance for two fields cost more memory than every other part of the view.
    """

    uid: str
    fallback: DeclaredTotals
    """The Instance's own ``spec.resources`` limits: the answer while it has no Pod."""

    @classmethod
    def of(cls, obj: dict[str, Any]) -> InstanceFacts:
        """From the API object; ``ContractError`` for a missing name or bad ``spec.resources``."""
        metadata = obj.get("metadata")
        if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
            raise ContractError("Instance without metadata.name")
        what = f"Instance {metadata.get('namespace', '')}/{metadata['name']}"
        fallback = totals_from_resources(resources_of(obj, what=what).limits(), what=what)
        return cls(str(metadata.get("uid", "")), fallback)


@dataclass
class Views:
    """The three informers; ``None`` from a lookup means "ask the API server"."""

    instances: Informer[InstanceFacts]
    pods: Informer[Pod]
    device_managers: Informer[Pod]

    @classmethod
    def of(cls, client: KubeClient, system_namespace: str) -> Views:
        """Informers scoped to exactly what the subresource may read."""
        return cls(
            # One whose spec.resources do not decode stays out of the view: it is read live,
            # and refused there with the reason, as it would be without the cache.
            instances=Informer(client, INSTANCES.path(), decode=InstanceFacts.of),
            pods=Informer(
                client,
                PODS.path(),
                decode=pod_from_object,
                label_selector=contract.PART_OF_LABEL,
            ),
            device_managers=Informer(
                client,
                PODS.path(system_namespace),
                decode=pod_from_object,
                label_selector=contract.DEVICE_MANAGER_SELECTOR,
                indexers={NODE_INDEX: _by_node},
            ),
        )

    async def run(self) -> None:
        """Run every informer until cancelled (each repairs its own watch)."""
        async with trio.open_nursery() as nursery:
            for informer in (self.instances, self.pods, self.device_managers):
                nursery.start_soon(informer.run)

    @property
    def synced(self) -> bool:
        """Every informer has listed once."""
        return self.instances.synced and self.pods.synced and self.device_managers.synced

    def instance(self, namespace: str, name: str) -> InstanceFacts | None:
        """The cached Instance, or ``None`` when the cache cannot vouch for it."""
        if not self.instances.synced:
            return None
        return self.instances.get(namespace, name)

    def pod(self, namespace: str, name: str) -> Pod | None:
        """The cached part-of-labelled Pod, or ``None`` (read it live)."""
        if not self.pods.synced:
            return None
        return self.pods.get(namespace, name)

    def managers_on(self, node: str) -> list[Pod] | None:
        """The node's Device Manager Pods, or ``None`` when the view has not synced."""
        if not self.device_managers.synced:
            return None
        return self.device_managers.by_index(NODE_INDEX, node)
