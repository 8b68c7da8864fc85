"""Per-card fit: whether one node's cards can hold a Pod's accelerator demand, from the ledgers.

Kueue's quota (``credits.gpustack.ai/<mfr>``) and a Node's companion resources
(``<base>.sliced.units``) are sums over many cards; neither can say whether *one* card can still
hold a 50 % slice. A node whose four cards each have 40 % left shows 160 % of room and takes
the slice, and the device plugin then refuses it at ``Allocate`` (``UnexpectedAdmissionError``)
while another node had a free card (``shared/reference/instancetypes.md``, "The per-accelerator
admission check").

This module asks the device plugin's own question before the Pod is admitted. It rebuilds each
node's cards as :mod:`gpustack_core.allocator` sees them — what the cards offer from the
``Devices`` spec, what Pods hold from its status ledger (read the way :mod:`gpustack_core.views`
reads it) — and calls :func:`gpustack_core.allocator.decide` on them, so the check, the fit
labels and the plugin share one rule set: a card held in another mode is refused, a slice needs
a slot and that many units left on one card, a share 160,000 units on each of N distinct cards,
a partition a free one of its profile, Exclusive whole free cards.

- :func:`admit` is the ``gpustack-node-devices`` AdmissionCheck's decision: every Pod of every
  PodSet must find one node (among those its flavor and selectors allow) whose cards hold all
  its asks; the Pods are placed one after another, each charging what it takes, so two Pods of
  one Workload are not both promised the same card.
- :func:`fit_labels` is a node's per-card fit labels: per accelerator model, the most units one
  card can still give a slice and how many cards can still give a share.

What the ledger cannot say is left to the plugin: how many slices already sit on a card (the
ledger keeps units, not grants, so a card's slice slots read as one taken while it is held),
and which init container's devices the kubelet reuses (a Pod's asks are counted as held
together — the conservative reading). Pure: the caller reads the objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from gpustack_core import contract
from gpustack_core.allocation import AllocatedAccelerator
from gpustack_core.allocator import Grant, Holding, Partition, Refusal, Request, Rule, decide
from gpustack_core.allocator import Node as GroupCards
from gpustack_core.devices import AcceleratorSpec, GroupSpec, LedgerAccelerator
from gpustack_core.features import accelerator_key
from gpustack_core.modes import AllocationMode
from gpustack_core.names import qualified_name_errors
from gpustack_core.requests import (
    ContainerRequests,
    Decision,
    fold_mib,
    fold_percentage,
    parse_pod,
)
from gpustack_core.resources import ResourceNames
from gpustack_core.tokens import token_id, tokens_per_card
from gpustack_core.units import UNITS_PER_ACCELERATOR
from gpustack_core.views import NodeDevices, card_remaining, free_partitions, ledger_rows

LEDGER_HOLDER = "the ledger"
"""Who holds what a ledger row says is held: the ledger keeps units per card, not Pods."""
ADMITTING = "the Workload being admitted"
"""Who holds what an earlier Pod of the same Workload was placed on."""
SHOWN_NODES = 3
"""A Retry message names this many nodes' reasons and counts the rest."""


# -- the asks ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ask:
    """One container's ask of one manufacturer's cards, as its device plugin will be asked."""

    manufacturer: str
    mode: AllocationMode
    count: int = 1
    """Cards (Exclusive, Shared); 1 for a slice or a partition."""
    units: int | None = None
    """A slice's or partition's units (the webhook's fold); ``None``: folded per card below."""
    memory_mib: int | None = None
    """An unfolded MiB slice, folded against each candidate card's memory."""
    profile: str | None = None
    container: str = ""

    def describe(self) -> str:
        """``a Sliced request of 800000 units`` — what a message says was asked."""
        if self.mode is AllocationMode.EXCLUSIVE:
            return f"{self.count} whole {self.manufacturer} card{'s' if self.count > 1 else ''}"
        if self.mode is AllocationMode.SHARED:
            return f"a share of {self.count} distinct {self.manufacturer} cards"
        if self.mode is AllocationMode.SLICED:
            size = f"{self.units} units" if self.units is not None else f"{self.memory_mib} MiB"
            return f"a {self.manufacturer} slice of {size}"
        return f"a free {self.manufacturer} {self.profile} partition"


