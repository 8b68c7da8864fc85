"""Builders for the parts of the objects expansion emits.

Container statuses and IDs, resources, QoS classes, cgroup lines and the allocation annotation.

Each is a pure function of the resolved plan, so the same Pod expands to the same bytes every
time and the Device Manager's procfs and the Pod's status cannot drift apart.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from gpustack_core.manufacturers import pci_vendor_id
from gpustack_core.modes import AllocationMode, Manufacturer
from gpustack_core.quantity import parse_quantity
from gpustack_core.tokens import token_id
from gpustack_core.units import UNITS_PER_ACCELERATOR
from gpustack_simulator.scenario.inventory import _Card
from gpustack_simulator.scenario.resolved import _Grant, _stamp
from gpustack_simulator.scenario.schema import (
    MIG_MEMORY_SLICES,
    SHARES_PER_CARD,
    ContainerDoc,
    InstanceDoc,
)
from gpustack_simulator.scenario.validation import _PodPlan
from gpustack_vendors.model import PartitionInfo


def pci_present_label(manufacturer: str) -> str:
    """NFD's vendor-only PCI label for ``manufacturer``'s cards (``…/pci-10de.present``).

    The PCI vendor id is the manufacturer's row (:mod:`gpustack_core.manufacturers`), the same
    id the chart's node affinity matches, so a simulated node is selected as a real one is.
    """
    return f"feature.node.kubernetes.io/pci-{pci_vendor_id(manufacturer)}.present"


def _card_problems(held: Sequence[_Grant]) -> Iterator[str]:
    """What one card's holders cannot all have at once."""
    first = held[0]
    for grant in held[1:]:
        if grant.mode is not first.mode:
            yield (
                f"{grant.path}.mode: {grant.card.id} is already held "
                f"{first.mode.api_name} at {first.path}"
            )
    modes = {g.mode for g in held}
    if modes == {AllocationMode.EXCLUSIVE} and len(held) > 1:
        yield f"{held[1].path}.device: {first.card.id} is already held Exclusive at {first.path}"
    if modes == {AllocationMode.SHARED} and len(held) > SHARES_PER_CARD:
        yield (
            f"{held[SHARES_PER_CARD].path}.device: {first.card.id} has only "
            f"{SHARES_PER_CARD} shares"
        )
    total = sum(g.memory_percent or 0 for g in held)
    if modes == {AllocationMode.SLICED} and total > 100:
        yield (
            f"{held[-1].path}.memoryPercent: slices of {first.card.id} add up to "
            f"{total} % of its memory"
        )
    partitions: dict[str, str] = {}
    for grant in held:
        if grant.partition is None:
            continue
        if grant.partition.id in partitions:
            yield (
                f"{grant.path}.device: partition {grant.partition.id} is already held "
                f"at {partitions[grant.partition.id]}"
            )
        partitions.setdefault(grant.partition.id, grant.path)


def _instance_phase(instance: InstanceDoc, pod: _PodPlan | None) -> str:
    if instance.stop:
        return "Stopping" if pod is not None else "Stopped"
    if pod is None or pod.doc.phase == "Pending":
        return "Starting"
    return "Ready" if pod.doc.phase == "Running" else "Starting"


def _state(plan: _PodPlan, container: ContainerDoc) -> str:
    if container.state is not None:
        return container.state
    return {"Pending": "waiting", "Succeeded": "terminated", "Failed": "terminated"}.get(
        plan.doc.phase, "running"
    )


def container_ids(plan: _PodPlan) -> dict[str, str]:
    """Bare container IDs (no runtime scheme), stable per Pod UID and container name.

    Stable so that a scenario's cgroup lines, its Pod statuses and a test's expectations can
    all be computed independently and still agree.
    """
    ids: dict[str, str] = {}
    for c in (*plan.containers, *plan.doc.init_containers):
        if c.id:
            _, sep, bare = c.id.partition("://")
            ids[c.name] = bare if sep else c.id
        else:
            ids[c.name] = hashlib.sha256(f"{plan.uid}/{c.name}".encode()).hexdigest()
    return ids


