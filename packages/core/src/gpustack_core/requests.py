"""A Pod's accelerator requests: parsed, checked against the request rules, and folded into units.

This is the pure half of the Pod admission webhook (gate 1, ``docs/worker.md``): no I/O, so the
worker's ``/mutate-v1-pod`` and ``/validate-v1-pod`` answer from exactly this code and the tests
pin every rule without a server. The webhook fetches the ``Devices`` objects and hands them in
as :class:`Cards`; everything else is decided here.

The rules are the reference operator's request rules (``docs/modules/devices/requests.md``) plus
the Kubernetes rule for extended resources; each refusal is one line that names the field and the
rule it broke, as an API server's field error does.

**The fold.** A slice or partition is charged in units, one whole card = 1,600,000
(:data:`~gpustack_core.units.UNITS_PER_ACCELERATOR`):

- memory percentage ``p`` → ``p × 16,000`` (1 % = 16,000, 100 % = 1,600,000; exact);
- memory MiB ``m`` on a card of ``C`` MiB → ``⌈m × 1,600,000 / C⌉``, capped at 1,600,000;
- a partition profile of ``P`` MiB on a card of ``C`` MiB → ``⌈P × 1,600,000 / C⌉``, capped.

Rounding is **up**: the Device Manager turns units back into a memory quota with
``⌊units × C / 1,600,000⌋`` (:func:`~gpustack_core.units.slice_memory_mib`), and only the ceiling
makes that quota at least the MiB asked. When more than one card could serve the Pod (no node
pinned) the fold takes the largest result among them — for MiB that is the smallest card — so
no card is charged less than the request's share of it and the ledger never grants a card past
1,600,000 units; on a larger card the slice's quota then exceeds what was asked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gpustack_core import contract
from gpustack_core.devices import GroupSpec
from gpustack_core.manufacturers import partition_kind
from gpustack_core.modes import AllocationMode
from gpustack_core.quantity import QuantityError, parse_quantity
from gpustack_core.resources import ResourceNames, default_names
from gpustack_core.units import UNITS_PER_ACCELERATOR, ceil_div

QUEUE_NAME_LABEL = contract.KUEUE_QUEUE_LABEL
"""The label the reference webhook selects Pods by (a Pod submitted to a Kueue LocalQueue)."""

UNITS_PER_PERCENT = UNITS_PER_ACCELERATOR // 100
"""16,000: one percent of a card's memory in units."""

DEFAULT_CORES_PERCENTAGE = 100
"""A slice without a compute cap may use the whole card's compute."""


_PROFILE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._+-]*[A-Za-z0-9])?")

Group = Literal["app", "init", "sidecar"]
"""A container's lifetime group: ``spec.containers``, ``spec.initContainers``, or a native
sidecar (an init container with ``restartPolicy: Always``)."""

Phase = Literal["mutate", "validate"]


class RequestError(ValueError):
    """A request breaks one rule; the message is one line naming the field and the rule."""


@dataclass(frozen=True, slots=True)
class Cards:
    """What the ``Devices`` objects say about one manufacturer's cards where the Pod may land.

    ``groups`` are the candidate product groups: the pinned node's, or every node's of that
    manufacturer when the Pod pins none. Empty means no ``Devices`` object lists the
    manufacturer: rules that need the cards are then not checked, and folds that need a card's
    memory are refused.
    """

    groups: tuple[GroupSpec, ...] = ()
    where: str = "the cluster"
    """For messages: ``node gpu-1`` when pinned, else ``the cluster``."""
    pinned: bool = False

    @property
    def known(self) -> bool:
        """Whether any card with a stated memory is listed."""
        return any(g.memory > 0 for g in self.groups)


NO_CARDS = Cards()


