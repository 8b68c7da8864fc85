"""How each manufacturer's container gets its cards: environment, device nodes, quota env.

The device nodes a container is given are its manufacturer's row in
:mod:`gpustack_core.manufacturers` (``container_nodes``); this table keeps what only the Device
Manager reads: the container runtime's variables. The facts are the reference operator's
(``shared/reference/operator.md`` §2 and §6): NVIDIA, Ascend, Iluvatar and MThreads select cards
with a visibility variable their container runtime reads; AMD, Hygon, Cambricon, MetaX and
T-Head get the card's device nodes mounted. Sliced grants add the quota variables of the
vendor's enforcement library (HAMi-core for NVIDIA and Iluvatar); a vendor whose library is not
described states no quota and says so in ``quota_note``. The CDI-annotation channel is not built
yet: every row injects by environment or device node.

A DRM card's ``card<N>``/``renderD<M>`` nodes are found by the card's PCI address, never by its
index (the minor follows probe order, which differs from the vendor library's enumeration
order): ``/dev/dri/by-path/pci-<bdf>-card|render`` first, else the card's own sysfs directory
(``/sys/bus/pci/devices/<bdf>/drm/``). Where neither names them, the container gets no DRM node
for that card and the log says why once; it never gets another card's node.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpustack_core.allocation import AllocatedAccelerator
from gpustack_core.manufacturers import DRI, maker
from gpustack_core.modes import AllocationMode
from gpustack_core.units import slice_memory_mib

log = logging.getLogger("gpustack.devicemanager.deviceplugin")

DEV = Path("/dev")
SYSFS = Path("/sys")


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


def _drm_by_path(bus: str, dev: Path) -> tuple[str, str] | None:
    """``card<N>`` and ``renderD<M>`` from udev's ``/dev/dri/by-path`` links, when both exist."""
    nodes = []
    for kind in ("card", "render"):
        try:
            target = os.readlink(dev / "dri" / "by-path" / f"pci-{bus}-{kind}")
        except OSError:
            return None
        nodes.append(str(dev / "dri" / os.path.basename(target)))
    return nodes[0], nodes[1]


def _drm_by_sysfs(bus: str, dev: Path, sysfs: Path) -> tuple[str, str] | None:
    """``card<N>`` and ``renderD<M>`` from the card's sysfs ``drm`` directory, when both are listed.

    The kernel's own record of which minors belong to this PCI function: true without udev.
    """
    try:
        names = os.listdir(sysfs / "bus" / "pci" / "devices" / bus / "drm")
    except OSError:
        return None
    card = sorted(n for n in names if n.startswith("card") and n[4:].isdigit())
    render = sorted(n for n in names if n.startswith("renderD") and n[7:].isdigit())
    if not card or not render:
        return None
    return str(dev / "dri" / card[0]), str(dev / "dri" / render[0])


_told: set[str] = set()
"""Cards whose missing DRM nodes were already logged (once per card, not per Allocate); bounded
by the node's cards."""


def _drm(card: Card, dev: Path, sysfs: Path) -> tuple[str, ...]:
    """``card``'s DRM nodes by its PCI address; none, said once, when nothing names them."""
    bus = card.pci_bus_id.lower()
    found = (_drm_by_path(bus, dev) or _drm_by_sysfs(bus, dev, sysfs)) if bus else None
    if found is not None:
        return found
    key = bus or f"index {card.index}"
    if key not in _told:
        _told.add(key)
        why = (
            f"neither {dev}/dri/by-path/pci-{bus}-card|render nor "
            f"{sysfs}/bus/pci/devices/{bus}/drm names its nodes"
            if bus
            else "the library reported no PCI address for it"
        )
        log.warning(
            "card %s (%s): no DRM node is injected: %s; a node is never chosen by index, which "
            "could be another card's",
            card.id,
            key,
            why,
        )
    return ()


def device_nodes(
    manufacturer: str, cards: Sequence[Card], dev: Path = DEV, sysfs: Path = SYSFS
) -> list[DeviceNode]:
    """The nodes ``cards`` of ``manufacturer`` need in a container, from its table row.

    Shared nodes once, per-card nodes per card (by its index, as the vendor's driver names
    them), and for :data:`~gpustack_core.manufacturers.DRI` each card's DRM nodes by PCI address.
    A manufacturer without container nodes (a visibility variable selects) gets none.
    """
    row = maker(manufacturer)
    if row is None or not cards:
        return []
    found: list[DeviceNode] = []
    for node in row.container_nodes:
        if node.path == DRI:
            for card in cards:
                found.extend(DeviceNode(path) for path in _drm(card, dev, sysfs))
        elif node.per_card:
            found.extend(DeviceNode(_under(dev, node.for_card(card.index))) for card in cards)
        else:
            found.append(DeviceNode(_under(dev, node.path)))
    return found


def _under(dev: Path, path: str) -> str:
    """``path`` (``/dev/kfd``) rooted at ``dev`` (a test's directory; ``/dev`` in production)."""
    return str(dev / Path(path).relative_to("/dev"))


@dataclass(frozen=True, slots=True)
class Vendor:
    """One manufacturer's injection facts."""

    visible_env: str | None = None
    """The variable the vendor's container runtime selects cards by."""
    visible_by_index: bool = False
    """Select by the vendor index instead of the card ID (Ascend, Cambricon)."""
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
        fixed_env=(("AMD_VISIBLE_DEVICES", "none"),),
        memory_limit_env="VROCM_DEVICE_MEMORY_LIMIT",
    ),
    "hygon": Vendor(
        partition_env="DMI_MIG_VISIBLE_DEVICE",
        quota_note="Hygon slices are configured by a per-Pod vdev.conf",
    ),
    "cambricon": Vendor(visible_env="CAMBRICON_VISIBLE_DEVICES", visible_by_index=True),
    "metax": Vendor(quota_note="MetaX sGPUs are created through sysfs"),
    "thead": Vendor(
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
    sysfs: Path = SYSFS,
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
    devices = tuple(device_nodes(manufacturer, cards, dev, sysfs))
    return Injection(envs=envs, devices=devices)