def _container_status(
    container: ContainerDoc, bare_id: str, state: str, epoch: datetime, started: float
) -> dict[str, Any]:
    image = container.image or f"registry.example/{container.name}:latest"
    when = _stamp(epoch, started)
    states: dict[str, dict[str, Any]] = {
        "running": {"running": {"startedAt": when}},
        "waiting": {"waiting": {"reason": "ContainerCreating"}},
        "terminated": {
            "terminated": {
                "exitCode": 0,
                "reason": "Completed",
                "startedAt": when,
                "finishedAt": _stamp(epoch, started + 18),
            }
        },
    }
    last: dict[str, Any] = {}
    if container.restart_count:
        last = {
            "terminated": {
                "exitCode": 137,
                "reason": "OOMKilled",
                "startedAt": _stamp(epoch, started - 20),
                "finishedAt": _stamp(epoch, started - 1),
            }
        }
    status: dict[str, Any] = {"name": container.name}
    if state != "waiting" or container.restart_count:
        status["containerID"] = f"containerd://{bare_id}"
    status |= {
        "ready": (state == "running") if container.ready is None else container.ready,
        "started": state == "running",
        "restartCount": container.restart_count,
        "state": states[state],
        "lastState": last,
        "image": image,
        "imageID": "",
    }
    if "containerID" in status:
        digest = hashlib.sha256(image.encode()).hexdigest()
        status["imageID"] = f"{image.rsplit(':', 1)[0]}@sha256:{digest}"
    return status


