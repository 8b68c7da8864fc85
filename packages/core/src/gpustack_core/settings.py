"""The operator's Settings: which keys exist, what each means, and how a value is read.

Settings live in the Secret ``gpustack-settings`` in the system namespace, one key each, as the
reference keeps them (``shared/reference/instancetypes.md``, "Settings the chain reads") and as
the walkthrough patches them (``kubectl -n gpustack-system patch secret gpustack-settings
--type=merge -p '{"data":{"<key>":"<base64>"}}'``). The worker seeds the Secret on first start
from ``GPUSTACK_<UPPER_SNAKE>`` variables or the defaults here, later starts only back-fill keys
that are missing, and every reader follows the Secret live.

The ConfigMap ``gpustack-operator-settings`` held four of them before; it is still read for one
release as a fallback, its keys translated (:attr:`Key.deprecated`), so an upgrade keeps what
was set there: its values seed the Secret where the Secret lacks a key.

This module is pure: it names the keys, parses values and decides which source wins. The
worker's :mod:`gpustack_worker.settings` does the reading and the writing.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Final, Literal

SECRET: Final = "gpustack-settings"
"""The Secret in the system namespace that holds every Setting."""
DEPRECATED_CONFIGMAP: Final = "gpustack-operator-settings"
"""Where three Settings lived before the Secret; read as a fallback for one release."""
ENV_PREFIX: Final = "GPUSTACK_"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class SettingError(ValueError):
    """A value a key cannot take; the message names the key and why."""


def parse_bool(text: str) -> bool:
    """Go's ``strconv.ParseBool``, which the reference reads its booleans with."""
    value = text.strip()
    if value in {"1", "t", "T", "TRUE", "true", "True"}:
        return True
    if value in {"0", "f", "F", "FALSE", "false", "False"}:
        return False
    raise SettingError(f"{value!r} is not a boolean (true or false)")


def parse_cidrs(setting: str) -> tuple[Network, ...]:
    """``instance-isolation-pod-cidrs``: comma or space separated CIDRs (blank: none).

    ``10.0.0.1/8`` has host bits set and is refused: a typo there would isolate the wrong range.
    """
    found: list[Network] = []
    for entry in setting.replace(",", " ").split():
        try:
            found.append(ipaddress.ip_network(entry, strict=True))
        except ValueError as exc:
            raise SettingError(f"{entry!r}: {exc}") from None
    return tuple(found)


def parse_ratio(text: str) -> Fraction:
    """An overcommit ratio: a number of at least 1 (requests are limits divided by it)."""
    value = text.strip() or "1"
    try:
        ratio = Fraction(value)
    except (ValueError, ZeroDivisionError):
        raise SettingError(f"{value!r} is not a number") from None
    if ratio < 1:
        raise SettingError(f"{value!r} is below 1: a request may not exceed its limit")
    return ratio


def parse_image(text: str) -> str:
    """An image reference, or blank; whitespace inside is refused (no reference holds any)."""
    value = text.strip()
    if any(c.isspace() for c in value):
        raise SettingError(f"{value!r} is not an image reference")
    return value


@dataclass(frozen=True, slots=True)
class Key:
    """One Setting: its name in the Secret, its default, its parser and what it does."""

    name: str
    default: str
    parse: Callable[[str], Any]
    attribute: str
    """The :class:`Settings` field it fills."""
    effect: str
    """One line for the documentation and for logs."""
    deprecated: tuple[str, ...] = ()
    """Its names in the deprecated ConfigMap."""

    @property
    def env(self) -> str:
        """``GPUSTACK_<UPPER_SNAKE>``: the variable that seeds it on first start."""
        return ENV_PREFIX + self.name.upper().replace("-", "_")


