"""Every API path the project sends upstream is built here, from escaped segments.

A name that reached an f-string unescaped could cut the path (``#``), add query parameters to a
privileged request (``?watch=1``) or walk to another resource (``..``, ``/``). So no caller
concatenates names into URLs: it names the resource and the object, and this module escapes each
segment (RFC 3986 unreserved characters only, everything else percent-encoded) and refuses the
segments no proxy may be trusted with (``.``, ``..``, empty). Validation of *what a name may be*
(DNS-1123) belongs to the caller that took it from a request; this module only guarantees that
whatever it is given stays one segment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

from gpustack_core.contract import API_GROUP, CRD_VERSION, KUEUE_API_VERSION


class PathSegmentError(ValueError):
    """A value that cannot stand as one path segment, even escaped."""


def segment(value: str) -> str:
    """``value`` percent-encoded as exactly one path segment."""
    if value in {"", ".", ".."}:
        raise PathSegmentError(f"{value!r} cannot be a path segment")
    return quote(value, safe="")


def join(*segments: str) -> str:
    """``/a/b/c`` from raw segments, each escaped."""
    return "".join("/" + segment(s) for s in segments)


@dataclass(frozen=True)
class Resource:
    """A resource type: where its collection lives, and whether it is namespaced."""

    group: str
    """``""`` for the core group (``/api/v1``), else e.g. ``worker.gpustack.ai``."""
    version: str
    plural: str
    namespaced: bool = True

    @property
    def root(self) -> str:
        """``/api/v1`` or ``/apis/<group>/<version>``."""
        if self.group == "":
            return join("api", self.version)
        return join("apis", self.group, self.version)

    def path(
        self,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """The collection (all namespaces or one), an object, or an object's subresource.

        ``namespace=None`` on a namespaced resource is the cross-namespace collection;
        a subresource needs a name.
        """
        parts: list[str] = []
        if namespace is not None:
            if not self.namespaced:
                raise PathSegmentError(f"{self.plural} is cluster-scoped: no namespace")
            parts += ["namespaces", namespace]
        parts.append(self.plural)
        if name is not None:
            parts.append(name)
        if subresource is not None:
            if name is None:
                raise PathSegmentError(f"{self.plural}/{subresource} needs an object name")
            parts += subresource.split("/")
        return self.root + join(*parts)

    def with_version(self, version: str) -> Resource:
        """The same resource served at another version (a CRD's v1alpha1 behind v1)."""
        return Resource(self.group, version, self.plural, self.namespaced)


PODS: Final = Resource("", "v1", "pods")
NODES: Final = Resource("", "v1", "nodes", namespaced=False)
CONFIGMAPS: Final = Resource("", "v1", "configmaps")
SECRETS: Final = Resource("", "v1", "secrets")
SERVICES: Final = Resource("", "v1", "services")
EVENTS: Final = Resource("", "v1", "events")
NETWORK_POLICIES: Final = Resource("networking.k8s.io", "v1", "networkpolicies")
LEASES: Final = Resource("coordination.k8s.io", "v1", "leases")
POD_METRICS: Final = Resource("metrics.k8s.io", "v1beta1", "pods")
TOKEN_REVIEWS: Final = Resource("authentication.k8s.io", "v1", "tokenreviews", namespaced=False)
SUBJECT_ACCESS_REVIEWS: Final = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", namespaced=False
)

INSTANCES: Final = Resource(API_GROUP, CRD_VERSION, "instances")
"""The Instance CRD's stored version; the worker serves it as ``v1``."""

NODE_FEATURES: Final = Resource("nfd.k8s-sigs.io", "v1alpha1", "nodefeatures")
"""node-feature-discovery's NodeFeature: labels a component asks nfd-master to put on a Node."""
INSTANCE_TYPES: Final = Resource(API_GROUP, CRD_VERSION, "instancetypes", namespaced=False)
"""The cluster-scoped InstanceType CRD: what an Instance's ``spec.type`` names."""
DEVICES: Final = Resource(API_GROUP, CRD_VERSION, "devices", namespaced=False)
"""The cluster-scoped ``Devices`` CRD, one object per node (spec from detection, the ledger)."""
INSTANCE_TYPE_FLAVORS: Final = Resource(
    API_GROUP, CRD_VERSION, "instancetypeflavors", namespaced=False
)
"""The cluster-scoped InstanceTypeFlavor CRD: the read-only catalog of the pools."""
NAMESPACES: Final = Resource("", "v1", "namespaces", namespaced=False)

KUEUE_GROUP, KUEUE_VERSION = KUEUE_API_VERSION.split("/")
"""The Kueue API the InstanceType chain writes (``contract.KUEUE_API_VERSION``)."""
RESOURCE_FLAVORS: Final = Resource(KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", namespaced=False)
CLUSTER_QUEUES: Final = Resource(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", namespaced=False)
LOCAL_QUEUES: Final = Resource(KUEUE_GROUP, KUEUE_VERSION, "localqueues")
ADMISSION_CHECKS: Final = Resource(KUEUE_GROUP, KUEUE_VERSION, "admissionchecks", namespaced=False)
WORKLOADS: Final = Resource(KUEUE_GROUP, KUEUE_VERSION, "workloads")
"""Kueue's Workloads: the node-devices AdmissionCheck answers their ``status.admissionChecks``."""


def node_summary_path(node: str) -> str:
    """The kubelet's ``/stats/summary`` through the API server's node proxy."""
    return NODES.path(name=node, subresource="proxy/stats/summary")


__all__ = [
    "ADMISSION_CHECKS",
    "CLUSTER_QUEUES",
    "CONFIGMAPS",
    "DEVICES",
    "INSTANCES",
    "INSTANCE_TYPE_FLAVORS",
    "KUEUE_GROUP",
    "KUEUE_VERSION",
    "LOCAL_QUEUES",
    "NAMESPACES",
    "NODES",
    "NODE_FEATURES",
    "PODS",
    "POD_METRICS",
    "RESOURCE_FLAVORS",
    "SECRETS",
    "SUBJECT_ACCESS_REVIEWS",
    "TOKEN_REVIEWS",
    "WORKLOADS",
    "PathSegmentError",
    "Resource",
    "join",
    "node_summary_path",
    "segment",
]
