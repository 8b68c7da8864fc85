"""What an Instance must be to be stored: the rules the Instance admission webhook enforces.

Each rule is a pure function of the Instance (and, where a rule needs the cluster, of the one
fact the webhook looked up for it), returning field errors worded as kube-apiserver words them
(:mod:`gpustack_core.fielderrors`). The webhook (``gpustack_worker.instance_admission``) only
decodes the review, looks up those facts and answers; nothing is decided there.

Why at admission: an Instance the controller cannot render used to be stored and then fail
quietly — a duplicate port or an impossible accelerator count left it with an empty status
forever. Refusing it before it is stored, with the field and the reason, is the only place a
``kubectl apply`` user sees the answer (``shared/spec/instancetype-walkthrough.md`` §6).

The rules, by group:

- **Shape** (:func:`spec_errors`): names that become object names (the Service and Secret the
  controller renders from the Instance's name, every object a ``LocalObject`` names), absolute
  canonical mount paths, one source per additional volume, no duplicate mount, port or
  variable, quantities that are numbers no node could be refused for being (negative, absurd),
  and the accelerator fields combined as one mode.
- **The two node-escape gates** (:func:`gate_errors`): ``spec.privileged`` and a ``hostPath``
  volume need their Setting, but only to be *taken*: an Instance that already holds an escape
  keeps it, a hostPath matched by value so reordering the list grants nothing new.
- **Immutability while running** (:func:`immutable_errors`): the spec of an Instance that is
  not stopped may change only in ``stop``.
- **Cluster facts** (:func:`node_errors`, :func:`capacity_errors`): ``spec.nodeName`` names a
  Node (at creation), and no request asks more cards than the largest node holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

import msgspec

from gpustack_core import contract
from gpustack_core.fielderrors import (
    FieldError,
    duplicate,
    forbidden,
    invalid,
    not_found,
    required,
)
from gpustack_core.instance import (
    DEFAULT_VOLUME_MOUNT,
    AdditionalVolume,
    InstanceSpec,
    LocalObject,
    Resources,
)
from gpustack_core.instancetype import UnitResources
from gpustack_core.names import (
    DNS1123_LABEL_MAX,
    dns1035_label_problem,
    dns1123_subdomain_problem,
)
from gpustack_core.quantity import QuantityError, parse_quantity
from gpustack_core.settings import SECRET as SETTINGS_SECRET
from gpustack_core.units import ceil_fraction

MAX_CPU_CORES: Final = 1 << 16
"""No node has more: the largest shipping servers have under 4,096 hardware threads, so a
request above 65,536 cores is a typo (``1e12``), not a wish any scheduler could grant."""
MAX_RAM_BYTES: Final = 1 << 50
"""1 PiB: two orders of magnitude above the largest single machines (tens of TiB)."""
MAX_LOCAL_STORAGE_BYTES: Final = 1 << 60
"""1 EiB of ephemeral storage on one node: beyond any disk, still inside int64 bytes."""
MAX_ACCELERATORS: Final = 1024
"""No node holds more cards; the cluster's largest node bounds the request more tightly."""

GENERATED_SUFFIX: Final = 5
"""The characters the API server appends to ``metadata.generateName``."""

ROOT_DETAIL: Final = "must be an absolute, canonical path"


@dataclass(frozen=True, slots=True)
class Gates:
    """The two node-escape Settings (``instance-privileged-allowed``, ``…-host-path-…``)."""

    privileged_allowed: bool = False
    host_path_volume_allowed: bool = False
    namespace: str = contract.SYSTEM_NAMESPACE
    """Where the Settings Secret lives (the release namespace): a refusal names it."""


# -- paths -----------------------------------------------------------------------------------


def canonical_path_problem(path: str, *, root: bool = False) -> str | None:
    """Why ``path`` is not an absolute, canonical path, or ``None``.

    Canonical: what ``path.Clean`` leaves unchanged — no empty segment (``//``, a trailing
    ``/``), no ``.`` or ``..``. A non-canonical spelling is refused rather than cleaned: two
    spellings of one directory would slip past the duplicate check, and ``..`` past a review.
    ``/`` itself is refused unless ``root`` (a node path may be the node's root; a mount there
    would hide the whole image).
    """
    if not path.startswith("/"):
        return ROOT_DETAIL
    if path == "/":
        return None if root else f"{ROOT_DETAIL} below /: the root would hide the whole image"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        return f"{ROOT_DETAIL} without control characters"
    for segment in path[1:].split("/"):
        if segment in {"", ".", ".."}:
            return ROOT_DETAIL
    return None


