"""Which extended-resource base each manufacturer is allocated by on this cluster.

By default a manufacturer's requests are spelled with its well-known base (``nvidia.com/gpu``).
A cluster that already runs another device plugin for that name (the NVIDIA GPU Operator's
serves ``nvidia.com/gpu``) can move ours to another base, as the reference operator allows:
``GPUSTACK_<MANUFACTURER>_ACCELERATABLE_RESOURCE_NAME`` (its older spelling
``GPUSTACK_<MANUFACTURER>_RESOURCE_NAME`` is read too; the longer one wins). Every component
that spells a name (the device plugin, the Pod webhook and its ``matchConditions``, node
capacity, the Instance controller, Kueue's resources block) must read the same variables, so
they are parsed here, once: a two-plugin fight or a webhook that never sees the renamed Pods
is exactly what a component reading them differently would cause.

A base must be a name the API server accepts as an extended resource (``domain/name``, not in
the ``kubernetes.io`` domains) and two manufacturers may never share one; a bad value is
refused with one line naming the variable, never silently replaced by the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gpustack_core.features import is_label_key
from gpustack_core.manufacturers import rows
from gpustack_core.resources import ResourceNames

_RESERVED_DOMAINS: Final = ("kubernetes.io", "k8s.io")
"""Extended resources may not live in Kubernetes' own domains (the API server refuses them)."""


def variable(manufacturer: str) -> str:
    """``GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME``: the reference's deploy-time variable."""
    return f"GPUSTACK_{manufacturer.upper()}_ACCELERATABLE_RESOURCE_NAME"


def legacy_variable(manufacturer: str) -> str:
    """``GPUSTACK_NVIDIA_RESOURCE_NAME``: the older spelling, still honoured."""
    return f"GPUSTACK_{manufacturer.upper()}_RESOURCE_NAME"


def check_base(base: str) -> str | None:
    """Why ``base`` cannot be an extended-resource base, or ``None`` when it can.

    The API server takes ``<domain>/<name>`` outside Kubernetes' domains; the derived names
    (``<base>.sliced.memory-percentage``) must stay valid too, so ``name`` leaves room for the
    longest suffix, and a quote or backslash could not be written into a CEL literal.
    """
    domain, slash, _ = base.partition("/")
    if not slash or not is_label_key(base):
        return "not a qualified name <domain>/<name> (DNS-1123 domain, name [A-Za-z0-9._-])"
    if any(domain == d or domain.endswith(f".{d}") for d in _RESERVED_DOMAINS):
        return f"the {domain} domain is reserved for Kubernetes' own resources"
    if not is_label_key(f"{base}.sliced.memory-percentage"):
        return "too long: <name>.sliced.memory-percentage must fit in 63 characters"
    return None


def configured_bases(environ: Mapping[str, str]) -> dict[str, str]:
    """Manufacturer -> base for every manufacturer whose variable is set (non-empty).

    Raises ``ValueError`` with one line naming the variable for a bad base, and for two
    manufacturers that would end up on one base (each counted on the other's cards).
    """
    bases: dict[str, str] = {}
    for row in rows():
        for name in (variable(row.name), legacy_variable(row.name)):
            value = environ.get(name, "").strip()
            if not value:
                continue
            why = check_base(value)
            if why is not None:
                raise ValueError(f"{name}={value!r}: {why}")
            bases[row.name] = value
            break
    effective = {row.name: bases.get(row.name, row.resource_base) for row in rows()}
    owners: dict[str, str] = {}
    for token, base in effective.items():
        if base in owners:
            other = owners[base]
            named = token if token in bases else other  # the one a variable set
            raise ValueError(
                f"{variable(named)}={base!r}: {other} and {token} would share one"
                " resource name; each manufacturer needs a base of its own"
            )
        owners[base] = token
    return bases


def names_with(bases: Mapping[str, str]) -> tuple[ResourceNames, ...]:
    """Every manufacturer's names, in table order, ``bases`` overriding.

    The table is :mod:`gpustack_core.manufacturers`, read at the call: a row added later counts.
    """
    return tuple(ResourceNames.of(row.name, bases.get(row.name)) for row in rows())


def configured_names(environ: Mapping[str, str]) -> tuple[ResourceNames, ...]:
    """:func:`names_with` the bases ``environ`` configures (``ValueError`` as there)."""
    return names_with(configured_bases(environ))


__all__ = [
    "check_base",
    "configured_bases",
    "configured_names",
    "legacy_variable",
    "names_with",
    "variable",
]
