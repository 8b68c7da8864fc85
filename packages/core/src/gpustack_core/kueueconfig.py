"""What Kueue's own Configuration must say for the operator's queues to admit anything.

The operator's ClusterQueues declare one resource each: an accelerated queue
``credits.gpustack.ai/<manufacturer>`` (a whole card 1,600,000, the allocation ledger's unit), the
generic CPU queue ``cpu`` (``gpustack_core.derive``). A Pod asks for none of that directly: it
asks ``nvidia.com/gpu``, ``.shared``, ``.sliced`` + ``.sliced.units`` (the webhook's fold), and so
on, beside its CPU and memory. Kueue turns Pod requests into a Workload's through its
Configuration's ``resources`` block, and refuses a Workload asking for any resource its queue
does not cover ("resource memory unavailable in ClusterQueue"). So Kueue must be told:

- **transformations** (the reference's credit mapping, per manufacturer): ``<base>`` → 1,600,000
  credits a card, ``<base>.shared`` → 160,000 a share (a tenth), ``<base>.sliced.units`` → 1
  credit a unit multiplied by ``<base>.sliced`` (always 1), ``<base>.partitioned.units`` → 1 a
  unit; the ``.sliced`` / ``.partitioned`` request markers themselves are replaced by nothing.
  Every figure is a whole number, so Kueue's int64 accounting never rounds a share up to a card.
- **excludeResourcePrefixes**: what no queue of ours declares and Kueue v0.17 would otherwise
  refuse — the slice's companion requests (memory percentage or MiB, cores percentage), the
  partition profiles (``<base>.partitioned.mig-…``), the SSH sidecar's
  ``device.gpustack.ai/<mfr>.visibility``, and ``memory``, ``ephemeral-storage``, ``hugepages-``
  and ``cpu``. The reference runs a Kueue whose quota check leaves a resource a queue does not
  declare alone; v0.17 (the newest the module proxy serves here) has no such switch, only this
  global list, so ``cpu`` is excluded everywhere — an accelerated Instance's CPU would otherwise
  make every accelerated queue refuse it — and the generic queue's ``cpu`` quota does not bind:
  Kueue admits a CPU Instance, kube-scheduler places it by the nodes' allocatable CPU.

Exclusion applies before the transformations (Kueue's ``totalRequestsFromPodSets``), so no
prefix here may be a prefix of a transformation's input: ``<base>.sliced.`` would swallow
``.sliced.units``; the exact companion names are listed instead (a test holds this).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, Final

from gpustack_core.manufacturers import partition_kind
from gpustack_core.poolnames import credits_resource
from gpustack_core.resources import SHARES_PER_ACCELERATOR, ResourceNames, default_names
from gpustack_core.units import UNITS_PER_ACCELERATOR

GENERAL_EXCLUSIONS: Final = ("cpu", "memory", "ephemeral-storage", "hugepages-")
"""Kubernetes' own resources, which no accelerated queue declares (see the module's note)."""
VISIBILITY_PREFIX: Final = "device.gpustack.ai/"
"""Every manufacturer's ``.visibility``: an SSH sidecar's view, no grant, never counted."""


def _rule(
    credits: str, source: str, per_unit: int | None, multiply_by: str | None = None
) -> dict[str, Any]:
    """One transformation: ``source`` replaced by ``per_unit`` credits a unit (none: dropped)."""
    entry: dict[str, Any] = {"input": source, "strategy": "Replace"}
    if multiply_by is not None:
        entry["multiplyBy"] = multiply_by
    entry["outputs"] = {credits: str(per_unit)} if per_unit is not None else {}
    return entry


def transformations(names: Sequence[ResourceNames] | None = None) -> list[dict[str, Any]]:
    """Kueue ``resources.transformations``: every accelerator request into its credits.

    ``names`` defaults to every manufacturer's at its default base, read from the table now.
    """
    found: list[dict[str, Any]] = []
    for resource in default_names() if names is None else names:
        credits = credits_resource(resource.manufacturer)
        rule = partial(_rule, credits)
        found += [
            rule(resource.exclusive, UNITS_PER_ACCELERATOR),
            rule(resource.shared, UNITS_PER_ACCELERATOR // SHARES_PER_ACCELERATOR),
            rule(resource.sliced_units, 1, resource.sliced),
            rule(resource.sliced, None),
        ]
        if partition_kind(resource.manufacturer) is not None:
            found += [rule(resource.partitioned_units, 1), rule(resource.partitioned, None)]
    return found


def excluded_prefixes(names: Sequence[ResourceNames] | None = None) -> list[str]:
    """Kueue ``resources.excludeResourcePrefixes``: what no queue of ours declares."""
    found = [*GENERAL_EXCLUSIONS, VISIBILITY_PREFIX]
    for resource in default_names() if names is None else names:
        found += [
            resource.sliced_memory_percentage,
            resource.sliced_memory_mib,
            resource.sliced_cores_percentage,
        ]
        kind = partition_kind(resource.manufacturer)
        if kind is not None:
            found.append(resource.partitioned_profile(kind, ""))
    return found


def resources(names: Sequence[ResourceNames] | None = None) -> dict[str, Any]:
    """The whole ``resources`` block of Kueue's ``Configuration`` (config.kueue.x-k8s.io)."""
    return {
        "excludeResourcePrefixes": excluded_prefixes(names),
        "transformations": transformations(names),
    }