def sub_path_problem(sub_path: str) -> str | None:
    """Why ``sub_path`` cannot select a path inside the volume, or ``None``.

    The Pod validation's own rule (``validateLocalDescendingPath``): relative, and no ``..``
    segment, so the mount cannot climb out of its volume.
    """
    if sub_path.startswith("/"):
        return "must be a relative path"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in sub_path):
        return "must not contain control characters"
    if ".." in sub_path.split("/"):
        return "must not contain '..'"
    return None


# -- names -----------------------------------------------------------------------------------


def name_errors(name: str, generate_name: str = "") -> list[FieldError]:
    """The Instance's name must name its Service: a DNS-1035 label of at most 63 characters.

    With only ``generateName`` (the API server appends five characters after admission of the
    prefix), the prefix must leave room for them and be a label's beginning.
    """
    if name:
        problem = dns1035_label_problem(name)
        if problem is None:
            return []
        return [invalid("metadata.name", name, f"{problem} (it names the Instance's Service)")]
    if not generate_name:
        return []
    room = DNS1123_LABEL_MAX - GENERATED_SUFFIX
    if len(generate_name) > room:
        return [
            invalid(
                "metadata.generateName",
                generate_name,
                f"must be no more than {room} characters, leaving room for the 5 generated ones "
                "(the name names the Instance's Service)",
            )
        ]
    problem = dns1035_label_problem(generate_name + "x")
    if problem is not None:
        return [invalid("metadata.generateName", generate_name, problem)]
    return []


def _object_name_errors(field: str, value: str) -> list[FieldError]:
    """A name the controller hands to the API server as an object's name (a DNS-1123 subdomain).

    ``../../etc/shadow`` or ``a;rm -rf /`` can never name a Secret; refusing it here keeps it
    out of every path and Pod the controller would build from it.
    """
    problem = dns1123_subdomain_problem(value)
    return [] if problem is None else [invalid(field, value, problem)]


def _local_names(spec: InstanceSpec) -> list[tuple[str, LocalObject]]:
    named: list[tuple[str, LocalObject]] = []
    if spec.volume.persistent is not None:
        named.append(("spec.volume.persistent.name", spec.volume.persistent))
    if spec.ssh_public_key is not None:
        named.append(("spec.sshPublicKey.name", spec.ssh_public_key))
    for i, extra in enumerate(spec.additional_volumes):
        for wire, source in (
            ("persistent", extra.persistent),
            ("configMap", extra.config_map),
            ("secret", extra.secret),
        ):
            if source is not None:
                named.append((f"spec.additionalVolumes[{i}].{wire}.name", source))
    return named


# -- quantities ------------------------------------------------------------------------------

_BOUNDS: Final[tuple[tuple[str, str, Fraction, str], ...]] = (
    ("cpu", "cpu", Fraction(MAX_CPU_CORES), f"{MAX_CPU_CORES} cores"),
    ("ram", "ram", Fraction(MAX_RAM_BYTES), "1Pi"),
    ("local_storage", "localStorage", Fraction(MAX_LOCAL_STORAGE_BYTES), "1Ei"),
    ("accelerator", "accelerator", Fraction(MAX_ACCELERATORS), f"{MAX_ACCELERATORS} cards"),
)


def accelerator_count(resources: Resources) -> int | None:
    """``spec.resources.accelerator`` as a whole card count; ``None`` when absent or unreadable."""
    if resources.accelerator is None:
        return None
    try:
        value = parse_quantity(resources.accelerator)
    except QuantityError:
        return None
    return int(value) if value.denominator == 1 and value >= 0 else None


def resource_errors(resources: Resources) -> list[FieldError]:
    """Each quantity parses, is not negative, not absurd; the accelerator fields form one mode."""
    errors: list[FieldError] = []
    for attribute, wire, bound, spelled in _BOUNDS:
        raw = getattr(resources, attribute)
        if raw is None:
            continue
        at = f"spec.resources.{wire}"
        try:
            value = parse_quantity(raw)
        except QuantityError as exc:
            errors.append(invalid(at, raw, str(exc)))
            continue
        if value < 0:
            errors.append(invalid(at, raw, "must be greater than or equal to 0"))
        elif value > bound:
            errors.append(invalid(at, raw, f"must be no more than {spelled}: no node holds more"))
        elif attribute == "accelerator" and value.denominator != 1:
            errors.append(invalid(at, raw, "must be a whole number of accelerators"))
    return errors + _mode_errors(resources)


