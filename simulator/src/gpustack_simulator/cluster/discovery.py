"""Discovery documents for exactly what the stand-in serves.

Clients (kubectl, the kubernetes client) discover before they call; a group listed here that is
not served — or served but not listed — would make them fail in ways no real cluster does.
"""

from __future__ import annotations

from typing import Any

VERSION = {
    "major": "1",
    "minor": "34",
    "gitVersion": "v1.34.0+gpustack-standin",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-11-29T00:00:00Z",
    "goVersion": "go1.24.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def _resource(
    name: str,
    kind: str,
    verbs: list[str],
    *,
    namespaced: bool = True,
    singular: str = "",
    short: tuple[str, ...] = (),
) -> dict[str, Any]:
    resource: dict[str, Any] = {
        "name": name,
        "singularName": singular,
        "namespaced": namespaced,
        "kind": kind,
        "verbs": list(verbs),
    }
    if short:
        resource["shortNames"] = list(short)  # what `kubectl get svc` resolves through
    return resource


READ = ["get", "list", "watch"]

CORE = [
    _resource("pods", "Pod", READ, singular="pod", short=("po",)),
    _resource("services", "Service", READ, singular="service", short=("svc",)),
    _resource("endpoints", "Endpoints", READ, singular="endpoints", short=("ep",)),
    _resource("nodes", "Node", ["get", "list", "watch"], namespaced=False, singular="node"),
    _resource("nodes/proxy", "NodeProxyOptions", ["get"], namespaced=False),
    _resource("configmaps", "ConfigMap", ["get"], singular="configmap"),
]

GROUPS: dict[str, dict[str, list[dict[str, Any]]]] = {
    "authorization.k8s.io": {
        "v1": [
            _resource("subjectaccessreviews", "SubjectAccessReview", ["create"], namespaced=False),
            _resource(
                "selfsubjectaccessreviews", "SelfSubjectAccessReview", ["create"], namespaced=False
            ),
        ]
    },
    "authentication.k8s.io": {
        "v1": [
            _resource("tokenreviews", "TokenReview", ["create"], namespaced=False),
        ]
    },
    "metrics.k8s.io": {"v1beta1": [_resource("pods", "PodMetrics", ["get", "list"])]},
    "worker.gpustack.ai": {
        "v1alpha1": [
            _resource("instances", "Instance", ["get", "list", "watch"], singular="instance"),
        ]
    },
}


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def _versions(group: str, *, metrics_api: bool, aggregated: bool) -> list[str]:
    if group == "metrics.k8s.io" and not metrics_api:
        return []
    versions = list(GROUPS.get(group, {}))
    if group == "worker.gpustack.ai" and aggregated:
        versions.insert(0, "v1")  # served by the worker through the aggregator
    return versions


def document(
    path: str, group: str, version: str, *, metrics_api: bool, aggregated: bool
) -> dict[str, Any] | None:
    """The discovery document at ``path``, or ``None`` where nothing is served."""
    if path == "/api":
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}
            ],
        }
    if path == "/api/v1":
        return {"kind": "APIResourceList", "groupVersion": "v1", "resources": CORE}
    if path == "/apis":
        groups = []
        for name in GROUPS:
            versions = _versions(name, metrics_api=metrics_api, aggregated=aggregated)
            if versions:
                groups.append(_group(name, versions))
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
    versions = _versions(group, metrics_api=metrics_api, aggregated=aggregated)
    if not versions:
        return None
    if not version:
        return {"kind": "APIGroup", "apiVersion": "v1", **_group(group, versions)}
    if version not in GROUPS.get(group, {}):
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}",
        "resources": GROUPS[group][version],
    }
