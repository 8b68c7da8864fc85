"""How each manufacturer's container gets its cards: environment, device nodes, quota env.

One table, one row per manufacturer, so a future vendor registry absorbs it whole. The facts
are the reference operator's (``shared/reference/operator.md`` §2 and §6): NVIDIA, Ascend,
Iluvatar and MThreads select cards with a visibility variable their container runtime reads;
AMD, Hygon, Cambricon, MetaX and T-Head get the card's device nodes mounted. Sliced grants add
the quota variables of the vendor's enforcement library (HAMi-core for NVIDIA and Iluvatar);
a vendor whose library is not described states no quota and says so in ``quota_note``.
The CDI-annotation channel is not built yet: every row injects by environment or device node.

Device-node numbers for DRM cards come from ``/dev/dri/by-path`` (the PCI address is stable,
the ``cardN`` minor is not), falling back to the vendor's index when the link is missing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpustack_core.allocation import AllocatedAccelerator
from gpustack_core.modes import AllocationMode
from gpustack_core.units import slice_memory_mib

DEV = Path("/dev")
RENDER_MINOR_BASE = 128
"""``renderD<N>`` minors start at 128 (``card0`` ↔ ``renderD128``)."""


@dataclass(frozen=True, slots=True)
class Card:
    """What injection needs of a granted card."""

    id: str
    index: int
    pci_bus_id: str = ""
    partition_id: str = ""
    """A Partitioned grant's own partition (``MIG-<uuid>``): what the container selects."""


@dataclass(frozen=True, slots=True)
class DeviceNode:
    """A host device node mounted into the container at the same path."""

    path: str
    permissions: str = "rw"


@dataclass(frozen=True, slots=True)
class Injection:
    """One container's share of an ``AllocateResponse``."""

    envs: dict[str, str] = field(default_factory=dict)
    devices: tuple[DeviceNode, ...] = ()
    annotations: dict[str, str] = field(default_factory=dict)


Nodes = Callable[[Sequence[Card], Path], list[DeviceNode]]


def _drm(card: Card, dev: Path) -> tuple[str, str]:
    """``/dev/dri/card<N>`` and ``renderD<M>`` of ``card``, by PCI address when it is linked."""
    by_path = dev / "dri" / "by-path"
    bus = card.pci_bus_id.lower()
    if bus:
        nodes = []
        for kind in ("card", "render"):
            link = by_path / f"pci-{bus}-{kind}"
            try:
                nodes.append(str(dev / "dri" / os.path.basename(os.readlink(link))))
            except OSError:
                break
        if len(nodes) == 2:  # card and render
            return nodes[0], nodes[1]
    return (
        str(dev / "dri" / f"card{card.index}"),
        str(dev / "dri" / f"renderD{RENDER_MINOR_BASE + card.index}"),
    )


def _kfd_and_drm(*extra: str) -> Nodes:
    def nodes(cards: Sequence[Card], dev: Path) -> list[DeviceNode]:
        found = [DeviceNode(str(dev / "kfd"))] + [DeviceNode(str(dev / e)) for e in extra]
        for card in cards:
            found.extend(DeviceNode(path) for path in _drm(card, dev))
        return found

    return nodes


def _cambricon(cards: Sequence[Card], dev: Path) -> list[DeviceNode]:
    return [DeviceNode(str(dev / "cambricon_ctl"))] + [
        DeviceNode(str(dev / f"cambricon_dev{card.index}")) for card in cards
    ]


def _metax(cards: Sequence[Card], dev: Path) -> list[DeviceNode]:
    found = [DeviceNode(str(dev / "mxcd"))]
    for card in cards:
        found.extend(DeviceNode(path) for path in _drm(card, dev))
    return found


def _thead(cards: Sequence[Card], dev: Path) -> list[DeviceNode]:
    return [DeviceNode(str(dev / "alixpu_ctl"))] + [
        DeviceNode(str(dev / f"alixpu_ppu{card.index}")) for card in cards
    ]