def _mode_errors(resources: Resources) -> list[FieldError]:
    """The accelerator fields name one mode (``operator-half.md``, "Through the Instance API")."""
    sliced = resources.accelerator_sliced_memory_percentage
    cores = resources.accelerator_sliced_cores_percentage
    profile = resources.accelerator_partitioned_profile
    count = accelerator_count(resources)
    errors: list[FieldError] = []
    if sliced is not None and profile:
        errors.append(
            invalid(
                "spec.resources.acceleratorPartitionedProfile",
                profile,
                "may not be combined with acceleratorSlicedMemoryPercentage",
            )
        )
    if (sliced is not None or profile) and count != 1:
        errors.append(
            invalid(
                "spec.resources.accelerator",
                resources.accelerator if resources.accelerator is not None else "",
                "a slice or a partition is one accelerator: set accelerator: 1",
            )
        )
    if cores is not None and sliced is None:
        errors.append(
            invalid(
                "spec.resources.acceleratorSlicedCoresPercentage",
                cores,
                "a compute cap needs acceleratorSlicedMemoryPercentage",
            )
        )
    return errors


# -- the spec's shape ------------------------------------------------------------------------


def _volume_errors(spec: InstanceSpec) -> list[FieldError]:
    errors: list[FieldError] = []
    if spec.volume.ephemeral is not None and spec.volume.persistent is not None:
        errors.append(
            invalid("spec.volume", "ephemeral, persistent", "must have exactly one source")
        )
    workspace = spec.volume_mount or DEFAULT_VOLUME_MOUNT
    if spec.volume_mount:
        problem = canonical_path_problem(spec.volume_mount)
        if problem is not None:
            errors.append(invalid("spec.volumeMount", spec.volume_mount, problem))
    seen: dict[str, str] = {workspace: "spec.volumeMount"}
    for i, extra in enumerate(spec.additional_volumes):
        errors += _additional_volume_errors(i, extra, seen)
    return errors


def _sources(extra: AdditionalVolume) -> list[str]:
    return [
        wire
        for wire, source in (
            ("persistent", extra.persistent),
            ("configMap", extra.config_map),
            ("secret", extra.secret),
            ("hostPath", extra.host_path),
        )
        if source is not None
    ]


def _additional_volume_errors(
    i: int, extra: AdditionalVolume, seen: dict[str, str]
) -> list[FieldError]:
    at = f"spec.additionalVolumes[{i}]"
    errors: list[FieldError] = []
    problem = canonical_path_problem(extra.mount_path)
    if problem is not None:
        errors.append(invalid(f"{at}.mountPath", extra.mount_path, problem))
    elif extra.mount_path in seen:
        errors.append(
            invalid(
                f"{at}.mountPath",
                extra.mount_path,
                f"must be unique: {seen[extra.mount_path]} mounts there already",
            )
        )
    else:
        seen[extra.mount_path] = f"{at}.mountPath"
    sources = _sources(extra)
    if len(sources) != 1:
        errors.append(
            invalid(
                at,
                ", ".join(sources) or "none",
                "must have exactly one source: persistent, configMap, secret or hostPath",
            )
        )
    if extra.sub_path:
        problem = sub_path_problem(extra.sub_path)
        if problem is not None:
            errors.append(invalid(f"{at}.subPath", extra.sub_path, problem))
    if extra.host_path is not None:
        problem = canonical_path_problem(extra.host_path.path, root=True)
        if problem is not None:
            errors.append(invalid(f"{at}.hostPath.path", extra.host_path.path, problem))
    return errors


def _env_name_problem(name: str) -> str | None:
    """The kubelet's relaxed rule (Kubernetes 1.32+): printable ASCII, no ``=``."""
    if not name:
        return "must not be empty"
    if "=" in name:
        return "must not contain '='"
    if any(not (0x20 <= ord(c) < 0x7F) for c in name):
        return "must consist of printable ASCII characters"
    return None


def _list_errors(spec: InstanceSpec) -> list[FieldError]:
    """Ports are keyed by (port, protocol), variables by name: each key at most once."""
    errors: list[FieldError] = []
    ports: set[tuple[int, str]] = set()
    for i, port in enumerate(spec.ports):
        key = (port.port, port.protocol)
        if key in ports:
            errors.append(duplicate(f"spec.ports[{i}]", f"{port.port}/{port.protocol}"))
        ports.add(key)
    names: set[str] = set()
    for i, variable in enumerate(spec.env):
        problem = _env_name_problem(variable.name)
        if problem is not None:
            errors.append(invalid(f"spec.env[{i}].name", variable.name, problem))
        elif variable.name in names:
            errors.append(duplicate(f"spec.env[{i}].name", variable.name))
        names.add(variable.name)
    return errors


