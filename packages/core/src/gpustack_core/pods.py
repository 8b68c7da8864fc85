"""The few parts of a Kubernetes ``Pod`` the metrics path reads, and the questions it asks of them.

The view is deliberately partial: unknown fields are ignored, so a newer API server adding fields
never breaks decoding, while the fields that are read are typed strictly enough that a wrong
shape is a :class:`~gpustack_core.decoding.ContractError` naming the field rather than a wrong
figure. Quantities stay strings until a calculation needs them, so a malformed limit on a
container nobody asks about cannot make the whole Pod unreadable.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from fractions import Fraction
from typing import Annotated, Any

import msgspec

from gpustack_core import contract
from gpustack_core.decoding import ContractError, convert, decode_json
from gpustack_core.instance_metrics import API_GROUP
from gpustack_core.quantity import QuantityError, cpu_to_millicores, parse_quantity
from gpustack_core.units import MIB, ceil_fraction
from gpustack_core.usage import DeclaredTotals
from gpustack_core.wire import Wire

PART_OF_LABEL = contract.PART_OF_LABEL
"""The label the Instance controller sets to the Instance's UID on the Pod it renders."""

INSTANCE_KIND = "Instance"

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"

AwareDatetime = Annotated[datetime, msgspec.Meta(tz=True)]
"""Kubernetes times always carry a zone; a naive one would fail later, far from its source."""

Quantity = str | int | float
"""A quantity as written: the API server sends strings, YAML scenarios may write numbers."""


class OwnerReference(Wire, frozen=True, kw_only=True):
    """The owner link; all four identity fields are required by the API server."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool = False
    """``*bool`` in Go, so absent means "not the controller"."""


class ObjectMeta(Wire, frozen=True, kw_only=True):
    """Identity, set by the API server on every persisted object (hence required)."""

    name: str
    namespace: str
    uid: str
    creation_timestamp: AwareDatetime
    deletion_timestamp: AwareDatetime | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    owner_references: tuple[OwnerReference, ...] = ()


class ResourceRequirements(Wire, frozen=True, kw_only=True):
    """``limits``/``requests`` as written; parsed on demand so one bad value stays local."""

    limits: dict[str, Quantity] = {}
    requests: dict[str, Quantity] = {}


class ContainerPort(Wire, frozen=True, kw_only=True):
    """A declared port; the Device Manager's is found by its name, ``https``."""

    container_port: int
    name: str = ""


class Container(Wire, frozen=True, kw_only=True):
    """An app, init or ephemeral container: its name, declared resources and named ports."""

    name: str
    resources: ResourceRequirements = ResourceRequirements()
    ports: tuple[ContainerPort, ...] | None = None


class PodSpec(Wire, frozen=True, kw_only=True):
    """The scheduled node and the three container lists (Kubernetes requires ``containers``)."""

    containers: tuple[Container, ...]
    node_name: str = ""
    init_containers: tuple[Container, ...] = ()
    ephemeral_containers: tuple[Container, ...] = ()


class ContainerStateRunning(Wire, frozen=True, kw_only=True):
    """Presence is the signal; ``startedAt`` is ``null`` when Go's zero time was serialised."""

    started_at: AwareDatetime | None = None


class ContainerStateTerminated(Wire, frozen=True, kw_only=True):
    """Presence is the signal: the container did run (or at least was attempted) once."""

    exit_code: int = 0
    reason: str = ""
    started_at: AwareDatetime | None = None
    finished_at: AwareDatetime | None = None


class ContainerStateWaiting(Wire, frozen=True, kw_only=True):
    """Waiting alone leaves no trace of having run: the gate stays closed on it."""

    reason: str = ""


class ContainerState(Wire, frozen=True, kw_only=True):
    """At most one member is set by the kubelet; an empty state means "not reported yet"."""

    running: ContainerStateRunning | None = None
    terminated: ContainerStateTerminated | None = None
    waiting: ContainerStateWaiting | None = None


class ContainerStatus(Wire, frozen=True, kw_only=True):
    """The kubelet's report on one container, for any of the three container lists."""

    name: str
    container_id: str = ""
    restart_count: int = 0
    started: bool | None = None
    ready: bool = False
    state: ContainerState = ContainerState()
    last_state: ContainerState = ContainerState()


class PodCondition(Wire, frozen=True, kw_only=True):
    """A condition; ``status`` is the string ``"True"``/``"False"``/``"Unknown"``."""

    type: str
    status: str


