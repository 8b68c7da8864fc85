"""Every manufacturer's facts in one table: one row each, read by every place that needs one.

A manufacturer used to be eleven tables in five packages (resource bases, slice counts, PCI
vendor ids, runtime classes, chart hints, device nodes, …), held equal by tests. Each fact now
lives in its :class:`Maker` row here, and every other place derives from :data:`MANUFACTURERS`
at the moment it asks (never a copy taken at import), so a row added here — by a release or
by a test's fixture — is seen everywhere at once:

- the resource base names every request (``gpustack_core.modes``, ``gpustack_core.resources``);
- the slice count states ``logicalSliced.count`` (``gpustack_core.features``);
- the partition word names ``.partitioned.<kind>-<profile>`` (``gpustack_core.resources``);
- the runtime class the Instance controller asks for (``gpustack_worker.instances``);
- the PCI vendor ids the simulator's NFD labels use (``gpustack_simulator.scenario``);
- the chart hint a Device Manager's failed library load ends with (``gpustack_vendors.loading``);
- the device nodes a workload container is given (``gpustack_devicemanager.deviceplugin.
  injection``) and those the Device Manager's own Pod mounts, with whether it runs privileged
  (the chart, through :func:`device_access_json` → ``clusters/chart/manufacturers/
  device-access.json``, which a test holds equal to this table).

What cannot live in core stays with its package, keyed by the same token: how to open a
library and build a backend (``gpustack_vendors.registry``), the visibility variables and quota
variables of a container runtime (``gpustack_devicemanager.deviceplugin.injection``), and the
simulator's stand-ins. Adding a manufacturer is its vendor package plus one row here
(``docs/vendors.md``).

Device-node facts are the vendors' (``shared/reference/vendors.md``, the reference operator's
injection table, the vendors' own device plugins and exporters); where no public source states
a node or a privilege, the row's ``privileged_why`` says so rather than presenting a guess as
a fact.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

CARD_INDEX = "{index}"
"""Stands for the card's index in a per-card device node's path (``/dev/davinci{index}``)."""
DRI = "/dev/dri"
"""The DRM directory: a card's ``card<N>``/``renderD<M>`` nodes are found in it by PCI address
(``/dev/dri/by-path``, else sysfs), never by index."""


@dataclass(frozen=True, slots=True)
class DeviceNode:
    """One host device path a vendor's library or containers open."""

    path: str
    """Absolute, under ``/dev``; a per-card node holds :data:`CARD_INDEX`."""
    directory: bool = False
    """A directory of nodes (``/dev/dri``) rather than one character device."""

    @property
    def per_card(self) -> bool:
        """One node per card (``/dev/cambricon_dev{index}``): no fixed path to mount."""
        return CARD_INDEX in self.path

    def for_card(self, index: int) -> str:
        """The node of card ``index`` (a shared node's path as it is)."""
        return self.path.replace(CARD_INDEX, str(index))


def _char(path: str) -> DeviceNode:
    return DeviceNode(path)


_DRI_DIR = DeviceNode(DRI, directory=True)


@dataclass(frozen=True, slots=True)
class Maker:
    """One manufacturer's facts."""

    name: str
    """The token on the ``gpustack.ai/manufacturer`` label and in every table keyed by it."""
    resource_base: str
    """The extended-resource base its requests are spelled with (``nvidia.com/gpu``)."""
    pci_vendor_ids: tuple[str, ...]
    """PCI vendor ids (lower-case hex, no ``0x``): what NFD's ``pci-<id>.present`` labels say."""
    library: str | None
    """The management library the Device Manager reads, as help and docs name it; ``None``
    where the project has no backend for this manufacturer yet."""
    logical_slices: int | None = None
    """Software slices per card (``logicalSliced.count``); ``None``: no logical slicing."""
    partition_kind: str | None = None
    """Its word for a hardware partition (``mig``); ``None`` where it has none."""
    runtime_class: str | None = None
    """The RuntimeClass its workload Pods ask for where the cluster serves one by that name."""
    library_nodes: tuple[DeviceNode, ...] = ()
    """What its management library opens on the node (the Device Manager's needs)."""
    nodes_from_runtime: bool = False
    """The vendor's container runtime injects :attr:`library_nodes` into the Device Manager's
    Pod itself (NVIDIA's toolkit with ``NVIDIA_VISIBLE_DEVICES=all``): the chart mounts none."""
    container_nodes: tuple[DeviceNode, ...] = ()
    """What the device plugin mounts into a workload container granted cards; a per-card node
    is mounted for each granted card, :data:`DRI` means each card's DRM nodes by PCI address.
    Empty: the vendor's container runtime selects cards by a visibility variable instead."""
    privileged: bool = False
    """Whether its Device Manager runs privileged, as the vendor's own exporter does: the
    device cgroup admits a hostPath device node only to a privileged container, and per-card
    nodes have no fixed path to mount."""
    privileged_why: str = ""
    """Why, with the source — or that no source was found and the choice is the safe one."""
    chart_hint: str | None = None
    """What to set in the chart when its library does not open; ``None``: the shared
    ``libraryPath`` advice."""

    @property
    def mounted_nodes(self) -> tuple[DeviceNode, ...]:
        """The :attr:`library_nodes` the chart mounts into the Device Manager's Pod by path.

        The fixed ones, unless the vendor's runtime injects them; per-card nodes have no path
        to name before the cards are known (privileged covers them).
        """
        if self.nodes_from_runtime:
            return ()
        return tuple(node for node in self.library_nodes if not node.per_card)