def spec_errors(spec: InstanceSpec) -> list[FieldError]:
    """Everything wrong with the spec's shape, each field once (empty: nothing)."""
    errors = resource_errors(spec.resources) + _volume_errors(spec) + _list_errors(spec)
    if accelerator_count(spec.resources) and not spec.type:
        errors.append(
            required(
                "spec.type",
                "accelerators come from an InstanceType's pool: name the type to draw them from",
            )
        )
    for field, named in _local_names(spec):
        errors += _object_name_errors(field, named.name)
    if spec.image_pull_secret:
        errors += _object_name_errors("spec.imagePullSecret", spec.image_pull_secret)
    if spec.node_name:
        errors += _object_name_errors("spec.nodeName", spec.node_name)
    return errors


# -- the gates -------------------------------------------------------------------------------


def _host_paths(spec: InstanceSpec) -> set[tuple[str, str]]:
    """Every node path the spec mounts, by value (``path``, ``type``): what it reaches."""
    return {
        (v.host_path.path, v.host_path.type)
        for v in spec.additional_volumes
        if v.host_path is not None
    }


def gate_errors(new: InstanceSpec, old: InstanceSpec | None, gates: Gates) -> list[FieldError]:
    """The escapes ``new`` takes that ``old`` did not hold, while their Setting is off.

    Held means: ``old`` is privileged already, or mounts that very node path with that very
    type. A stopped Instance is judged the same (taking an escape while stopped is still
    taking it); a held one stays editable and restartable whatever the Setting says now.
    """
    errors: list[FieldError] = []
    if new.privileged and not gates.privileged_allowed and not (old is not None and old.privileged):
        errors.append(
            forbidden(
                "spec.privileged",
                "privileged Instances are not allowed: the Setting instance-privileged-allowed "
                f"is false ({gates.namespace}/{SETTINGS_SECRET})",
            )
        )
    if gates.host_path_volume_allowed:
        return errors
    held = _host_paths(old) if old is not None else set()
    for i, extra in enumerate(new.additional_volumes):
        if extra.host_path is None:
            continue
        if (extra.host_path.path, extra.host_path.type) in held:
            continue
        errors.append(
            forbidden(
                f"spec.additionalVolumes[{i}].hostPath",
                "hostPath volumes are not allowed: the Setting instance-host-path-volume-allowed "
                f"is false ({gates.namespace}/{SETTINGS_SECRET})",
            )
        )
    return errors


# -- immutability ----------------------------------------------------------------------------

MUTABLE_WHILE_RUNNING: Final = frozenset({"stop"})


def changed_fields(new: InstanceSpec, old: InstanceSpec) -> list[str]:
    """The spec fields (wire names) whose values differ, ``stop`` aside, in the spec's order.

    Compared decoded, so a default the API server or a webhook spelled out (``protocol:
    TCP``) is no change.
    """
    changed: list[str] = []
    for info in msgspec.structs.fields(InstanceSpec):
        if info.name in MUTABLE_WHILE_RUNNING:
            continue
        if getattr(new, info.name) != getattr(old, info.name):
            changed.append(f"spec.{info.encode_name}")
    return changed


def immutable_errors(new: InstanceSpec, old: InstanceSpec) -> list[FieldError]:
    """A running Instance (``old`` not stopped) may change ``spec.stop`` and nothing else."""
    if old.stop:
        return []
    changed = changed_fields(new, old)
    if not changed:
        return []
    return [
        forbidden(
            "spec",
            f"{', '.join(changed)} may not change while the Instance runs: stop it first "
            '(spec.stop: true, e.g. kubectl patch --type=merge -p \'{"spec":{"stop":true}}\'), '
            "edit it, then start it again (spec.stop: false)",
        )
    ]


# -- what the cluster says -------------------------------------------------------------------


def node_errors(node_name: str, exists: bool) -> list[FieldError]:
    """``spec.nodeName`` must name a Node (checked at creation only, walkthrough §6)."""
    if not node_name or exists:
        return []
    return [not_found("spec.nodeName", node_name, "no Node of that name exists")]


def largest_node(cards_by_node: Mapping[str, int]) -> tuple[str, int]:
    """The node holding the most cards, ``("", 0)`` for none."""
    if not cards_by_node:
        return "", 0
    node = max(sorted(cards_by_node), key=lambda n: cards_by_node[n])
    return node, cards_by_node[node]


