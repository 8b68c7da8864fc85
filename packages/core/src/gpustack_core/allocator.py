"""The device plugin's decisions, as pure functions: grant or refuse, advertise, prefer.

The Device Manager's gRPC servers only fetch (the node's cards, the Pods' grants, the
container's request), call these under one node-wide lock, and write what they return. Keeping
the rules here means the property tests exercise exactly what a kubelet's ``Allocate`` gets,
and a future webhook or scheduler extension can ask the same questions without a socket.

The rules (``shared/reference/operator-half.md``, "Allocation contract"):

- A card is **held in a mode** by any live grant on it other than Visibility; a request in
  another mode is refused (``FailedPrecondition`` on the wire) naming the holder.
- Exclusive takes a whole card (1,600,000 units); Shared one of ten shares (160,000) of N
  *distinct* cards; Sliced one of the card's ``logicalSliced.count`` slots with the container's
  ``.sliced.units`` (capped at one card; the token count without the webhook) and no more units
  than the card has left; Partitioned an existing, unheld partition of the requested profile
  on any card (the pool is fungible: cards already partitioned are filled first), recording
  the partition's own ID; Visibility what the Pod's sibling containers hold, at no charge.
- Succeeded and Failed Pods release their Exclusive, Shared and Sliced units; a partition stays
  held until its Pod is gone (the partition outlives the process and is reclaimed on delete).
- Health: a card's tokens are Unhealthy when the card is, or when another mode holds it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from gpustack_core.allocation import AllocatedAccelerator, ContainerAllocation, Placement
from gpustack_core.devices import AcceleratorSpec, GroupSpec
from gpustack_core.modes import RELEASED_BY_TERMINATION, TERMINATED_PHASES, AllocationMode
from gpustack_core.resources import SHARES_PER_ACCELERATOR
from gpustack_core.tokens import (
    FUNGIBLE,
    TokenID,
    listed,
    parse_token_id,
    pool,
    shown,
    tokens_per_card,
)
from gpustack_core.units import UNITS_PER_ACCELERATOR

SHARE_UNITS = UNITS_PER_ACCELERATOR // SHARES_PER_ACCELERATOR
"""One share of a card: 160,000 units."""


class Holding(NamedTuple):
    """One accelerator entry some Pod's annotation holds on this node."""

    pod: str
    """``namespace/name``, for refusal messages."""
    container: str
    manufacturer: str
    accelerator: AllocatedAccelerator
    terminated: bool = False
    """The Pod is Succeeded or Failed."""


def holdings(pod: str, phase: str, allocation: Mapping[str, ContainerAllocation]) -> list[Holding]:
    """Every entry of one Pod's parsed annotation, flattened, with its termination flag."""
    terminated = phase in TERMINATED_PHASES
    return [
        Holding(pod, container, group.manufacturer, accelerator, terminated)
        for container in sorted(allocation)
        for group in allocation[container].devices.groups
        for accelerator in group.accelerators
    ]


def live(held: Iterable[Holding], manufacturer: str) -> list[Holding]:
    """The holdings that still count against ``manufacturer``'s cards."""
    return [
        h
        for h in held
        if h.manufacturer == manufacturer
        and not (h.terminated and h.accelerator.mode in RELEASED_BY_TERMINATION)
    ]


class Partition(NamedTuple):
    """An existing hardware partition (a MIG instance), as detection found it."""

    id: str
    """Its own identifier (``MIG-<uuid>``), what a grant records as ``allocatedPhysicalID``."""
    parent_id: str
    profile: str
    placement: Placement | None = None


class Rule(StrEnum):
    """Why a request was refused; each maps to one gRPC status in the server."""

    MALFORMED = "malformed-device-id"
    UNKNOWN_DEVICE = "unknown-device"
    UNHEALTHY = "unhealthy"
    OTHER_MODE = "held-in-another-mode"
    DISTINCT_CARDS = "shared-needs-distinct-cards"
    NO_SHARE = "no-share-left"
    NO_SLOT = "no-slot-left"
    NO_UNITS = "no-units-left"
    PROFILE_REQUIRED = "partition-profile-required"
    NO_PARTITION = "no-partition-left"


class Refusal(NamedTuple):
    """A refused request: the rule, and one line saying what was asked and what is in the way."""

    rule: Rule
    message: str


