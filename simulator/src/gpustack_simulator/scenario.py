"""Cluster scenarios, ``cluster-scenario/v1``: a small cluster stated once, served everywhere.

The daemons under test read an API server (Nodes, Pods, Instances, reviews), a kubelet's stats
summary, metrics.k8s.io and, through a Device Manager, a vendor library and a host ``/proc``.
A scenario states what all of those would answer in a compact authoring form, and
:func:`expand` turns it into the exact JSON each one returns. The authoring form is small so a
scenario stays reviewable; the expansion happens in one place so the stand-ins cannot disagree
with each other: a Pod's allocation annotation, its container IDs, the cgroup lines of its
processes and the kubelet entry that measures it all come from one declaration.

Everything a scenario names is checked against what it names: nodes, recordings, devices and
PIDs. An error names the file, the JSON path and the field, so a broken scenario is fixed from
the message alone. See ``docs/scenarios.md``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import yaml

from gpustack_core.allocation import ANNOTATION
from gpustack_core.decoding import ContractError, convert
from gpustack_core.instance_metrics import API_GROUP
from gpustack_core.modes import AllocationMode, Manufacturer
from gpustack_core.pods import PART_OF_LABEL, AwareDatetime
from gpustack_core.quantity import QuantityError, parse_quantity
from gpustack_core.units import UNITS_PER_ACCELERATOR
from gpustack_core.wire import Wire
from gpustack_simulator.recording import ProcEntry, Recording, load_recording
from gpustack_simulator.replay.backends import UnsupportedRecording, replay_backend
from gpustack_simulator.synth.timeline import VirtualClock
from gpustack_vendors.model import PartitionInfo

SCHEMA = "cluster-scenario/v1"

_REPO = Path(__file__).resolve().parents[3]
RECORDINGS_DIR = _REPO / "recordings"
"""Where recording paths in a scenario are resolved by default (``expand``'s ``base``)."""
SCENARIOS_DIR = Path(os.environ.get("GPUSTACK_SCENARIOS") or RECORDINGS_DIR / "scenarios")
"""Where a bare scenario name is looked up; ``GPUSTACK_SCENARIOS`` points elsewhere."""

DEFAULT_EPOCH = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
"""Scenario time 0. Fixed, so every expansion of a scenario yields the same bytes."""

SYSTEM_NAMESPACE = "gpustack-system"
DEVICE_MANAGER_PORT = 32443
INSTANCE_API_VERSION = f"{API_GROUP}/v1alpha1"
COMPONENT_LABEL = "app.kubernetes.io/component"
MANUFACTURER_LABEL = "gpustack.ai/manufacturer"
MASTERS = "system:masters"

SHARES_PER_CARD = 10
"""``Shared`` hands out ten shares of a card; each share is a tenth of its units."""
MIG_MEMORY_SLICES = 8
"""An NVIDIA card's MIG memory slices: a ``3g.40gb`` of an H100 spans four of them."""
MAX_OFFSET = 1e9
"""Scenario times stay within about 30 years of the epoch, so every one is a real date."""
MAX_FIGURE = (1 << 63) - 1
"""A usage figure must fit the kubelet's counters as JSON readers decode them (int64)."""
MAX_PID = 4_194_304
"""Linux's ``pid_max`` ceiling: a larger PID cannot be a host process."""

_UUID_NAMESPACE = uuid.UUID("5c0e7a3e-2f49-4c1b-9a0e-6d8f1b2c3a4d")
_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Pid = Annotated[int, msgspec.Meta(ge=1, le=MAX_PID)]
Percent = Annotated[int, msgspec.Meta(ge=1, le=100)]
Quantity = str | int
"""As written in a scenario: a Kubernetes quantity string, or a whole number."""


# --------------------------------------------------------------------------------------------
# The authoring schema
# --------------------------------------------------------------------------------------------


class _Authored(Wire, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of the authoring structs: a misspelt key is an error, not a silently lost field.

    The wire contracts ignore unknown keys so newer producers never break readers; a scenario
    is written by hand, where an ignored ``memroyPercent`` would quietly change what it tests.
    """


class UsagePoint(_Authored, frozen=True, kw_only=True):
    """A Pod's usage from ``t`` seconds until the next point; an omitted figure is unmeasured.

    Whole numbers are base units (nanocores, bytes); strings are quantities (``250m`` cores,
    ``2Gi``), so a figure can be copied from either a kubelet summary or a limit.
    """

    t: float
    cpu: Quantity | None = None
    memory: Quantity | None = None
    storage: Quantity | None = None


class Rule(_Authored, frozen=True, kw_only=True):
    """An RBAC rule, as a Role's ``rules[]`` entry, plus the namespaces it is bound in.

    ``namespaces`` empty means a cluster-wide binding (a ClusterRoleBinding); otherwise the rule
    applies only to requests in those namespaces, as a RoleBinding would.
    """

    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()


class UserDoc(_Authored, frozen=True, kw_only=True):
    """A user the stand-in authenticates; replaces a built-in user of the same name."""

    name: str
    groups: tuple[str, ...] = ()
    token: str = ""
    rules: tuple[Rule, ...] = ()


class DeviceManagerDoc(_Authored, frozen=True, kw_only=True):
    """One manufacturer's Device Manager on a node and the recording its library replays."""

    manufacturer: str
    recording: str
    ready: bool = True


class NodeDoc(_Authored, frozen=True, kw_only=True):
    """A node; ``addresses`` maps address type to address (``InternalIP: 10.0.0.11``)."""

    name: str
    addresses: dict[str, str] = {}
    labels: dict[str, str] = {}
    capacity: dict[str, Quantity] = {}
    device_managers: tuple[DeviceManagerDoc, ...] = ()


class GrantDoc(_Authored, frozen=True, kw_only=True):
    """One accelerator grant of a container.

    ``device`` is the card's id (NVIDIA UUID, AMD PCI bus id), or under ``Partitioned`` the
    partition's own (a MIG UUID); ``manufacturer`` is found from the node's recordings when
    omitted.
    """

    device: str
    mode: str
    manufacturer: str = ""
    memory_percent: Percent | None = None
    cores_percent: Percent | None = None


class ContainerDoc(_Authored, frozen=True, kw_only=True):
    """An app or init container: what it declares, how it runs, which PIDs are its own."""

    name: str
    image: str = ""
    limits: dict[str, Quantity] = {}
    requests: dict[str, Quantity] | None = None
    id: str = ""
    state: Literal["running", "waiting", "terminated"] | None = None
    restart_count: NonNegative = 0
    ready: bool | None = None
    pids: tuple[Pid, ...] = ()
    comm: str = ""
    accelerators: tuple[GrantDoc, ...] = ()


class PodDoc(_Authored, frozen=True, kw_only=True):
    """A Pod. Times are seconds relative to the scenario epoch (``created: -3600``).

    Under an Instance, name, namespace and node default to the Instance's and ``partOf`` to its
    UID; setting ``partOf`` to another UID states a previous incarnation's Pod.
    """

    name: str = ""
    namespace: str = ""
    node: str = ""
    uid: str = ""
    phase: Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"] = "Running"
    created: float = -3600.0
    deleted: float | None = None
    part_of: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    containers: tuple[ContainerDoc, ...] = ()
    init_containers: tuple[ContainerDoc, ...] = ()
    usage: tuple[UsagePoint, ...] = ()


class InstanceDoc(_Authored, frozen=True, kw_only=True):
    """An Instance (``worker.gpustack.ai/v1alpha1``) and, unless stopped or pending, its Pod."""

    name: str
    namespace: str = "default"
    uid: str = ""
    node: str = ""
    instance_type: str = ""
    image: str = ""
    resources: dict[str, Quantity] = {}
    stop: bool = False
    phase: str = ""
    created: float = -7200.0
    labels: dict[str, str] = {}
    pod: PodDoc | None = None


class FaultDoc(_Authored, frozen=True, kw_only=True):
    """A source failing from ``from`` until ``to`` (forever when omitted); no node = all."""

    kind: Literal["kubelet-unreachable", "metrics-api-absent"]
    node: str | None = None
    start: float = msgspec.field(default=0.0, name="from")
    end: float | None = msgspec.field(default=None, name="to")


class ScenarioDocument(_Authored, frozen=True, kw_only=True):
    """One scenario file."""

    schema: Literal["cluster-scenario/v1"]
    description: str
    nodes: tuple[NodeDoc, ...]
    epoch: AwareDatetime = DEFAULT_EPOCH
    instances: tuple[InstanceDoc, ...] = ()
    pods: tuple[PodDoc, ...] = ()
    users: tuple[UserDoc, ...] = ()
    faults: tuple[FaultDoc, ...] = ()


@dataclass(frozen=True)
class Scenario:
    """A parsed, checked scenario and the file it came from (every later error names it)."""

    source: str
    document: ScenarioDocument

    @property
    def description(self) -> str:
        """What the scenario shows, as its file says."""
        return self.document.description


# --------------------------------------------------------------------------------------------
# What expansion hands the stand-ins
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceManagerSpec:
    """A Device Manager the stand-in runs: where, for which manufacturer, over which recording.

    ``name``/``namespace`` are those of its Pod in ``Expanded.pods``, whose ``podIP`` the
    stand-in fills in once it knows where the Device Manager listens.
    """

    node: str
    manufacturer: str
    recording: Path
    ready: bool
    name: str
    namespace: str


@dataclass(frozen=True)
class UserSpec:
    """A user the stand-in authenticates by bearer token (TokenReview answers with the groups)."""

    name: str
    token: str
    groups: tuple[str, ...]


@dataclass(frozen=True)
class Fault:
    """A source failing between ``start`` and ``end`` (``None``: forever) on ``node`` (or all)."""

    kind: Literal["kubelet-unreachable", "metrics-api-absent"]
    node: str | None
    start: float
    end: float | None

    def active(self, node: str | None, t: float) -> bool:
        """Whether the fault covers ``node`` at scenario time ``t`` (``from`` in, ``to`` out)."""
        if self.node is not None and node != self.node:
            return False
        return self.start <= t and (self.end is None or t < self.end)


def token_for(user: str) -> str:
    """The bearer token of a user without one of its own: stable, so tests can spell it."""
    digest = hashlib.sha256(f"gpustack-simulator/{user}".encode()).hexdigest()
    return f"sim-{user}-{digest[:32]}"


# --------------------------------------------------------------------------------------------
# RBAC, as the API server's authorizer decides it
# --------------------------------------------------------------------------------------------


def _rule_matches(
    rule: Rule, verb: str, group: str, resource: str, subresource: str, namespace: str, name: str
) -> bool:
    """Kubernetes' ``RuleAllows``: a rule on ``instances`` never grants ``instances/metrics``."""
    if rule.namespaces and namespace not in rule.namespaces:
        return False
    if "*" not in rule.verbs and verb not in rule.verbs:
        return False
    if "*" not in rule.api_groups and group not in rule.api_groups:
        return False
    combined = f"{resource}/{subresource}" if subresource else resource
    resource_ok = any(
        spelled in {"*", combined} or (subresource != "" and spelled == f"*/{subresource}")
        for spelled in rule.resources
    )
    if not resource_ok:
        return False
    return not rule.resource_names or name in rule.resource_names


def allowed(
    users_rules: Mapping[str, Sequence[Rule]],
    user: str,
    groups: Sequence[str],
    *,
    verb: str,
    group: str,
    resource: str,
    subresource: str = "",
    namespace: str = "",
    name: str = "",
) -> tuple[bool, str]:
    """Decide a SubjectAccessReview; the string is the review's ``reason``.

    Rules are additive and there is no deny, exactly as RBAC: the first rule that matches
    allows, and ``system:masters`` is allowed everything without any rule, as the API server's
    superuser group is. The denial reason names what was asked, so a failing test says which
    permission the scenario's user lacked.
    """
    if MASTERS in groups:
        return True, f'allowed: user "{user}" is in group "{MASTERS}"'
    for index, rule in enumerate(users_rules.get(user, ())):
        if _rule_matches(rule, verb, group, resource, subresource, namespace, name):
            return True, f'allowed by rule {index} of user "{user}"'
    what = f"{resource}/{subresource}" if subresource else resource
    where = f' in namespace "{namespace}"' if namespace else ""
    return False, (
        f'user "{user}" has no rule allowing "{verb}" on "{what}" in API group "{group}"{where}'
    )


def _rule(groups: Sequence[str], resources: Sequence[str], verbs: Sequence[str], **kw: Any) -> Rule:
    return Rule(api_groups=tuple(groups), resources=tuple(resources), verbs=tuple(verbs), **kw)


def _daemon_rules() -> tuple[Rule, ...]:
    """What the worker and the Device Manager call, and nothing else.

    The chart grants the same narrow roles; the stand-in grants only what the daemons use so a
    new, unreviewed call shows up as a 403 in a test rather than passing unnoticed.
    """
    read = ("get", "list", "watch")
    return (
        _rule([""], ["pods"], read),
        _rule([""], ["nodes"], ["get", "list"]),
        _rule([""], ["nodes/proxy"], ["get"]),
        _rule([""], ["configmaps"], ["get"], namespaces=("kube-system",)),
        _rule(["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
        _rule(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
        _rule(["metrics.k8s.io"], ["pods"], ["get", "list"]),
        _rule([API_GROUP], ["instances"], read),
        _rule([API_GROUP], ["instances/metrics"], ["get"]),
    )


def builtin_users() -> tuple[UserDoc, ...]:
    """The users every scenario has, each shaped after a question a test asks of RBAC."""
    service = ("system:serviceaccounts", f"system:serviceaccounts:{SYSTEM_NAMESPACE}")
    return (
        # Bound both ways, as a kubeadm admin is: a review naming the user without its groups
        # (a SubjectAccessReview carries only what the caller put in it) is still allowed.
        UserDoc(
            name="admin",
            groups=(MASTERS, "system:authenticated"),
            rules=(_rule(["*"], ["*"], ["*"]),),
        ),
        UserDoc(
            name="no-metrics",
            groups=("system:authenticated",),
            rules=(_rule([API_GROUP], ["instances"], ["get", "list", "watch"]),),
        ),
        UserDoc(
            name="device-manager",
            groups=(*service, "system:authenticated"),
            rules=_daemon_rules(),
        ),
        UserDoc(name="worker", groups=(*service, "system:authenticated"), rules=_daemon_rules()),
        # What Prometheus' `kubernetes_sd_configs` (role: endpoints) lists and watches, and
        # nothing else: a scrape setup reaching for more shows up as a 403.
        UserDoc(
            name="prometheus",
            groups=(
                "system:serviceaccounts",
                "system:serviceaccounts:monitoring",
                "system:authenticated",
            ),
            rules=(_rule([""], ["pods", "services", "endpoints"], ("get", "list", "watch")),),
        ),
    )


# --------------------------------------------------------------------------------------------
# Parsing and the checks that need no recording
# --------------------------------------------------------------------------------------------


def find_scenario(name_or_path: str) -> Path:
    """A path as given, or a bare name looked up as ``SCENARIOS_DIR/<name>.yaml``.

    A bare name keeps command lines and tests short (``nvidia-mixed``); anything that looks
    like a path is taken as one, so a scenario outside the repository works the same way.
    """
    looks_like_path = "/" in name_or_path or name_or_path.endswith((".yaml", ".yml"))
    path = Path(name_or_path) if looks_like_path else SCENARIOS_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in SCENARIOS_DIR.glob("*.yaml"))
        raise FileNotFoundError(
            f"no scenario {name_or_path!r} ({path}); scenarios in {SCENARIOS_DIR}: "
            + (", ".join(known) or "none")
        )
    return path


_SCHEMA_LINE = re.compile(r"^schema:[ \t]*(['\"]?)cluster-scenario/v1\1[ \t]*(#.*)?$", re.M)


def is_scenario(path: Path) -> bool:
    """Whether the file declares this schema, read from its top-level ``schema`` key only.

    Recordings and scenarios share a folder tree, and listing them must not parse every
    recording twice just to tell them apart.
    """
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return False
    return _SCHEMA_LINE.search(text) is not None


def parse_scenario(data: str | bytes, *, source: str) -> Scenario:
    """Parse and check a scenario; every problem names ``source``, the path and the field."""
    try:
        document = yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise ContractError(f"{source}: not valid YAML ({exc})") from exc
    except RecursionError as exc:
        raise ContractError(f"{source}: nested too deeply to read") from exc
    parsed = convert(document, ScenarioDocument, what=source)
    problems = check(parsed)
    if problems:
        raise ContractError(f"{source}: " + "; ".join(problems))
    return Scenario(source=source, document=parsed)


def load_scenario(path: Path) -> Scenario:
    """Read a scenario file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ContractError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    return parse_scenario(data, source=str(path))


def recordings_for(path: Path) -> Path:
    """The folder a scenario's recording paths are relative to.

    A scenario kept in ``<dir>/scenarios/`` reads recordings from ``<dir>``, so a copied tree
    stays self-contained; one kept anywhere else reads the repository's recordings.
    """
    parent = path.resolve().parent
    return parent.parent if parent.name == "scenarios" else RECORDINGS_DIR


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
    return problems


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


# --------------------------------------------------------------------------------------------
# Time series
# --------------------------------------------------------------------------------------------


def _base_units(value: Quantity, *, nano: bool) -> int:
    """A usage figure in base units: whole numbers as written, quantities converted exactly."""
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value} is negative")
        return value
    amount = parse_quantity(value) * (10**9 if nano else 1)
    if amount < 0:
        raise ValueError(f"quantity {value!r} is negative")
    return math.ceil(amount)


@dataclass(frozen=True)
class _Point:
    t: float
    nanocores: int | None
    memory: int | None
    storage: int | None


@dataclass(frozen=True)
class _Series:
    """A Pod's usage points; each holds from its ``t`` until the next."""

    points: tuple[_Point, ...]

    def at(self, t: float) -> _Point | None:
        """The point in force at ``t``; ``None`` before the first (the kubelet has no entry)."""
        current = None
        for point in self.points:
            if point.t > t:
                break
            current = point
        return current

    def core_nanoseconds(self, t: float) -> int:
        """Cumulative CPU (``usageCoreNanoSeconds``): the rate integrated up to ``t``."""
        total = Fraction(0)
        for i, point in enumerate(self.points):
            if point.t > t:
                break
            end = t if i + 1 == len(self.points) else min(t, self.points[i + 1].t)
            total += (point.nanocores or 0) * (Fraction(end) - Fraction(point.t))
        return math.floor(total)


def _series(doc: PodDoc) -> _Series:
    return _Series(
        tuple(
            _Point(
                t=p.t,
                nanocores=None if p.cpu is None else _base_units(p.cpu, nano=True),
                memory=None if p.memory is None else _base_units(p.memory, nano=False),
                storage=None if p.storage is None else _base_units(p.storage, nano=False),
            )
            for p in doc.usage
        )
    )


# --------------------------------------------------------------------------------------------
# Recordings: what each Device Manager's library holds
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Card:
    id: str
    index: int
    name: str
    manufacturer: str
    group: str
    memory_mib: int
    partitions: tuple[PartitionInfo, ...]


@dataclass
class _Inventory:
    """One Device Manager's recording, read the way the Device Manager reads it."""

    path: str
    manufacturer: str
    file: Path
    recording: Recording
    cards: dict[str, _Card]
    partitions: dict[str, tuple[_Card, PartitionInfo]]
    pid_devices: Mapping[int, frozenset[str]]


def _group_id(manufacturer: str, product: str) -> str:
    """A device group's id, ``<manufacturer>-<product>`` as the Devices object keys groups."""
    slug = re.sub(r"[^a-z0-9]+", "-", product.lower()).strip("-")
    slug = slug.removeprefix(f"{manufacturer}-")
    return f"{manufacturer}-{slug or 'device'}"


def _inventory(
    path: str, dm: DeviceManagerDoc, base: Path, problems: list[str]
) -> _Inventory | None:
    """One Device Manager's recording, or ``None`` with the reason added to ``problems``."""
    file = Path(dm.recording) if Path(dm.recording).is_absolute() else base / dm.recording
    if not file.is_file():
        problems.append(f"{path}.recording: unknown recording {dm.recording!r} (no {file})")
        return None
    try:
        recording, cards, pid_devices = _detected(str(file.resolve()), file.stat().st_mtime_ns)
    except (ContractError, UnsupportedRecording) as exc:
        problems.append(f"{path}.recording: {exc}")
        return None
    if recording.vendor != dm.manufacturer:
        problems.append(
            f"{path}.recording: {dm.recording} is a {recording.vendor} recording, "
            f"not {dm.manufacturer}"
        )
        return None
    partitions = {p.id: (card, p) for card in cards.values() for p in card.partitions}
    return _Inventory(path, dm.manufacturer, file, recording, cards, partitions, pid_devices)


@functools.lru_cache(maxsize=32)
def _detected(
    file: str, mtime_ns: int
) -> tuple[Recording, dict[str, _Card], dict[int, frozenset[str]]]:
    """Detect the recording's cards through the unchanged backend, then list who runs where.

    Going through the backend (not the YAML) means a scenario can only name devices the
    Device Manager will actually report, by the ids it will report them under. Cached per
    file version (``mtime_ns`` is part of the key): a stand-in and a test suite expand the
    same few recordings many times, and the answers are the caller's to read, never to change.
    """
    recording = load_recording(Path(file))
    clock = VirtualClock()
    backend = replay_backend(recording, clock=clock)
    try:
        cards = {
            d.id: _Card(
                d.id,
                d.index,
                d.name,
                recording.vendor,
                _group_id(recording.vendor, d.name),
                d.memory_mib,
                d.partitions,
            )
            for d in backend.detect().devices
        }
        pid_devices: dict[int, set[str]] = {}
        # One pass per monitor period over the recording's loop: a PID seen on a card at any
        # time counts, so a process that starts mid-recording is still found.
        period = 15.0
        for _ in range(max(1, math.ceil((recording.loop_seconds or period) / period))):
            for device_id, listed in backend.processes(list(cards)).items():
                for row in listed.rows:
                    pid_devices.setdefault(row.pid, set()).add(device_id)
            clock.sleep(period)
    finally:
        backend.close()
    return recording, cards, {pid: frozenset(ids) for pid, ids in pid_devices.items()}


# --------------------------------------------------------------------------------------------
# Expansion
# --------------------------------------------------------------------------------------------


def _stamp(epoch: datetime, offset: float) -> str:
    """RFC 3339 in UTC with ``Z``, fractional seconds only where there are any."""
    moment = epoch + timedelta(seconds=offset)
    text = moment.astimezone(UTC).isoformat()
    return text.replace("+00:00", "Z")


def _fnv64a(text: str) -> str:
    value = 0xCBF29CE484222325
    for byte in text.encode():
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{value:016x}"


@dataclass(frozen=True)
class _Grant:
    """A grant resolved against the node's recordings."""

    path: str
    pod: _PodPlan
    container: str
    mode: AllocationMode
    card: _Card
    partition: PartitionInfo | None
    memory_percent: int | None
    cores_percent: int | None


@dataclass
class _Runtime:
    """What the kubelet and metrics-server stand-ins need of one measurable Pod."""

    namespace: str
    name: str
    uid: str
    node: str
    labels: dict[str, str]
    started: float
    containers: tuple[tuple[str, float], ...]
    """App containers that run, with their start offsets: the per-container split."""
    series: _Series


@dataclass
class Expanded:
    """A scenario as the stand-ins serve it: exact Kubernetes objects plus their behaviour.

    Objects carry no ``resourceVersion``: the stand-in's store assigns those as it serves, and
    Device Manager Pods carry an empty ``podIP`` until the stand-in knows where each listens.
    """

    description: str
    epoch: datetime
    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    instances: list[dict[str, Any]]
    device_managers: list[DeviceManagerSpec]
    users: list[UserSpec]
    faults: list[Fault]
    rules: dict[str, tuple[Rule, ...]]
    _runtimes: dict[tuple[str, str], _Runtime] = field(default_factory=dict, repr=False)
    _procs: dict[str, dict[str, ProcEntry]] = field(default_factory=dict, repr=False)
    _storage_capacity: dict[str, int] = field(default_factory=dict, repr=False)

    # -- authorization ---------------------------------------------------------------------

    def allowed(
        self,
        user: str,
        groups: Sequence[str] | None = None,
        *,
        verb: str,
        group: str,
        resource: str,
        subresource: str = "",
        namespace: str = "",
        name: str = "",
    ) -> tuple[bool, str]:
        """:func:`allowed` over this scenario's rules; ``groups`` default to the user's own."""
        if groups is None:
            groups = next((u.groups for u in self.users if u.name == user), ())
        return allowed(
            self.rules,
            user,
            groups,
            verb=verb,
            group=group,
            resource=resource,
            subresource=subresource,
            namespace=namespace,
            name=name,
        )

    def user_for_token(self, token: str) -> UserSpec | None:
        """The user a bearer token authenticates as (a TokenReview's answer), if any."""
        return next((u for u in self.users if u.token == token), None)

    def fault_active(self, kind: str, node: str | None, t: float) -> bool:
        """Whether a fault of ``kind`` covers ``node`` (or the cluster) at time ``t``."""
        return any(f.kind == kind and f.active(node, t) for f in self.faults)

    # -- measurements ----------------------------------------------------------------------

    def _node_names(self) -> list[str]:
        return [n["metadata"]["name"] for n in self.nodes]

    def summary(self, node: str, t: float) -> dict[str, Any]:
        """The node's kubelet ``/stats/summary`` at scenario time ``t``.

        Faults are not applied here: whether the kubelet answers at all is the stand-in's
        decision (``fault_active``), what it would say is this one's.
        """
        if node not in self._node_names():
            raise KeyError(f"no node {node!r} in this scenario")
        now = _stamp(self.epoch, t)
        capacity = self._storage_capacity.get(node, 0)
        entries: list[dict[str, Any]] = []
        cpu_sum, memory_sum, storage_sum, cumulative = 0, 0, 0, 0
        for runtime in self._runtimes.values():
            if runtime.node != node:
                continue
            point = runtime.series.at(t)
            if point is None:
                continue
            entries.append(_pod_stats(runtime, point, now, t, capacity, self.epoch))
            cpu_sum += point.nanocores or 0
            memory_sum += point.memory or 0
            storage_sum += point.storage or 0
            cumulative += runtime.series.core_nanoseconds(t)
        return {
            "node": _node_stats(
                node, now, self.epoch, t, capacity, cpu_sum, memory_sum, storage_sum, cumulative
            ),
            "pods": entries,
        }

    def pod_metrics(self, namespace: str, name: str, t: float) -> dict[str, Any] | None:
        """metrics.k8s.io's ``PodMetrics`` for the Pod at ``t``; ``None`` when it has no usage.

        ``None`` covers an unknown Pod, one that never started and one whose first usage point
        lies after ``t``: metrics-server answers 404 for all three.
        """
        runtime = self._runtimes.get((namespace, name))
        if runtime is None:
            return None
        point = runtime.series.at(t)
        if point is None or (point.nanocores is None and point.memory is None):
            return None
        now = _stamp(self.epoch, t)
        cpu_parts = _split(point.nanocores, len(runtime.containers))
        memory_parts = _split(point.memory, len(runtime.containers))
        containers = []
        for k, (container, _) in enumerate(runtime.containers):
            usage: dict[str, str] = {}
            if cpu_parts is not None:
                usage["cpu"] = f"{cpu_parts[k]}n"
            if memory_parts is not None:
                usage["memory"] = _memory_quantity(memory_parts[k])
            containers.append({"name": container, "usage": usage})
        return {
            "kind": "PodMetrics",
            "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "creationTimestamp": now,
                "labels": dict(runtime.labels),
            },
            "timestamp": now,
            "window": "15s",
            "containers": containers,
        }

    def procs(self, node: str) -> dict[str, ProcEntry]:
        """The host process table the node's Device Managers see through their fake procfs."""
        if node not in self._node_names():
            raise KeyError(f"no node {node!r} in this scenario")
        return dict(self._procs.get(node, {}))


def _split(value: int | None, parts: int) -> list[int] | None:
    """Divide a Pod figure among its containers so the parts sum back to it exactly."""
    if value is None or parts == 0:
        return None
    share, rest = divmod(value, parts)
    return [share + (rest if k == 0 else 0) for k in range(parts)]


def _memory_quantity(value: int) -> str:
    """metrics-server spells memory in Ki; a figure that is not whole Ki stays in bytes."""
    return f"{value // 1024}Ki" if value % 1024 == 0 else str(value)


def _cpu_block(time: str, nanocores: int | None, cumulative: int) -> dict[str, Any]:
    block: dict[str, Any] = {"time": time}
    if nanocores is not None:
        block["usageNanoCores"] = nanocores
    block["usageCoreNanoSeconds"] = cumulative
    return block


def _memory_block(time: str, working_set: int) -> dict[str, Any]:
    # The kubelet's working set is usage less inactive file pages, and RSS is part of it.
    return {
        "time": time,
        "usageBytes": working_set + working_set // 8,
        "workingSetBytes": working_set,
        "rssBytes": working_set - working_set // 4,
        "pageFaults": 0,
        "majorPageFaults": 0,
    }


def _fs_block(time: str, used: int, capacity: int) -> dict[str, Any]:
    return {
        "time": time,
        "availableBytes": max(capacity - used, 0),
        "capacityBytes": capacity,
        "usedBytes": used,
    }


def _pod_stats(
    runtime: _Runtime, point: _Point, now: str, t: float, capacity: int, epoch: datetime
) -> dict[str, Any]:
    cumulative = runtime.series.core_nanoseconds(t)
    count = len(runtime.containers)
    cpu_parts = _split(point.nanocores, count)
    cumulative_parts = _split(cumulative, count) or [0] * count
    memory_parts = _split(point.memory, count)
    containers = []
    for k, (name, started) in enumerate(runtime.containers):
        container: dict[str, Any] = {"name": name, "startTime": _stamp(epoch, started)}
        container["cpu"] = _cpu_block(
            now, None if cpu_parts is None else cpu_parts[k], cumulative_parts[k]
        )
        if memory_parts is not None:
            container["memory"] = _memory_block(now, memory_parts[k])
        containers.append(container)
    entry: dict[str, Any] = {
        "podRef": {"name": runtime.name, "namespace": runtime.namespace, "uid": runtime.uid},
        "startTime": _stamp(epoch, runtime.started),
        "containers": containers,
        "cpu": _cpu_block(now, point.nanocores, cumulative),
    }
    if point.memory is not None:
        entry["memory"] = _memory_block(now, point.memory)
    if point.storage is not None:
        entry["ephemeral-storage"] = _fs_block(now, point.storage, capacity)
    return entry


SYSTEM_CPU_NANOCORES = 180_000_000
SYSTEM_MEMORY_BYTES = 3 << 30
SYSTEM_STORAGE_BYTES = 24 << 30
"""What the node itself (kubelet, runtime, OS) adds on top of its Pods in the node block."""


def _node_stats(
    node: str,
    now: str,
    epoch: datetime,
    t: float,
    capacity: int,
    cpu: int,
    memory: int,
    storage: int,
    cumulative: int,
) -> dict[str, Any]:
    return {
        "nodeName": node,
        "startTime": _stamp(epoch, -86_400),
        "cpu": _cpu_block(
            now,
            cpu + SYSTEM_CPU_NANOCORES,
            cumulative + math.floor(SYSTEM_CPU_NANOCORES * (86_400 + max(t, 0))),
        ),
        "memory": _memory_block(now, memory + SYSTEM_MEMORY_BYTES),
        "fs": _fs_block(now, storage + SYSTEM_STORAGE_BYTES, capacity),
    }


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
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        for inventory in self.inventories.get(node.name, []):
            manufacturer = Manufacturer(inventory.manufacturer)
            labels[f"feature.node.kubernetes.io/pci-{_PCI_VENDORS[manufacturer]}.present"] = "true"
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
                "annotations": {},
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
        pod = next((p for p in self.plans if p.instance is instance), None)
        phase = instance.phase or _instance_phase(instance, pod)
        status: dict[str, Any] = {"phase": phase}
        node = instance.node or (pod.node if pod else "")
        if node and (pod is not None or not instance.stop):
            status["nodeName"] = node
            doc = next(n for n in self.doc.nodes if n.name == node)
            status["hostIPs"] = [{"ip": self._node_ip(doc)}]
        spec: dict[str, Any] = {
            "image": instance.image or "registry.example/gpustack/runner:latest",
            "resources": {
                k: str(v) for k, v in _instance_resources(instance, instance.pod).items()
            },
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
                "labels": dict(instance.labels),
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
        position = [p for p in self.plans if p.node == plan.node].index(plan)
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
                    COMPONENT_LABEL: "device-manager",
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


_PCI_VENDORS = {
    Manufacturer.NVIDIA: "10de",
    Manufacturer.AMD: "1002",
    Manufacturer.ASCEND: "19e5",
    Manufacturer.CAMBRICON: "cabc",
    Manufacturer.HYGON: "1d94",
    Manufacturer.ILUVATAR: "1e3e",
    Manufacturer.METAX: "9999",
    Manufacturer.MTHREADS: "1ed5",
    Manufacturer.THEAD: "1ded",
}

APP_START = 30.0
"""Seconds after a Pod's creation its app containers start (init containers run before)."""


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
        container["deviceIDs"].append(f"{grant.card.group}:{grant.card.id}:{token}")
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