KEYS: Final[tuple[Key, ...]] = (
    Key(
        "instance-privileged-allowed",
        "false",
        parse_bool,
        "instance_privileged_allowed",
        "whether an Instance may take spec.privileged (the container escape)",
    ),
    Key(
        "instance-host-path-volume-allowed",
        "false",
        parse_bool,
        "instance_host_path_volume_allowed",
        "whether an Instance may take a spec.additionalVolumes[*].hostPath (the node's files)",
    ),
    Key(
        "instance-isolation-pod-cidrs",
        "",
        parse_cidrs,
        "instance_isolation_pod_cidrs",
        "the pod CIDRs every namespace holding an Instance is isolated from (blank: no policy)",
        deprecated=("instance-isolation-pod-cidrs",),
    ),
    Key(
        "instance-ssh-server-image",
        "",
        parse_image,
        "instance_ssh_server_image",
        "the SSH sidecar's image for Instances with spec.sshPublicKey (blank: none runs)",
        deprecated=("instance-sshd-image",),
    ),
    Key(
        "instance-cpu-overcommit",
        "1",
        parse_ratio,
        "instance_cpu_overcommit",
        "an Instance Pod's CPU request is its limit divided by this",
        deprecated=("instance-cpu-overcommit",),
    ),
    Key(
        "instance-memory-overcommit",
        "1",
        parse_ratio,
        "instance_memory_overcommit",
        "an Instance Pod's memory request is its limit divided by this",
        deprecated=("instance-memory-overcommit",),
    ),
    Key(
        "instance-type-derived-from-node",
        "true",
        parse_bool,
        "instance_type_derived_from_node",
        "derive InstanceTypes, their ClusterQueues and entrance LocalQueues from the nodes "
        "(create-only); false: only align the ResourceFlavors",
    ),
    Key(
        "instance-type-aware-cpu-manufacturer",
        "false",
        parse_bool,
        "instance_type_aware_cpu_manufacturer",
        "split every pool by the CPU key (new types created beside the collapsed ones); "
        "ResourceFlavors are never rewritten",
    ),
    Key(
        "instance-type-mixed-on-node",
        "true",
        parse_bool,
        "instance_type_mixed_on_node",
        "a node with accelerators also joins a CPU pool; false: CPU pools hold only nodes "
        "without accelerators",
    ),
    Key(
        "instance-type-drain-when-no-flavors",
        "true",
        parse_bool,
        "instance_type_drain_when_no_flavors",
        "a ClusterQueue that lost every flavor is drained (HoldAndDrain) before its resource "
        "groups are emptied, once nothing is reserved; false: emptied at once",
    ),
    Key(
        "node-management-manual",
        "false",
        parse_bool,
        "node_management_manual",
        "false: a node is onboarded with gpustack.ai/managed=true when its worker NodeFeature "
        "is first written; true: an administrator sets it. Either way a value set is kept",
    ),
    Key(
        "workload-fit-affinity",
        "true",
        parse_bool,
        "workload_fit_affinity",
        "a slice, or a shared request of two or more cards, on a Kueue queue is pinned to nodes "
        "whose per-card fit labels show one card can still hold it",
    ),
)
"""Every key served, in the order the documentation lists them."""

BY_NAME: Final[Mapping[str, Key]] = {key.name: key for key in KEYS}


@dataclass(frozen=True, slots=True)
class Settings:
    """Every Setting, parsed."""

    instance_privileged_allowed: bool = False
    instance_host_path_volume_allowed: bool = False
    instance_isolation_pod_cidrs: tuple[Network, ...] = ()
    instance_ssh_server_image: str = ""
    instance_cpu_overcommit: Fraction = Fraction(1)
    instance_memory_overcommit: Fraction = Fraction(1)
    instance_type_derived_from_node: bool = True
    instance_type_aware_cpu_manufacturer: bool = False
    instance_type_mixed_on_node: bool = True
    instance_type_drain_when_no_flavors: bool = True
    node_management_manual: bool = False
    workload_fit_affinity: bool = True


def defaults() -> Settings:
    """Each key's default, parsed (the same as ``Settings()``; a test holds them equal)."""
    return replace(Settings(), **{k.attribute: k.parse(k.default) for k in KEYS})


