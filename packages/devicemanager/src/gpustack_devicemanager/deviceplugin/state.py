"""What every plugin server of one Device Manager reads: the cards and what the Pods hold.

The gRPC servers answer on their own threads while the daemon's trio tasks refresh detection
and the Pod view, so this one object is shared under a ``threading.Condition``: writers swap
immutable values in and bump ``generation``; each ListAndWatch stream sleeps on the condition
and re-sends its device list when its health map changed. Every plugin (one per mode) reads
the same holdings, which is how a card taken in one mode turns Unhealthy in the others.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from gpustack_core.allocator import Holding, Node, Partition
from gpustack_core.devices import GroupSpec


@dataclass(frozen=True, slots=True)
class Inventory:
    """One manufacturer's cards (every product group) and their existing partitions."""

    groups: tuple[GroupSpec, ...] = ()
    partitions: tuple[Partition, ...] = ()

    def group(self, group_id: str) -> GroupSpec | None:
        """The group with this ID, if detected."""
        for group in self.groups:
            if group.id == group_id:
                return group
        return None


class PluginState:
    """The shared, lock-guarded view; values are immutable, swapped whole."""

    def __init__(self, inventory: Inventory | None = None) -> None:
        self._condition = threading.Condition()
        self._inventory = inventory or Inventory()
        self._held: tuple[Holding, ...] = ()
        self._slice_units: int | None = None
        self._generation = 0
        self._closed = False

    @property
    def generation(self) -> int:
        """Bumped by every change."""
        with self._condition:
            return self._generation

    def read(self) -> tuple[Inventory, tuple[Holding, ...], int]:
        """Inventory, live holdings and generation, consistently."""
        with self._condition:
            return self._inventory, self._held, self._generation

    def nodes(self) -> list[Node]:
        """One allocator view per group."""
        inventory, held, _ = self.read()
        return [node_of(inventory, held, group) for group in inventory.groups]

    @property
    def slice_units(self) -> int | None:
        """Units of the next Sliced container the kubelet will admit here, when one waits."""
        with self._condition:
            return self._slice_units

    def set_slice_units(self, units: int | None) -> None:
        """Record the waiting slice's size (no device list changes: no watcher wakes)."""
        with self._condition:
            self._slice_units = units

    def update(
        self, *, inventory: Inventory | None = None, held: Sequence[Holding] | None = None
    ) -> None:
        """Swap in new values; watchers wake only when something actually changed."""
        with self._condition:
            changed = False
            if inventory is not None and inventory != self._inventory:
                self._inventory, changed = inventory, True
            if held is not None and tuple(held) != self._held:
                self._held, changed = tuple(held), True
            if changed:
                self._generation += 1
                self._condition.notify_all()

    def wait_changed(self, seen: int, timeout: float) -> int:
        """Block until the generation moves past ``seen`` (or ``timeout``, or close)."""
        with self._condition:
            self._condition.wait_for(
                lambda: self._generation != seen or self._closed, timeout=timeout
            )
            return self._generation

    def close(self) -> None:
        """Wake every watcher for good: the daemon is stopping."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    @property
    def closed(self) -> bool:
        """Set by :meth:`close`."""
        with self._condition:
            return self._closed


def node_of(inventory: Inventory, held: Sequence[Holding], group: GroupSpec) -> Node:
    """The allocator's view of one group: its cards' holdings and partitions only."""
    ids = {card.id for card in group.accelerators}
    return Node(
        group,
        tuple(h for h in held if h.accelerator.id in ids),
        tuple(p for p in inventory.partitions if p.parent_id in ids),
    )
