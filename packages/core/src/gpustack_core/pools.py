"""The finest-grain pools, read from the Nodes' feature labels: Kueue ``ResourceFlavor`` objects.

A node enters a pool only through its labels: the worker's NodeFeature gives it
``gpustack.ai/managed`` and ``general.feature.gpustack.ai/<gKey>`` (+ ``.count``, its cores), the
Device Manager's ``acceleratable.feature.gpustack.ai/<aKey>`` (+ ``.count``, ``.memory``,
``.cores``, ``.product``, ``.family``). Managed nodes sharing ``(gKey, [aKey,] os, arch, count)``
form one flavor (``shared/spec/instancetype-walkthrough.md`` §1: four nodes, seven flavors — an
accelerated node yields a CPU flavor too, while ``instance-type-mixed-on-node`` is on). The
flavor pins its nodes with ``spec.nodeLabels``, ``gpustack.ai/managed=true`` among them, so a node
taken out of management leaves every pool at once (§2).

A flavor is independent of every setting: it always spells the CPU key, so the aggregation
layer (queues, types, catalog; :mod:`gpustack_core.derive`) can regroup by CPU or not without
rewriting one. Its identity (product, memory…) is its first contributing node's, by name: every
contributor to one flavor name shares the keys it is named by.

Pure: labels in, objects out. A label that does not parse (a count that is not a positive
integer) leaves that key out with one line saying why; the rest of the node still counts.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpustack_core.contract import ARCH_LABEL, KUEUE_API_VERSION, OS_LABEL, RESOURCE_TYPE_LABEL
from gpustack_core.features import (
    ACCELERATABLE_PREFIX,
    CPU_NAME_ANNOTATION,
    FEATURE_PREFIX,
    GENERAL_PREFIX,
    MANAGED_LABEL,
    NODE_ACCELERATABLE,
    TRUE,
)
from gpustack_core.poolnames import flavor_name

FLAVOR_TYPE: Final = "nodes"
"""``resource.gpustack.ai/type`` of a ResourceFlavor the operator owns."""
CPU_ONLY_LABEL: Final = FEATURE_PREFIX + "cpu-only"
"""With ``instance-type-mixed-on-node`` off, CPU flavors select nodes without accelerators."""
COUNT: Final = ".count"
CAPACITY: Final = ".capacity"
_ACCELERATOR_SUFFIXES: Final = (
    COUNT,
    CAPACITY,
    ".memory",
    ".cores",
    ".product",
    ".family",
    ".comcap",
    ".driver-version",
    ".runtime-version",
)
_GENERAL_SUFFIXES: Final = (COUNT, CAPACITY)


@dataclass(frozen=True, slots=True)
class Accelerator:
    """One accelerator model on a node, as its labels state it (absent figures are ``""``)."""

    key: str
    """``nvidia-a10g``."""
    manufacturer: str
    count: int
    memory: str = ""
    cores: str = ""
    product: str = ""
    family: str = ""


@dataclass(frozen=True, slots=True)
class NodeProfile:
    """What the pools read of one managed node."""

    name: str
    os: str
    arch: str
    general_key: str
    cpu_manufacturer: str
    cores: int | None
    """Whole CPU cores (``general.…/<gKey>.count``); ``None`` when not stated."""
    cpu_product: str = ""
    """The CPU's model name as NFD reports it (``AMD EPYC 7R13 Processor``), for the catalog."""
    accelerators: tuple[Accelerator, ...] = ()


@dataclass(frozen=True, slots=True)
class Profiled:
    """A node's profile (``None`` when it is in no pool) and why anything was left out."""

    profile: NodeProfile | None
    skipped: tuple[str, ...] = ()


def _keys(labels: Mapping[str, str], prefix: str, suffixes: tuple[str, ...]) -> list[str]:
    """The key names under ``prefix`` set to ``true``, without the figure labels beside them."""
    return sorted(
        name[len(prefix) :]
        for name, value in labels.items()
        if name.startswith(prefix) and value == TRUE and not name.endswith(suffixes)
    )


def _count(labels: Mapping[str, str], key: str, skipped: list[str], node: str) -> int | None:
    text = labels.get(key)
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()) or int(text) <= 0:
        skipped.append(f"node {node}: label {key}={text!r} is not a positive count; ignored")
        return None
    return int(text)


def _manufacturer(key: str, candidates: Iterable[str]) -> str:
    """The longest other key that prefixes ``key`` at a ``-`` (``nvidia`` of ``nvidia-a10g``)."""
    found = [c for c in candidates if key.startswith(c + "-")]
    return max(found, key=len) if found else key.split("-", 1)[0]