def pod_asks(
    pod: Mapping[str, Any], names: Sequence[ResourceNames] | None = None
) -> tuple[Ask, ...]:
    """The accelerator asks of a Pod or a PodTemplateSpec (a Workload's PodSet template).

    Read by the request parser the Pod webhook uses (:func:`gpustack_core.requests.parse_pod`);
    raises its :class:`~gpustack_core.requests.RequestError` for a malformed request. A slice's
    units are the ``.sliced.units`` the webhook wrote, else its memory percentage folded; a
    Visibility sidecar asks for nothing (it sees its sibling's cards).
    """
    return _asks(parse_pod(pod, names), {})


def decision_asks(decision: Decision) -> tuple[Ask, ...]:
    """The asks of a Pod the webhook just judged, with the units its patch is about to write."""
    folded = {(field_, maker): units for field_, maker, units in decision.folded}
    return _asks(decision.requests, folded)


def _asks(
    containers: Sequence[ContainerRequests], folded: Mapping[tuple[str, str], int]
) -> tuple[Ask, ...]:
    asks: list[Ask] = []
    for container in containers:
        for r in container.requests:
            if r.mode is AllocationMode.VISIBILITY:
                continue
            units = (
                r.units if r.units is not None else folded.get((container.field, r.manufacturer))
            )
            if units is None and r.mode is AllocationMode.SLICED and r.memory_percentage:
                units = fold_percentage(r.memory_percentage)
            asks.append(
                Ask(
                    manufacturer=r.manufacturer,
                    mode=r.mode,
                    count=r.count if r.mode in _CARD_COUNTED else 1,
                    units=units,
                    memory_mib=r.memory_mib if units is None else None,
                    profile=r.partition_profile,
                    container=container.name,
                )
            )
    return tuple(asks)


_CARD_COUNTED = frozenset({AllocationMode.EXCLUSIVE, AllocationMode.SHARED})


# -- a node's cards as the allocator sees them ------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeCards:
    """One node's groups, each an :class:`~gpustack_core.allocator.Node` charged from its ledger."""

    node: str
    groups: tuple[GroupCards, ...]


def _unusable(card: AcceleratorSpec) -> AcceleratorSpec:
    """The card as one that grants nothing (a ledger row in a mode this code does not know)."""
    return msgspec.structs.replace(
        card, status=msgspec.structs.replace(card.status, unhealthy=True)
    )


def _held(node: str, manufacturer: str, row: LedgerAccelerator) -> Holding | None:
    """The row's holding: its mode, its allocated units; ``None`` when nothing holds the card."""
    mode, remaining = card_remaining(row)
    if mode == 0:
        return None
    entry = AllocatedAccelerator(
        id=row.id,
        index=row.index,
        mode=AllocationMode(mode),
        allocated=UNITS_PER_ACCELERATOR - remaining,
    )
    return Holding(f"{node}'s Pods", LEDGER_HOLDER, manufacturer, entry)


def node_cards(devices: NodeDevices) -> NodeCards:
    """A node's cards charged with what its ledger says is held.

    Each card with a ledger row in a mode is held by one synthetic holding of its allocated
    units (``1,600,000 - remaining``); a partitioned card lists one free partition per
    partition its ledger row says is free of each profile (:func:`views.free_partitions`). A
    card without a row is free, as the views read it.
    """
    rows = ledger_rows(devices.ledger)
    known = {int(m) for m in AllocationMode}
    groups: list[GroupCards] = []
    for group in devices.groups:
        cards: list[AcceleratorSpec] = []
        held: list[Holding] = []
        partitions: list[Partition] = []
        for card in group.accelerators:
            row = rows.get(card.id)
            if row is not None and row.mode not in known and row.mode != 0:
                cards.append(_unusable(card))
                continue
            cards.append(card)
            holding = _held(devices.node, group.manufacturer, row) if row is not None else None
            if holding is not None:
                held.append(holding)
            for profile, free in sorted(free_partitions(card, row).items()):
                partitions += [
                    Partition(f"{card.id}/{profile}/{n}", card.id, profile) for n in range(free)
                ]
        spec = msgspec.structs.replace(group, accelerators=tuple(cards))
        groups.append(GroupCards(spec, tuple(held), tuple(partitions)))
    return NodeCards(devices.node, tuple(groups))