class PodStatus(Wire, frozen=True, kw_only=True):
    """Everything is optional: a freshly created Pod may carry an empty status."""

    phase: str = ""
    pod_ip: str = ""
    host_ip: str = ""
    """The node's address: where a kubelet read directly (``nodes/stats``) is sent."""
    conditions: tuple[PodCondition, ...] = ()
    container_statuses: tuple[ContainerStatus, ...] = ()
    init_container_statuses: tuple[ContainerStatus, ...] = ()
    ephemeral_container_statuses: tuple[ContainerStatus, ...] = ()
    start_time: AwareDatetime | None = None
    """When the kubelet accepted the Pod: a node summary read before it cannot list it."""


class Pod(Wire, frozen=True, kw_only=True):
    """A Pod as the API server returns it, reduced to what the metrics path reads."""

    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus = PodStatus()


def parse_pod(data: bytes | str) -> Pod:
    """Decode a Pod from the API server's JSON."""
    return decode_json(data, Pod, what="Pod")


def pod_from_object(obj: dict[str, Any]) -> Pod:
    """Build a Pod from an already-decoded mapping (a kube client's JSON dict, a YAML scenario).

    ``strict=True`` suits both: JSON and YAML already yield real ints, floats and booleans, and
    an RFC 3339 string still converts to a datetime under strict rules (YAML loaders that yield
    ``datetime`` objects pass through). Relaxing it would accept ``restartCount: "3"``.
    """
    return convert(obj, Pod, what="Pod")


def _pod_name(pod: Pod) -> str:
    return f"Pod {pod.metadata.namespace}/{pod.metadata.name}"


def _parse(where: str, value: Quantity) -> Fraction:
    """Parse one quantity, naming where it came from so the log line needs no context."""
    try:
        return parse_quantity(value)
    except QuantityError as exc:
        raise ContractError(f"{where}: {exc}") from exc


def _quantity(pod: Pod, container: str, field: str, value: Quantity) -> Fraction:
    return _parse(f"{_pod_name(pod)}: container {container!r}: {field}", value)


def sum_declared(declarations: Iterable[tuple[str, Mapping[str, Quantity]]]) -> DeclaredTotals:
    """Sum ``(where, resources)`` declarations into totals, exactly, rounding once at the end.

    Used for a Pod's app-container limits and for an Instance's own ``spec.resources`` when it
    has no Pod, so both read the same way. Exact sums are why two ``1.5Mi`` limits total 3 MiB,
    not 4. ``where`` names the declaration in the error a malformed quantity raises.
    """
    listed = list(declarations)
    return _totals(tuple(_spellings(resources) for _, resources in listed), lambda i: listed[i][0])


def _spellings(resources: Mapping[str, Quantity]) -> tuple[Quantity | None, ...]:
    return tuple(resources.get(resource) for resource in _SUMMED)


def _totals(
    declared: tuple[tuple[Quantity | None, ...], ...], where: Callable[[int], str]
) -> DeclaredTotals:
    """The memoized sums; ``where(i)`` names declaration ``i`` only when one is malformed."""
    # A boolean equals 1 as a cache key, and is no quantity: it takes the path that says so.
    if not any(isinstance(value, bool) for values in declared for value in values):
        with contextlib.suppress(QuantityError):
            return _sum_values(declared)
    for i, values in enumerate(declared):  # name the declaration that is malformed
        for resource, value in zip(_SUMMED, values, strict=True):
            if value is not None:
                _parse(f"{where(i)}.{resource}", value)
    return _sum_values(declared)


_SUMMED = (CPU, MEMORY, EPHEMERAL_STORAGE)


@functools.lru_cache(maxsize=1024)
def _sum_values(declared: tuple[tuple[Quantity | None, ...], ...]) -> DeclaredTotals:
    """The totals of (cpu, memory, storage) declarations; memoized on the spellings.

    The exporter sums every Instance Pod's limits each round and exact ``Fraction`` sums cost
    ~30 µs a Pod; a node's Pods repeat a few shapes, so the sums are made once per shape.
    """
    sums = [Fraction(0), Fraction(0), Fraction(0)]
    for values in declared:
        for i, value in enumerate(values):
            if value is not None:
                sums[i] += parse_quantity(value)
    return DeclaredTotals(
        cpu_millicores=cpu_to_millicores(sums[0]),
        memory_mib=ceil_fraction(sums[1] / MIB),
        storage_mib=ceil_fraction(sums[2] / MIB),
    )


