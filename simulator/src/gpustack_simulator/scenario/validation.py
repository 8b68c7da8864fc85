"""The checks a scenario gets before any recording is read, and the Pod plans they share.

Each problem names the JSON path and the field, so a broken scenario is fixed from the message
alone; the plans resolve every Pod's defaults once, so the checks and the expansion agree on
which Pod is which.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import msgspec

from gpustack_core.modes import AllocationMode, Manufacturer
from gpustack_core.names import dns1123_subdomain_problem
from gpustack_core.quantity import QuantityError, parse_quantity
from gpustack_simulator.scenario.schema import (
    _UUID_NAMESPACE,
    APP_START,
    APPLY_KINDS,
    MAX_FIGURE,
    MAX_OFFSET,
    ContainerDoc,
    InstanceDoc,
    PodDoc,
    Quantity,
    ScenarioDocument,
)
from gpustack_simulator.scenario.series import _base_units


@dataclass(frozen=True)
class _PodPlan:
    """A Pod with its defaults resolved, wherever in the document it was written."""

    path: str
    doc: PodDoc
    name: str
    namespace: str
    node: str
    uid: str
    instance: InstanceDoc | None
    part_of: str
    containers: tuple[ContainerDoc, ...]


def _uid(kind: str, *parts: str) -> str:
    return str(uuid.uuid5(_UUID_NAMESPACE, "/".join((kind, *parts))))


def _instance_uid(instance: InstanceDoc) -> str:
    return instance.uid or _uid("instance", instance.namespace, instance.name)


def _instance_resources(instance: InstanceDoc, pod: PodDoc | None) -> dict[str, Quantity]:
    """The Instance's declaration; when unwritten, its ``main`` container's limits are it."""
    if instance.resources or pod is None:
        return dict(instance.resources)
    for container in pod.containers:
        if container.name == "main":
            return {k: v for k, v in container.limits.items() if k in _CORE_RESOURCES}
    return {}


_CORE_RESOURCES = ("cpu", "memory", "ephemeral-storage")
_MANUFACTURERS = frozenset(m.value for m in Manufacturer)


def _pod_plans(doc: ScenarioDocument) -> list[_PodPlan]:
    """Every Pod, Instance-owned first, in document order."""
    plans: list[_PodPlan] = []
    for i, instance in enumerate(doc.instances):
        pod = instance.pod
        if pod is None:
            continue
        containers = pod.containers or (ContainerDoc(name="main"),)
        resources = _instance_resources(instance, pod)
        containers = tuple(
            msgspec.structs.replace(c, limits=dict(resources))
            if c.name == "main" and not c.limits
            else c
            for c in containers
        )
        namespace = pod.namespace or instance.namespace
        name = pod.name or instance.name
        plans.append(
            _PodPlan(
                path=f"$.instances[{i}].pod",
                doc=pod,
                name=name,
                namespace=namespace,
                node=pod.node or instance.node,
                uid=pod.uid or _uid("pod", namespace, name),
                instance=instance,
                part_of=pod.part_of or _instance_uid(instance),
                containers=containers,
            )
        )
    for i, pod in enumerate(doc.pods):
        namespace = pod.namespace or "default"
        plans.append(
            _PodPlan(
                path=f"$.pods[{i}]",
                doc=pod,
                name=pod.name,
                namespace=namespace,
                node=pod.node,
                uid=pod.uid or _uid("pod", namespace, pod.name),
                instance=None,
                part_of=pod.part_of,
                containers=pod.containers,
            )
        )
    return plans


def _quantity_problems(path: str, values: Mapping[str, Quantity]) -> Iterator[str]:
    for key, value in values.items():
        try:
            if parse_quantity(value) < 0:
                yield f"{path}.{key}: {value!r} is negative"
        except QuantityError as exc:
            yield f"{path}.{key}: {exc}"


def _finite(path: str, value: float | None) -> Iterator[str]:
    """A time offset must land on a calendar date: finite, and within a few decades of epoch."""
    if value is not None and not (math.isfinite(value) and abs(value) <= MAX_OFFSET):
        yield f"{path}: {value!r} is not a time within {MAX_OFFSET:g} s of the epoch"


def check(doc: ScenarioDocument) -> list[str]:
    """Every problem the schema cannot express and no recording is needed to see."""
    problems: list[str] = []
    nodes = _check_nodes(doc, problems)
    plans = _pod_plans(doc)
    _check_instances(doc, nodes, problems)
    _check_pods(plans, nodes, problems)
    _check_uids(doc, plans, problems)
    _check_faults(doc, nodes, problems)
    _check_users(doc, problems)
    _check_apply(doc, problems)
    return problems


def _check_apply(doc: ScenarioDocument, problems: list[str]) -> None:
    """Each applied object: a kind ``apply`` knows, at its apiVersion, named as Kubernetes names."""
    for index, obj in enumerate(doc.apply):
        path = f"$.apply[{index}]"
        kind = obj.get("kind")
        if kind not in APPLY_KINDS:
            problems.append(f"{path}.kind: {kind!r} is not one of {', '.join(APPLY_KINDS)}")
            continue
        version, _, namespaced = APPLY_KINDS[kind]
        if obj.get("apiVersion") != version:
            problems.append(f"{path}.apiVersion: a {kind} is applied as {version}")
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
            problems.append(f"{path}.metadata.name: must be a string")
            continue
        if (problem := dns1123_subdomain_problem(meta["name"])) is not None:
            problems.append(f"{path}.metadata.name: {problem}")
        if namespaced and not isinstance(meta.get("namespace"), str):
            problems.append(f"{path}.metadata.namespace: a {kind} needs its namespace")


def _check_nodes(doc: ScenarioDocument, problems: list[str]) -> set[str]:
    names: set[str] = set()
    if not doc.nodes:
        problems.append("$.nodes: a scenario needs at least one node")
    for i, node in enumerate(doc.nodes):
        path = f"$.nodes[{i}]"
        if not node.name:
            problems.append(f"{path}.name: must not be empty")
        if node.name in names:
            problems.append(f"{path}.name: node {node.name!r} is declared twice")
        names.add(node.name)
        problems.extend(_quantity_problems(f"{path}.capacity", node.capacity))
        seen: set[str] = set()
        for j, dm in enumerate(node.device_managers):
            dm_path = f"{path}.deviceManagers[{j}]"
            if dm.manufacturer not in _MANUFACTURERS:
                problems.append(
                    f"{dm_path}.manufacturer: unknown manufacturer {dm.manufacturer!r}; "
                    f"expected one of {', '.join(m.value for m in Manufacturer)}"
                )
            if dm.manufacturer in seen:
                problems.append(
                    f"{dm_path}.manufacturer: node {node.name!r} already runs a "
                    f"{dm.manufacturer} Device Manager (one DaemonSet per manufacturer)"
                )
            seen.add(dm.manufacturer)
            if not dm.recording:
                problems.append(f"{dm_path}.recording: must name a recording")
    return names


def _check_instances(doc: ScenarioDocument, nodes: set[str], problems: list[str]) -> None:
    for i, instance in enumerate(doc.instances):
        path = f"$.instances[{i}]"
        if not instance.name:
            problems.append(f"{path}.name: must not be empty")
        if instance.node and instance.node not in nodes:
            problems.append(f"{path}.node: unknown node {instance.node!r}")
        if instance.pod is not None and not instance.node and not instance.pod.node:
            problems.append(f"{path}.node: an Instance with a Pod must name its node")
        problems.extend(_quantity_problems(f"{path}.resources", instance.resources))
        problems.extend(_finite(f"{path}.created", instance.created))
        pod = instance.pod
        if pod is None:
            continue
        for attr, own in (("namespace", instance.namespace), ("node", instance.node)):
            written = getattr(pod, attr)
            if written and own and written != own:
                problems.append(
                    f"{path}.pod.{attr}: {written!r} differs from the Instance's {own!r}"
                )


def _check_pods(plans: Sequence[_PodPlan], nodes: set[str], problems: list[str]) -> None:
    names: dict[tuple[str, str], str] = {}
    pids: dict[tuple[str, int], str] = {}
    for plan in plans:
        path = plan.path
        key = (plan.namespace, plan.name)
        if not plan.name:
            problems.append(f"{path}.name: a Pod outside an Instance needs a name")
        elif key in names:
            problems.append(
                f"{path}.name: Pod {plan.namespace}/{plan.name} is also declared at {names[key]}"
            )
        names.setdefault(key, path)
        if not plan.node:
            if plan.instance is None:
                problems.append(f"{path}.node: a Pod must name its node")
        elif plan.node not in nodes:
            problems.append(f"{path}.node: unknown node {plan.node!r}")
        if plan.instance is None and not plan.containers:
            problems.append(f"{path}.containers: a Pod needs at least one container")
        problems.extend(_finite(f"{path}.created", plan.doc.created))
        problems.extend(_finite(f"{path}.deleted", plan.doc.deleted))
        if plan.doc.deleted is not None and plan.doc.deleted < plan.doc.created:
            problems.append(f"{path}.deleted: {plan.doc.deleted} is before 'created'")
        _check_containers(plan, pids, problems)
        _check_usage(plan, problems)


def _check_containers(
    plan: _PodPlan, pids: dict[tuple[str, int], str], problems: list[str]
) -> None:
    seen: set[str] = set()
    lists = (("containers", plan.containers), ("initContainers", plan.doc.init_containers))
    for list_name, containers in lists:
        for j, container in enumerate(containers):
            path = f"{plan.path}.{list_name}[{j}]"
            if not container.name:
                problems.append(f"{path}.name: must not be empty")
            if container.name in seen:
                problems.append(f"{path}.name: container {container.name!r} is declared twice")
            seen.add(container.name)
            problems.extend(_quantity_problems(f"{path}.limits", container.limits))
            problems.extend(_quantity_problems(f"{path}.requests", container.requests or {}))
            for key in container.limits:
                if _is_accelerator_resource(key):
                    problems.append(
                        f"{path}.limits.{key}: accelerator requests are derived from "
                        "'accelerators'; declare the grant there"
                    )
            for k, pid in enumerate(container.pids):
                owner = pids.get((plan.node, pid))
                if owner is not None:
                    problems.append(
                        f"{path}.pids[{k}]: PID {pid} on node {plan.node!r} is already "
                        f"claimed by {owner}"
                    )
                pids.setdefault((plan.node, pid), f"{path}.pids")
            _check_grants(path, container, problems)


def _is_accelerator_resource(key: str) -> bool:
    """Whether a resource name is one the device plugin serves (derived, never written)."""
    if key.startswith("device.gpustack.ai/"):
        return True
    return any(
        key == m.resource_base or key.startswith(f"{m.resource_base}.") for m in Manufacturer
    )


def _check_grants(path: str, container: ContainerDoc, problems: list[str]) -> None:
    for k, grant in enumerate(container.accelerators):
        grant_path = f"{path}.accelerators[{k}]"
        try:
            mode = AllocationMode.from_api_name(grant.mode)
        except ValueError as exc:
            problems.append(f"{grant_path}.mode: {exc}")
            continue
        if grant.manufacturer and grant.manufacturer not in _MANUFACTURERS:
            problems.append(
                f"{grant_path}.manufacturer: unknown manufacturer {grant.manufacturer!r}"
            )
        if not grant.device:
            problems.append(f"{grant_path}.device: must name a device")
        if mode is AllocationMode.SLICED:
            if grant.memory_percent is None:
                problems.append(f"{grant_path}.memoryPercent: a Sliced grant states its memory")
        else:
            for key, value in (
                ("memoryPercent", grant.memory_percent),
                ("coresPercent", grant.cores_percent),
            ):
                if value is not None:
                    problems.append(f"{grant_path}.{key}: only a Sliced grant has one")


def _check_usage(plan: _PodPlan, problems: list[str]) -> None:
    previous: float | None = None
    start = plan.doc.created + APP_START
    for k, point in enumerate(plan.doc.usage):
        path = f"{plan.path}.usage[{k}]"
        if not (math.isfinite(point.t) and 0 <= point.t <= MAX_OFFSET):
            problems.append(
                f"{path}.t: {point.t!r} must be a non-negative time within {MAX_OFFSET:g} s"
            )
            continue
        if math.isfinite(start) and point.t < start:
            # metrics.k8s.io rejects an entry older than its Pod, so such a point is a mistake.
            problems.append(
                f"{path}.t: {point.t} is before the Pod's containers start ({start:g}: "
                f"'created' + {APP_START:g})"
            )
        if previous is not None and point.t <= previous:
            problems.append(
                f"{path}.t: {point.t:g} goes back in time (previous point {previous:g})"
            )
        previous = point.t
        for name in ("cpu", "memory", "storage"):
            value = getattr(point, name)
            if value is None:
                continue
            try:
                figure = _base_units(value, nano=name == "cpu")
            except (QuantityError, ValueError) as exc:
                problems.append(f"{path}.{name}: {exc}")
                continue
            if figure > MAX_FIGURE:
                problems.append(f"{path}.{name}: {value!r} is beyond what a kubelet counts")


def _check_uids(doc: ScenarioDocument, plans: Sequence[_PodPlan], problems: list[str]) -> None:
    seen: dict[str, str] = {}

    def claim(uid: str, path: str) -> None:
        if uid in seen:
            problems.append(f"{path}: UID {uid} is also used at {seen[uid]}")
        seen.setdefault(uid, path)

    instance_names: dict[tuple[str, str], str] = {}
    for i, instance in enumerate(doc.instances):
        claim(_instance_uid(instance), f"$.instances[{i}].uid")
        key = (instance.namespace, instance.name)
        if key in instance_names:
            problems.append(
                f"$.instances[{i}].name: Instance {instance.namespace}/{instance.name} is also "
                f"declared at {instance_names[key]}"
            )
        instance_names.setdefault(key, f"$.instances[{i}]")
    for plan in plans:
        claim(plan.uid, f"{plan.path}.uid")


def _check_faults(doc: ScenarioDocument, nodes: set[str], problems: list[str]) -> None:
    for i, fault in enumerate(doc.faults):
        path = f"$.faults[{i}]"
        problems.extend(_finite(f"{path}.from", fault.start))
        problems.extend(_finite(f"{path}.to", fault.end))
        if fault.node is not None and fault.node not in nodes:
            problems.append(f"{path}.node: unknown node {fault.node!r}")
        if fault.kind == "metrics-api-absent" and fault.node is not None:
            problems.append(f"{path}.node: metrics.k8s.io is cluster-wide; it has no node")
        if fault.end is not None and fault.end <= fault.start:
            problems.append(f"{path}.to: {fault.end} must be after 'from' ({fault.start})")


def _check_users(doc: ScenarioDocument, problems: list[str]) -> None:
    names: set[str] = set()
    for i, user in enumerate(doc.users):
        path = f"$.users[{i}]"
        if not user.name:
            problems.append(f"{path}.name: must not be empty")
        if user.name in names:
            problems.append(f"{path}.name: user {user.name!r} is declared twice")
        names.add(user.name)
        for j, rule in enumerate(user.rules):
            for key, values in (
                ("apiGroups", rule.api_groups),
                ("resources", rule.resources),
                ("verbs", rule.verbs),
            ):
                if not values:
                    problems.append(f"{path}.rules[{j}].{key}: must not be empty")
