"""STAND-IN COPIES of Kueue's CRDs for the cluster stand-in: served, never acted on.

Hand-written, not Kueue's: each is Kueue v0.17's group, version, kind, plural and scope with a
schema that keeps whatever it is given (``x-kubernetes-preserve-unknown-fields``), so the
stand-in stores and serves LocalQueues and Workloads the way a cluster with Kueue's CRDs does.
Nothing here admits, gates or schedules: the stand-in never imitates Kueue's admission. A test
that needs a Workload's verdict writes the Workload itself, as Kueue would; the real proof runs
on the real control plane with real Kueue (``GPUSTACK_E2E_CONTROL_PLANE=real``).
"""

from __future__ import annotations

from typing import Any, Final

from gpustack_kube.client import KubeClient

GROUP: Final = "kueue.x-k8s.io"
VERSION: Final = "v1beta2"
KINDS: Final = (
    ("LocalQueue", "localqueues", "Namespaced"),
    ("Workload", "workloads", "Namespaced"),
    ("ClusterQueue", "clusterqueues", "Cluster"),
    ("ResourceFlavor", "resourceflavors", "Cluster"),
    ("AdmissionCheck", "admissionchecks", "Cluster"),
)
CRDS: Final = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def crd(kind: str, plural: str, scope: str) -> dict[str, Any]:
    """One stand-in CRD: Kueue's names and scope, any spec and status kept."""
    kept = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(),
                      "listKind": f"{kind}List"},
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": kept, "status": kept},
                }},
            }],
        },
    }  # fmt: skip


async def install(admin: KubeClient) -> None:
    """Create the stand-in copies (as an administrator installing Kueue would its CRDs)."""
    for kind, plural, scope in KINDS:
        await admin.create(CRDS, crd(kind, plural, scope))


def local_queue(namespace: str, name: str, cluster_queue: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue},
    }


def workload_of(
    pod: dict[str, Any], queue: str, status: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A Workload as Kueue's Pod integration makes one for ``pod`` (written by the test)."""
    meta = pod["metadata"]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workload",
        "metadata": {
            "name": f"pod-{meta['name']}-0a1b2",
            "namespace": meta["namespace"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                 "uid": meta["uid"], "controller": True,
                                 "blockOwnerDeletion": True}],
        },
        "spec": {"queueName": queue, "podSets": [{"name": "main", "count": 1}]},
        **({"status": status} if status else {}),
    }  # fmt: skip
