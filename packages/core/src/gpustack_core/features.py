"""Node feature labels and the ``Devices`` spec, derived from what detection found.

Pure functions: the Device Manager hands in its detection and publishes the result as its
``NodeFeature`` (``acceleratable.*`` labels) and its group of ``Devices.spec``; the worker hands
in a Node's CPU model and publishes ``general.*`` labels. Node feature discovery turns both
into Node labels, which the InstanceType chain selects nodes by — so every key and value here
must be a valid Kubernetes label, whatever a vendor library calls its product.

Key names and the shape of each value are the reference operator's
(``shared/reference/operator-half.md``, "NodeFeature labels"; the walkthrough's node-a10g).
The rules this module applies (product slugs, label-value sanitizing, the memory quantity,
the NVIDIA family table) are written down in ``docs/contracts.md``, "Node features".

A figure detection did not state yields no label: a missing ``.cores`` means "not known",
never zero cores.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpustack_core.devices import (
    AcceleratorSpec,
    AcceleratorStatus,
    GroupSpec,
    LogicalSliced,
    PhysicalProfile,
    PhysicalSliced,
    Topology,
)
from gpustack_core.manufacturers import logical_slices

FEATURE_PREFIX = "feature.gpustack.ai/"
NODE_ACCELERATABLE = FEATURE_PREFIX + "acceleratable"
"""``feature.gpustack.ai/acceleratable``: the cheap "is this node accelerated?" label."""
ACCELERATABLE_PREFIX = "acceleratable." + FEATURE_PREFIX
GENERAL_PREFIX = "general." + FEATURE_PREFIX
MANAGED_LABEL = "gpustack.ai/managed"
"""Set by the worker's NodeFeature on every node it manages; pools select on it."""
CPU_NAME_ANNOTATION = FEATURE_PREFIX + "cpu-name"
"""Where the reference operator's NFD rule reports a node's CPU model name."""
NFD_CPU_VENDOR_LABEL = "feature.node.kubernetes.io/cpu-model.vendor_id"
"""NFD's CPU vendor label (``AMD``, ``Intel``): the CPU key's manufacturer part."""
GENERIC_CPU = "generic"
CPU_VENDOR_MAX = 16
"""A CPU vendor longer than this is cut, leaving the key room for the model (cpuid vendors are
``AMD``, ``Intel``, ``ARM``, ``Hygon``…)."""
"""The CPU manufacturer when NFD states none (the reference's fallback)."""
TRUE = "true"

LABEL_VALUE_MAX = 63
"""A label value, and the name part of a label key, is at most 63 characters."""
LONGEST_AKEY_SUFFIX = len(".product")
"""The longest suffix put after an accelerator key; reserved so every key stays ≤ 63."""

_VALID_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")
_VALID_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_SEPARATORS = "-_."
_CPU_TRADEMARKS = re.compile(r"\((?:R|r|TM|tm)\)")
_CPU_PREFIX_CRUFT = re.compile(r"^(?:Genuine |[0-9]+(?:st|nd|rd|th) Gen )+")
_CPU_CORE_COUNT = re.compile(r"(?i) [0-9]+-cores?$")


def is_label_value(value: str) -> bool:
    """Whether Kubernetes accepts ``value`` as a label value (empty is allowed)."""
    return bool(_VALID_VALUE.match(value))


def is_label_key(key: str) -> bool:
    """Whether Kubernetes accepts ``key`` as a label key: ``[prefix/]name``, name ≤ 63."""
    prefix, slash, name = key.rpartition("/")
    if slash and (
        not prefix
        or len(prefix) > 253
        or not all(_DNS_LABEL.match(part) for part in prefix.split("."))
    ):
        return False
    return bool(_VALID_NAME.match(name))


def label_value(text: str) -> str:
    """``text`` as a label value: case kept, every other character run becomes one ``-``.

    ``NVIDIA A10G`` → ``NVIDIA-A10G``. Runs of separators collapse to their first, the value
    is cut to 63 characters and never starts or ends with a separator, so whatever a vendor
    calls its product the label is accepted.
    """
    out: list[str] = []
    for char in text:
        if char.isascii() and char.isalnum():
            out.append(char)
            continue
        sep = char if char in _SEPARATORS else "-"
        if out and out[-1] not in _SEPARATORS:
            out.append(sep)
    value = "".join(out)[:LABEL_VALUE_MAX]
    return value.strip(_SEPARATORS)


