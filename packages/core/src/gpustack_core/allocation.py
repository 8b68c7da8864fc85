"""The Pod allocation annotation ``device.gpustack.ai/accelerator.allocated``.

Its value is a JSON string mapping **container name** to what that container was granted. Modes
are integers on the wire (1 Exclusive … 5 Visibility); readers aggregate every container,
name-sorted, into one pod-wide list of grants. The device plugin writes it with
:func:`encode_allocation` after :func:`merge_container`, over the same structs the reader parses.

**One reader.** :func:`read_allocation` is the only place the annotation's text is decoded
(``tests/lint/annotation.py`` holds every other module to it): the Device Manager's Pod view,
the device plugin's read-before-write, the worker's Instance status and subresource, and the
simulator's kubelet seed all call it, and everything downstream (the ledger, the holdings, the
grant confirmation, the exporter) takes the typed :class:`Allocated` it returns, never text.

**One error policy.** An absent annotation holds nothing. A malformed one (not JSON, a wrong
type, not a string) raises :class:`~gpustack_core.decoding.ContractError` whose one line names
the Pod, the annotation and the field; the reader never returns a guess. Each caller then keeps
its loop and that Pod's other facts, logs the reason, and counts the Pod as claiming nothing
(the device plugin, about to write the annotation, replaces it). That gives the annotation's
writer no power it lacks already — whoever may patch the Pod can write a valid ``{}`` with the
same effect — and the annotation is a claim, never proof: the monitor, the exporter and the
plugin's holdings believe a grant only as far as the kubelet's record confirms it
(:mod:`gpustack_core.confirm`), the plugin counts its own in-process grants besides, and the
ledger charges every claim as written (a false claim over-charges; it never frees a card).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

import msgspec

from gpustack_core import contract
from gpustack_core.decoding import ContractError, decode_json
from gpustack_core.modes import AllocationMode
from gpustack_core.wire import Wire

ANNOTATION = contract.ALLOCATION_ANNOTATION


class Placement(Wire, frozen=True, kw_only=True):
    """A run of slots on the card (memory slices for MIG placements)."""

    start: int
    length: int


class AllocatedAccelerator(Wire, frozen=True, kw_only=True):
    """One accelerator (or share of one) granted to a container."""

    id: str
    mode: AllocationMode
    index: int = 0
    allocated: int = 0
    """Allocation units; one whole card is 1,600,000."""
    remaining: int = 0
    allocated_physical_profile: str = ""
    allocated_physical_placements: tuple[Placement, ...] = ()
    allocated_physical_id: str = ""
    """The partition's own identifier (MIG UUID), the only key a partition is addressed by."""
    allocated_logical_placements: tuple[Placement, ...] = ()


class AllocatedGroup(Wire, frozen=True, kw_only=True):
    """The accelerators of one device group (one manufacturer) granted to a container."""

    manufacturer: str
    id: str = ""
    accelerators: tuple[AllocatedAccelerator, ...] = ()


class AllocatedDevices(Wire, frozen=True, kw_only=True):
    """The annotation nests groups one level down, mirroring the ``Devices`` object's spec."""

    groups: tuple[AllocatedGroup, ...] = ()


class ContainerAllocation(Wire, frozen=True, kw_only=True):
    """What one container holds, plus the kubelet device-plugin IDs it was allocated."""

    devices: AllocatedDevices = AllocatedDevices()
    device_ids: tuple[str, ...] = ()


class Grant(NamedTuple):
    """One (container, accelerator) pair, flattened out of the annotation."""

    container: str
    manufacturer: str
    accelerator: AllocatedAccelerator


def parse_allocation(text: str | bytes) -> dict[str, ContainerAllocation]:
    """Decode the annotation's value; the error names the annotation, container and field.

    The codec's decoder, the inverse of :func:`encode_allocation`: modules read a Pod's
    annotation through :func:`read_allocation`, which wraps this (tests may call it directly).
    Containers are decoded one by one so the message can name the container: msgspec's own
    path spells a map key as ``$[...]``, which would leave the reader guessing which one.
    """
    what = f"annotation {ANNOTATION}"
    containers = decode_json(text, dict[str, msgspec.Raw], what=what)
    return {
        name: decode_json(raw, ContainerAllocation, what=f"{what}: container {name!r}")
        for name, raw in containers.items()
    }