@dataclass(frozen=True, slots=True)
class AcceleratorRequest:
    """One container's request for one manufacturer's accelerators, as parsed from its limits."""

    names: ResourceNames
    mode: AllocationMode
    count: int
    """Cards (Exclusive, Shared), always 1 (Sliced, Partitioned), the sidecar's count
    (Visibility)."""
    memory_percentage: int | None = None
    memory_mib: int | None = None
    cores_percentage: int | None = None
    """As given; ``None`` means the default of 100 is to be written."""
    partition_kind: str | None = None
    partition_profile: str | None = None
    units: int | None = None
    """The ``.sliced.units`` / ``.partitioned.units`` the Pod already carries."""

    @property
    def manufacturer(self) -> str:
        """The manufacturer token (``nvidia``)."""
        return self.names.manufacturer

    @property
    def units_resource(self) -> str | None:
        """The resource the webhook folds into, for the modes that have one."""
        if self.mode is AllocationMode.SLICED:
            return self.names.sliced_units
        if self.mode is AllocationMode.PARTITIONED:
            return self.names.partitioned_units
        return None


@dataclass(frozen=True, slots=True)
class ContainerRequests:
    """A container's accelerator requests and where it sits in the Pod."""

    name: str
    field: str
    """``spec.containers[0]``: the field path messages name."""
    pointer: str
    """``/spec/containers/0``: the JSON Pointer patches address."""
    group: Group
    requests: tuple[AcceleratorRequest, ...]
    has_requests_map: bool
    """Whether ``resources.requests`` is an object (the fold is written there too)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """What the webhook answers for an admitted Pod: the JSONPatch to apply (maybe none)."""

    patch: tuple[dict[str, Any], ...] = ()
    requests: tuple[ContainerRequests, ...] = ()
    folded: tuple[tuple[str, str, int], ...] = ()
    """``(container field, manufacturer, units)`` of every slice and partition folded: what the
    Pod will carry in ``.units`` once the patch is applied (the fit affinity pins by it)."""


# -- names ------------------------------------------------------------------------------------


def _classify(key: str, names: Sequence[ResourceNames]) -> tuple[ResourceNames, str] | None:
    """``(names, role)`` for a gpustack accelerator resource, else ``None``.

    Roles: ``exclusive shared sliced sliced-units cores memory-percentage memory-mib partitioned
    partitioned-units profile visibility``.
    """
    for n in names:
        if key == n.visibility:
            return n, "visibility"
        if key != n.base and not key.startswith(n.base + "."):
            continue
        role = {
            n.exclusive: "exclusive",
            n.shared: "shared",
            n.sliced: "sliced",
            n.sliced_units: "sliced-units",
            n.sliced_cores_percentage: "cores",
            n.sliced_memory_percentage: "memory-percentage",
            n.sliced_memory_mib: "memory-mib",
            n.partitioned: "partitioned",
            n.partitioned_units: "partitioned-units",
        }.get(key)
        if role is not None:
            return n, role
        if key.startswith(n.partitioned_profile_prefix):
            return n, "profile"
    return None


def is_accelerator_resource(key: str, names: Sequence[ResourceNames] | None = None) -> bool:
    """Whether ``key`` is one of the extended resources this project serves or folds.

    ``names`` defaults to every manufacturer's at its default base (:func:`default_names`, read
    at the call), as in every judging function here.
    """
    return _classify(key, _or_default(names)) is not None


def _or_default(names: Sequence[ResourceNames] | None) -> Sequence[ResourceNames]:
    return default_names() if names is None else names


def json_pointer_token(key: str) -> str:
    """Escape one JSON Pointer token (RFC 6901): ``~`` → ``~0``, then ``/`` → ``~1``."""
    return key.replace("~", "~0").replace("/", "~1")


# -- the Pod's shape --------------------------------------------------------------------------


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RequestError(f"{where}: Invalid value: must be an object")
    return value


def _containers(pod: Mapping[str, Any]) -> Iterator[tuple[str, str, Group, Mapping[str, Any]]]:
    """``(field, pointer, group, container)`` for every init and app container."""
    spec = _mapping(pod.get("spec"), "spec")
    for key, default_group in (("initContainers", "init"), ("containers", "app")):
        listed = spec.get(key)
        if listed is None:
            continue
        if not isinstance(listed, list):
            raise RequestError(f"spec.{key}: Invalid value: must be a list")
        for index, container in enumerate(listed):
            where = f"spec.{key}[{index}]"
            if not isinstance(container, Mapping):
                raise RequestError(f"{where}: Invalid value: must be an object")
            group: Group = default_group  # type: ignore[assignment]
            if group == "init" and container.get("restartPolicy") == "Always":
                group = "sidecar"
            yield where, f"/spec/{key}/{index}", group, container


def _positive_integer(value: object, where: str) -> int:
    """A quantity that must be a whole, positive number (every accelerator request is)."""
    try:
        number = parse_quantity(value)  # type: ignore[arg-type]
    except QuantityError:
        raise RequestError(
            f"{where}: Invalid value: {_shown(value)}: must be a positive integer"
        ) from None
    if number.denominator != 1 or number <= 0:
        raise RequestError(f"{where}: Invalid value: {_shown(value)}: must be a positive integer")
    return number.numerator


def _shown(value: object) -> str:
    """A value quoted for a one-line message (control characters escaped, length bounded)."""
    text = value if isinstance(value, str) else repr(value)
    return json.dumps(text[:32])


def _key(key: str) -> str:
    """A resource name for a one-line message: a profile key's suffix is the user's text."""
    return json.dumps(key[:120])[1:-1]


def _resource_maps(
    container: Mapping[str, Any], where: str, names: Sequence[ResourceNames]
) -> tuple[dict[str, int], bool]:
    """The container's accelerator limits as integers, after Kubernetes' extended-resource rule.

    An extended resource is never overcommitted, so Kubernetes accepts it in ``limits`` alone or
    in both with the same value, never in ``requests`` alone nor with two values.
    """
    resources = _mapping(container.get("resources"), f"{where}.resources")
    limits = _mapping(resources.get("limits"), f"{where}.resources.limits")
    raw_requests = resources.get("requests")
    requests = _mapping(raw_requests, f"{where}.resources.requests")
    out: dict[str, int] = {}
    for key, value in limits.items():
        if not isinstance(key, str) or _classify(key, names) is None:
            continue
        out[key] = _positive_integer(value, _limit(where, key))
    for key, value in requests.items():
        if not isinstance(key, str) or _classify(key, names) is None:
            continue
        spot = f"{where}.resources.requests[{_key(key)}]"
        if key not in out:
            raise RequestError(
                f"{spot}: Invalid value: {_shown(value)}: an accelerator resource must be set "
                "in limits (requests may only repeat the limit)"
            )
        if _positive_integer(value, spot) != out[key]:
            raise RequestError(
                f"{spot}: Invalid value: {_shown(value)}: must equal its limit "
                f'"{out[key]}" (extended resources cannot be overcommitted)'
            )
    return out, isinstance(raw_requests, Mapping)


# -- one container ----------------------------------------------------------------------------


def _limit(where: str, key: str) -> str:
    return f"{where}.resources.limits[{_key(key)}]"


def _container_requests(
    where: str, limits: Mapping[str, int], names: Sequence[ResourceNames]
) -> tuple[AcceleratorRequest, ...]:
    """Group one container's accelerator limits by manufacturer and check each group's shape."""
    by_maker: dict[str, tuple[ResourceNames, dict[str, tuple[str, int]]]] = {}
    profiles: dict[str, list[tuple[str, int]]] = {}
    for key, value in limits.items():
        classified = _classify(key, names)
        assert classified is not None  # _resource_maps kept only classified keys
        n, role = classified
        entry = by_maker.setdefault(n.manufacturer, (n, {}))[1]
        if role == "profile":
            profiles.setdefault(n.manufacturer, []).append((key, value))
        else:
            entry[role] = (key, value)
    out = []
    for maker, (n, roles) in sorted(by_maker.items()):
        out.append(_one_manufacturer(where, n, roles, profiles.get(maker, [])))
    return tuple(r for r in out if r is not None)


def _one_manufacturer(
    where: str,
    n: ResourceNames,
    roles: Mapping[str, tuple[str, int]],
    profiles: Sequence[tuple[str, int]],
) -> AcceleratorRequest | None:
    modes = [
        role
        for role in ("exclusive", "shared", "sliced", "partitioned", "visibility")
        if role in roles
    ]
    if len(modes) > 1:
        raise RequestError(
            f"{where}.resources.limits: Forbidden: a container may request one mode of "
            f"{n.manufacturer} accelerators, found {' and '.join(roles[m][0] for m in modes)}"
        )
    mode = modes[0] if modes else None
    sliced_extras = [
        r for r in ("sliced-units", "cores", "memory-percentage", "memory-mib") if r in roles
    ]
    if mode != "sliced" and sliced_extras:
        key = roles[sliced_extras[0]][0]
        raise RequestError(
            f'{_limit(where, key)}: Forbidden: only meaningful beside {n.sliced}: "1"'
        )
    partition_extras = [roles["partitioned-units"][0]] if "partitioned-units" in roles else []
    partition_extras += [key for key, _ in profiles]
    if mode != "partitioned" and partition_extras:
        raise RequestError(
            f"{_limit(where, partition_extras[0])}: Forbidden: only meaningful beside "
            f'{n.partitioned}: "1"'
        )
    if mode is None:
        return None
    key, count = roles[mode]
    if mode == "exclusive":
        return AcceleratorRequest(names=n, mode=AllocationMode.EXCLUSIVE, count=count)
    if mode == "shared":
        return AcceleratorRequest(names=n, mode=AllocationMode.SHARED, count=count)
    if mode == "visibility":
        return AcceleratorRequest(names=n, mode=AllocationMode.VISIBILITY, count=count)
    if mode == "sliced":
        return _sliced(where, n, roles, count)
    return _partitioned(where, n, roles, profiles, count)


def _sliced(
    where: str, n: ResourceNames, roles: Mapping[str, tuple[str, int]], count: int
) -> AcceleratorRequest:
    if count != 1:
        raise RequestError(
            f'{_limit(where, n.sliced)}: Invalid value: "{count}": a logical slice request is '
            f"always a single accelerator ({n.sliced} must be 1)"
        )
    percentage = roles.get("memory-percentage", (None, None))[1]
    mib = roles.get("memory-mib", (None, None))[1]
    if percentage is None and mib is None:
        raise RequestError(
            f"{where}.resources.limits: Required value: a {n.sliced} request must set "
            f"{n.sliced_memory_percentage} or {n.sliced_memory_mib}"
        )
    if percentage is not None and mib is not None:
        raise RequestError(
            f"{where}.resources.limits: Forbidden: cannot set both "
            f"{n.sliced_memory_percentage} and {n.sliced_memory_mib}"
        )
    if percentage is not None and percentage > 100:
        raise RequestError(
            f'{_limit(where, n.sliced_memory_percentage)}: Invalid value: "{percentage}": '
            "must be a percentage from 1 to 100"
        )
    cores = roles.get("cores", (None, None))[1]
    if cores is not None and cores > 100:
        raise RequestError(
            f'{_limit(where, n.sliced_cores_percentage)}: Invalid value: "{cores}": '
            "must be a percentage from 1 to 100"
        )
    return AcceleratorRequest(
        names=n,
        mode=AllocationMode.SLICED,
        count=1,
        memory_percentage=percentage,
        memory_mib=mib,
        cores_percentage=cores,
        units=roles.get("sliced-units", (None, None))[1],
    )


def _partitioned(
    where: str,
    n: ResourceNames,
    roles: Mapping[str, tuple[str, int]],
    profiles: Sequence[tuple[str, int]],
    count: int,
) -> AcceleratorRequest:
    kind = partition_kind(n.manufacturer)
    if kind is None:
        raise RequestError(
            f"{_limit(where, n.partitioned)}: Forbidden: {n.manufacturer} accelerators have no "
            "hardware partitioning"
        )
    if count != 1:
        raise RequestError(
            f'{_limit(where, n.partitioned)}: Invalid value: "{count}": a partition request is '
            f"always a single accelerator ({n.partitioned} must be 1)"
        )
    if not profiles:
        raise RequestError(
            f"{where}.resources.limits: Required value: a {n.partitioned} request must name a "
            f"profile, e.g. {n.partitioned_profile(kind, '<profile>')}"
        )
    if len(profiles) > 1:
        found = " ".join(
            sorted(_key(key[len(n.partitioned_profile_prefix) :]) for key, _ in profiles)
        )
        raise RequestError(
            f"{where}.resources.limits: Forbidden: a partition request names exactly one "
            f"profile, found [{found}]"
        )
    key, instances = profiles[0]
    spelled = key[len(n.partitioned_profile_prefix) :]
    given_kind, dash, profile = spelled.partition("-")
    if not dash or given_kind != kind or not _PROFILE.fullmatch(profile):
        raise RequestError(
            f"{_limit(where, key)}: Invalid value: not a {n.manufacturer} partition profile "
            f"(expected {n.partitioned_profile(kind, '<profile>')})"
        )
    if instances != 1:
        raise RequestError(
            f'{_limit(where, key)}: Invalid value: "{instances}": a partition profile request '
            "must be exactly 1 instance"
        )
    return AcceleratorRequest(
        names=n,
        mode=AllocationMode.PARTITIONED,
        count=1,
        partition_kind=kind,
        partition_profile=profile,
        units=roles.get("partitioned-units", (None, None))[1],
    )


# -- the whole Pod ----------------------------------------------------------------------------


def parse_pod(
    pod: Mapping[str, Any], names: Sequence[ResourceNames] | None = None
) -> tuple[ContainerRequests, ...]:
    """Every container's accelerator requests, each container's shape checked.

    Raises :class:`RequestError` for the first broken per-container rule; containers that
    request no accelerator are left out.
    """
    names = _or_default(names)
    out = []
    for where, pointer, group, container in _containers(pod):
        limits, has_requests = _resource_maps(container, where, names)
        if not limits:
            continue
        name = container.get("name")
        out.append(
            ContainerRequests(
                name=name if isinstance(name, str) else "",
                field=where,
                pointer=pointer,
                group=group,
                requests=_container_requests(where, limits, names),
                has_requests_map=has_requests,
            )
        )
    return tuple(c for c in out if c.requests)


def selects(pod: Mapping[str, Any], names: Sequence[ResourceNames] | None = None) -> bool:
    """Whether the webhook judges this Pod at all.

    The reference selects only Pods carrying ``kueue.x-k8s.io/queue-name``. This webhook also
    judges any Pod that names one of our accelerator resources: without Kueue a user can still
    write ``nvidia.com/gpu.sliced: 1``, and an unfolded slice reaches the device plugin with no
    units (charged one token, not its memory) and no cores default.
    """
    metadata = pod.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    if isinstance(labels, Mapping) and QUEUE_NAME_LABEL in labels:
        return True
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return False
    names = _or_default(names)
    for key in ("initContainers", "containers"):
        listed = spec.get(key)
        for container in listed if isinstance(listed, list) else ():
            resources = container.get("resources") if isinstance(container, Mapping) else None
            if not isinstance(resources, Mapping):
                continue
            for part in ("limits", "requests"):
                declared = resources.get(part)
                if isinstance(declared, Mapping) and any(
                    isinstance(k, str) and _classify(k, names) for k in declared
                ):
                    return True
    return False


def _pod_rules(containers: Sequence[ContainerRequests]) -> None:
    """The rules that look across containers (reference rules 1, 4, 6 and 7, and visibility)."""
    for c in containers:
        if c.group == "sidecar" and any(
            r.mode is not AllocationMode.VISIBILITY for r in c.requests
        ):
            raise RequestError(
                f"{c.field}.resources.limits: Forbidden: a restartable init container (a native "
                "sidecar) may not request an accelerator; move the request to an app container"
            )
    makers = sorted({r.manufacturer for c in containers for r in c.requests})
    for maker in makers:
        granted = [
            (c, r)
            for c in containers
            for r in c.requests
            if r.manufacturer == maker and r.mode is not AllocationMode.VISIBILITY
        ]
        modes = sorted({r.mode for _, r in granted})
        if len(modes) > 1:
            raise RequestError(
                f"spec: Forbidden: a Pod may request {maker} accelerators in one mode only, "
                f"found [{' '.join(m.api_name for m in modes)}]"
            )
        groups = sorted({c.group for c, _ in granted})
        if len(groups) > 1:
            raise RequestError(
                f"spec.initContainers: Forbidden: a Pod's {maker} requests must all sit in one "
                "container group: an init container's devices are held for the Pod's whole "
                "life while the scheduler charges the Pod only once"
            )
        slicing = [c for c, r in granted if r.units_resource is not None]
        if len(slicing) > 1:
            raise RequestError(
                f"spec: Forbidden: at most one container may request a {maker} slice or "
                f"partition, found {len(slicing)}"
            )
        for c in containers:
            for r in c.requests:
                if r.manufacturer != maker or r.mode is not AllocationMode.VISIBILITY:
                    continue
                if not any(other is not c for other, _ in granted):
                    raise RequestError(
                        f"{_limit(c.field, r.names.visibility)}: Forbidden: visibility lets a "
                        f"sidecar see a sibling container's {maker} accelerators, and no "
                        "sibling container requests one"
                    )


# -- the fold ---------------------------------------------------------------------------------


def fold_percentage(percentage: int) -> int:
    """Memory percentage → units: ``p × 16,000`` (exact, so no rounding to state)."""
    return percentage * UNITS_PER_PERCENT


def fold_mib(mib: int, card_mib: int) -> int:
    """Memory MiB → units of a card of ``card_mib``: ``⌈mib × 1,600,000 / card_mib⌉``, capped.

    Rounded up so the Device Manager's floored quota (``⌊units × card / 1,600,000⌋``) is never
    below the MiB asked; capped at one whole card (1,600,000).
    """
    return min(ceil_div(mib * UNITS_PER_ACCELERATOR, card_mib), UNITS_PER_ACCELERATOR)


def _profile_memory(group: GroupSpec, profile: str) -> int | None:
    """The profile's MiB on one group's cards (the first card that lists it), else ``None``."""
    for card in group.accelerators:
        physical = card.status.physical_sliced
        for p in physical.profiles if physical is not None else ():
            if p.name == profile and p.memory_mib > 0:
                return p.memory_mib
    return None


def _offered_profiles(cards: Cards) -> list[str]:
    found = {
        p.name
        for g in cards.groups
        for a in g.accelerators
        if a.status.physical_sliced is not None
        for p in a.status.physical_sliced.profiles
    }
    return sorted(found)


def _fold(c: ContainerRequests, r: AcceleratorRequest, cards: Cards) -> int | None:
    """The units this request folds to, checking the rules that need the cards."""
    if r.mode is AllocationMode.VISIBILITY:
        return None
    if r.mode in (AllocationMode.EXCLUSIVE, AllocationMode.SHARED):
        most = max((len(g.accelerators) for g in cards.groups), default=0)
        if most and r.count > most:
            key = r.names.exclusive if r.mode is AllocationMode.EXCLUSIVE else r.names.shared
            raise RequestError(
                f'{_limit(c.field, key)}: Invalid value: "{r.count}": a Pod\'s accelerators come '
                f"from one node, and no node in {cards.where} has more than {most} "
                f"{r.manufacturer} accelerators"
            )
        return None
    if r.mode is AllocationMode.SLICED:
        if r.memory_percentage is not None:
            return fold_percentage(r.memory_percentage)
        assert r.memory_mib is not None  # _sliced required one of the two
        spot = _limit(c.field, r.names.sliced_memory_mib)
        memories = [g.memory for g in cards.groups if g.memory > 0]
        if not memories:
            raise RequestError(
                f'{spot}: Invalid value: "{r.memory_mib}": no Devices object lists a '
                f"{r.manufacturer} card's memory, so MiB cannot be folded into units; request "
                f"{r.names.sliced_memory_percentage} instead"
            )
        if r.memory_mib > max(memories):
            raise RequestError(
                f'{spot}: Invalid value: "{r.memory_mib}": more than the memory of any '
                f"{r.manufacturer} card in {cards.where} ({max(memories)} MiB)"
            )
        return fold_mib(r.memory_mib, min(memories))
    assert r.mode is AllocationMode.PARTITIONED
    assert r.partition_profile is not None
    assert r.partition_kind is not None
    key = _limit(c.field, r.names.partitioned_profile(r.partition_kind, r.partition_profile))
    folds = [
        fold_mib(memory, g.memory)
        for g in cards.groups
        if g.memory > 0 and (memory := _profile_memory(g, r.partition_profile)) is not None
    ]
    if folds:
        return max(folds)
    offered = _offered_profiles(cards)
    if not cards.known or not offered:
        raise RequestError(
            f"{key}: Forbidden: no Devices object in {cards.where} lists {r.manufacturer} "
            "partition profiles, so the profile can be neither checked nor folded into units"
        )
    raise RequestError(
        f"{key}: Invalid value: profile {r.partition_profile!r} is not offered by the "
        f"{r.manufacturer} cards in {cards.where}; offered: {', '.join(_key(o) for o in offered)}"
    )


def review(
    pod: Mapping[str, Any],
    cards: Mapping[str, Cards],
    *,
    phase: Phase = "mutate",
    names: Sequence[ResourceNames] | None = None,
) -> Decision:
    """Check every rule on ``pod`` and return the patch that folds its requests.

    ``cards`` maps a manufacturer to what is known of its cards (missing = nothing known).
    ``phase="mutate"`` answers the mutating webhook: a ``.units`` the Pod carries must already
    equal the fold (a mutating webhook must be idempotent: it may see its own output again),
    and the patch writes the units and the cores default. ``phase="validate"`` answers the
    validating webhook, which runs after every mutation: the units must be there and equal
    the fold, or something bypassed or altered the mutation. Raises :class:`RequestError`.
    """
    containers = parse_pod(pod, names)
    _pod_rules(containers)
    patch: list[dict[str, Any]] = []
    folded: list[tuple[str, str, int]] = []
    for c in containers:
        for r in c.requests:
            units = _fold(c, r, cards.get(r.manufacturer, NO_CARDS))
            resource = r.units_resource
            if units is None or resource is None:
                continue
            folded.append((c.field, r.manufacturer, units))
            spot = _limit(c.field, resource)
            if r.units is None and phase == "validate":
                raise RequestError(
                    f"{spot}: Required value: folded by the mutating webhook and missing; is "
                    "the MutatingWebhookConfiguration installed?"
                )
            if r.units is not None and r.units != units:
                raise RequestError(
                    f'{spot}: Invalid value: "{r.units}": webhook-derived, never set by hand '
                    f'(this request folds to "{units}"); remove it'
                )
            if r.units is None:
                patch += _writes(c, resource, units)
            if r.mode is AllocationMode.SLICED and r.cores_percentage is None:
                if phase == "validate":
                    raise RequestError(
                        f"{_limit(c.field, r.names.sliced_cores_percentage)}: Required value: "
                        "defaulted by the mutating webhook and missing"
                    )
                patch += _writes(c, r.names.sliced_cores_percentage, DEFAULT_CORES_PERCENTAGE)
    return Decision(patch=tuple(patch), requests=containers, folded=tuple(folded))


def _writes(c: ContainerRequests, resource: str, value: int) -> Iterable[dict[str, Any]]:
    """JSONPatch ``add`` of one quantity to limits, and to requests where the container has them.

    Requests must keep equalling limits (the extended-resource rule), so both are written.
    """
    token = json_pointer_token(resource)
    yield {"op": "add", "path": f"{c.pointer}/resources/limits/{token}", "value": str(value)}
    if c.has_requests_map:
        yield {"op": "add", "path": f"{c.pointer}/resources/requests/{token}", "value": str(value)}


__all__ = [
    "DEFAULT_CORES_PERCENTAGE",
    "NO_CARDS",
    "QUEUE_NAME_LABEL",
    "UNITS_PER_PERCENT",
    "AcceleratorRequest",
    "Cards",
    "ContainerRequests",
    "Decision",
    "RequestError",
    "fold_mib",
    "fold_percentage",
    "is_accelerator_resource",
    "json_pointer_token",
    "parse_pod",
    "review",
    "selects",
]
