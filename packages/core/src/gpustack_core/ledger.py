"""The ``Devices.status`` ledger: what the node's Pods hold of each card, rebuilt wholesale.

The ledger is never updated incrementally. Every rebuild starts from the detected cards at
``remaining = 1,600,000`` (one whole accelerator, ``UNITS_PER_ACCELERATOR``) and charges each
Pod's allocation annotation again, so a Pod that is gone is simply absent and a missed watch
event cannot leave a charge behind.

Rules (the reference operator's, ``shared/reference/operator-half.md``):

- Visibility entries are an SSH sidecar's view of its sibling's cards, not a second grant:
  skipped.
- A Succeeded or Failed Pod releases what it held in Exclusive, Shared and Sliced mode, but
  **not** a partition: a MIG instance stays carved until its Pod object is deleted.
- A card's ``mode`` is the mode that holds it (0 when nothing does); a partitioned card also
  lists, per profile, how many partitions are held and how many remain.
- A Pod whose annotation does not parse holds nothing in the ledger; its reason is returned
  so the caller logs it, and every other Pod is still charged.

The ledger takes grants, never the annotation's text: the caller read each Pod's annotation
once with :func:`gpustack_core.allocation.read_allocation` (the Device Manager's Pod view
does, once per Pod change) and hands over what it read, or why it could not.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gpustack_core.allocation import Grant
from gpustack_core.devices import (
    GroupSpec,
    LedgerAccelerator,
    LedgerGroup,
    ProfileCount,
)
from gpustack_core.modes import TERMINATED_PHASES, AllocationMode
from gpustack_core.units import UNITS_PER_ACCELERATOR


@dataclass(frozen=True, slots=True)
class PodAllocation:
    """What the ledger reads of one Pod: who it is, its phase and what its annotation grants."""

    namespace: str
    name: str
    phase: str
    grants: tuple[Grant, ...]
    """Empty when the Pod carries no allocation annotation (it holds nothing)."""
    unreadable: str | None = None
    """Why the Pod's annotation could not be read (``read_allocation``'s one-line reason,
    naming the Pod); it then holds nothing and the reason is reported in ``skipped``."""


@dataclass(frozen=True, slots=True)
class Ledger:
    """A rebuilt ledger, and one line per Pod or grant that could not be charged."""

    groups: tuple[LedgerGroup, ...]
    skipped: tuple[str, ...] = ()


@dataclass
class _Card:
    id: str
    index: int
    allocated: int = 0
    mode: int = 0
    held: dict[str, int] = field(default_factory=dict)
    """Partitions held, by profile."""
    partitions: dict[str, int] = field(default_factory=dict)
    """Partitions the card has, by profile (from the spec)."""

    def row(self) -> LedgerAccelerator:
        remaining = max(UNITS_PER_ACCELERATOR - self.allocated, 0)
        held = tuple(ProfileCount(name=p, count=n) for p, n in sorted(self.held.items()))
        free = tuple(
            ProfileCount(name=p, count=max(n - self.held.get(p, 0), 0))
            for p, n in sorted(self.partitions.items())
        )
        return LedgerAccelerator(
            id=self.id,
            index=self.index,
            mode=self.mode,
            allocated=self.allocated,
            remaining=remaining,
            allocated_profiles=held,
            remaining_profiles=free,
        )


def build_ledger(groups: Sequence[GroupSpec], pods: Iterable[PodAllocation]) -> Ledger:
    """The ledger of ``groups``' cards, charged with every Pod's grants on them.

    Grants naming a card not in ``groups`` (another manufacturer's, or one no longer
    detected) are not this ledger's and are ignored silently; a grant whose mode disagrees
    with the mode already holding the card is charged anyway (the units are really held) and
    reported, since the device plugin should never have allowed it.
    """
    cards: dict[str, _Card] = {}
    order: list[tuple[GroupSpec, list[_Card]]] = []
    for group in groups:
        members = []
        for spec in group.accelerators:
            card = _Card(spec.id, spec.index)
            physical = spec.status.physical_sliced
            if physical is not None:
                card.partitions = {p.name: p.count for p in physical.profiles}
            cards[card.id] = card
            members.append(card)
        order.append((group, members))

    skipped: list[str] = []
    for pod in sorted(pods, key=lambda p: (p.namespace, p.name)):
        if pod.unreadable is not None:
            skipped.append(f"{pod.unreadable}; it holds nothing in the ledger")
            continue
        who = f"pod {pod.namespace}/{pod.name}"
        terminal = pod.phase in TERMINATED_PHASES
        for grant in pod.grants:
            accelerator = grant.accelerator
            mode = accelerator.mode
            if mode is AllocationMode.VISIBILITY:
                continue
            if terminal and mode is not AllocationMode.PARTITIONED:
                continue
            found = cards.get(accelerator.id)
            if found is None:
                continue
            card = found
            if card.mode and card.mode != int(mode):
                skipped.append(
                    f"{who}: container {grant.container!r} holds card {card.id} in mode "
                    f"{int(mode)} while mode {card.mode} holds it; charged anyway"
                )
            card.mode = card.mode or int(mode)
            card.allocated = min(card.allocated + accelerator.allocated, UNITS_PER_ACCELERATOR)
            if mode is AllocationMode.PARTITIONED and accelerator.allocated_physical_profile:
                profile = accelerator.allocated_physical_profile
                card.held[profile] = card.held.get(profile, 0) + 1
    return Ledger(
        tuple(
            LedgerGroup(
                id=group.id,
                manufacturer=group.manufacturer,
                accelerators=tuple(card.row() for card in members),
            )
            for group, members in order
        ),
        tuple(skipped),
    )