class Grant(NamedTuple):
    """What the container gets: its annotation entries (one group) and the kubelet's IDs."""

    accelerators: tuple[AllocatedAccelerator, ...]
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Request:
    """One container's ask of one resource, as the plugin server learned it."""

    mode: AllocationMode
    device_ids: tuple[str, ...]
    units: int | None = None
    """The container's ``.sliced.units`` / ``.partitioned.units`` limit (the webhook's fold)."""
    profile: str | None = None
    """Partitioned: the profile named by its ``.partitioned.<kind>-<profile>`` request."""
    siblings: tuple[AllocatedAccelerator, ...] = ()
    """Visibility: what the Pod's other containers hold of this group."""


@dataclass(frozen=True, slots=True)
class Node:
    """One manufacturer's cards on the node and what its Pods hold of them."""

    group: GroupSpec
    held: tuple[Holding, ...] = ()
    """Live holdings of this group only (see :func:`live`)."""
    partitions: tuple[Partition, ...] = ()

    def card(self, accelerator_id: str) -> AcceleratorSpec | None:
        """The card with this ID, if the group has it."""
        for card in self.group.accelerators:
            if card.id == accelerator_id:
                return card
        return None

    def on(self, card_id: str) -> list[Holding]:
        """Live holdings on one card, Visibility excluded (it holds nothing)."""
        return [
            h
            for h in self.held
            if h.accelerator.id == card_id and h.accelerator.mode is not AllocationMode.VISIBILITY
        ]

    def holder(self, card_id: str, mode: AllocationMode) -> Holding | None:
        """A holding on the card in a mode other than ``mode``, if any."""
        if mode is AllocationMode.VISIBILITY:
            return None
        for h in self.on(card_id):
            if h.accelerator.mode is not mode:
                return h
        return None

    def used_units(self, card_id: str) -> int:
        """Units the card's live grants take."""
        return sum(h.accelerator.allocated for h in self.on(card_id))

    def held_partitions(self) -> set[str]:
        """Partition IDs a live grant records."""
        return {
            h.accelerator.allocated_physical_id
            for h in self.held
            if h.accelerator.mode is AllocationMode.PARTITIONED
            and h.accelerator.allocated_physical_id
        }


def health(node: Node, mode: AllocationMode) -> dict[str, bool]:
    """Each token of ``mode``'s pool → healthy? (the ListAndWatch answer).

    Only the card's state counts, never this mode's own grants: the kubelet already subtracts
    what it assigned, and a token turning Unhealthy under its holder would shrink the node's
    allocatable twice.
    """
    answer: dict[str, bool] = {}
    for token in pool(node.group, mode):
        card = node.card(token.accelerator)
        ok = card is not None and not card.status.unhealthy
        ok = ok and node.holder(token.accelerator, mode) is None
        answer[str(token)] = ok
    return answer


def advertised(groups: Iterable[GroupSpec], mode: AllocationMode) -> frozenset[str]:
    """Every token ID of ``mode`` the groups' cards offer: what ListAndWatch sends."""
    return frozenset(str(token) for group in groups for token in pool(group, mode))


def screen(ids: Sequence[str], mode: AllocationMode, offered: frozenset[str]) -> Refusal | None:
    """What the kubelet API calls an invalid request, decided before anything is looked up.

    The kubelet only ever assigns IDs the plugin advertised, each once, at least one per
    container; a request that breaks that did not come from a kubelet's own bookkeeping, so it
    is refused ``InvalidArgument`` at once — not after waiting for a Pod that could never
    match it. ``offered`` is :func:`advertised` for the request's mode.
    """
    if not ids:
        return Refusal(Rule.MALFORMED, f"the {mode.api_name} request names no device IDs")
    doubled = [text for text, count in Counter(ids).items() if count > 1]
    if doubled:
        return Refusal(Rule.MALFORMED, f"device ID {listed(doubled)} is asked more than once")
    unknown = [text for text in ids if text not in offered]
    if unknown:
        return Refusal(
            Rule.UNKNOWN_DEVICE,
            f"{len(unknown)} of {len(ids)} device IDs were not advertised as {mode.api_name} "
            f"tokens of this node: {listed(unknown)}",
        )
    return None