def seeds(environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """What a first start writes: each key's ``GPUSTACK_<UPPER_SNAKE>`` value, else its default.

    A variable whose value the key cannot take is not written (the default is, and the problem
    is returned to be logged): a typo in a deployment must not become the cluster's Setting.
    """
    values: dict[str, str] = {}
    problems: list[str] = []
    for key in KEYS:
        given = environ.get(key.env)
        if given is not None:
            try:
                key.parse(given)
            except SettingError as exc:
                problems.append(f"{key.env}: {exc}; seeding the default {key.default!r}")
            else:
                values[key.name] = given
                continue
        values[key.name] = key.default
    return values, problems


def decode_secret_data(data: Any) -> tuple[dict[str, str], list[str]]:
    """A Secret's ``data`` as text; a value that is not base64 of UTF-8 is left out, named."""
    found: dict[str, str] = {}
    problems: list[str] = []
    if not isinstance(data, Mapping):
        return found, ([] if data is None else [f"{SECRET}: data is not an object"])
    for name, raw in data.items():
        if not isinstance(raw, str):
            problems.append(f"{SECRET} {name}: the value is not a base64 string")
            continue
        try:
            found[str(name)] = base64.b64decode(raw, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            problems.append(f"{SECRET} {name}: the value is not base64 of UTF-8 text")
    return found, problems


def encode_secret_data(values: Mapping[str, str]) -> dict[str, str]:
    """Text values as a Secret's ``data`` (base64)."""
    return {k: base64.b64encode(v.encode("utf-8")).decode("ascii") for k, v in values.items()}


def _deprecated_value(key: Key, configmap: Mapping[str, str]) -> tuple[str, str] | None:
    """``(name there, value)`` of ``key`` in the deprecated ConfigMap, if it holds it."""
    for old in key.deprecated:
        if old in configmap:
            return old, configmap[old]
    return None


Source = Literal["secret", "configmap", "seed"]


@dataclass(frozen=True, slots=True)
class Resolution:
    """The Settings now in force and how each key came to its value."""

    settings: Settings
    sources: Mapping[str, Source] = field(default_factory=dict)
    """Key → where its value came from."""
    problems: tuple[str, ...] = ()
    """Values refused (the key keeps its previous value), one line each."""
    shadowed: tuple[str, ...] = ()
    """Deprecated ConfigMap keys the Secret overrides (edits there no longer apply)."""


def source_of(
    key: Key,
    secret: Mapping[str, str] | None,
    configmap: Mapping[str, str] | None,
    seeded: Mapping[str, str],
) -> tuple[str, Source, str]:
    """The text ``key`` takes, where it comes from, and that place as a message names it.

    The Secret first, else the deprecated ConfigMap, else the seed (``GPUSTACK_<UPPER_SNAKE>``
    or the default). :func:`resolve` parses this text, and the ``Setting`` resource serves it,
    so what ``kubectl get settings`` shows for a key the Secret lacks is what the worker applies.
    """
    if secret is not None and key.name in secret:
        return secret[key.name], "secret", f"{SECRET} {key.name}"
    old = _deprecated_value(key, configmap or {})
    if old is not None:
        return old[1], "configmap", f"{DEPRECATED_CONFIGMAP} {old[0]}"
    return seeded.get(key.name, key.default), "seed", key.env


def resolve(
    secret: Mapping[str, str] | None,
    configmap: Mapping[str, str] | None,
    seeded: Mapping[str, str],
    previous: Settings,
) -> Resolution:
    """Each key from the Secret, else the deprecated ConfigMap, else its seed.

    A value the key cannot take is refused and the key keeps its ``previous`` value: one bad
    edit never resets a gate or drops the isolation policy, and the problem is reported.
    """
    values: dict[str, Any] = {}
    sources: dict[str, Source] = {}
    problems: list[str] = []
    shadowed: list[str] = []
    for key in KEYS:
        text, source, where = source_of(key, secret, configmap, seeded)
        old = _deprecated_value(key, configmap or {})
        if source == "secret" and old is not None:
            shadowed.append(old[0])
        try:
            values[key.attribute] = key.parse(text)
        except SettingError as exc:
            problems.append(f"{where}: {exc}; keeping the previous value")
            values[key.attribute] = getattr(previous, key.attribute)
        sources[key.name] = source
    return Resolution(replace(previous, **values), sources, tuple(problems), tuple(shadowed))


def backfill(
    secret: Mapping[str, str] | None,
    configmap: Mapping[str, str] | None,
    seeded: Mapping[str, str],
) -> dict[str, str]:
    """The keys a start writes into the Secret: those it lacks, never one it holds.

    The deprecated ConfigMap's value comes first where it parses (an upgrade keeps what was set
    there), then the seed.
    """
    missing: dict[str, str] = {}
    for key in KEYS:
        if secret is not None and key.name in secret:
            continue
        old = _deprecated_value(key, configmap or {})
        if old is not None:
            try:
                key.parse(old[1])
            except SettingError:
                pass
            else:
                missing[key.name] = old[1]
                continue
        missing[key.name] = seeded.get(key.name, key.default)
    return missing


__all__ = [
    "BY_NAME",
    "DEPRECATED_CONFIGMAP",
    "KEYS",
    "SECRET",
    "Key",
    "Network",
    "Resolution",
    "SettingError",
    "Settings",
    "backfill",
    "decode_secret_data",
    "defaults",
    "encode_secret_data",
    "parse_bool",
    "parse_cidrs",
    "parse_image",
    "parse_ratio",
    "resolve",
    "seeds",
    "source_of",
]
