"""An InstanceType's four views of its accelerators, and its CPU view, from the ``Devices`` ledgers.

Kueue's quota is one scalar per pool (credits), which cannot say how the free room is spread
over cards; the views can, because they are projected card by card from each member node's
``Devices`` object (``spec`` for what a card offers, ``status`` for what Pods hold of it). Each
view is ``capacity / onceMaxRequest / remaining`` (``shared/reference/instancetypes.md``, "Credits
and the four views"):

- **EX** (``accelerator``): whole cards nothing holds. Capacity: the unpartitioned cards.
  Once-max: the most free cards on one node (one request may span a node's cards).
- **SH** (``acceleratorShared``): shares, ten per card, on free or already-shared cards.
  Capacity: ten per unpartitioned card. Once-max: the most cards on one node that still have a
  share — *cards*, not shares, since a shared request of N names N distinct cards on one node
  (the current shared reading; the walkthrough predates it and shows shares there: its A10G
  ``10/10`` reads ``1/10`` now, its T4 ``40/50`` ``4/50``).
- **SL** (``acceleratorSliced``): VRAM-percent units, a hundred per card that can be sliced
  logically, on free or already-sliced cards. Once-max: the freest single card (a slice
  targets one card).
- **PT** (``acceleratorPartitioned``): the hardware partitions (MIG instances) the pool's
  partitioned cards still have free, with ``remainingProfiles`` per profile (every profile
  offered listed, zero included, so "offered but full" differs from "not offered"). Once-max:
  1 while any partition is free (a request is one partition), else 0.

Each card counts in exactly one of EX/SH/SL (unpartitioned) or PT (partitioned), decided by what
the card offers (partitions present in its spec), never by its ledger. A card partly held in one
mode is neither whole nor a share: a 20 % slice takes the card out of EX and SH. An unhealthy
card offers nothing, in capacity or remaining, as on the Node's capacity. A card with no ledger
row yet is read as free, never as full: the ledger is rebuilt from Pods and lags detection.

Partitions: this project's ``Devices.spec`` lists the partitions that *exist* on a card, per
profile (``physicalSliced.profiles[].count``), not a geometry catalog of profiles competing for
the same slices, so the free partitions of different profiles are distinct hardware and sum.

The CPU view is a CPU pool's cores: capacity the member nodes' cores, remaining what the pool's
queue has not reserved, once-max the largest member node's cores (capped by remaining: a soft
bound, since one Pod's cores come from one node). An accelerated pool's queue covers no CPU, so
its CPU view is ``0/0``.

Pure: the controller reads the objects and writes the status this module returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gpustack_core.devices import AcceleratorSpec, GroupSpec, LedgerAccelerator, LedgerGroup
from gpustack_core.features import accelerator_key
from gpustack_core.modes import AllocationMode
from gpustack_core.resources import SHARES_PER_ACCELERATOR
from gpustack_core.units import MILLICORES_PER_CORE, UNITS_PER_ACCELERATOR

PERCENT = 100
SHARE_UNITS = UNITS_PER_ACCELERATOR // SHARES_PER_ACCELERATOR
_SHAREABLE = frozenset({0, int(AllocationMode.SHARED)})
_SLICEABLE = frozenset({0, int(AllocationMode.SLICED)})


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """One member node's ``Devices``: what its cards offer (spec) and what Pods hold (status)."""

    node: str
    groups: tuple[GroupSpec, ...]
    ledger: tuple[LedgerGroup, ...] = ()


@dataclass(frozen=True, slots=True)
class View:
    """One view, its figures in the view's own unit.

    Cards, shares, percent or partitions; millicores for the CPU view.
    """

    capacity: int = 0
    once_max_request: int = 0
    remaining: int = 0


@dataclass(frozen=True, slots=True)
class Views:
    """The four accelerator views of one pool, and the free partitions per profile."""

    exclusive: View = View()
    shared: View = View()
    sliced: View = View()
    partitioned: View = View()
    remaining_profiles: tuple[tuple[str, int], ...] = ()
    """``(profile, free partitions)`` for every profile the pool's partitioned cards offer."""


@dataclass
class _Tally:
    ex_capacity: int = 0
    ex_remaining: int = 0
    ex_once: int = 0
    sh_capacity: int = 0
    sh_remaining: int = 0
    sh_once: int = 0
    sl_capacity: int = 0
    sl_remaining: int = 0
    sl_once: int = 0
    pt_capacity: int = 0
    pt_remaining: int = 0
    profiles: dict[str, int] = field(default_factory=dict)


@dataclass
class _NodeTally:
    free_cards: int = 0
    shareable_cards: int = 0


