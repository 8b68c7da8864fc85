"""The stand-in's live state and the handle tests and ``simulator up`` drive it through."""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import yaml

from gpustack_simulator import packagedata
from gpustack_simulator.cluster import services
from gpustack_simulator.cluster.paging import ListChunks
from gpustack_simulator.cluster.pki import ClusterPKI
from gpustack_simulator.cluster.resources import CONFIGMAP, INSTANCE, NODE, POD, Registry, from_crd
from gpustack_simulator.cluster.selectors import Narrowing
from gpustack_simulator.cluster.services import ENDPOINTS, SERVICE
from gpustack_simulator.cluster.store import Store
from gpustack_simulator.scenario import SYSTEM_NAMESPACE as DEVICE_MANAGER_NAMESPACE
from gpustack_simulator.scenario import Expanded, Fault, UserSpec

SYSTEM_NAMESPACE = "kube-system"
_SERVICE_PODS = Narrowing(labels=tuple(services.SELECTOR.items()))
"""The Device Manager Service's selector, as the store's label index reads it."""
AUTH_CONFIGMAP = "extension-apiserver-authentication"
INSTANCE_CRD = packagedata.crd("instances")
"""The project's Instance CRD: Instances written through the stand-in are validated by it."""
DEVICES_CRD = packagedata.crd("devices")
"""The project's Devices CRD (cluster-scoped, one per node), served and validated the same way."""
INSTANCETYPES_CRD = packagedata.crd("instancetypes")
"""The InstanceType CRD (cluster-scoped): what an Instance's ``spec.type`` names."""
INSTANCETYPEFLAVORS_CRD = packagedata.crd("instancetypeflavors")
"""The InstanceTypeFlavor CRD (cluster-scoped): the catalog the worker derives from the nodes."""
METRICACCESS_CRD = packagedata.CRDS / "metricaccesses.observability.gpustack.ai.yaml"
"""The MetricAccess CRD (namespaced, opt-in): a tenant's declared slice of metrics."""


class Clock(Protocol):
    """Scenario time source."""

    def __call__(self) -> float:
        """Scenario seconds now."""
        ...


MAX_SCENARIO_SECONDS = 10 * 366 * 86400.0
"""How far scenario time may run: ten years. Every timestamp the stand-in serves is the
scenario's start plus scenario time, and a clock pushed past what a date can hold would make
every later kubelet read fail; a decade covers any series a scenario can hold."""


class ClockRangeError(ValueError):
    """An advance that would leave the range scenario time is defined on."""


@dataclass
class ScenarioClock:
    """Seconds since the stand-in started, plus whatever a test advanced it by."""

    source: Callable[[], float] = time.monotonic
    offset: float = 0.0
    started: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.started = self.source()

    def __call__(self) -> float:
        """Scenario seconds now: elapsed since start plus every advance."""
        return self.source() - self.started + self.offset

    def advance(self, seconds: float) -> None:
        """Jump scenario time forward (load rising, a fault window opening).

        Refused, leaving the clock as it was, for a non-finite or negative step and for one
        that would carry scenario time past :data:`MAX_SCENARIO_SECONDS`.
        """
        if not math.isfinite(seconds) or seconds < 0:
            raise ClockRangeError(
                f"advanceSeconds must be a finite number of seconds >= 0, not {seconds}: "
                "scenario time only moves forward"
            )
        if self() + seconds > MAX_SCENARIO_SECONDS:
            raise ClockRangeError(
                f"advanceSeconds {seconds:g} would carry scenario time past "
                f"{MAX_SCENARIO_SECONDS:g} s (ten years), the range its timestamps are defined on"
            )
        self.offset += seconds


DeviceAdmission = Callable[[dict[str, Any], Callable[[], None]], bool]
"""``(pod, start) → start now?``; ``False`` means it will call ``start()`` (or fail the Pod)."""


