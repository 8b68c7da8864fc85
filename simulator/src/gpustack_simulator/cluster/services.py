"""The Device Manager ``Service`` and the ``Endpoints`` the endpoints controller derives from it.

Prometheus finds the Device Managers the way the spec tells it to (``kubernetes_sd_configs``,
``role: endpoints``): through this ``Endpoints`` object, the ``Service`` annotations and the
Pods behind it. So the stand-in recomputes both from the Pods on every Pod change, the way the
controller manager would, and a watch sees the change as it does on a cluster.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from gpustack_core import contract
from gpustack_simulator.scenario import COMPONENT_LABEL, DEVICE_MANAGER_PORT, SYSTEM_NAMESPACE

SERVICE, ENDPOINTS = "Service", "Endpoints"
DEVICE_MANAGER_SERVICE = "gpustack-operator-device-manager"
"""The chart's name for it (``clusters/device-manager-service.yaml``)."""
PORT_NAME = "https"
SELECTOR = {COMPONENT_LABEL: contract.DEVICE_MANAGER_COMPONENT}
CLUSTER_IP = "10.96.32.43"
_UUIDS = uuid.UUID("5d0e1c7a-3b1f-4e4c-9a51-6c1b2d7e0f43")


def _uid(kind: str, namespace: str, name: str) -> str:
    return str(uuid.uuid5(_UUIDS, f"{kind}/{namespace}/{name}"))


def _stamp(epoch: datetime, offset: float) -> str:
    return (epoch + timedelta(seconds=offset)).astimezone(UTC).isoformat().replace("+00:00", "Z")


def device_manager_service(epoch: datetime, pods: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The chart's ``Service``, its ``prometheus.io/port`` set to where ``pods`` listen.

    On a cluster the annotation and the container port are the same constant (32443). Here
    the stand-in rebinds the Pods' port to wherever each process listens, so the annotation
    has to follow it, or Prometheus' relabelling would address a port nothing serves.
    """
    port = scrape_port(selected(SYSTEM_NAMESPACE, SELECTOR, pods))
    labels = {
        "app.kubernetes.io/name": "gpustack-operator",
        COMPONENT_LABEL: contract.DEVICE_MANAGER_COMPONENT,
    }
    return {
        "apiVersion": "v1",
        "kind": SERVICE,
        "metadata": {
            "name": DEVICE_MANAGER_SERVICE,
            "namespace": SYSTEM_NAMESPACE,
            "uid": _uid("service", SYSTEM_NAMESPACE, DEVICE_MANAGER_SERVICE),
            "creationTimestamp": _stamp(epoch, -86_200),
            "labels": labels,
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(port),
                "prometheus.io/path": "/metrics",
                "prometheus.io/scheme": "https",
            },
        },
        "spec": {
            "type": "ClusterIP",
            "selector": dict(SELECTOR),
            "ports": [{"name": PORT_NAME, "protocol": "TCP", "port": 443, "targetPort": PORT_NAME}],
            "clusterIP": CLUSTER_IP,
            "clusterIPs": [CLUSTER_IP],
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "internalTrafficPolicy": "Cluster",
            "sessionAffinity": "None",
        },
        "status": {"loadBalancer": {}},
    }


def selected(
    namespace: str, selector: Mapping[str, str], pods: Iterable[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The Pods of ``namespace`` a ``Service`` selector matches."""
    return [
        pod
        for pod in pods
        if pod["metadata"].get("namespace") == namespace
        and all((pod["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
    ]


def https_port(pod: Mapping[str, Any]) -> int | None:
    """The Pod's container port named ``https`` (what ``targetPort: https`` resolves to)."""
    for container in pod.get("spec", {}).get("containers", []):
        for port in container.get("ports", []):
            if port.get("name") == PORT_NAME:
                return int(port["containerPort"])
    return None


def scrape_port(pods: Iterable[Mapping[str, Any]]) -> int:
    """The one port the ``prometheus.io/port`` annotation can name for all the Pods.

    Counted over the Pods that have an address (those are what Prometheus scrapes), else over
    all of them; the most common wins, the lowest on a tie. Only an in-process test binding
    several Device Managers to one IP at different ports makes them disagree, and such a test
    does not scrape through Prometheus.
    """
    pods = list(pods)
    addressed = [p for p in pods if p.get("status", {}).get("podIP")]
    ports = Counter(port for p in addressed or pods if (port := https_port(p)) is not None)
    if not ports:
        return DEVICE_MANAGER_PORT
    return min(ports, key=lambda port: (-ports[port], port))


def _in_endpoints(pod: Mapping[str, Any]) -> bool:
    """The endpoints controller's rule: an IP, not terminal, not terminating."""
    status = pod.get("status", {})
    return (
        bool(status.get("podIP"))
        and status.get("phase") not in {"Succeeded", "Failed"}
        and not pod["metadata"].get("deletionTimestamp")
    )


def _ready(pod: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in pod.get("status", {}).get("conditions", [])
    )


def _address(pod: Mapping[str, Any]) -> dict[str, Any]:
    """One address; ``targetRef`` without ``resourceVersion``, as controllers since 1.25 write.

    Carrying the Pod's version would rewrite the ``Endpoints`` on every Pod status write.
    """
    meta = pod["metadata"]
    return {
        "ip": pod["status"]["podIP"],
        "nodeName": pod["spec"]["nodeName"],
        "targetRef": {
            "kind": "Pod",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
        },
    }


def endpoints_for(service: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``Endpoints`` of ``service`` over ``pods``: one subset per resolved port number.

    Ready Pods go under ``addresses``, unready ones under ``notReadyAddresses`` (Prometheus
    still makes targets of them, labelled ``__meta_kubernetes_endpoint_ready="false"``); Pods
    without an IP, terminal or terminating are left out. Empty lists are omitted and an
    ``Endpoints`` with no Pod has no ``subsets`` key, as the API server serializes them.
    """
    meta = service["metadata"]
    by_port: dict[int, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for pod in selected(meta["namespace"], service["spec"]["selector"], pods):
        port = https_port(pod)
        if port is None or not _in_endpoints(pod):
            continue
        ready, unready = by_port.setdefault(port, ([], []))
        (ready if _ready(pod) else unready).append(_address(pod))
    subsets = []
    for port, (ready, unready) in sorted(by_port.items()):
        subset: dict[str, Any] = {}
        if ready:
            subset["addresses"] = sorted(ready, key=_order)
        if unready:
            subset["notReadyAddresses"] = sorted(unready, key=_order)
        subset["ports"] = [{"name": PORT_NAME, "port": port, "protocol": "TCP"}]
        subsets.append(subset)
    endpoints: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": ENDPOINTS,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": _uid("endpoints", meta["namespace"], meta["name"]),
            "creationTimestamp": meta["creationTimestamp"],
            "labels": dict(meta.get("labels") or {}),
        },
    }
    if subsets:
        endpoints["subsets"] = subsets
    return endpoints


def _order(address: Mapping[str, Any]) -> tuple[str, str]:
    return str(address["ip"]), str(address["targetRef"]["uid"])