def _token(group: GroupSpec, card: AcceleratorSpec) -> str:
    return token_id(group.id, card.id, 0)


def _charged(cards: GroupCards, grant: Grant) -> GroupCards:
    """``cards`` with ``grant`` held too, as the plugin's next decision would see it."""
    added = tuple(
        Holding(ADMITTING, "", cards.group.manufacturer, entry) for entry in grant.accelerators
    )
    return GroupCards(cards.group, cards.held + added, cards.partitions)


# -- one ask on one group ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Miss:
    """Why an ask found no room in one group: the reason nearest to fitting, one line."""

    reason: str
    closeness: int = 0
    """Higher is nearer to fitting (units left, cards that could take part)."""


def _units_for(ask: Ask, group: GroupSpec) -> int | None:
    if ask.units is not None:
        return ask.units
    if ask.memory_mib is not None and group.memory > 0:
        return fold_mib(ask.memory_mib, group.memory)
    return None


def _refused(card: AcceleratorSpec, refusal: Refusal, cards: GroupCards) -> str:
    """A refusal in the words a Workload's reader needs (the ledger, not a Pod, holds cards)."""
    if refusal.rule is Rule.OTHER_MODE:
        holder = next(iter(cards.on(card.id)), None)
        mode = holder.accelerator.mode.api_name if holder else "in another mode"
        return f"card {card.id} (index {card.index}) is held {mode}"
    if refusal.rule is Rule.UNKNOWN_DEVICE:
        return f"card {card.id} (index {card.index}) offers no such slot"
    return refusal.message


def _single(
    cards: GroupCards, ask: Ask, units: int | None
) -> tuple[list[AcceleratorSpec], list[tuple[AcceleratorSpec, str]]]:
    """The cards that would each take the ask alone, and why each other card would not."""
    taking: list[AcceleratorSpec] = []
    refused: list[tuple[AcceleratorSpec, str]] = []
    for card in sorted(cards.group.accelerators, key=lambda c: (c.index, c.id)):
        if tokens_per_card(card, ask.mode) == 0:
            refused.append((card, f"card {card.id} (index {card.index}) offers no "
                                  f"{ask.mode.api_name} slot"))  # fmt: skip
            continue
        answer = decide(cards, Request(ask.mode, (_token(cards.group, card),), units=units))
        if isinstance(answer, Refusal):
            refused.append((card, _refused(card, answer, cards)))
        else:
            taking.append(card)
    return taking, refused


def _fit_group(cards: GroupCards, ask: Ask) -> Grant | _Miss:
    """Grant ``ask`` on one group's cards as the plugin would, or say what is nearest."""
    group = cards.group
    units = _units_for(ask, group)
    if ask.mode is AllocationMode.SLICED and units is None:
        return _Miss(f"the memory of a {group.id} card is unknown, so {ask.memory_mib} MiB cannot "
                     "be folded into units")  # fmt: skip
    if ask.mode is AllocationMode.PARTITIONED:
        offering = [c for c in group.accelerators if tokens_per_card(c, ask.mode) > 0]
        if not offering:
            return _Miss(f"no {group.id} card is partitioned")
        request = Request(ask.mode, (_token(group, offering[0]),), units=units, profile=ask.profile)
        answer = decide(cards, request)
        return _Miss(answer.message) if isinstance(answer, Refusal) else answer
    taking, refused = _single(cards, ask, units)
    if ask.mode is AllocationMode.SLICED:
        if not taking:
            card, why = max(refused, key=lambda r: _left(cards, r[0]))
            return _Miss(why, _left(cards, card))
        # Best fit, as the plugin prefers: the fullest card that still holds the slice.
        chosen = [max(taking, key=lambda c: (cards.used_units(c.id), -c.index))]
    else:
        if len(taking) < ask.count:
            first = f" ({refused[0][1]})" if refused else ""
            return _Miss(
                f"{len(taking)} of its {len(group.accelerators)} {group.id} cards can take "
                f"{'a whole card' if ask.mode is AllocationMode.EXCLUSIVE else 'a share'}, "
                f"{ask.count} are asked{first}",
                len(taking),
            )
        # The roomiest cards first: what is left then serves the Pod's other asks best.
        chosen = sorted(taking, key=lambda c: (cards.used_units(c.id), c.index))[: ask.count]
    tokens = tuple(_token(group, c) for c in chosen)
    answer = decide(cards, Request(ask.mode, tokens, units=units))
    return _Miss(answer.message) if isinstance(answer, Refusal) else answer