@dataclass
class ClusterState:
    """Everything the routes read; every mutation goes through here so watches see it."""

    expanded: Expanded
    pki: ClusterPKI
    clock: ScenarioClock = field(default_factory=ScenarioClock)
    store: Store = field(default_factory=Store)
    faults: list[Fault] = field(default_factory=list)
    worker_url: str | None = None
    worker_ca: str | None = None
    registry: Registry = field(default_factory=Registry)
    chunks: ListChunks = field(default_factory=ListChunks)
    """The lists being read in chunks (``limit`` / ``continue``), answering their tokens."""
    webhook_services: dict[tuple[str, str, int], str] = field(default_factory=dict)
    """``(namespace, name, port)`` of a Service → the ``host:port`` an admission webhook's
    ``clientConfig.service`` is called at; cluster IPs do not route here (admission.py)."""
    device_admission: DeviceAdmission | None = None
    """The fake kubelet's device admission (``gpustack_simulator.fakekubelet``): a bound Pod
    it answers ``False`` for stays Pending until it has called Allocate and then ``start``."""
    node_changed: Callable[[], None] | None = None
    """Run the node simulator's pass (set by the routes): a Node changed outside the API — the
    fake kubelets' device counts — and Pods it could not place may fit now."""
    _synced_from: tuple[Any, ...] | None = field(default=None, init=False, repr=False)
    """What the Service and Endpoints were last computed from (``_sync_services``)."""

    def __post_init__(self) -> None:
        self.faults = list(self.expanded.faults)
        for crd in (INSTANCE_CRD, DEVICES_CRD, INSTANCETYPES_CRD, INSTANCETYPEFLAVORS_CRD,
                    METRICACCESS_CRD):  # fmt: skip
            if crd.is_file():
                # The chart's CRDs, so a written object is checked as a cluster checks it.
                for resource in from_crd(yaml.safe_load(crd.read_text())):
                    self.registry.add(resource)
        for node in self.expanded.nodes:
            self.store.put(NODE, node)
        for pod in self.expanded.pods:
            self.store.put(POD, pod)
        for instance in self.expanded.instances:
            self.store.put(INSTANCE, instance)
        self.store.put(CONFIGMAP, self._auth_configmap())
        self._sync_services()

    def pods_changed(self) -> None:
        """Recompute what derives from Pods (the Device Manager Endpoints) after a write."""
        self._sync_services()

    def _sync_services(self) -> None:
        """Bring the Device Manager ``Service`` and ``Endpoints`` in step with the Pods.

        Each is stored only when it changed, so a watch sees one MODIFIED event per change
        that matters to it and none for an unrelated Pod's update.
        """
        # Only the Service's own Pods (its namespace and selector label) can change either
        # object: read those from the store's label index, and skip the whole computation
        # when none of them, nor either stored object, was written since the last one (every
        # write gives an object a new resourceVersion).
        pods = self.store.candidates(POD, DEVICE_MANAGER_NAMESPACE, _SERVICE_PODS)
        versions = tuple(p["metadata"].get("resourceVersion") for p in pods)
        if (versions, self._stored_versions()) == self._synced_from:
            return
        service = services.device_manager_service(self.expanded.epoch, pods)
        self._put_if_changed(SERVICE, service)
        self._put_if_changed(ENDPOINTS, services.endpoints_for(service, pods))
        self._synced_from = (versions, self._stored_versions())

    def _stored_versions(self) -> tuple[Any, ...]:
        return tuple(
            (found or {}).get("metadata", {}).get("resourceVersion")
            for found in (
                self.store.get(kind, DEVICE_MANAGER_NAMESPACE, services.DEVICE_MANAGER_SERVICE)
                for kind in (SERVICE, ENDPOINTS)
            )
        )

    def _put_if_changed(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        current = self.store.get(kind, meta["namespace"], meta["name"])
        if current is not None:
            unstamped = copy.deepcopy(current)
            unstamped["metadata"].pop("resourceVersion", None)
            if unstamped == obj:
                return
        self.store.put(kind, obj)

    def _auth_configmap(self) -> dict[str, Any]:
        front = self.pki.front_proxy_ca.read_text()
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": AUTH_CONFIGMAP,
                "namespace": SYSTEM_NAMESPACE,
                "uid": "00000000-0000-4000-8000-00000000c0f1",
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
            "data": {
                "client-ca-file": self.pki.ca.read_text(),
                "requestheader-client-ca-file": front,
                "requestheader-allowed-names": '["front-proxy-client"]',
                "requestheader-username-headers": '["X-Remote-User"]',
                "requestheader-group-headers": '["X-Remote-Group"]',
                "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
            },
        }

    # -- what the routes ask ---------------------------------------------------------------

    def user_for_token(self, token: str) -> UserSpec | None:
        """The scenario user a bearer token belongs to."""
        return next((u for u in self.expanded.users if u.token == token), None)

    def fault_active(self, kind: str, node: str | None = None) -> Fault | None:
        """The fault of that kind in force now (for that node, if node-scoped)."""
        now = self.clock()
        for fault in self.faults:
            end = math.inf if fault.end is None else fault.end
            if (
                fault.kind == kind
                and fault.start <= now < end
                and (fault.node is None or node is None or fault.node == node)
            ):
                return fault
        return None

    # -- what tests and `simulator up` do ---------------------------------------------------

    def update_pod(
        self, namespace: str, name: str, mutate: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any]:
        """Change a Pod; watches of Pods see MODIFIED, and of Endpoints too if it moved.

        A Device Manager Pod's IP, https port or readiness is what its Endpoints entry is
        made of, so those changes reach a Prometheus watching Endpoints as on a cluster.
        """
        pod = self.store.update(POD, namespace, name, mutate)
        self._sync_services()
        return pod

    def delete_pod(self, namespace: str, name: str) -> None:
        """Delete a Pod; watches see DELETED (and its address leave the Endpoints)."""
        self.store.delete(POD, namespace, name)
        self._sync_services()

    def bind_pod_address(self, namespace: str, name: str, ip: str, port: int) -> None:
        """Fill in a Device Manager Pod's IP and https port once its process listens."""
        self.bind_pod_addresses([(namespace, name, ip, port)])

    def bind_pod_addresses(self, bindings: Sequence[tuple[str, str, str, int]]) -> None:
        """:meth:`bind_pod_address` for each ``(namespace, name, ip, port)``, in order.

        The Service and Endpoints are synced once, after the last.
        """
        for namespace, name, ip, port in bindings:

            def mutate(pod: dict[str, Any], ip: str = ip, port: int = port) -> None:
                pod["status"]["podIP"] = ip
                pod["status"]["podIPs"] = [{"ip": ip}]
                for container in pod["spec"]["containers"]:
                    for port_spec in container.get("ports", []):
                        if port_spec.get("name") == "https":
                            port_spec["containerPort"] = port

            self.store.update(POD, namespace, name, mutate)
        self._sync_services()

    def add_fault(self, fault: Fault) -> None:
        """Inject a fault at run time (kubelet unreachable, metrics API absent)."""
        self.faults.append(fault)

    def clear_faults(self) -> None:
        """Remove every fault, the scenario's included."""
        self.faults.clear()

    def set_worker(self, url: str | None, ca: str | None = None) -> None:
        """Point the aggregator at the worker (``None``: the APIService is unavailable)."""
        self.worker_url, self.worker_ca = url, ca

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A copy of a Pod as stored now."""
        found = self.store.get(POD, namespace, name)
        return copy.deepcopy(found) if found is not None else None


__all__ = [
    "AUTH_CONFIGMAP",
    "CONFIGMAP",
    "INSTANCE",
    "NODE",
    "POD",
    "SYSTEM_NAMESPACE",
    "ClockRangeError",
    "ClusterState",
    "ScenarioClock",
]