def decide(node: Node, request: Request) -> Grant | Refusal:
    """Grant ``request`` on ``node``, or refuse it naming the rule."""
    tokens: list[TokenID] = []
    doubled = [text for text, count in Counter(request.device_ids).items() if count > 1]
    if doubled:
        return Refusal(Rule.MALFORMED, f"device ID {listed(doubled)} is asked more than once")
    for text in request.device_ids:
        try:
            token = parse_token_id(text)
        except ValueError as exc:
            return Refusal(Rule.MALFORMED, str(exc))
        if token.group != node.group.id or node.card(token.accelerator) is None:
            return Refusal(
                Rule.UNKNOWN_DEVICE,
                f"device ID {shown(text)} names no card of group {node.group.id!r}",
            )
        if token.number >= tokens_per_card(_card(node, token), request.mode):
            return Refusal(
                Rule.UNKNOWN_DEVICE,
                f"device ID {shown(text)} is outside the card's {request.mode.api_name} pool",
            )
        tokens.append(token)
    match request.mode:
        case AllocationMode.EXCLUSIVE:
            return _bound(node, request, tokens, UNITS_PER_ACCELERATOR)
        case AllocationMode.SHARED:
            return _shared(node, request, tokens)
        case AllocationMode.SLICED:
            return _sliced(node, request, tokens)
        case AllocationMode.PARTITIONED:
            return _partitioned(node, request)
        case AllocationMode.VISIBILITY:
            return _visibility(node, request)


def _card(node: Node, token: TokenID) -> AcceleratorSpec:
    card = node.card(token.accelerator)
    if card is None:  # decide checked every token first
        raise LookupError(f"card {token.accelerator} vanished between checks")
    return card


def _entry(card: AcceleratorSpec, mode: AllocationMode, units: int) -> AllocatedAccelerator:
    return AllocatedAccelerator(id=card.id, index=card.index, mode=mode, allocated=units)


def _usable(node: Node, card: AcceleratorSpec, mode: AllocationMode) -> Refusal | None:
    """The refusal every accelerator-bound mode shares: the card is sick or another mode's."""
    if card.status.unhealthy:
        return Refusal(Rule.UNHEALTHY, f"card {card.id} (index {card.index}) is unhealthy")
    holder = node.holder(card.id, mode)
    if holder is not None:
        return Refusal(
            Rule.OTHER_MODE,
            f"card {card.id} (index {card.index}) is held {holder.accelerator.mode.api_name} "
            f"by {holder.pod} container {holder.container!r}; refusing {mode.api_name}",
        )
    return None


def _bound(node: Node, request: Request, tokens: Sequence[TokenID], units: int) -> Grant | Refusal:
    """Exclusive: each token is its card, whole."""
    entries = []
    for token in tokens:
        card = _card(node, token)
        refusal = _usable(node, card, request.mode)
        if refusal is not None:
            return refusal
        holder = next(iter(node.on(card.id)), None)
        if holder is not None:
            return Refusal(
                Rule.NO_UNITS,
                f"card {card.id} (index {card.index}) is already held Exclusive by "
                f"{holder.pod} container {holder.container!r}",
            )
        entries.append(_entry(card, request.mode, units))
    return Grant(tuple(entries), request.device_ids)


def _shared(node: Node, request: Request, tokens: Sequence[TokenID]) -> Grant | Refusal:
    cards = Counter(t.accelerator for t in tokens)
    doubled = sorted(c for c, n in cards.items() if n > 1)
    if doubled:
        return Refusal(
            Rule.DISTINCT_CARDS,
            f"{len(tokens)} shares must be on {len(tokens)} distinct cards; "
            f"got {len(cards)} (card {doubled[0]} more than once)",
        )
    entries = []
    for token in tokens:
        card = _card(node, token)
        refusal = _usable(node, card, request.mode)
        if refusal is not None:
            return refusal
        if node.used_units(card.id) + SHARE_UNITS > UNITS_PER_ACCELERATOR:
            return Refusal(
                Rule.NO_SHARE,
                f"card {card.id} (index {card.index}) has no share left of "
                f"{SHARES_PER_ACCELERATOR}",
            )
        entries.append(_entry(card, request.mode, SHARE_UNITS))
    return Grant(tuple(entries), request.device_ids)


def _slice_units(request: Request, tokens: int) -> int:
    """The container's folded units capped at one card; without the webhook, the token count."""
    units = request.units if request.units is not None and request.units > 0 else tokens
    return min(units, UNITS_PER_ACCELERATOR)


def _sliced(node: Node, request: Request, tokens: Sequence[TokenID]) -> Grant | Refusal:
    entries = []
    units = _slice_units(request, len(tokens))
    for token in {t.accelerator: t for t in tokens}.values():
        card = _card(node, token)
        refusal = _usable(node, card, request.mode)
        if refusal is not None:
            return refusal
        slots = tokens_per_card(card, request.mode)
        if len(node.on(card.id)) >= slots:
            return Refusal(
                Rule.NO_SLOT,
                f"card {card.id} (index {card.index}) has all {slots} slices taken",
            )
        left = UNITS_PER_ACCELERATOR - node.used_units(card.id)
        if units > left:
            return Refusal(
                Rule.NO_UNITS,
                f"card {card.id} (index {card.index}) has {left} units left; "
                f"the slice asks {units}",
            )
        entries.append(_entry(card, request.mode, units))
    return Grant(tuple(entries), request.device_ids)