def ledger_rows(ledger: Iterable[LedgerGroup]) -> dict[str, LedgerAccelerator]:
    """Each card's ledger row by card ID (the per-card fit reads the ledger the same way)."""
    return {card.id: card for group in ledger for card in group.accelerators}


def card_remaining(row: LedgerAccelerator | None) -> tuple[int, int]:
    """``(mode, remaining units)`` of a card; no row is a free card, figures are clamped."""
    if row is None:
        return 0, UNITS_PER_ACCELERATOR
    return row.mode, min(max(row.remaining, 0), UNITS_PER_ACCELERATOR)


def _partitioned(card: AcceleratorSpec) -> bool:
    physical = card.status.physical_sliced
    return physical is not None and physical.count > 0


def _sliceable(card: AcceleratorSpec) -> bool:
    logical = card.status.logical_sliced
    return logical is not None and logical.count > 0


def free_partitions(card: AcceleratorSpec, row: LedgerAccelerator | None) -> dict[str, int]:
    """Profile → partitions of the card nothing holds, the ledger's figure clamped to the offer.

    No row (or no figure for a profile) is every offered partition free, as for the views.
    """
    physical = card.status.physical_sliced
    free = {p.name: p.count for p in (row.remaining_profiles if row else ())}
    out: dict[str, int] = {}
    for profile in physical.profiles if physical is not None else ():
        offered = max(profile.count, 0)
        out[profile.name] = min(max(free.get(profile.name, offered), 0), offered)
    return out


def _count_partitions(card: AcceleratorSpec, row: LedgerAccelerator | None, tally: _Tally) -> None:
    physical = card.status.physical_sliced
    assert physical is not None  # _partitioned(card)
    left_by_profile = free_partitions(card, row)
    for profile in physical.profiles:
        left = left_by_profile[profile.name]
        tally.pt_capacity += max(profile.count, 0)
        tally.pt_remaining += left
        tally.profiles[profile.name] = tally.profiles.get(profile.name, 0) + left


def _count_whole(
    card: AcceleratorSpec, row: LedgerAccelerator | None, tally: _Tally, node: _NodeTally
) -> None:
    mode, remaining = card_remaining(row)
    tally.ex_capacity += 1
    if mode == 0 and remaining >= UNITS_PER_ACCELERATOR:
        tally.ex_remaining += 1
        node.free_cards += 1
    tally.sh_capacity += SHARES_PER_ACCELERATOR
    shares = remaining // SHARE_UNITS if mode in _SHAREABLE else 0
    tally.sh_remaining += shares
    node.shareable_cards += 1 if shares else 0
    if _sliceable(card):
        tally.sl_capacity += PERCENT
        percent = remaining * PERCENT // UNITS_PER_ACCELERATOR if mode in _SLICEABLE else 0
        tally.sl_remaining += percent
        tally.sl_once = max(tally.sl_once, percent)


def accelerator_views(nodes: Iterable[NodeDevices], key: str) -> Views:
    """The four views of accelerator ``key`` (``nvidia-a10g``) over the pool's member nodes.

    Only the groups whose accelerator key is ``key`` count: a node may carry several models,
    and a pool is one model.
    """
    tally = _Tally()
    for node in nodes:
        rows = ledger_rows(node.ledger)
        here = _NodeTally()
        for group in node.groups:
            if accelerator_key(group) != key:
                continue
            for card in group.accelerators:
                if card.status.unhealthy:
                    continue
                row = rows.get(card.id)
                if _partitioned(card):
                    _count_partitions(card, row, tally)
                else:
                    _count_whole(card, row, tally, here)
        tally.ex_once = max(tally.ex_once, here.free_cards)
        tally.sh_once = max(tally.sh_once, here.shareable_cards)
    return Views(
        exclusive=View(tally.ex_capacity, tally.ex_once, tally.ex_remaining),
        shared=View(tally.sh_capacity, tally.sh_once, tally.sh_remaining),
        sliced=View(tally.sl_capacity, tally.sl_once, tally.sl_remaining),
        partitioned=View(tally.pt_capacity, 1 if tally.pt_remaining else 0, tally.pt_remaining),
        remaining_profiles=tuple(sorted(tally.profiles.items())),
    )


def cpu_view(node_cores: Sequence[int], reserved_millicores: int = 0) -> View:
    """A CPU pool's view in millicores: member nodes' cores, less what its queue reserved.

    ``node_cores`` has one entry per member node (a node with no stated core count is not a
    member: its flavor could not be named). ``reserved_millicores`` is the pool's queue usage;
    a figure above the capacity leaves nothing, never a negative remainder.
    """
    cores = [max(c, 0) * MILLICORES_PER_CORE for c in node_cores]
    capacity = sum(cores)
    remaining = max(capacity - max(reserved_millicores, 0), 0)
    return View(capacity, min(max(cores, default=0), remaining), remaining)