def node_profile(
    name: str, labels: Mapping[str, str], annotations: Mapping[str, str] | None = None
) -> Profiled:
    """Read one Node's labels (and its CPU-name annotation) into the profile pools are built from.

    A node not labelled ``gpustack.ai/managed=true``, or without ``kubernetes.io/os`` and
    ``kubernetes.io/arch``, is in no pool. Its CPU key is the ``general.`` key with a
    ``.count`` (the longest ``general.`` key when none has one); an accelerator key is an
    ``acceleratable.`` key with a ``.count``, its manufacturer the shorter key prefixing it.
    """
    skipped: list[str] = []
    if labels.get(MANAGED_LABEL) != TRUE:
        return Profiled(None, (f"node {name}: not managed ({MANAGED_LABEL} is not {TRUE!r})",))
    os, arch = labels.get(OS_LABEL, ""), labels.get(ARCH_LABEL, "")
    if not (os and arch):
        return Profiled(None, (f"node {name}: no {OS_LABEL} or {ARCH_LABEL} label",))

    general = _keys(labels, GENERAL_PREFIX, _GENERAL_SUFFIXES)
    counted = [k for k in general if GENERAL_PREFIX + k + COUNT in labels]
    if not general:
        return Profiled(None, (f"node {name}: no {GENERAL_PREFIX}<CPU key> label",))
    gkey = max(counted or general, key=lambda k: (len(k), k))
    cores = _count(labels, GENERAL_PREFIX + gkey + COUNT, skipped, name)

    candidates = _keys(labels, ACCELERATABLE_PREFIX, _ACCELERATOR_SUFFIXES)
    accelerators = []
    for key in candidates:
        prefix = ACCELERATABLE_PREFIX + key
        if prefix + COUNT not in labels:
            continue
        count = _count(labels, prefix + COUNT, skipped, name)
        if count is None:
            continue
        accelerators.append(
            Accelerator(
                key=key,
                manufacturer=_manufacturer(key, candidates),
                count=count,
                memory=labels.get(prefix + ".memory", ""),
                cores=labels.get(prefix + ".cores", ""),
                product=labels.get(prefix + ".product", ""),
                family=labels.get(prefix + ".family", ""),
            )
        )
    product = (annotations or {}).get(CPU_NAME_ANNOTATION, "")
    profile = NodeProfile(
        name=name,
        os=os,
        arch=arch,
        general_key=gkey,
        cpu_manufacturer=_manufacturer(gkey, general),
        cores=cores,
        cpu_product="" if product.startswith("@") else product,
        accelerators=tuple(accelerators),
    )
    return Profiled(profile, tuple(skipped))