def _left(cards: GroupCards, card: AcceleratorSpec) -> int:
    return UNITS_PER_ACCELERATOR - cards.used_units(card.id)


# -- one Pod on one node ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Placed:
    """Where one Pod of a PodSet found room."""

    podset: str
    node: str
    cards: tuple[str, ...]


def _order(ask: Ask) -> tuple[int, int]:
    return (-ask.count, -(ask.units or 0))


def fit_pod(cards: NodeCards, asks: Sequence[Ask]) -> tuple[NodeCards, tuple[str, ...]] | str:
    """``cards`` charged with every ask and the cards granted, or why the node cannot take it.

    Asks go largest first (the most cards, then the most units), each on the first group of
    its manufacturer that grants it.
    """
    groups = list(cards.groups)
    granted: list[str] = []
    for ask in sorted(asks, key=_order):
        misses: list[_Miss] = []
        for i, group in enumerate(groups):
            if group.group.manufacturer != ask.manufacturer or not group.group.accelerators:
                continue
            answer = _fit_group(group, ask)
            if isinstance(answer, _Miss):
                misses.append(answer)
                continue
            groups[i] = _charged(group, answer)
            granted += [a.id for a in answer.accelerators]
            break
        else:
            if not misses:
                return f"{cards.node}: no {ask.manufacturer} card"
            nearest = max(misses, key=lambda m: m.closeness)
            return f"{cards.node}: {nearest.reason}"
    return NodeCards(cards.node, tuple(groups)), tuple(granted)


def fitting(nodes: Iterable[NodeDevices], asks: Sequence[Ask]) -> frozenset[str]:
    """The nodes whose cards can hold one Pod asking ``asks`` now.

    As its device plugin would grant it: the check's decision for a single Pod.
    """
    return frozenset(n.node for n in nodes if not isinstance(fit_pod(node_cards(n), asks), str))


# -- a Workload -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodSet:
    """One PodSet of a Workload as the check reads it."""

    name: str
    count: int
    asks: tuple[Ask, ...]
    nodes: frozenset[str] | None = None
    """The nodes its flavor and selectors allow; ``None``: every node with a ``Devices``."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The check's answer: ``Ready`` when every Pod found a node, else ``Retry``."""

    ready: bool
    message: str
    placed: tuple[Placed, ...] = field(default=())


def admit(nodes: Iterable[NodeDevices], podsets: Sequence[PodSet]) -> Verdict:
    """Whether one node's cards can hold each Pod of each PodSet, Pods charged one by one.

    Nodes are tried by name for each Pod, the first that takes it keeps it (its cards then
    charged for the next Pod). A PodSet asking for no accelerator needs no node. The message
    says where each PodSet went, or for the first Pod that found no room why the nearest
    nodes could not take it (a few named, the rest counted).
    """
    state = {n.node: node_cards(n) for n in nodes}
    placed: list[Placed] = []
    for podset in podsets:
        if not podset.asks:
            continue
        names = sorted(state if podset.nodes is None else state.keys() & podset.nodes)
        for number in range(max(podset.count, 0)):
            reasons: list[str] = []
            for name in names:
                answer = fit_pod(state[name], podset.asks)
                if isinstance(answer, str):
                    reasons.append(answer)
                    continue
                state[name], cards = answer
                placed.append(Placed(podset.name, name, cards))
                break
            else:
                return Verdict(False, _retry(podset, number, names, reasons), tuple(placed))
    if not placed:
        return Verdict(True, "no PodSet asks for accelerators")
    return Verdict(True, _ready(placed), tuple(placed))


