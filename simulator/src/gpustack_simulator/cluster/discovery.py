"""Discovery documents for exactly what the stand-in serves.

Clients (kubectl, the kubernetes client) discover before they call; a group listed here that is
not served — or served but not listed — would make them fail in ways no real cluster does.
"""

from __future__ import annotations

from typing import Any

from gpustack_core import contract
from gpustack_simulator.cluster.resources import Registry

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


PROXY = _resource("nodes/proxy", "NodeProxyOptions", ["get"], namespaced=False)
"""The kubelet behind the node proxy: served beside the object routes, listed with them."""

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
}
"""The groups served by fixed routes; every object group comes from the registry."""

AGGREGATED_GROUPS = (contract.API_GROUP, contract.SETTINGS_API_GROUP)
"""The groups the worker serves at ``v1`` behind the aggregator (the chart's APIServices)."""


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def _served(registry: Registry, *, metrics_api: bool, aggregated: bool) -> dict[str, list[str]]:
    served: dict[str, list[str]] = {}
    for group, versions in registry.groups():
        served[group] = list(versions)
    for group, by_version in GROUPS.items():
        if group == "metrics.k8s.io" and not metrics_api:
            continue
        served.setdefault(group, []).extend(v for v in by_version if v not in served[group])
    if aggregated:  # the worker's two APIServices: its Instances and the operator Settings
        for group in AGGREGATED_GROUPS:
            served.setdefault(group, []).insert(0, "v1")
    return served


def _listed(registry: Registry, group: str, version: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for resource in registry.listed(group, version):
        entries.append(resource.discovery())
        if resource.status:
            entries.append(
                _resource(
                    f"{resource.plural}/status",
                    resource.kind,
                    ["get", "patch", "update"],
                    namespaced=resource.namespaced,
                )
            )
    if not group:
        entries.append(PROXY)
    return entries + list(GROUPS.get(group, {}).get(version, []))


def document(
    path: str,
    group: str,
    version: str,
    *,
    metrics_api: bool,
    aggregated: bool,
    registry: Registry,
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
        return {
            "kind": "APIResourceList",
            "groupVersion": "v1",
            "resources": _listed(registry, "", "v1"),
        }
    served = _served(registry, metrics_api=metrics_api, aggregated=aggregated)
    if path == "/apis":
        groups = [_group(name, versions) for name, versions in served.items() if versions]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
    versions = served.get(group, [])
    if not versions:
        return None
    if not version:
        return {"kind": "APIGroup", "apiVersion": "v1", **_group(group, versions)}
    listed = _listed(registry, group, version)
    if not listed:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}",
        "resources": listed,
    }
