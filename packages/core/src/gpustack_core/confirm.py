"""A Pod's allocation annotation, believed only as far as the kubelet's own record confirms it.

The annotation is written by the Device Manager, but anyone who may ``patch pods`` may write it
too: a tenant could claim another tenant's card and read that card's figures. The kubelet
records which device-plugin IDs it assigned to each container (PodResources), and the Device
Manager's plugin wrote exactly those IDs into the annotation's ``deviceIDs``. So a container's
grants stand only when

* its ``deviceIDs`` are not empty and every one of them is assigned by the kubelet to *that*
  container (``(namespace, pod, container)``): a copied entry names IDs the kubelet assigned to
  someone else, and a hand-written one names none; and
* for the card-bound modes (Exclusive, Shared, Sliced, whose IDs name their card), the granted
  card is the card one of those IDs names. Partitioned and Visibility IDs are fungible counts
  (the plugin picks the card), so their confirmation is the ID check alone.

Pure: the caller reads PodResources; a grant that does not stand is dropped with a reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpustack_core.allocation import Grant
from gpustack_core.modes import AllocationMode
from gpustack_core.tokens import parse_token_id

Assigned = Mapping[tuple[str, str, str], frozenset[str]]
"""(namespace, pod, container) → every device-plugin ID the kubelet assigned it."""

CARD_BOUND = frozenset({AllocationMode.EXCLUSIVE, AllocationMode.SHARED, AllocationMode.SLICED})


@dataclass(frozen=True)
class Verdict:
    """The grants that stand, and why each other one does not (one line each)."""

    kept: tuple[Grant, ...]
    dropped: tuple[str, ...]


def _cards(ids: Sequence[str]) -> set[str]:
    cards = set()
    for text in ids:
        try:
            cards.add(parse_token_id(text).accelerator)
        except ValueError:
            continue  # not one of ours: confirms no card
    return cards


def confirm(
    namespace: str,
    name: str,
    grants: Sequence[Grant],
    device_ids: Mapping[str, Sequence[str]],
    assigned: Assigned,
) -> Verdict:
    """Keep the Pod's grants the kubelet's assignments confirm (see the module docstring)."""
    kept: list[Grant] = []
    dropped: list[str] = []
    for grant in grants:
        where = f"pod {namespace}/{name} container {grant.container!r}"
        claimed = tuple(device_ids.get(grant.container, ()))
        given = assigned.get((namespace, name, grant.container), frozenset())
        if not claimed:
            dropped.append(
                f"{where}: the annotation claims {grant.manufacturer} {grant.accelerator.id} "
                "with no device IDs, so no kubelet assignment can confirm it"
            )
            continue
        unassigned = sorted(set(claimed) - given)
        if unassigned:
            dropped.append(
                f"{where}: the kubelet did not assign it {', '.join(unassigned)}; its claim on "
                f"{grant.manufacturer} {grant.accelerator.id} is not believed"
            )
            continue
        if grant.accelerator.mode in CARD_BOUND and grant.accelerator.id not in _cards(claimed):
            dropped.append(
                f"{where}: its device IDs name no {grant.accelerator.id}; its "
                f"{grant.accelerator.mode.api_name} claim on that card is not believed"
            )
            continue
        kept.append(grant)
    return Verdict(tuple(kept), tuple(dropped))