def slug(name: str, *, prefix: str = "", max_length: int = LABEL_VALUE_MAX) -> str:
    """A product name as a lower-case key part: ``NVIDIA A10G`` with prefix ``nvidia`` → ``a10g``.

    Letters are lowered, digits kept, spaces become ``-``, ``-_.`` are kept but never two in a
    row nor leading or trailing, everything else is dropped. A leading word equal to ``prefix``
    (the manufacturer, case-insensitively) is dropped, so the key does not say it twice — a
    whole word only: ``NVIDIAX`` keeps its letters. The result is at most ``max_length``
    characters and may be empty (a name with nothing usable in it).
    """
    out: list[str] = []
    for char in name:
        if char.isascii() and char.isalnum():
            out.append(char.lower())
        elif char in " -_." and out and out[-1] not in _SEPARATORS:
            out.append("-" if char == " " else char)
    text = "".join(out)
    lowered = prefix.lower()
    if lowered and (
        text == lowered
        or (text[len(lowered) : len(lowered) + 1] in ("-", "_", ".") and text.startswith(lowered))
    ):
        text = text[len(lowered) :]
    return text.strip(_SEPARATORS)[:max_length].strip(_SEPARATORS)


def cpu_model(name: str) -> str:
    """A CPU model name without its marketing cruft (``@ 2.50GHz``, ``(R)``, ``Processor``…).

    ``Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz`` → ``Intel Xeon Platinum 8259CL``.
    """
    name = name.split(" @ ", 1)[0]
    name = _CPU_TRADEMARKS.sub("", name)
    name = _CPU_PREFIX_CRUFT.sub("", name).strip()
    for suffix in (" CPU", " Processor"):
        name = name.removesuffix(suffix)
    return _CPU_CORE_COUNT.sub("", name).strip()