@dataclass(frozen=True, slots=True)
class Vendor:
    """One manufacturer's injection facts."""

    visible_env: str | None = None
    """The variable the vendor's container runtime selects cards by."""
    visible_by_index: bool = False
    """Select by the vendor index instead of the card ID (Ascend, Cambricon)."""
    nodes: Nodes | None = None
    fixed_env: tuple[tuple[str, str], ...] = ()
    partition_env: str | None = None
    """Partitioned: the variable naming the partition (defaults to ``visible_env``)."""
    memory_limit_env: str | None = None
    """Sliced: ``<NAME>_<i>`` = the slice's MiB with an ``m`` suffix, per visible card ``i``."""
    cores_limit_env: str | None = None
    """Sliced: the slice's compute cap in percent."""
    slice_env: tuple[tuple[str, str], ...] = ()
    quota_note: str = ""


VENDORS: dict[str, Vendor] = {
    "nvidia": Vendor(
        visible_env="NVIDIA_VISIBLE_DEVICES",
        memory_limit_env="CUDA_DEVICE_MEMORY_LIMIT",
        cores_limit_env="CUDA_DEVICE_SM_LIMIT",
        slice_env=(("CUDA_DEVICE_ORDER", "PCI_BUS_ID"), ("LIBCUDA_LOG_LEVEL", "0")),
    ),
    "iluvatar": Vendor(
        visible_env="IX_VISIBLE_DEVICES",
        memory_limit_env="CUDA_DEVICE_MEMORY_LIMIT",
        cores_limit_env="CUDA_DEVICE_SM_LIMIT",
    ),
    "ascend": Vendor(
        visible_env="ASCEND_VISIBLE_DEVICES",
        visible_by_index=True,
        quota_note="vcann-rt quotas are written to npu_info.config, not the environment",
    ),
    "mthreads": Vendor(visible_env="MTHREADS_VISIBLE_DEVICES"),
    "amd": Vendor(
        nodes=_kfd_and_drm(),
        fixed_env=(("AMD_VISIBLE_DEVICES", "none"),),
        memory_limit_env="VROCM_DEVICE_MEMORY_LIMIT",
    ),
    "hygon": Vendor(
        nodes=_kfd_and_drm("mkfd"),
        partition_env="DMI_MIG_VISIBLE_DEVICE",
        quota_note="Hygon slices are configured by a per-Pod vdev.conf",
    ),
    "cambricon": Vendor(
        visible_env="CAMBRICON_VISIBLE_DEVICES", visible_by_index=True, nodes=_cambricon
    ),
    "metax": Vendor(nodes=_metax, quota_note="MetaX sGPUs are created through sysfs"),
    "thead": Vendor(
        nodes=_thead,
        memory_limit_env="HGGC_DEVICE_MEMORY_LIMIT",
        cores_limit_env="HGGC_DEVICE_SM_LIMIT",
    ),
}


def vendor(manufacturer: str) -> Vendor:
    """The row for ``manufacturer``; ``KeyError`` naming it when there is none."""
    try:
        return VENDORS[manufacturer]
    except KeyError:
        raise KeyError(f"no injection facts for manufacturer {manufacturer!r}") from None


def inject(
    manufacturer: str,
    mode: AllocationMode,
    cards: Sequence[Card],
    granted: Sequence[AllocatedAccelerator] = (),
    *,
    card_mib: int = 0,
    cores_percentage: int | None = None,
    dev: Path = DEV,
) -> Injection:
    """The container's injection for ``cards`` granted in ``mode``.

    ``granted`` carries the units of a Sliced grant (one per card, in ``cards`` order) and
    ``card_mib`` the card's memory, from which the memory quota is stated.
    """
    row = vendor(manufacturer)
    envs = dict(row.fixed_env)
    if row.visible_env is not None or (mode is AllocationMode.PARTITIONED and row.partition_env):
        if mode is AllocationMode.PARTITIONED:
            key = row.partition_env or row.visible_env
            value = ",".join(c.partition_id or c.id for c in cards)
        else:
            key = row.visible_env
            value = ",".join(str(c.index) if row.visible_by_index else c.id for c in cards)
        if key is not None:
            envs[key] = value or "none"
    if mode is AllocationMode.SLICED:
        envs.update(row.slice_env)
        if row.memory_limit_env is not None and card_mib > 0:
            for i, entry in enumerate(granted):
                mib = slice_memory_mib(entry.allocated, card_mib)
                if mib is not None:
                    envs[f"{row.memory_limit_env}_{i}"] = f"{mib}m"
        if row.cores_limit_env is not None and cores_percentage is not None:
            envs[row.cores_limit_env] = str(cores_percentage)
    devices = tuple(row.nodes(cards, dev)) if row.nodes is not None and cards else ()
    return Injection(envs=envs, devices=devices)