def _who(podset: PodSet, number: int) -> str:
    if podset.count > 1:
        return f"Pod {number + 1} of {podset.count} of PodSet {podset.name}"
    return f"PodSet {podset.name}"


def _retry(podset: PodSet, number: int, names: Sequence[str], reasons: Sequence[str]) -> str:
    asked = "; ".join(a.describe() for a in sorted(podset.asks, key=_order))
    if not names:
        return (f"{_who(podset, number)} asks for {asked}, and no node with a Devices object "
                "matches its flavor and node selectors")  # fmt: skip
    shown = "; ".join(reasons[:SHOWN_NODES])
    more = len(reasons) - SHOWN_NODES
    rest = f"; and {more} more node{'s' if more > 1 else ''}" if more > 0 else ""
    return (f"{_who(podset, number)} asks for {asked}, and no node has one card that can hold "
            f"it: {shown}{rest}")  # fmt: skip


def _ready(placed: Sequence[Placed]) -> str:
    by_set: dict[str, list[str]] = {}
    for p in placed:
        by_set.setdefault(p.podset, []).append(f"{p.node} ({', '.join(p.cards)})")
    return "; ".join(f"PodSet {name} fits on {', '.join(where)}" for name, where in by_set.items())


# -- the fit labels ---------------------------------------------------------------------------


def fit_labels(devices: NodeDevices) -> dict[str, str]:
    """The node's per-card fit labels, from the same decisions :func:`admit` makes.

    Per accelerator model (``<aKey>``, ``nvidia-a10g``):

    - ``sliced-max-free-units.fit.gpustack.ai/<aKey>``: the most units one card would still
      give a slice (a card where a 1-unit slice is granted: sliceable, a slot, not held in
      another mode), 0 when none; published when a card of the model offers slices at all;
    - ``shared-free-cards.fit.gpustack.ai/<aKey>``: how many cards would still grant one
      share; published when the model has cards.

    So a slice of ``U`` units fits on some card of the model exactly when the first is at
    least ``U``, and a shared request of ``N`` when the second is at least ``N`` — the
    required node affinity's ``Gt U-1`` / ``Gt N-1``. A key that is no valid label key (an
    over-long model name) is left out.
    """
    labels: dict[str, str] = {}
    for cards in node_cards(devices).groups:
        group = cards.group
        if not group.accelerators:
            continue
        key = accelerator_key(group)
        shared, _ = _single(cards, Ask(group.manufacturer, AllocationMode.SHARED), None)
        labels[contract.FIT_SHARED_PREFIX + key] = str(len(shared))
        if any(tokens_per_card(c, AllocationMode.SLICED) > 0 for c in group.accelerators):
            sliced, _ = _single(cards, Ask(group.manufacturer, AllocationMode.SLICED), 1)
            most = max((_left(cards, c) for c in sliced), default=0)
            labels[contract.FIT_SLICED_PREFIX + key] = str(most)
    return {k: v for k, v in labels.items() if not qualified_name_errors(k)}


def is_fit_label(key: str) -> bool:
    """Whether ``key`` is one of the fit labels (the worker owns every one of them)."""
    return key.startswith((contract.FIT_SLICED_PREFIX, contract.FIT_SHARED_PREFIX))


__all__ = [
    "Ask",
    "NodeCards",
    "Placed",
    "PodSet",
    "Verdict",
    "admit",
    "decision_asks",
    "fit_labels",
    "fit_pod",
    "is_fit_label",
    "node_cards",
    "pod_asks",
]