MANUFACTURERS: Final[dict[str, Maker]] = {
    row.name: row
    for row in (
        Maker(
            name="nvidia",
            resource_base="nvidia.com/gpu",
            pci_vendor_ids=("10de",),
            library="NVML through pynvml",
            logical_slices=128,
            partition_kind="mig",
            runtime_class="nvidia",
            library_nodes=(
                _char("/dev/nvidiactl"),
                _char("/dev/nvidia-uvm"),
                _char(f"/dev/nvidia{CARD_INDEX}"),
            ),
            nodes_from_runtime=True,
            privileged=False,
            privileged_why=(
                "NVIDIA's container toolkit injects libnvidia-ml and every card's node "
                "(NVIDIA_VISIBLE_DEVICES=all), as for DCGM exporter, which runs unprivileged"
            ),
            chart_hint=(
                "in the Helm chart, libnvidia-ml comes from the NVIDIA container toolkit: set "
                "deviceManager.manufacturers.nvidia.runtimeClassName (e.g. nvidia) where its "
                "runtime is not the node's default"
            ),
        ),
        Maker(
            name="amd",
            resource_base="amd.com/gpu",
            pci_vendor_ids=("1002",),
            library="ROCm SMI, then AMD SMI",
            library_nodes=(_char("/dev/kfd"), _DRI_DIR),
            container_nodes=(_char("/dev/kfd"), _DRI_DIR),
            privileged=True,
            privileged_why=(
                "AMD SMI opens /dev/kfd and the render nodes under /dev/dri (AMD's Device "
                "Metrics Exporter docs name both); its Kubernetes deployments run privileged"
            ),
        ),
        Maker(
            name="hygon",
            resource_base="hygon.com/dcu",
            pci_vendor_ids=("1d94",),
            library="its ROCm SMI and libhydmi_mig",
            logical_slices=4,
            partition_kind="mig",
            library_nodes=(_char("/dev/kfd"), _char("/dev/mkfd"), _DRI_DIR),
            container_nodes=(_char("/dev/kfd"), _char("/dev/mkfd"), _DRI_DIR),
            privileged=True,
            privileged_why=(
                "Hygon's ROCm SMI fork opens the same kfd and DRM nodes as AMD's; no public "
                "Hygon exporter manifest was found, so AMD's privileged deployment is followed"
            ),
        ),
        Maker(
            name="ascend",
            resource_base="huawei.com/npu",
            pci_vendor_ids=("19e5",),
            library="DCMI",
            logical_slices=63,
            library_nodes=(
                _char("/dev/davinci_manager"),
                _char("/dev/devmm_svm"),
                _char("/dev/hisi_hdc"),
                _char(f"/dev/davinci{CARD_INDEX}"),
            ),
            privileged=True,
            privileged_why=(
                "DCMI opens davinci_manager, devmm_svm, hisi_hdc and every /dev/davinci<N>; "
                "Huawei's npu-exporter runs privileged"
            ),
        ),
        Maker(
            name="thead",
            resource_base="alibabacloud.com/ppu",
            pci_vendor_ids=("1ded",),
            library="HGML",
            partition_kind="mig",
            library_nodes=(_char("/dev/alixpu_ctl"), _char(f"/dev/alixpu_ppu{CARD_INDEX}")),
            container_nodes=(_char("/dev/alixpu_ctl"), _char(f"/dev/alixpu_ppu{CARD_INDEX}")),
            privileged=True,
            privileged_why=(
                "unverified: the alixpu node names are the reference operator's; no public "
                "T-Head exporter manifest was found, so the Device Manager runs privileged"
            ),
        ),
        Maker(
            name="cambricon",
            resource_base="cambricon.com/mlu",
            pci_vendor_ids=("cabc",),
            library="CNDev",
            logical_slices=16,
            library_nodes=(
                _char("/dev/cambricon_ctl"),
                _char(f"/dev/cambricon_dev{CARD_INDEX}"),
            ),
            container_nodes=(
                _char("/dev/cambricon_ctl"),
                _char(f"/dev/cambricon_dev{CARD_INDEX}"),
            ),
            privileged=True,
            privileged_why=(
                "CNDev opens cambricon_ctl and every /dev/cambricon_dev<N>; Cambricon's "
                "mlu-exporter and device plugin run privileged"
            ),
        ),
        Maker(
            name="iluvatar",
            resource_base="iluvatar.com/gpu",
            pci_vendor_ids=("1e3e",),
            library="IXML",
            runtime_class="iluvatar",
            library_nodes=(_char(f"/dev/iluvatar{CARD_INDEX}"),),
            privileged=True,
            privileged_why=(
                "IXML opens /dev/iluvatar<N> (the minor number names it); the nodes are per "
                "card, so only a privileged container sees them without Iluvatar's runtime"
            ),
        ),
        Maker(
            name="metax",
            resource_base="metax-tech.com/gpu",
            pci_vendor_ids=("9999",),
            library="MXSML",
            logical_slices=16,
            library_nodes=(_char("/dev/mxcd"), _DRI_DIR),
            container_nodes=(_char("/dev/mxcd"), _DRI_DIR),
            privileged=True,
            privileged_why=(
                "MXSML opens /dev/mxcd and the DRM nodes; no public MetaX exporter manifest "
                "was found, so the Device Manager runs privileged as AMD's does"
            ),
        ),
        Maker(
            name="mthreads",
            resource_base="mthreads.com/gpu",
            pci_vendor_ids=("1ed5",),
            library=None,
            runtime_class="mthreads",
            privileged_why="no backend yet: no Device Manager runs for it",
        ),
    )
}
"""Every manufacturer, by token. Mutable only so that a test can add a fixture row; nothing
in the tree writes it."""