def _qos(plan: _PodPlan) -> str:
    """Kubernetes' QoS class, which decides the cgroup slice a container's processes run in."""
    containers = (*plan.containers, *plan.doc.init_containers)
    declared = [(c.limits, c.limits if c.requests is None else c.requests) for c in containers]
    if not any(
        key in values
        for limits, requests in declared
        for values in (limits, requests)
        for key in ("cpu", "memory")
    ):
        return "BestEffort"
    guaranteed = all(
        key in limits
        and key in requests
        and parse_quantity(limits[key]) == parse_quantity(requests[key])
        for limits, requests in declared
        for key in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"


def cgroup_line(pod_uid: str, container_id: str, qos: str) -> str:
    """The cgroup v2 line of a process in a Pod container, as the systemd cgroup driver names it.

    Guaranteed Pods sit directly under ``kubepods.slice``; the other classes get a slice of
    their own, exactly as the kubelet lays them out, so attribution sees both shapes.
    """
    escaped = pod_uid.replace("-", "_")
    scope = f"cri-containerd-{container_id}.scope"
    if qos == "Guaranteed":
        return f"0::/kubepods.slice/kubepods-pod{escaped}.slice/{scope}"
    level = qos.lower()
    return f"0::/kubepods.slice/kubepods-{level}.slice/kubepods-{level}-pod{escaped}.slice/{scope}"


def _container_resources(
    plan: _PodPlan, allocation: Mapping[str, Any]
) -> dict[str, dict[str, dict[str, str]]]:
    """Each container's limits and requests, accelerator requests derived from its grants."""
    out: dict[str, dict[str, dict[str, str]]] = {}
    for container in (*plan.containers, *plan.doc.init_containers):
        limits = {k: str(v) for k, v in container.limits.items()}
        requests = (
            dict(limits)
            if container.requests is None
            else {k: str(v) for k, v in container.requests.items()}
        )
        extended = _accelerator_requests(allocation.get(container.name))
        limits.update(extended)
        requests.update(extended)
        out[container.name] = {"limits": limits, "requests": requests}
    return out


def _accelerator_requests(allocation: Mapping[str, Any] | None) -> dict[str, str]:
    """What a container asks the device plugin for, given what the annotation says it got."""
    if not allocation:
        return {}
    counts: dict[str, int] = {}
    extra: dict[str, str] = {}
    for group in allocation["devices"]["groups"]:
        manufacturer = Manufacturer(group["manufacturer"])
        base = manufacturer.resource_base
        for accelerator in group["accelerators"]:
            mode = AllocationMode(accelerator["mode"])
            if mode is AllocationMode.EXCLUSIVE:
                counts[base] = counts.get(base, 0) + 1
            elif mode is AllocationMode.SHARED:
                counts[f"{base}.shared"] = counts.get(f"{base}.shared", 0) + 1
            elif mode is AllocationMode.SLICED:
                extra[f"{base}.sliced"] = "1"
                extra[f"{base}.sliced.cores-percentage"] = str(accelerator["_cores"])
                extra[f"{base}.sliced.memory-percentage"] = str(accelerator["_memory"])
            elif mode is AllocationMode.PARTITIONED:
                extra[f"{base}.partitioned"] = "1"
                profile = accelerator["allocatedPhysicalProfile"]
                extra[f"{base}.partitioned.mig-{profile}"] = "1"
            else:
                key = f"device.gpustack.ai/{manufacturer.value}.visibility"
                counts[key] = counts.get(key, 0) + 1
    return {**{k: str(v) for k, v in counts.items()}, **extra}


def _container_spec(
    container: ContainerDoc, resources: dict[str, dict[str, str]]
) -> dict[str, Any]:
    return {
        "name": container.name,
        "image": container.image or f"registry.example/{container.name}:latest",
        "resources": resources,
    }


def _units(grant: _Grant) -> tuple[int, list[dict[str, int]]]:
    """Allocation units and physical placements of one grant, as the allocator charges them."""
    mode = grant.mode
    if mode is AllocationMode.EXCLUSIVE:
        return UNITS_PER_ACCELERATOR, []
    if mode is AllocationMode.SHARED:
        return UNITS_PER_ACCELERATOR // SHARES_PER_CARD, []
    if mode is AllocationMode.SLICED:
        # Memory percent folds into units ×16000: a 25 % slice is 400,000 units.
        return (grant.memory_percent or 0) * (UNITS_PER_ACCELERATOR // 100), []
    if mode is AllocationMode.PARTITIONED and grant.partition is not None:
        start, length = _placement(grant.card, grant.partition)
        units = length * UNITS_PER_ACCELERATOR // MIG_MEMORY_SLICES
        return units, [{"start": start, "length": length}]
    return 0, []


def _slices(card: _Card, partition: PartitionInfo) -> int:
    """A partition's memory slices, from its share of the card (``3g.40gb`` of 80 GB: 4)."""
    if card.memory_mib <= 0:
        return 1
    return max(1, round(partition.memory_mib * MIG_MEMORY_SLICES / card.memory_mib))


def _placement(card: _Card, partition: PartitionInfo) -> tuple[int, int]:
    """Slots laid out in slot order, each after the previous: a stable, plausible placement."""
    start = 0
    for other in sorted(card.partitions, key=lambda p: p.slot):
        if other.id == partition.id:
            break
        start += _slices(card, other)
    return start, _slices(card, partition)


def _allocations(grants: Sequence[_Grant]) -> dict[str, dict[str, Any]]:
    """Each Pod's annotation value (by Pod UID): container → groups → accelerators."""
    charged: dict[tuple[str, str], int] = {}
    units: dict[int, tuple[int, list[dict[str, int]]]] = {}
    for k, grant in enumerate(grants):
        units[k] = _units(grant)
        key = (grant.pod.node, grant.card.id)
        charged[key] = charged.get(key, 0) + units[k][0]
    logical: dict[tuple[str, str], int] = {}
    pods: dict[str, dict[str, Any]] = {}
    for k, grant in enumerate(grants):
        allocated, physical = units[k]
        card_key = (grant.pod.node, grant.card.id)
        accelerator: dict[str, Any] = {
            "id": grant.card.id,
            "index": grant.card.index,
            "mode": int(grant.mode),
            "allocated": allocated,
            "remaining": max(UNITS_PER_ACCELERATOR - charged[card_key], 0),
        }
        token = 0
        if grant.partition is not None:
            accelerator["allocatedPhysicalProfile"] = grant.partition.profile
            accelerator["allocatedPhysicalPlacements"] = physical
            accelerator["allocatedPhysicalID"] = grant.partition.id
            token = grant.partition.slot
        elif grant.mode in {AllocationMode.SLICED, AllocationMode.SHARED}:
            token = logical.get(card_key, 0)
            logical[card_key] = token + 1
            if grant.mode is AllocationMode.SLICED:
                accelerator["allocatedLogicalPlacements"] = [{"start": token, "length": 1}]
        container = pods.setdefault(grant.pod.uid, {}).setdefault(
            grant.container, {"devices": {"groups": []}, "deviceIDs": []}
        )
        groups: list[dict[str, Any]] = container["devices"]["groups"]
        group = next((g for g in groups if g["id"] == grant.card.group), None)
        if group is None:
            group = {
                "id": grant.card.group,
                "manufacturer": grant.card.manufacturer,
                "accelerators": [],
            }
            groups.append(group)
        group["accelerators"].append(accelerator)
        # The plugin's own spelling (gpustack_core.tokens): PodResources and the grant
        # confirmation compare these IDs letter for letter.
        container["deviceIDs"].append(token_id(grant.card.group, grant.card.id, token))
        # Private keys carry the slice request to `_accelerator_requests`; stripped below.
        accelerator["_cores"] = grant.cores_percent or 100
        accelerator["_memory"] = grant.memory_percent or 0
    return pods


def _public(allocation: Mapping[str, Any]) -> dict[str, Any]:
    """The annotation without the private request keys."""
    return {
        name: {
            "devices": {
                "groups": [
                    {
                        **{k: v for k, v in group.items() if k != "accelerators"},
                        "accelerators": [
                            {k: v for k, v in a.items() if not k.startswith("_")}
                            for a in group["accelerators"]
                        ],
                    }
                    for group in container["devices"]["groups"]
                ]
            },
            "deviceIDs": container["deviceIDs"],
        }
        for name, container in allocation.items()
    }