def node_profile_of(node: Mapping[str, Any]) -> Profiled:
    """:func:`node_profile` of a Node object as the API server returns it."""
    meta = node.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    labels, annotations = meta.get("labels"), meta.get("annotations")
    return node_profile(
        str(meta.get("name", "")),
        {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {},
        {str(k): str(v) for k, v in annotations.items()} if isinstance(annotations, dict) else {},
    )


@dataclass(frozen=True, slots=True)
class Flavor:
    """One finest-grain pool: the managed nodes sharing its keys, platform and per-node count."""

    general_key: str
    accelerator: Accelerator | None
    os: str
    arch: str
    per_node: int
    """Accelerators per node (accelerated) or CPU cores per node (a CPU flavor)."""
    nodes: tuple[str, ...]
    cpu_manufacturer: str = ""
    cpu_product: str = ""
    cpu_only: bool = False
    """Selects only nodes without accelerators (``instance-type-mixed-on-node`` off)."""

    @property
    def name(self) -> str:
        """``gpustack--${gKey}[--${aKey}]-${os}-${arch}-${n}{c|d}``."""
        key = self.accelerator.key if self.accelerator else None
        return flavor_name(self.general_key, key, self.os, self.arch, self.per_node)

    @property
    def capacity(self) -> int:
        """Accelerators (or cores) the flavor pools: contributing nodes × per-node count."""
        return self.per_node * len(self.nodes)


def flavors(nodes: Iterable[NodeProfile], *, mixed_on_node: bool = True) -> tuple[Flavor, ...]:
    """Every flavor the managed ``nodes`` form, sorted by name.

    A node yields one accelerated flavor per accelerator model and a CPU flavor from its cores
    (a node whose cores are not stated has no CPU flavor: its name needs the count). With
    ``mixed_on_node`` off, nodes carrying accelerators yield no CPU flavor and CPU flavors
    select ``feature.gpustack.ai/cpu-only=true``.
    """
    groups: dict[tuple[str, str, str, str, int], list[NodeProfile]] = {}
    models: dict[tuple[str, str, str, str, int], Accelerator | None] = {}
    for node in sorted(nodes, key=lambda n: n.name):
        for model in node.accelerators:
            key = (node.general_key, model.key, node.os, node.arch, model.count)
            groups.setdefault(key, []).append(node)
            models.setdefault(key, model)
        if node.cores is not None and (mixed_on_node or not node.accelerators):
            key = (node.general_key, "", node.os, node.arch, node.cores)
            groups.setdefault(key, []).append(node)
            models.setdefault(key, None)
    found = []
    for key, members in groups.items():
        gkey, _, os, arch, per_node = key
        found.append(
            Flavor(
                general_key=gkey,
                accelerator=models[key],
                os=os,
                arch=arch,
                per_node=per_node,
                nodes=tuple(n.name for n in members),
                cpu_manufacturer=members[0].cpu_manufacturer,
                cpu_product=members[0].cpu_product,
                cpu_only=not mixed_on_node and models[key] is None,
            )
        )
    return tuple(sorted(found, key=lambda f: f.name))


def pinned_flavor_labels(
    node: Mapping[str, Any], accelerator_key: str | None, *, mixed_on_node: bool = True
) -> dict[str, str]:
    """The ``spec.nodeLabels`` of the flavor ``node`` forms for a pool, or nothing.

    ``accelerator_key``: the pool's accelerator (``nvidia-tesla-t4``); ``None`` for a CPU
    pool. An Instance pinned to a node (``spec.nodeName``) carries these in its Pod's
    ``nodeSelector`` beside the hostname: Kueue matches a Pod's selectors against its flavors'
    ``nodeLabels`` (on the keys flavors use, never the hostname), so a pin into a pool of
    several flavors (the walkthrough's T4s: node-t4-a's ``1d``, node-t4-b's ``4d``) is assigned
    the pinned node's flavor instead of the first with quota, where it could never run. Empty
    when the node forms no flavor of the pool (unmanaged, another accelerator): the pin is then
    the hostname alone and the scheduler's business, as the reference leaves it.
    """
    profile = node_profile_of(node).profile
    if profile is None:
        return {}
    for flavor in flavors([profile], mixed_on_node=mixed_on_node):
        key = flavor.accelerator.key if flavor.accelerator is not None else None
        if key == accelerator_key:
            labels: dict[str, str] = resource_flavor(flavor)["spec"]["nodeLabels"]
            return labels
    return {}


def steered(members: Sequence[Flavor], fitting: Collection[str]) -> tuple[Flavor, ...]:
    """The pool's flavors with a node in ``fitting``; none when there is nothing to steer by.

    ``members`` are a type's flavors (:func:`gpustack_core.derive.members`), ``fitting`` the
    nodes whose cards can hold the Pod now (:func:`gpustack_core.fit.fitting`). Kueue assigns
    the first flavor with quota, and a flavor whose every node is fragmented (or its cards
    partitioned, or held outside Kueue) gets the node-devices check's Retry, is requeued and
    assigned again, for ever: naming the flavors that can hold the Pod steers it. Empty when
    every flavor has such a node (nothing to steer) and when none has (nothing fits now: the
    check's Retry says why, and any flavor may free up first).
    """
    chosen = tuple(f for f in members if any(node in fitting for node in f.nodes))
    if not chosen or len(chosen) == len(members):
        return ()
    return chosen


def node_labels_of(flavor: Flavor) -> dict[str, str]:
    """The ``spec.nodeLabels`` of ``flavor``'s ResourceFlavor."""
    labels: dict[str, str] = resource_flavor(flavor)["spec"]["nodeLabels"]
    return labels


def resource_flavor(flavor: Flavor) -> dict[str, Any]:
    """The Kueue ``ResourceFlavor`` of ``flavor``, labels and ``spec.nodeLabels`` as §1 shows.

    Labels carry the pool identity: the acceleratable discriminator, the CPU key and, when
    accelerated, the accelerator key, the per-node ``.count`` and the pooled ``.capacity``.
    ``spec.nodeLabels`` pins nodes by platform, management, the keys and the per-node count.
    """
    general = GENERAL_PREFIX + flavor.general_key
    pinned = {OS_LABEL: flavor.os, ARCH_LABEL: flavor.arch}
    labels = {**pinned, NODE_ACCELERATABLE: "true" if flavor.accelerator else "false"}
    labels[general] = TRUE
    node_labels = {**pinned, MANAGED_LABEL: TRUE, general: TRUE}
    if flavor.accelerator is not None:
        key = ACCELERATABLE_PREFIX + flavor.accelerator.key
        labels |= {key: TRUE, key + COUNT: str(flavor.per_node)}
        labels[key + CAPACITY] = str(flavor.capacity)
        node_labels |= {key: TRUE, key + COUNT: str(flavor.per_node)}
    else:
        labels |= {general + COUNT: str(flavor.per_node), general + CAPACITY: str(flavor.capacity)}
        node_labels[general + COUNT] = str(flavor.per_node)
        if flavor.cpu_only:
            node_labels[CPU_ONLY_LABEL] = TRUE
    labels[RESOURCE_TYPE_LABEL] = FLAVOR_TYPE
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": flavor.name, "labels": labels},
        "spec": {"nodeLabels": node_labels},
    }