def rows() -> Iterator[Maker]:
    """Every row, in table order."""
    return iter(tuple(MANUFACTURERS.values()))


def maker(name: str) -> Maker | None:
    """The row of ``name``; ``None`` for a manufacturer the table does not know."""
    return MANUFACTURERS.get(name)


def resource_base(name: str) -> str | None:
    """``name``'s default extended-resource base; ``None`` when unknown."""
    row = MANUFACTURERS.get(name)
    return None if row is None else row.resource_base


def logical_slices(name: str) -> int | None:
    """Software slices one card of ``name`` offers; ``None``: no logical slicing."""
    row = MANUFACTURERS.get(name)
    return None if row is None else row.logical_slices


def partition_kind(name: str) -> str | None:
    """``name``'s word for a hardware partition; ``None`` where it has none."""
    row = MANUFACTURERS.get(name)
    return None if row is None else row.partition_kind


def runtime_class(name: str) -> str | None:
    """The RuntimeClass ``name``'s workload Pods ask for, where one is known."""
    row = MANUFACTURERS.get(name)
    return None if row is None else row.runtime_class


def pci_vendor_id(name: str) -> str:
    """``name``'s first PCI vendor id; ``KeyError`` naming it when unknown."""
    row = MANUFACTURERS.get(name)
    if row is None or not row.pci_vendor_ids:
        raise KeyError(f"no PCI vendor id for manufacturer {name!r}")
    return row.pci_vendor_ids[0]


def with_backend() -> tuple[Maker, ...]:
    """The rows whose library the project reads (a vendor backend exists), in table order."""
    return tuple(row for row in rows() if row.library is not None)


def device_access() -> dict[str, dict[str, object]]:
    """Per manufacturer with a backend: its Device Manager's privilege and device mounts.

    ``privileged``, and the host device paths its Pod mounts (``hostPath`` type
    ``CharDevice`` or ``Directory``): what the chart renders for it.
    """
    return {
        row.name: {
            "privileged": row.privileged,
            "mounts": [
                {"path": node.path, "type": "Directory" if node.directory else "CharDevice"}
                for node in row.mounted_nodes
            ],
        }
        for row in with_backend()
    }


def device_access_json() -> str:
    """:func:`device_access` as ``clusters/chart/manufacturers/device-access.json`` holds it."""
    return json.dumps(device_access(), indent=2) + "\n"


__all__ = [
    "CARD_INDEX",
    "DRI",
    "MANUFACTURERS",
    "DeviceNode",
    "Maker",
    "device_access",
    "device_access_json",
    "logical_slices",
    "maker",
    "partition_kind",
    "pci_vendor_id",
    "resource_base",
    "rows",
    "runtime_class",
    "with_backend",
]