def _partitioned(node: Node, request: Request) -> Grant | Refusal:
    if not request.profile:
        return Refusal(
            Rule.PROFILE_REQUIRED,
            "a Partitioned request names its profile (<base>.partitioned.<kind>-<profile>)",
        )
    taken = node.held_partitions()
    units = _slice_units(request, len(request.device_ids))
    candidates: list[tuple[int, int, Partition, AcceleratorSpec]] = []
    for partition in node.partitions:
        card = node.card(partition.parent_id)
        if card is None or partition.profile != request.profile or partition.id in taken:
            continue
        if card.status.unhealthy or node.holder(card.id, request.mode) is not None:
            continue
        if node.used_units(card.id) + units > UNITS_PER_ACCELERATOR:
            continue  # the folded units say the card's memory is already spoken for
        # Pack: a card already partitioned for others first (most grants), then by index.
        candidates.append((-len(node.on(card.id)), card.index, partition, card))
    if not candidates:
        return Refusal(
            Rule.NO_PARTITION,
            f"no free {request.profile} partition with {units} units left on a healthy card "
            "not held in another mode",
        )
    _, _, partition, card = min(candidates, key=lambda c: (c[0], c[1], c[2].id))
    entry = AllocatedAccelerator(
        id=card.id,
        index=card.index,
        mode=AllocationMode.PARTITIONED,
        allocated=units,
        allocated_physical_profile=partition.profile,
        allocated_physical_placements=(partition.placement,) if partition.placement else (),
        allocated_physical_id=partition.id,
    )
    return Grant((entry,), request.device_ids)


def _visibility(node: Node, request: Request) -> Grant:
    seen: dict[str, AllocatedAccelerator] = {}
    for sibling in request.siblings:
        if sibling.mode is AllocationMode.VISIBILITY or sibling.id in seen:
            continue
        card = node.card(sibling.id)
        index = card.index if card is not None else sibling.index
        seen[sibling.id] = AllocatedAccelerator(
            id=sibling.id, index=index, mode=AllocationMode.VISIBILITY
        )
    return Grant(tuple(seen.values()), request.device_ids)


def preferred(
    node: Node,
    mode: AllocationMode,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    slice_units: int | None = None,
) -> list[str]:
    """The IDs the plugin would like the kubelet to assign (``GetPreferredAllocation``).

    Fungible pools pack: tokens of cards that already carry this mode's grants first, so
    whole cards stay free for Exclusive. Shared spreads over distinct cards (one share each),
    packing onto already-shared cards too. Sliced packs by best fit when ``slice_units`` (the
    size of the slice being admitted, which the kubelet does not say: the plugin finds it on
    the Pod) is known: the card with the fewest units left that still holds it, so whole cards
    stay free; unknown, the roomiest card. Never a card the slice cannot fit (none left, or
    fewer than ``slice_units``). Unhealthy tokens are never preferred.
    """
    healthy = health(node, mode)
    chosen = [i for i in must_include if i in available][:size]
    cards_used = {parse_token_id(i).accelerator for i in chosen}

    def rank(text: str) -> tuple[int, int, str]:
        token = parse_token_id(text)
        card = node.card(token.accelerator)
        index = card.index if card is not None else 0
        if mode is AllocationMode.SLICED:
            used = node.used_units(token.accelerator)
            return (-used if slice_units is not None else used, index, text)
        return (-len(node.on(token.accelerator)), index, text)

    for text in sorted((i for i in available if i not in chosen), key=rank):
        if len(chosen) >= size:
            break
        if not healthy.get(text, False):
            continue
        card = parse_token_id(text).accelerator
        if mode is AllocationMode.SHARED and card in cards_used:
            continue
        if mode is AllocationMode.SLICED and (
            UNITS_PER_ACCELERATOR - node.used_units(card) < max(slice_units or 0, 1)
        ):
            continue
        chosen.append(text)
        cards_used.add(card)
    return chosen


__all__ = [
    "FUNGIBLE",
    "Grant",
    "Holding",
    "Node",
    "Partition",
    "Refusal",
    "Request",
    "Rule",
    "advertised",
    "decide",
    "health",
    "holdings",
    "live",
    "preferred",
    "screen",
]
