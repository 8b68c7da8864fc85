"""An Instance's status, derived from what the cluster holds: its Pod, Service and Node.

Level-triggered: the status is recomputed whole from the objects each reconcile, never
accumulated from events, so a missed event cannot leave it wrong and a repeat reconcile writes
nothing new. Pure: the controller passes the objects in and writes the result only if it differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpustack_core.allocation import read_allocation
from gpustack_core.decoding import ContractError
from gpustack_core.instance import (
    Address,
    Allocation,
    Instance,
    InstanceStatus,
    Phase,
    StatusPort,
)
from gpustack_core.modes import AllocationMode
from gpustack_worker.instances.kueue import Waiting
from gpustack_worker.instances.render import MAIN, belongs_to


def _ready(pod: Mapping[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _waiting(pod: Mapping[str, Any]) -> str:
    """The first container's waiting reason and message (``ImagePullBackOff: …``), if any."""
    for status in pod.get("status", {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            message = waiting.get("message")
            return f"{status.get('name')}: {waiting['reason']}" + (
                f": {message}" if message else ""
            )
    return ""


def phase_of(
    instance: Instance, pod: Mapping[str, Any] | None, queued: Waiting | None = None
) -> tuple[Phase, str]:
    """``(phase, phaseMessage)`` by the reference's five phases.

    ``queued``: why Kueue still holds the Pod (it is in a queue, not yet admitted); an
    unscheduled Pod then says that (``Pending: couldn't assign flavors…``) rather than only
    that it waits to be scheduled.
    """
    if instance.metadata.deletion_timestamp:
        return "Deleting", "the Instance is being deleted"
    owned = belongs_to(instance, pod)
    if instance.spec.stop:
        if owned:
            return "Stopping", "deleting the Pod; the Service and its node ports are kept"
        return "Stopped", ""
    if pod is None or not owned:
        return "Starting", "creating the Pod"
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return "Starting", "the previous Pod is still terminating"
    phase = pod.get("status", {}).get("phase")
    if phase == "Failed":
        reason = pod.get("status", {}).get("reason") or "the Pod failed"
        return "Starting", f"{reason}: {pod.get('status', {}).get('message', '')}".rstrip(": ")
    if _ready(pod):
        return "Ready", ""
    if not pod.get("spec", {}).get("nodeName"):
        return "Starting", str(queued) if queued is not None else "waiting to be scheduled"
    return "Starting", _waiting(pod) or "waiting for the Pod to become ready"


def _host_ips(node: Mapping[str, Any] | None) -> tuple[Address, ...]:
    """The node's addresses as a user reaches them: external ones first, then internal."""
    addresses = (node or {}).get("status", {}).get("addresses") or []
    ordered = [a for a in addresses if a.get("type") == "ExternalIP"] + [
        a for a in addresses if a.get("type") == "InternalIP"
    ]
    seen: list[str] = []
    for address in ordered:
        if address.get("address") and address["address"] not in seen:
            seen.append(address["address"])
    return tuple(Address(ip=ip) for ip in seen)


def _status_ports(instance: Instance, service: Mapping[str, Any] | None) -> tuple[StatusPort, ...]:
    """Each ``spec.ports`` entry with its node port, once *every* port has one (else none)."""
    if service is None or not instance.spec.ports:
        return ()
    allocated = {
        (p.get("port"), p.get("protocol", "TCP")): p.get("nodePort")
        for p in service.get("spec", {}).get("ports") or []
    }
    found = []
    for port in instance.spec.ports:
        node_port = allocated.get((port.port, port.protocol))
        if not isinstance(node_port, int) or node_port <= 0:
            return ()
        found.append(
            StatusPort(port=port.port, protocol=port.protocol, name=port.name, node_port=node_port)
        )
    return tuple(found)


def allocations_of(pod: Mapping[str, Any] | None) -> tuple[Allocation, ...]:
    """The cards the Pod's workload holds, from the Device Manager's annotation.

    Visibility entries (the SSH sidecar's view of the same cards) are not holdings. An
    annotation that does not parse yields none (``read_allocation``'s policy): the status says
    nothing rather than a guess, and the Device Manager logs the reason for that Pod.
    """
    if pod is None:
        return ()
    meta = pod.get("metadata") or {}
    try:
        read = read_allocation(
            meta.get("annotations"), pod=f"{meta.get('namespace')}/{meta.get('name')}"
        )
    except ContractError:
        return ()
    return tuple(
        Allocation(
            manufacturer=g.manufacturer,
            id=g.accelerator.id,
            index=g.accelerator.index,
            mode=g.accelerator.mode.api_name,
            allocated=g.accelerator.allocated,
            partition=g.accelerator.allocated_physical_id,
        )
        for g in read.grants
        if g.accelerator.mode is not AllocationMode.VISIBILITY and g.container == MAIN
    )


def derive_status(
    instance: Instance,
    pod: Mapping[str, Any] | None,
    service: Mapping[str, Any] | None,
    node: Mapping[str, Any] | None,
    *,
    queued: Waiting | None = None,
) -> InstanceStatus:
    """The whole status, from the Instance and the objects it owns (and its Pod's Node).

    ``queued``: why Kueue still holds the Pod, if it does (:func:`phase_of`).
    """
    phase, message = phase_of(instance, pod, queued)
    owned = (
        pod if phase in {"Ready", "Starting", "Stopping"} and belongs_to(instance, pod) else None
    )
    node_name = str((owned or {}).get("spec", {}).get("nodeName") or "")
    host_ips = _host_ips(node) if node_name else ()
    pod_ips = tuple(
        Address(ip=p["ip"])
        for p in (owned or {}).get("status", {}).get("podIPs") or []
        if isinstance(p, Mapping) and p.get("ip")
    )
    ports = _status_ports(instance, service)
    access = tuple(f"{host_ips[0].ip}:{p.node_port}" for p in ports) if host_ips else ()
    return InstanceStatus(
        phase=phase,
        phase_message=message,
        observed_generation=instance.metadata.generation or None,
        node_name=node_name,
        pod_name=instance.metadata.name if owned is not None else "",
        host_ips=host_ips,
        pod_ips=pod_ips,
        access_addresses=access,
        ports=ports,
        allocations=allocations_of(owned),
    )