def typeless_errors(resources: Resources, type_name: str, manufacturer: str) -> list[FieldError]:
    """Cards asked of an InstanceType that names no manufacturer: it holds none to give."""
    count = accelerator_count(resources)
    if not count or manufacturer:
        return []
    return [
        invalid(
            "spec.resources.accelerator",
            resources.accelerator,
            f"InstanceType {type_name} names no accelerator manufacturer, so it has none to give",
        )
    ]


def capacity_errors(
    resources: Resources, manufacturer: str, cards_by_node: Mapping[str, int]
) -> list[FieldError]:
    """An accelerator count no node can ever hold: more cards than the largest node has.

    ``cards_by_node``: how many of ``manufacturer``'s cards (any, when it is blank) each node
    publishes in its ``Devices`` object.
    """
    count = accelerator_count(resources)
    if not count:
        return []
    node, most = largest_node(cards_by_node)
    if count <= most:
        return []
    which = f"{manufacturer} " if manufacturer else ""
    if most == 0:
        detail = f"no node in the cluster has any {which}accelerator"
    else:
        detail = (
            f"no node can hold it: the largest, {node}, has {most} {which}"
            f"accelerator{'s' if most != 1 else ''}"
        )
    return [invalid("spec.resources.accelerator", resources.accelerator, detail)]


# -- defaults --------------------------------------------------------------------------------


def preset_units(resources: Resources, acceleratable: bool) -> Fraction | None:
    """How many of its type's units an Instance asks, or ``None`` when the preset says nothing.

    The reference's reading (``shared/reference/instancetypes.md``, "Unit presets"): by card
    count for whole cards, by memory percentage for a slice; a type without accelerators is one
    unit. A partition's share needs its profile's memory, which the type does not carry, and an
    Instance on an accelerated type that asks no card has no count to scale by: both get none.
    """
    if resources.accelerator_partitioned_profile:
        return None
    if resources.accelerator_sliced_memory_percentage is not None:
        return Fraction(resources.accelerator_sliced_memory_percentage, 100)
    count = accelerator_count(resources)
    if count:
        return Fraction(count)
    return None if acceleratable else Fraction(1)


def _cpu_text(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    return f"{ceil_fraction(value * 1000)}m"


def _bytes_text(value: Fraction) -> str:
    whole = ceil_fraction(value)
    for suffix, shift in (("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if whole and whole % (1 << shift) == 0:
            return f"{whole >> shift}{suffix}"
    return str(whole)


def default_resources(
    resources: Resources, unit: UnitResources, *, acceleratable: bool
) -> dict[str, str]:
    """The ``spec.resources`` fields the type's preset fills (wire name → quantity).

    Only absent fields are filled: an explicit request is the user's. CPU and RAM scale with
    :func:`preset_units`; local storage is the type's, per Instance. A preset value that does
    not parse fills nothing (the type is the administrator's to fix).
    """
    filled: dict[str, str] = {}
    units = preset_units(resources, acceleratable)
    for attribute, wire, scale, spell in (
        ("cpu", "cpu", True, _cpu_text),
        ("ram", "ram", True, _bytes_text),
        ("local_storage", "localStorage", False, _bytes_text),
    ):
        preset = getattr(unit, attribute)
        if getattr(resources, attribute) is not None or preset is None:
            continue
        if scale and units is None:
            continue
        try:
            value = parse_quantity(preset)
        except QuantityError:
            continue
        if value <= 0:
            continue
        filled[wire] = spell(value * units if scale and units is not None else value)
    return filled


def object_meta(obj: Mapping[str, Any]) -> tuple[str, str]:
    """``(name, generateName)`` of a raw object, blank where absent or not text."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return "", ""
    name, generate = meta.get("name"), meta.get("generateName")
    return (name if isinstance(name, str) else "", generate if isinstance(generate, str) else "")


__all__ = [
    "MAX_ACCELERATORS",
    "MAX_CPU_CORES",
    "MAX_LOCAL_STORAGE_BYTES",
    "MAX_RAM_BYTES",
    "Gates",
    "accelerator_count",
    "canonical_path_problem",
    "capacity_errors",
    "changed_fields",
    "default_resources",
    "gate_errors",
    "immutable_errors",
    "largest_node",
    "name_errors",
    "node_errors",
    "object_meta",
    "preset_units",
    "resource_errors",
    "spec_errors",
    "sub_path_problem",
    "typeless_errors",
]