def grants(allocation: Mapping[str, ContainerAllocation]) -> list[Grant]:
    """Flatten every container's grants, containers in name order (the readers' convention)."""
    return [
        Grant(container, group.manufacturer, accelerator)
        for container in sorted(allocation)
        for group in allocation[container].devices.groups
        for accelerator in group.accelerators
    ]


class Allocated(NamedTuple):
    """A Pod's allocation annotation, read: as written per container, and flattened.

    ``containers`` is what the device plugin merges its next grant into; ``grants`` is what
    every reader charges, resolves or shows; ``device_ids`` are each container's kubelet
    device-plugin IDs, what a grant is confirmed against.
    """

    containers: Mapping[str, ContainerAllocation]
    grants: tuple[Grant, ...]
    device_ids: Mapping[str, tuple[str, ...]]

    @classmethod
    def of(cls, containers: Mapping[str, ContainerAllocation]) -> Allocated:
        """The reading of ``containers`` (decoded, or built by a writer)."""
        frozen = MappingProxyType(dict(containers))
        ids = MappingProxyType({name: entry.device_ids for name, entry in frozen.items()})
        return cls(frozen, tuple(grants(frozen)), ids)


NOTHING = Allocated.of({})
"""What a Pod without the annotation holds."""


def read_allocation(annotations: Mapping[str, object] | None, *, pod: str) -> Allocated:
    """The one reader of the annotation in ``annotations`` (a Pod's), for the Pod named ``pod``.

    ``pod`` is ``namespace/name``: the :class:`ContractError` raised for a malformed annotation
    names it, so the caller's log line stands on its own (the module docstring gives the
    policy). A value that is not a string — no API server stores one, but a raw object may
    carry anything — is malformed too, never taken for "no annotation".
    """
    if not annotations or ANNOTATION not in annotations:
        return NOTHING
    text = annotations[ANNOTATION]
    if not isinstance(text, str):
        raise ContractError(
            f"pod {pod}: annotation {ANNOTATION}: expected a string, got {type(text).__name__}"
        )
    try:
        return Allocated.of(parse_allocation(text))
    except ContractError as exc:
        raise ContractError(f"pod {pod}: {exc}") from exc


def encode_allocation(allocation: Mapping[str, ContainerAllocation]) -> str:
    """The annotation's value for ``allocation``: the same structs the reader decodes.

    ``remaining`` is dropped from every entry (it belongs to the ``Devices`` ledger, never to
    the annotation), and keys are sorted so one allocation always spells one string — a
    re-sent patch is then byte-identical and a no-op on the server.
    """
    written = {
        name: msgspec.structs.replace(
            entry,
            devices=AllocatedDevices(
                groups=tuple(
                    msgspec.structs.replace(
                        group,
                        accelerators=tuple(
                            msgspec.structs.replace(a, remaining=0) for a in group.accelerators
                        ),
                    )
                    for group in entry.devices.groups
                )
            ),
        )
        for name, entry in allocation.items()
    }
    return msgspec.json.encode(written, order="sorted").decode()


def merge_container(
    current: Mapping[str, ContainerAllocation],
    container: str,
    group: AllocatedGroup,
    mode: AllocationMode,
    device_ids: Sequence[str],
) -> dict[str, ContainerAllocation]:
    """``current`` with ``container``'s grant of ``mode`` in ``group`` replaced by ``group``'s.

    The kubelet allocates one resource of one container per call, and a strategic-merge patch
    replaces the whole annotation value, so each write must carry every sibling container's
    entry as well as this container's grants of other resources: another mode of the same
    manufacturer (a sidecar's Visibility next to the Sliced grant) or another manufacturer's
    group (a node with two Device Managers). Only this container's accelerators of ``mode`` in
    ``group`` are replaced; its device IDs gain the new ones (IDs of different resources may
    be spelled alike, so none is removed).
    """
    merged = dict(current)
    entry = merged.get(container, ContainerAllocation())
    groups: list[AllocatedGroup] = []
    placed = False
    for existing in entry.devices.groups:
        if (existing.manufacturer, existing.id) != (group.manufacturer, group.id):
            groups.append(existing)
            continue
        kept = tuple(a for a in existing.accelerators if a.mode is not mode)
        groups.append(
            msgspec.structs.replace(existing, accelerators=kept + tuple(group.accelerators))
        )
        placed = True
    if not placed:
        groups.append(group)
    ids = list(dict.fromkeys([*entry.device_ids, *device_ids]))
    merged[container] = ContainerAllocation(
        devices=AllocatedDevices(groups=tuple(g for g in groups if g.accelerators)),
        device_ids=tuple(ids),
    )
    return merged
