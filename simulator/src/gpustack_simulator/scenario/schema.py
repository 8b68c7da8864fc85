"""The ``cluster-scenario/v1`` authoring schema and the values expansion hands the stand-ins.

The authoring form is small so a scenario stays reviewable; these structs are what a scenario
file decodes into (unknown fields refused), plus the constants every other part of the package
shares, so a label key or a port is spelled once.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from gpustack_core import contract
from gpustack_core.pods import AwareDatetime
from gpustack_core.resources import SHARES_PER_ACCELERATOR
from gpustack_core.wire import Wire
from gpustack_simulator import packagedata

SCHEMA = "cluster-scenario/v1"

RECORDINGS_DIR = packagedata.RECORDINGS
"""Where recording paths in a scenario are resolved by default (``expand``'s ``base``)."""

DEFAULT_EPOCH = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
"""Scenario time 0. Fixed, so every expansion of a scenario yields the same bytes."""

# The contract's names under the names the package has long used: imported, never restated
# (tests/lint/layers.py refuses a contract value written out anywhere in the simulator).
SYSTEM_NAMESPACE = contract.SYSTEM_NAMESPACE
DEVICE_MANAGER_PORT = contract.DEVICE_MANAGER_PORT
INSTANCE_API_VERSION = f"{contract.API_GROUP}/{contract.CRD_VERSION}"
COMPONENT_LABEL = contract.COMPONENT_LABEL
MANUFACTURER_LABEL = contract.MANUFACTURER_LABEL
MASTERS = "system:masters"

SHARES_PER_CARD = SHARES_PER_ACCELERATOR
"""``Shared`` hands out this many shares of a card, each that fraction of its units (core's)."""
MIG_MEMORY_SLICES = 8
"""An NVIDIA card's MIG memory slices: a ``3g.40gb`` of an H100 spans four of them."""
MAX_OFFSET = 1e9
"""Scenario times stay within about 30 years of the epoch, so every one is a real date."""
MAX_FIGURE = (1 << 63) - 1
"""A usage figure must fit the kubelet's counters as JSON readers decode them (int64)."""
MAX_PID = 4_194_304
"""Linux's ``pid_max`` ceiling: a larger PID cannot be a host process."""

_UUID_NAMESPACE = uuid.UUID("5c0e7a3e-2f49-4c1b-9a0e-6d8f1b2c3a4d")
_QUEUE_LABEL = contract.KUEUE_QUEUE_LABEL

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
    annotations: dict[str, str] = {}
    """E.g. ``feature.gpustack.ai/cpu-name``, the CPU model NFD's rule reports on a Node."""
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
    apply: tuple[dict[str, Any], ...] = ()
    """Kubernetes objects ``simulator up`` creates through the API once everything answers,
    in order, as a user's ``kubectl create`` would: through the admission webhooks, to the
    Instance controller and the device plugins. Kinds: :data:`APPLY_KINDS`."""


APPLY_KINDS: dict[str, tuple[str, str, bool]] = {
    "InstanceType": (INSTANCE_API_VERSION, "instancetypes", False),
    "Instance": (INSTANCE_API_VERSION, "instances", True),
    "Pod": ("v1", "pods", True),
    "ConfigMap": ("v1", "configmaps", True),
    "Secret": ("v1", "secrets", True),
}
"""What a scenario may ``apply``: kind → (apiVersion, plural, namespaced)."""


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


APP_START = 30.0
"""Seconds after a Pod's creation its app containers start (init containers run before)."""
