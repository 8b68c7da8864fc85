"""Device-plugin token IDs and the token pool each allocation mode advertises.

The kubelet counts what it is told: every resource is a list of opaque device IDs, one per
schedulable unit. The IDs are ``<group>:<accelerator>:<NNNN>`` (token number zero-padded to four
digits), so an ID found in a Pod's annotation or in PodResources names the card it came from
without a lookup table. The pools per mode are the reference operator's contract
(``shared/reference/operator-half.md``, "Token pools").

- Exclusive: one token per card (``:0000``).
- Shared: ten per card, one per share of 160,000 units.
- Sliced: the card's ``status.logicalSliced.count``.
- Partitioned: the card's partition count (``status.physicalSliced.count``); *fungible* — the
  token's card is only where it is counted, the allocator picks the partition.
- Visibility: 512 per card, fungible; a sidecar sees its sibling's cards whatever token it got.

An AMD accelerator's ID is its PCI bus ID (``0000:03:00.0``), which holds colons itself, so an ID
is split at its first and last colon only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from gpustack_core.devices import AcceleratorSpec, GroupSpec
from gpustack_core.modes import AllocationMode
from gpustack_core.resources import SHARES_PER_ACCELERATOR, VISIBILITY_TOKENS

TOKEN_DIGITS = 4
MAX_TOKENS_PER_CARD = 10**TOKEN_DIGITS
"""Four digits name at most 10,000 tokens of one card; a larger pool is refused, not wrapped."""

FUNGIBLE = frozenset({AllocationMode.PARTITIONED, AllocationMode.VISIBILITY})
"""Modes whose token does not bind the grant to the token's card."""


class TokenID(NamedTuple):
    """One parsed device-plugin ID."""

    group: str
    accelerator: str
    number: int

    def __str__(self) -> str:
        return token_id(self.group, self.accelerator, self.number)


def token_id(group: str, accelerator: str, number: int) -> str:
    """Spell an ID: ``token_id("h100", "GPU-1", 3) == "h100:GPU-1:0003"``."""
    if not 0 <= number < MAX_TOKENS_PER_CARD:
        raise ValueError(f"token number {number} is outside 0..{MAX_TOKENS_PER_CARD - 1}")
    return f"{group}:{accelerator}:{number:0{TOKEN_DIGITS}d}"


MAX_SHOWN_ID_CHARS = 80
"""An ID quoted in a message is cut to this many characters (the rest is counted)."""
MAX_SHOWN_IDS = 4
"""A message lists this many IDs and counts the rest."""


def shown(text: str) -> str:
    """``text`` quoted for a message, cut to :data:`MAX_SHOWN_ID_CHARS`.

    IDs come from the kubelet's request, which anything that reaches the plugin's socket can
    fill: a message quoting them whole would be as large as the request (the kubelet logs it
    and writes it into the Pod's status), so each is cut and counted instead.
    """
    if len(text) <= MAX_SHOWN_ID_CHARS:
        return repr(text)
    return f"{text[:MAX_SHOWN_ID_CHARS]!r}… ({len(text)} characters)"


def listed(ids: Sequence[str]) -> str:
    """At most :data:`MAX_SHOWN_IDS` IDs, each :func:`shown`, and how many more there are."""
    head = ", ".join(shown(text) for text in ids[:MAX_SHOWN_IDS])
    more = len(ids) - MAX_SHOWN_IDS
    return f"{head} and {more} more" if more > 0 else head


def parse_token_id(text: str) -> TokenID:
    """Parse an ID; ``ValueError`` names the ID and what is wrong with it."""
    group, sep, rest = text.partition(":")
    accelerator, sep2, number = rest.rpartition(":")
    if not (sep and sep2 and group and accelerator):
        raise ValueError(f"device ID {shown(text)} is not <group>:<accelerator>:<NNNN>")
    if len(number) != TOKEN_DIGITS or not number.isdigit():
        raise ValueError(
            f"device ID {shown(text)}: token {shown(number)} is not {TOKEN_DIGITS} digits"
        )
    return TokenID(group, accelerator, int(number))


def tokens_per_card(card: AcceleratorSpec, mode: AllocationMode) -> int:
    """How many tokens ``card`` contributes to ``mode``'s pool (0: the mode is not offered)."""
    status = card.status
    count = {
        AllocationMode.EXCLUSIVE: 1,
        AllocationMode.SHARED: SHARES_PER_ACCELERATOR,
        AllocationMode.SLICED: status.logical_sliced.count if status.logical_sliced else 0,
        AllocationMode.PARTITIONED: (status.physical_sliced.count if status.physical_sliced else 0),
        AllocationMode.VISIBILITY: VISIBILITY_TOKENS,
    }[mode]
    if count > MAX_TOKENS_PER_CARD:
        raise ValueError(
            f"card {card.id}: {count} {mode.api_name} tokens exceed {MAX_TOKENS_PER_CARD}"
        )
    return count


def pool(group: GroupSpec, mode: AllocationMode) -> list[TokenID]:
    """Every token of ``mode`` the group's cards offer, cards in index order."""
    return [
        TokenID(group.id, card.id, number)
        for card in sorted(group.accelerators, key=lambda c: (c.index, c.id))
        for number in range(tokens_per_card(card, mode))
    ]