def declared_totals(pod: Pod) -> DeclaredTotals:
    """Sum the app containers' limits: the Instance's declaration, the ``Total`` of each pair.

    Init containers are excluded because they never run alongside the app containers, and
    ephemeral containers cannot declare resources. A container without a limit adds nothing
    (its use is unbounded, so it has no declaration to add).
    """
    containers = pod.spec.containers
    return _totals(
        tuple(_spellings(c.resources.limits) for c in containers),
        lambda i: f"{_pod_name(pod)}: container {containers[i].name!r}: limits",
    )


def _all_statuses(pod: Pod) -> Iterator[ContainerStatus]:
    status = pod.status
    yield from status.init_container_statuses
    yield from status.container_statuses
    yield from status.ephemeral_container_statuses


def _left_a_trace(status: ContainerStatus) -> bool:
    return (
        status.state.running is not None
        or status.state.terminated is not None
        or status.restart_count > 0
        or status.last_state.running is not None
        or status.last_state.terminated is not None
        or status.started is True
    )


def has_started(pod: Pod) -> bool:
    """Whether any container of the Pod has ever run: the gate between "idle" and "measure".

    "Has started", not "is ready": a Pod with a failing probe or an unready sidecar still holds
    memory and accelerators, and reporting zero for it would fabricate an idle measurement. Every
    trace counts, including an init container that already finished and an ephemeral debug
    container; only statuses that have never left ``waiting`` keep the gate closed.
    """
    return any(_left_a_trace(status) for status in _all_statuses(pod))


def _api_group(api_version: str) -> str:
    """``worker.gpustack.ai/v1`` → ``worker.gpustack.ai``; the core group (``v1``) is ``""``."""
    group, slash, _ = api_version.rpartition("/")
    return group if slash else ""


def is_instance_pod(pod: Pod, instance_uid: str | None = None) -> bool:
    """Whether the Pod is the one an Instance controller rendered (for that Instance, if given).

    Both the controller reference and the ``part-of`` label must name the same UID: a Pod left by
    a deleted-and-recreated Instance of the same name carries the old UID and is not this one's.
    Any API version of the group is accepted so a version bump does not orphan running Pods.
    """
    for ref in pod.metadata.owner_references:
        if not ref.controller:
            continue
        # Only one reference may be the controller; the first one decides.
        return (
            ref.kind == INSTANCE_KIND
            and _api_group(ref.api_version) == API_GROUP
            and pod.metadata.labels.get(PART_OF_LABEL) == ref.uid
            and (instance_uid is None or ref.uid == instance_uid)
        )
    return False


def is_terminating(pod: Pod) -> bool:
    """Whether deletion has begun: such a Pod is going away and must not be picked as a target."""
    return pod.metadata.deletion_timestamp is not None


def is_ready(pod: Pod) -> bool:
    """Whether the ``Ready`` condition is ``"True"`` (not merely present)."""
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions)


def _strip_scheme(container_id: str) -> str:
    _, sep, rest = container_id.partition("://")
    return rest if sep else container_id


def container_ids(pod: Pod) -> dict[str, str]:
    """Map each reported container ID, without its runtime scheme, to the container's name.

    The scheme (``containerd://``, ``cri-o://``, ``docker://``) is dropped because cgroup paths
    and device-library process records carry the bare ID. Statuses without an ID yet (still
    being created) are skipped.
    """
    ids: dict[str, str] = {}
    for status in _all_statuses(pod):
        bare = _strip_scheme(status.container_id)
        if bare:
            ids[bare] = status.name
    return ids


def named_port(pod: Pod, name: str) -> int | None:
    """The container port called ``name`` in any app container (``https`` on Device Managers)."""
    for container in pod.spec.containers:
        for port in container.ports or ():
            if port.name == name:
                return port.container_port
    return None


def container_request(pod: Pod, container_name: str, resource: str) -> Fraction | None:
    """Return a container's request for ``resource``, falling back to its limit.

    Extended resources are written as limits and copied to requests by the API server, but a
    Pod built elsewhere (a scenario, an older object) may carry only the limit; either way the
    figure is the same. Container names are unique pod-wide; app and init containers are
    searched (ephemeral containers cannot declare resources). ``None`` when the container or the
    resource is not declared.
    """
    for container in (*pod.spec.containers, *pod.spec.init_containers):
        if container.name != container_name:
            continue
        for field, values in (
            ("requests", container.resources.requests),
            ("limits", container.resources.limits),
        ):
            value = values.get(resource)
            if value is not None:
                return _quantity(pod, container_name, f"{field}.{resource}", value)
        return None
    return None