def binary_quantity(mib: int) -> str:
    """MiB as the quantity a label carries: the largest binary unit it reaches, rounded.

    The value is expressed in the largest of ``Ki``… ``Ei`` not above it and rounded to the
    nearest whole number of that unit, halves up: 24,576 MiB → ``24Gi``, 23,028 MiB (22.49 GiB)
    → ``22Gi``, 512 MiB → ``512Mi``. Lossy by design: a label names the card's class, the exact
    figure is ``Devices.spec.groups[].memory``. Raises ``ValueError`` for a non-positive size,
    which has no label (absent, not zero).
    """
    if mib <= 0:
        raise ValueError(f"memory label: {mib} MiB is not a size")
    value = mib << 20
    for power, suffix in ((6, "Ei"), (5, "Pi"), (4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki")):
        unit = 1 << (10 * power)
        if value >= unit:
            return f"{(value + unit // 2) // unit}{suffix}"
    return str(value)  # unreachable for a positive MiB count, kept for completeness


_NVIDIA_FAMILIES: tuple[tuple[tuple[int, int], str], ...] = (
    ((12, 0), "Blackwell"),
    ((10, 0), "Blackwell"),
    ((9, 0), "Hopper"),
    ((8, 9), "Ada"),
    ((8, 0), "Ampere"),
    ((7, 5), "Turing"),
    ((7, 0), "Volta"),
    ((6, 0), "Pascal"),
    ((5, 0), "Maxwell"),
    ((3, 0), "Kepler"),
)
"""NVIDIA architecture by lowest CUDA compute capability (NVIDIA's CUDA GPU table): 8.6 is
Ampere, 7.5 Turing, 9.0 Hopper. Read top-down: the first row not above the capability wins."""


def nvidia_family(compute_capability: str) -> str | None:
    """The architecture a CUDA compute capability belongs to; ``None`` when not in the table."""
    major, dot, minor = compute_capability.partition(".")
    if not (dot and major.isdigit() and minor.isdigit()):
        return None
    cc = (int(major), int(minor))
    for lowest, family in _NVIDIA_FAMILIES:
        if cc >= lowest:
            return family
    return None


def family_of(manufacturer: str, compute_capability: str | None) -> str | None:
    """The product family, where it follows from what detection stated.

    NVIDIA's follows from the compute capability (the table above). No other manufacturer's
    library states a figure it follows from, so theirs is absent rather than guessed from a
    product name.
    """
    if manufacturer == "nvidia" and compute_capability:
        return nvidia_family(compute_capability)
    return None


# -- detection in, groups out -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Partition:
    """One hardware partition on a card as detection found it (a MIG instance)."""

    profile: str
    memory_mib: int


@dataclass(frozen=True, slots=True)
class Card:
    """One card as this module needs it: the vendor model's ``DeviceInfo``, minus I/O types.

    ``gpustack_core`` does not import the vendor package; the Device Manager copies each
    detected device into this shape.
    """

    id: str
    index: int
    name: str
    memory_mib: int
    cores: int | None
    driver_version: str
    runtime_version: str
    pci_bus_id: str = ""
    unhealthy: bool = False
    compute_capability: str | None = None
    partitions: tuple[Partition, ...] = ()


@dataclass(frozen=True, slots=True)
class Grouped:
    """The groups one manufacturer's detection makes, and the cards it could not place."""

    groups: tuple[GroupSpec, ...]
    skipped: tuple[str, ...] = ()
    """One line per card left out (a product name with nothing usable in it)."""


def group_id(manufacturer: str, name: str) -> str:
    """The group id and accelerator-key tail: ``NVIDIA A10G`` → ``a10g`` (``nvidia-a10g``).

    Budgeted so ``acceleratable.feature.gpustack.ai/<mfr>-<id>.product`` stays a valid key.
    """
    budget = LABEL_VALUE_MAX - len(manufacturer) - 1 - LONGEST_AKEY_SUFFIX
    return slug(name, prefix=manufacturer, max_length=budget)


def _physical(card: Card) -> PhysicalSliced | None:
    """The card's existing partitions by profile; ``None`` for a card with none."""
    if not card.partitions:
        return None
    by_profile: dict[str, list[Partition]] = {}
    for partition in card.partitions:
        by_profile.setdefault(partition.profile, []).append(partition)
    profiles = tuple(
        PhysicalProfile(name=name, memory_mib=min(p.memory_mib for p in found), count=len(found))
        for name, found in sorted(by_profile.items())
    )
    return PhysicalSliced(profiles=profiles, count=len(card.partitions))


def _accelerator(manufacturer: str, card: Card) -> AcceleratorSpec:
    slices = logical_slices(manufacturer)
    return AcceleratorSpec(
        id=card.id,
        index=card.index,
        topology=Topology(pci_bus_id=card.pci_bus_id) if card.pci_bus_id else None,
        status=AcceleratorStatus(
            unhealthy=card.unhealthy,
            logical_sliced=LogicalSliced(count=slices) if slices else None,
            physical_sliced=_physical(card),
        ),
    )


def groups_from_cards(manufacturer: str, cards: Sequence[Card]) -> Grouped:
    """One group per product of ``manufacturer``, cards in index order.

    A group's memory is its smallest card's (the figure every card of it can honour) and its
    cores the same way; a figure no card stated stays absent (0 on the wire is omitted). A card
    whose product name yields no usable id is skipped, with a reason, rather than filed under
    an invented name.
    """
    by_id: dict[str, list[Card]] = {}
    skipped: list[str] = []
    for card in sorted(cards, key=lambda c: c.index):
        gid = group_id(manufacturer, card.name)
        if not gid:
            skipped.append(
                f"{manufacturer} card {card.id}: product name {card.name!r} yields no "
                "accelerator key; left out of the node's features"
            )
            continue
        by_id.setdefault(gid, []).append(card)
    groups = []
    for gid, members in by_id.items():
        first = members[0]
        memory = [c.memory_mib for c in members if c.memory_mib > 0]
        cores = [c.cores for c in members if c.cores]
        capability = first.compute_capability or ""
        groups.append(
            GroupSpec(
                id=gid,
                manufacturer=manufacturer,
                name=first.name,
                memory=min(memory) if len(memory) == len(members) else 0,
                cores=min(cores) if len(cores) == len(members) else 0,
                driver_version=first.driver_version,
                runtime_version=first.runtime_version,
                compute_capability=capability,
                family=family_of(manufacturer, capability) or "",
                accelerators=tuple(_accelerator(manufacturer, c) for c in members),
            )
        )
    return Grouped(tuple(groups), tuple(skipped))


def accelerator_key(group: GroupSpec) -> str:
    """``<mfr>-<group id>``: ``nvidia-a10g``."""
    return f"{group.manufacturer}-{group.id}"


def acceleratable_labels(groups: Sequence[GroupSpec]) -> dict[str, str]:
    """The ``acceleratable.*`` labels of a Device Manager's NodeFeature, letter for letter.

    Per manufacturer: ``…/<mfr>`` and its ``.driver-version`` / ``.runtime-version`` (when
    stated); per group: ``…/<aKey>`` and ``.count``, ``.memory``, ``.cores``, ``.product``,
    ``.family``, ``.comcap`` — each only when its figure is known. Groups without cards add
    nothing; no groups at all yield no labels (a node without accelerators is not labelled
    ``acceleratable``).
    """
    labels: dict[str, str] = {}
    for group in groups:
        if not group.accelerators:
            continue
        labels[NODE_ACCELERATABLE] = TRUE
        mfr = ACCELERATABLE_PREFIX + group.manufacturer
        labels[mfr] = TRUE
        if value := label_value(group.driver_version):
            labels[mfr + ".driver-version"] = value
        if value := label_value(group.runtime_version):
            labels[mfr + ".runtime-version"] = value
        key = ACCELERATABLE_PREFIX + accelerator_key(group)
        labels[key] = TRUE
        labels[key + ".count"] = str(len(group.accelerators))
        if group.memory > 0:
            labels[key + ".memory"] = binary_quantity(group.memory)
        if group.cores > 0:
            labels[key + ".cores"] = str(group.cores)
        if value := label_value(group.name):
            labels[key + ".product"] = value
        if value := label_value(group.family):
            labels[key + ".family"] = value
        if value := label_value(group.compute_capability):
            labels[key + ".comcap"] = value
    return labels


# -- the worker's CPU keys --------------------------------------------------------------------


def cpu_manufacturer(vendor_id: str | None) -> str:
    """NFD's ``cpu-model.vendor_id`` lowered (``AMD`` → ``amd``); ``generic`` when unknown."""
    vendor = slug(vendor_id or "", max_length=CPU_VENDOR_MAX)
    return GENERIC_CPU if vendor in {"", "vendorunknown"} else vendor


def general_key(cpu_name: str | None, vendor_id: str | None) -> str:
    """The CPU key ``gKey``: ``AMD EPYC 7R32`` from an AMD node → ``amd-epyc-7r32``.

    The manufacturer leads; the model follows without its cruft and without repeating the
    manufacturer. With no usable model name the key is the manufacturer alone.
    """
    manufacturer = cpu_manufacturer(vendor_id)
    budget = LABEL_VALUE_MAX - len(manufacturer) - 1 - len(".count")
    model = slug(cpu_model(cpu_name or ""), prefix=manufacturer, max_length=budget)
    return f"{manufacturer}-{model}" if model else manufacturer


def general_labels(
    cpu_name: str | None, vendor_id: str | None, cores: int | None
) -> dict[str, str]:
    """The worker's NodeFeature labels for one node.

    ``gpustack.ai/managed``, ``general.feature.gpustack.ai/<mfr>``, ``…/<gKey>`` and
    ``…/<gKey>.count`` (the node's CPU capacity in whole cores, when known and positive).
    """
    gkey = general_key(cpu_name, vendor_id)
    manufacturer = gkey.split("-", 1)[0]
    labels = {
        MANAGED_LABEL: TRUE,
        GENERAL_PREFIX + manufacturer: TRUE,
        GENERAL_PREFIX + gkey: TRUE,
    }
    if cores is not None and cores > 0:
        labels[GENERAL_PREFIX + gkey + ".count"] = str(cores)
    return labels


def unknown_reason(labels: Mapping[str, str]) -> str | None:
    """The first label Kubernetes would refuse, as one line; ``None`` when all are valid.

    A guard for the publishers: what this module derives is always valid (tested), so a
    reason here means a bug, reported instead of a 422 from the API server.
    """
    for key, value in labels.items():
        if not is_label_key(key):
            return f"label key {key!r} is not a valid Kubernetes label key"
        if not is_label_value(value):
            return f"label {key}={value!r}: not a valid Kubernetes label value"
    return None
