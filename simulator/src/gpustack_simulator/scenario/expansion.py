"""Expansion: a checked scenario turned into exact Kubernetes objects and their behaviour.

The expansion happens in one place so the stand-ins cannot disagree with each other: a Pod's
allocation annotation, its container IDs, the cgroup lines of its processes and the kubelet
entry that measures it all come from one declaration. Checks that need the recordings
(devices, PIDs, who may hold what) run here and fail as parsing does: file, path, field.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from gpustack_core import contract
from gpustack_core.allocation import ANNOTATION
from gpustack_core.contract import INSTANCE_MANAGED_BY_LABEL
from gpustack_core.decoding import ContractError
from gpustack_core.instance import resources_from_limits
from gpustack_core.modes import AllocationMode, Manufacturer
from gpustack_core.pods import PART_OF_LABEL
from gpustack_simulator.recording import ProcEntry
from gpustack_simulator.scenario.builders import (
    _allocations,
    _card_problems,
    _container_resources,
    _container_spec,
    _container_status,
    _instance_phase,
    _public,
    _qos,
    _state,
    cgroup_line,
    container_ids,
    pci_present_label,
)
from gpustack_simulator.scenario.expanded import Expanded
from gpustack_simulator.scenario.inventory import _Inventory, _inventory
from gpustack_simulator.scenario.rbac import builtin_users
from gpustack_simulator.scenario.resolved import _fnv64a, _Grant, _Runtime, _stamp
from gpustack_simulator.scenario.schema import (
    _QUEUE_LABEL,
    APP_START,
    COMPONENT_LABEL,
    DEVICE_MANAGER_PORT,
    INSTANCE_API_VERSION,
    MANUFACTURER_LABEL,
    SYSTEM_NAMESPACE,
    DeviceManagerDoc,
    DeviceManagerSpec,
    Fault,
    GrantDoc,
    InstanceDoc,
    NodeDoc,
    Quantity,
    Rule,
    Scenario,
    UserDoc,
    UserSpec,
    token_for,
)
from gpustack_simulator.scenario.series import _base_units, _series
from gpustack_simulator.scenario.validation import (
    _instance_resources,
    _instance_uid,
    _pod_plans,
    _PodPlan,
    _uid,
)

SCENARIO_MANAGER = "scenario.simulator.gpustack.ai"
"""``worker.gpustack.ai/managed-by`` of a scenario's own Instances: their Pods are the
scenario's, so the worker's Instance controller leaves them be."""


def expand(scenario: Scenario, *, base: Path) -> Expanded:
    """Turn a checked scenario into the objects and behaviour the stand-ins serve.

    ``base`` is the folder recording paths are relative to (normally the repository's
    ``recordings/``). Checks that need the recordings (devices, PIDs, who may hold what)
    run here and fail the same way parsing does: file, path, field.
    """
    return _Expander(scenario, base).run()


class _Expander:
    def __init__(self, scenario: Scenario, base: Path) -> None:
        self.source = scenario.source
        self.doc = scenario.document
        self.base = base
        self.problems: list[str] = []
        self.plans = _pod_plans(self.doc)
        self.inventories: dict[str, list[_Inventory]] = {}
        self.node_index = {node.name: i for i, node in enumerate(self.doc.nodes)}
        # Each plan's place among its node's plans, and each Instance's plan: found once,
        # not by a scan of every plan per Pod (a fleet has ten thousand).
        self.positions: dict[int, int] = {}
        self.plan_of: dict[int, _PodPlan] = {}
        counts: dict[str, int] = {}
        for plan in self.plans:
            self.positions[id(plan)] = counts.get(plan.node, 0)
            counts[plan.node] = counts.get(plan.node, 0) + 1
            if plan.instance is not None:
                self.plan_of.setdefault(id(plan.instance), plan)

    def fail_if_problems(self) -> None:
        if self.problems:
            raise ContractError(f"{self.source}: " + "; ".join(self.problems))

    def run(self) -> Expanded:
        for i, node in enumerate(self.doc.nodes):
            found = [
                _inventory(f"$.nodes[{i}].deviceManagers[{j}]", dm, self.base, self.problems)
                for j, dm in enumerate(node.device_managers)
            ]
            self.inventories[node.name] = [inv for inv in found if inv is not None]
        self.fail_if_problems()
        grants = self._resolve_grants()
        self._check_ledger(grants)
        procs = self._procs()
        self.fail_if_problems()
        allocations = _allocations(grants)
        pods = [self._pod(plan, allocations.get(plan.uid)) for plan in self.plans]
        dm_pods, dm_specs = self._device_managers()
        users, rules = self._users()
        expanded = Expanded(
            description=self.doc.description,
            epoch=self.doc.epoch,
            nodes=[self._node(node) for node in self.doc.nodes],
            pods=pods + dm_pods,
            instances=[self._instance(i) for i in self.doc.instances],
            device_managers=dm_specs,
            users=users,
            faults=[Fault(f.kind, f.node, f.start, f.end) for f in self.doc.faults],
            rules=rules,
            applied=[copy.deepcopy(obj) for obj in self.doc.apply],
        )
        expanded._runtimes = {
            (r.namespace, r.name): r for r in (self._runtime(plan) for plan in self.plans) if r
        }
        expanded._procs = procs
        expanded._storage_capacity = {
            node.name: _base_units(self._capacity(node)["ephemeral-storage"], nano=False)
            for node in self.doc.nodes
        }
        return expanded

    # -- grants ----------------------------------------------------------------------------

    def _resolve_grants(self) -> list[_Grant]:
        grants: list[_Grant] = []
        for plan in self.plans:
            inventories = self.inventories.get(plan.node, [])
            for j, container in enumerate(plan.containers):
                for k, doc in enumerate(container.accelerators):
                    path = f"{plan.path}.containers[{j}].accelerators[{k}]"
                    grant = self._resolve(path, plan, container.name, doc, inventories)
                    if grant is not None:
                        grants.append(grant)
        return grants

    def _resolve(
        self,
        path: str,
        plan: _PodPlan,
        container: str,
        doc: GrantDoc,
        inventories: Sequence[_Inventory],
    ) -> _Grant | None:
        mode = AllocationMode.from_api_name(doc.mode)  # checked when parsed
        candidates = [i for i in inventories if doc.manufacturer in {"", i.manufacturer}]
        if not candidates:
            wanted = doc.manufacturer or "any"
            self.problems.append(
                f"{path}.device: node {plan.node!r} runs no {wanted} Device Manager"
            )
            return None
        for inventory in candidates:
            if mode is AllocationMode.PARTITIONED:
                found = inventory.partitions.get(doc.device)
                if found is not None:
                    card, partition = found
                    return _Grant(path, plan, container, mode, card, partition, None, None)
            elif doc.device in inventory.cards:
                card = inventory.cards[doc.device]
                if card.partitions:
                    self.problems.append(
                        f"{path}.device: {doc.device} is in MIG mode; grant one of its "
                        f"partitions as Partitioned ({', '.join(p.id for p in card.partitions)})"
                    )
                    return None
                return _Grant(
                    path,
                    plan,
                    container,
                    mode,
                    card,
                    None,
                    doc.memory_percent,
                    doc.cores_percent,
                )
        kind = "partition" if mode is AllocationMode.PARTITIONED else "device"
        known = sorted(
            key
            for inventory in candidates
            for key in (
                inventory.partitions if mode is AllocationMode.PARTITIONED else inventory.cards
            )
        )
        files = ", ".join(self._shown(i.file) for i in candidates)
        self.problems.append(
            f"{path}.device: {doc.device!r} is not a {kind} in the recordings of node "
            f"{plan.node!r} ({files}); known: {', '.join(known) or 'none'}"
        )
        return None

    def _check_ledger(self, grants: Sequence[_Grant]) -> None:
        """Refuse what the Device Manager's allocator would: cross-mode or over-full cards.

        A scenario the real allocator could never produce would test the daemons on a state
        they are entitled to assume away.
        """
        per_container: dict[tuple[str, str, str, AllocationMode], _Grant] = {}
        by_card: dict[tuple[str, str], list[_Grant]] = {}
        for grant in grants:
            if grant.mode is not AllocationMode.VISIBILITY:
                by_card.setdefault((grant.pod.node, grant.card.id), []).append(grant)
            if grant.mode not in {AllocationMode.SLICED, AllocationMode.PARTITIONED}:
                continue
            # `<base>.sliced` and `<base>.partitioned` are always 1 per container.
            key = (grant.pod.uid, grant.container, grant.card.manufacturer, grant.mode)
            if key in per_container:
                self.problems.append(
                    f"{grant.path}.mode: a container holds one {grant.mode.api_name} grant per "
                    f"manufacturer (also at {per_container[key].path})"
                )
            per_container.setdefault(key, grant)
        for held in by_card.values():
            self.problems.extend(_card_problems(held))

    # -- processes -------------------------------------------------------------------------

    def _procs(self) -> dict[str, dict[str, ProcEntry]]:
        """Each node's process table: the recordings' lines, claimed PIDs rewritten."""
        tables: dict[str, dict[str, ProcEntry]] = {}
        for node in self.doc.nodes:
            inventories = self.inventories.get(node.name, [])
            table = self._recorded_procs(node.name, inventories)
            for plan in (p for p in self.plans if p.node == node.name):
                self._claim(plan, inventories, table)
            tables[node.name] = {str(pid): table[pid] for pid in sorted(table)}
        return tables

    def _recorded_procs(self, node: str, inventories: Sequence[_Inventory]) -> dict[int, ProcEntry]:
        table: dict[int, ProcEntry] = {}
        origin: dict[int, _Inventory] = {}
        for inventory in inventories:
            for pid_text, entry in inventory.recording.context.procs.items():
                pid = int(pid_text)
                if pid in table and table[pid] != entry:
                    self.problems.append(
                        f"{inventory.path}.recording: PID {pid} on node {node!r} has different "
                        f"/proc entries here and in {origin[pid].path}.recording"
                    )
                table.setdefault(pid, entry)
                origin.setdefault(pid, inventory)
        return table

    def _claim(
        self,
        plan: _PodPlan,
        inventories: Sequence[_Inventory],
        table: dict[int, ProcEntry],
    ) -> None:
        ids = container_ids(plan)
        qos = _qos(plan)
        for j, container in enumerate(plan.containers):
            held = {(self._card_of(g, inventories) or g.device) for g in container.accelerators}
            for k, pid in enumerate(container.pids):
                path = f"{plan.path}.containers[{j}].pids[{k}]"
                recorded = table.get(pid)
                if recorded is None:
                    self.problems.append(
                        f"{path}: PID {pid} is absent from the recordings of node {plan.node!r} "
                        f"(they hold {', '.join(str(p) for p in sorted(table)) or 'none'})"
                    )
                    continue
                on: set[str] = set()
                for inventory in inventories:
                    on |= inventory.pid_devices.get(pid, set())
                if on and not on & held:
                    self.problems.append(
                        f"{path}: PID {pid} runs on {', '.join(sorted(on))} in the recording, "
                        f"none of which container {container.name!r} is granted"
                    )
                table[pid] = ProcEntry(
                    cgroup=cgroup_line(plan.uid, ids[container.name], qos),
                    state=recorded.state,
                    comm=container.comm or recorded.comm,
                )

    def _shown(self, file: Path) -> str:
        return str(file.relative_to(self.base)) if file.is_relative_to(self.base) else str(file)

    @staticmethod
    def _card_of(grant: GrantDoc, inventories: Sequence[_Inventory]) -> str | None:
        for inventory in inventories:
            if grant.device in inventory.partitions:
                return inventory.partitions[grant.device][0].id
        return None

    # -- objects ---------------------------------------------------------------------------

    def _capacity(self, node: NodeDoc) -> dict[str, Quantity]:
        capacity: dict[str, Quantity] = {
            "cpu": "64",
            "memory": "512Gi",
            "ephemeral-storage": "1Ti",
            "pods": "110",
        }
        capacity.update(node.capacity)
        return capacity

    def _node_ip(self, node: NodeDoc) -> str:
        return node.addresses.get("InternalIP") or f"10.0.0.{11 + self.node_index[node.name]}"

    def _node(self, node: NodeDoc) -> dict[str, Any]:
        addresses = {"InternalIP": self._node_ip(node), **node.addresses}
        addresses.setdefault("Hostname", node.name)
        capacity = {k: str(v) for k, v in self._capacity(node).items()}
        labels = {
            "kubernetes.io/hostname": node.name,
            contract.OS_LABEL: "linux",
            contract.ARCH_LABEL: "amd64",
        }
        for inventory in self.inventories.get(node.name, []):
            manufacturer = Manufacturer(inventory.manufacturer)
            labels[pci_present_label(manufacturer)] = "true"
            capacity[manufacturer.resource_base] = str(len(inventory.cards))
        labels.update(node.labels)
        index = self.node_index[node.name]
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node.name,
                "uid": _uid("node", node.name),
                "creationTimestamp": _stamp(self.doc.epoch, -86_400),
                "labels": labels,
                "annotations": dict(node.annotations),
            },
            "spec": {"podCIDR": f"10.42.{index}.0/24", "podCIDRs": [f"10.42.{index}.0/24"]},
            "status": {
                "addresses": [{"type": k, "address": v} for k, v in addresses.items()],
                "capacity": capacity,
                "allocatable": dict(capacity),
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": _stamp(self.doc.epoch, 0),
                        "lastTransitionTime": _stamp(self.doc.epoch, -86_000),
                    }
                ],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {
                    "kubeletVersion": "v1.33.0",
                    "containerRuntimeVersion": "containerd://2.0.5",
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                    "osImage": "Ubuntu 24.04.2 LTS",
                    "kernelVersion": "6.8.0-60-generic",
                },
            },
        }

    def _instance(self, instance: InstanceDoc) -> dict[str, Any]:
        pod = self.plan_of.get(id(instance))  # the first plan of that Instance, by identity
        phase = instance.phase or _instance_phase(instance, pod)
        status: dict[str, Any] = {"phase": phase}
        node = instance.node or (pod.node if pod else "")
        if node and (pod is not None or not instance.stop):
            status["nodeName"] = node
            doc = next(n for n in self.doc.nodes if n.name == node)
            status["hostIPs"] = [{"ip": self._node_ip(doc)}]
        spec: dict[str, Any] = {
            "image": instance.image or "registry.example/gpustack/runner:latest",
            # The API's names (ram, localStorage), from the scenario's container-limit names.
            "resources": msgspec.to_builtins(
                resources_from_limits(
                    {k: str(v) for k, v in _instance_resources(instance, instance.pod).items()}
                )
            ),
            "stop": instance.stop,
        }
        if instance.instance_type:
            spec["type"] = instance.instance_type
        return {
            "apiVersion": INSTANCE_API_VERSION,
            "kind": "Instance",
            "metadata": {
                "name": instance.name,
                "namespace": instance.namespace,
                "uid": _instance_uid(instance),
                "generation": 1,
                "creationTimestamp": _stamp(self.doc.epoch, instance.created),
                # The scenario renders this Instance's Pod and status itself; the worker's
                # controller leaves it to the scenario (Instances a scenario `apply`s it owns).
                "labels": {INSTANCE_MANAGED_BY_LABEL: SCENARIO_MANAGER, **instance.labels},
            },
            "spec": spec,
            "status": status,
        }

    def _pod(self, plan: _PodPlan, allocation: dict[str, Any] | None) -> dict[str, Any]:
        epoch, doc = self.doc.epoch, plan.doc
        labels: dict[str, str] = {}
        owners: list[dict[str, Any]] = []
        if plan.instance is not None:
            labels[PART_OF_LABEL] = plan.part_of
            if plan.instance.instance_type:
                labels[_QUEUE_LABEL] = f"gpustack-fnv64-{_fnv64a(plan.instance.instance_type)}"
            owners.append(
                {
                    "apiVersion": INSTANCE_API_VERSION,
                    "kind": "Instance",
                    "name": plan.instance.name,
                    "uid": plan.part_of,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            )
        labels.update(doc.labels)
        annotations = dict(doc.annotations)
        if allocation:
            annotations[ANNOTATION] = json.dumps(_public(allocation), separators=(",", ":"))
        metadata: dict[str, Any] = {
            "name": plan.name,
            "namespace": plan.namespace,
            "uid": plan.uid,
            "creationTimestamp": _stamp(epoch, doc.created),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": owners,
        }
        if doc.deleted is not None:
            metadata["deletionTimestamp"] = _stamp(epoch, doc.deleted)
            metadata["deletionGracePeriodSeconds"] = 30
        resources = _container_resources(plan, allocation or {})
        spec: dict[str, Any] = {
            "nodeName": plan.node,
            "containers": [_container_spec(c, resources[c.name]) for c in plan.containers],
            "initContainers": [_container_spec(c, resources[c.name]) for c in doc.init_containers],
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": False,
        }
        if plan.instance is not None:
            spec["hostIPC"] = True
            spec["shareProcessNamespace"] = True
            spec["automountServiceAccountToken"] = False
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": spec,
            "status": self._pod_status(plan),
        }

    def _pod_status(self, plan: _PodPlan) -> dict[str, Any]:
        epoch, doc = self.doc.epoch, plan.doc
        ids = container_ids(plan)
        started = doc.created + APP_START
        app = [
            _container_status(c, ids[c.name], _state(plan, c), epoch, started)
            for c in plan.containers
        ]
        init = [
            _container_status(c, ids[c.name], c.state or "terminated", epoch, doc.created + 2)
            for c in doc.init_containers
        ]
        running = [s for s in app if "running" in s["state"]]
        ready = bool(app) and all(s["ready"] for s in app)
        node = next(n for n in self.doc.nodes if n.name == plan.node)
        has_ip = bool(running) or any("terminated" in s["state"] for s in app)
        pod_ip = self._pod_ip(plan) if has_ip else ""
        when = _stamp(epoch, started)
        status: dict[str, Any] = {
            "phase": doc.phase,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": when},
                {"type": "Initialized", "status": "True", "lastTransitionTime": when},
                {"type": "ContainersReady", "status": str(ready), "lastTransitionTime": when},
                {"type": "Ready", "status": str(ready), "lastTransitionTime": when},
            ],
            "hostIP": self._node_ip(node),
            "hostIPs": [{"ip": self._node_ip(node)}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}] if pod_ip else [],
            "startTime": _stamp(epoch, doc.created + 1),
            "containerStatuses": app,
            "initContainerStatuses": init,
            "qosClass": _qos(plan),
        }
        return status

    def _pod_ip(self, plan: _PodPlan) -> str:
        index = self.node_index[plan.node]
        position = self.positions[id(plan)]  # no two plans are equal (each has its path)
        return f"10.42.{index}.{10 + position}"

    def _runtime(self, plan: _PodPlan) -> _Runtime | None:
        """A Pod the kubelet measures: one with a usage series that has started running."""
        if not plan.doc.usage:
            return None
        states = [_state(plan, c) for c in plan.containers]
        traces = [c.restart_count > 0 for c in plan.containers]
        if not any(s != "waiting" for s in states) and not any(traces):
            return None
        containers = tuple(
            (c.name, plan.doc.created + APP_START)
            for c, s in zip(plan.containers, states, strict=True)
            if s == "running"
        ) or ((plan.containers[0].name, plan.doc.created + APP_START),)
        return _Runtime(
            namespace=plan.namespace,
            name=plan.name,
            uid=plan.uid,
            node=plan.node,
            labels={**({PART_OF_LABEL: plan.part_of} if plan.instance else {}), **plan.doc.labels},
            started=plan.doc.created + 1,
            containers=containers,
            series=_series(plan.doc),
        )

    def _device_managers(self) -> tuple[list[dict[str, Any]], list[DeviceManagerSpec]]:
        pods: list[dict[str, Any]] = []
        specs: list[DeviceManagerSpec] = []
        for node in self.doc.nodes:
            for dm in node.device_managers:
                inventory = next(
                    i for i in self.inventories[node.name] if i.manufacturer == dm.manufacturer
                )
                name = (
                    f"gpustack-operator-device-manager-{dm.manufacturer}-"
                    + hashlib.sha256(node.name.encode()).hexdigest()[:5]
                )
                pods.append(self._dm_pod(node, dm, name))
                specs.append(
                    DeviceManagerSpec(
                        node=node.name,
                        manufacturer=dm.manufacturer,
                        recording=inventory.file.resolve(),
                        ready=dm.ready,
                        name=name,
                        namespace=SYSTEM_NAMESPACE,
                    )
                )
        return pods, specs

    def _dm_pod(self, node: NodeDoc, dm: DeviceManagerDoc, name: str) -> dict[str, Any]:
        epoch = self.doc.epoch
        daemonset = f"gpustack-operator-device-manager-{dm.manufacturer}"
        uid = _uid("pod", SYSTEM_NAMESPACE, name)
        container_id = (
            "containerd://" + hashlib.sha256(f"{uid}/device-manager".encode()).hexdigest()
        )
        ready = "True" if dm.ready else "False"
        when = _stamp(epoch, -86_000)
        env = [
            {
                "name": "KUBERNETES_NODE_NAME",
                "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
            },
            {
                "name": "KUBERNETES_POD_NAME",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
            },
            {
                "name": "KUBERNETES_POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            },
            {"name": "KUBERNETES_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ]
        image = "ghcr.io/gpustack/gpustack-operator:v0.9.2"
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": SYSTEM_NAMESPACE,
                "uid": uid,
                "creationTimestamp": _stamp(epoch, -86_100),
                "labels": {
                    "app.kubernetes.io/name": "gpustack-operator",
                    COMPONENT_LABEL: contract.DEVICE_MANAGER_COMPONENT,
                    MANUFACTURER_LABEL: dm.manufacturer,
                    "pod-template-generation": "1",
                },
                "annotations": {},
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": daemonset,
                        "uid": _uid("daemonset", SYSTEM_NAMESPACE, daemonset),
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "nodeName": node.name,
                "hostPID": True,
                "hostIPC": True,
                "priorityClassName": "system-cluster-critical",
                "serviceAccountName": "gpustack-operator-device-manager",
                "containers": [
                    {
                        "name": "device-manager",
                        "image": image,
                        "args": [
                            "device-manager",
                            "serve",
                            f"--manufacturer={dm.manufacturer}",
                            f"--secure-port={DEVICE_MANAGER_PORT}",
                            "-v=2",
                        ],
                        "env": env,
                        "ports": [
                            {
                                "name": "https",
                                "containerPort": DEVICE_MANAGER_PORT,
                                "protocol": "TCP",
                            }
                        ],
                        "resources": {"limits": {}, "requests": {}},
                    }
                ],
                "initContainers": [],
            },
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": when},
                    {"type": "Initialized", "status": "True", "lastTransitionTime": when},
                    {"type": "ContainersReady", "status": ready, "lastTransitionTime": when},
                    {"type": "Ready", "status": ready, "lastTransitionTime": when},
                ],
                "hostIP": self._node_ip(node),
                "hostIPs": [{"ip": self._node_ip(node)}],
                "podIP": "",
                "podIPs": [],
                "startTime": when,
                "containerStatuses": [
                    {
                        "name": "device-manager",
                        "containerID": container_id,
                        "ready": dm.ready,
                        "started": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": when}},
                        "lastState": {},
                        "image": image,
                        "imageID": f"{image.rsplit(':', 1)[0]}@sha256:" + "0" * 64,
                    }
                ],
                "initContainerStatuses": [],
                "qosClass": "BestEffort",
            },
        }

    def _users(self) -> tuple[list[UserSpec], dict[str, tuple[Rule, ...]]]:
        users: dict[str, UserDoc] = {u.name: u for u in builtin_users()}
        users.update({u.name: u for u in self.doc.users})
        specs = [UserSpec(u.name, u.token or token_for(u.name), u.groups) for u in users.values()]
        tokens: dict[str, str] = {}
        for spec in specs:
            if spec.token in tokens:
                self.problems.append(
                    f"$.users: users {tokens[spec.token]!r} and {spec.name!r} share a token"
                )
            tokens.setdefault(spec.token, spec.name)
        self.fail_if_problems()
        return specs, {u.name: u.rules for u in users.values()}
