"""The names of the InstanceType chain's objects, and the quota they are counted in.

Every object the chain writes is found again by its name alone — a ResourceFlavor by the
``(gKey, [aKey,] os, arch, count)`` it pools, a ClusterQueue by the InstanceType it backs, a
LocalQueue by the ClusterQueue it fronts — so two spellings of one name would make two objects.
This module is the one place each name is spelt (``shared/reference/instancetypes.md``, "Names
and the entrance queue"; the walkthrough's §1 and §5 show every form):

- ResourceFlavor, the finest grain and independent of every setting:
  ``gpustack--${gKey}[--${aKey}]-${os}-${arch}-${n}{c|d}`` (``c``: a CPU pool's cores per node,
  ``d``: accelerators per node);
- ClusterQueue = InstanceType: ``gpustack--${aKey}-${os}-${arch}`` per accelerator,
  ``gpustack--generic-${os}-${arch}`` for the collapsed CPU pool, and with CPU-manufacturer
  awareness ``gpustack--${gKey}--${aKey}-…`` / ``gpustack--${gKey}-…``;
- InstanceTypeFlavor (the os/arch-agnostic catalog): the same without ``-${os}-${arch}``;
- the entrance LocalQueue: ``gpustack-fnv64-`` and the lowercase hex of the 64-bit FNV-1a hash
  of the ClusterQueue's name. A Pod names its queue in the ``kueue.x-k8s.io/queue-name`` label,
  whose value may not exceed 63 characters while a ClusterQueue's name may, so the entrance is
  named by a fixed-length digest instead (always 31 characters).

Pure: no I/O, so the controllers, the webhooks and the tests spell every name identically.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gpustack_core.contract import CREDITS_PREFIX
from gpustack_core.features import GENERIC_CPU
from gpustack_core.units import UNITS_PER_ACCELERATOR

PREFIX: Final = "gpustack--"
"""Every pool object's name starts so; ``--`` separates the CPU key from the accelerator key."""
KEY_SEPARATOR: Final = "--"
ENTRANCE_PREFIX: Final = "gpustack-fnv64-"

FNV64_OFFSET: Final = 0xCBF29CE484222325
FNV64_PRIME: Final = 0x100000001B3
_MASK64: Final = (1 << 64) - 1


def fnv1a64(text: str) -> int:
    """The 64-bit FNV-1a hash of ``text``'s UTF-8 bytes (xor the byte, then multiply)."""
    value = FNV64_OFFSET
    for byte in text.encode():
        value = ((value ^ byte) * FNV64_PRIME) & _MASK64
    return value


def entrance_name(cluster_queue: str) -> str:
    """The entrance LocalQueue of a ClusterQueue: ``gpustack-fnv64-`` + 16 lowercase hex digits.

    ``gpustack--nvidia-a10g-linux-amd64`` → ``gpustack-fnv64-c4680bb149644f1c``. A custom
    InstanceType's ClusterQueue is named after the type, so its entrance is this hash of the
    type's own name.
    """
    return f"{ENTRANCE_PREFIX}{fnv1a64(cluster_queue):016x}"


@dataclass(frozen=True, slots=True)
class PoolIdentity:
    """What names a pool: the keys it aggregates and the platform of its nodes.

    ``general_group`` is a CPU key or ``generic`` (CPU-manufacturer-agnostic);
    ``accelerator_group`` is an accelerator key, empty for a CPU pool. An InstanceType's
    spec carries the same five fields, so a type authored by an administrator names its pool
    the same way a derived one does.
    """

    general_group: str
    accelerator_group: str
    os: str
    arch: str

    @property
    def acceleratable(self) -> bool:
        """Whether the pool holds accelerators."""
        return bool(self.accelerator_group)

    @property
    def cpu_aware(self) -> bool:
        """Whether the pool is split by CPU key (its general group is not ``generic``)."""
        return bool(self.general_group) and self.general_group != GENERIC_CPU

    @property
    def name(self) -> str:
        """The ClusterQueue's and the derived InstanceType's name."""
        return f"{catalog_name(self)}-{self.os}-{self.arch}"

    @property
    def catalog(self) -> str:
        """The InstanceTypeFlavor's name: the pool without its platform."""
        return catalog_name(self)


def catalog_name(pool: PoolIdentity) -> str:
    """``gpustack--generic``, ``gpustack--${aKey}``, ``gpustack--${gKey}[--${aKey}]``.

    The CPU key is spelt only for a CPU-aware pool; a collapsed accelerator pool is named by
    its accelerator alone, a collapsed CPU pool ``generic``.
    """
    keys = [pool.general_group] if pool.cpu_aware else []
    if pool.accelerator_group:
        keys.append(pool.accelerator_group)
    return PREFIX + (KEY_SEPARATOR.join(keys) or GENERIC_CPU)


def flavor_name(
    general_key: str, accelerator_key: str | None, os: str, arch: str, per_node: int
) -> str:
    """A ResourceFlavor's name: ``gpustack--${gKey}[--${aKey}]-${os}-${arch}-${n}{c|d}``.

    ``per_node`` is the accelerators per node of an accelerated flavor (``d``), the CPU cores
    per node of a CPU flavor (``c``). The CPU key is always spelt: a flavor is the finest grain,
    which every grouping of the aggregation layer can be built from without renaming it.
    """
    keys = general_key + (KEY_SEPARATOR + accelerator_key if accelerator_key else "")
    unit = "d" if accelerator_key else "c"
    return f"{PREFIX}{keys}-{os}-{arch}-{per_node}{unit}"


def credits_resource(manufacturer: str) -> str:
    """The Kueue resource an accelerated pool's quota is counted in: ``credits.gpustack.ai/<m>``."""
    return CREDITS_PREFIX + manufacturer


def credits(accelerators: int) -> int:
    """The nominal quota of ``accelerators`` whole cards: each is 1,600,000 credits.

    The same unit as the allocation ledger, so a share (160,000) or a slice's units are whole
    numbers of credits and Kueue's int64 accounting never rounds a fraction up to a card.
    """
    if accelerators < 0:
        raise ValueError(f"credits: {accelerators} accelerators is not a count")
    return accelerators * UNITS_PER_ACCELERATOR
