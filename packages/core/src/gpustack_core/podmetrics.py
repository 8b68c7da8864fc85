"""metrics.k8s.io ``PodMetrics``: the CPU/memory fallback when the kubelet cannot answer.

metrics-server has no storage figures, and its entries are keyed by namespace/name only, so an
entry may still describe a previous Pod of the same name; the caller passes the current Pod's
creation time so such an entry is rejected rather than reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from fractions import Fraction
from typing import Any

from gpustack_core.decoding import ContractError, convert, decode_json
from gpustack_core.pods import CPU, MEMORY, AwareDatetime, Quantity
from gpustack_core.quantity import QuantityError, cpu_to_millicores, parse_quantity
from gpustack_core.units import MIB, ceil_fraction
from gpustack_core.usage import PodUsage, UsageSource, implausible
from gpustack_core.wire import Wire


class PodMetricsMeta(Wire, frozen=True, kw_only=True):
    """The entry's identity; ``creationTimestamp`` is when metrics-server answered, not the Pod's.

    ``namespace`` is required: it is what tells a PodMetrics from a (cluster-scoped) NodeMetrics.
    """

    name: str
    namespace: str
    creation_timestamp: AwareDatetime | None = None


class ContainerMetrics(Wire, frozen=True, kw_only=True):
    """One container's usage as quantities (``704595n`` cores, ``801112Ki`` bytes)."""

    name: str
    usage: dict[str, Quantity] = {}


class PodMetrics(Wire, frozen=True, kw_only=True):
    """One Pod's entry; ``timestamp`` is the end of the ``window`` the rates average over."""

    metadata: PodMetricsMeta
    timestamp: AwareDatetime | None = None
    window: str = ""
    containers: tuple[ContainerMetrics, ...] | None = None
    """``null`` on the wire when metrics-server has no container figures (Go's nil slice)."""


class PodMetricsList(Wire, frozen=True, kw_only=True):
    """The list form (``…/namespaces/<ns>/pods``); ``items`` is ``null`` when empty."""

    items: tuple[PodMetrics, ...] | None = None


def parse_pod_metrics(data: bytes | str) -> PodMetrics:
    """Decode a ``PodMetrics`` object; a wrong type is a ContractError naming its JSON path."""
    return decode_json(data, PodMetrics, what="PodMetrics")


def pod_metrics_from_object(obj: Any) -> PodMetrics:
    """Build from an already-decoded mapping (a client's JSON dict), without re-encoding it."""
    return convert(obj, PodMetrics, what="PodMetrics")


def parse_pod_metrics_list(data: bytes | str) -> PodMetricsList:
    """Decode a ``PodMetricsList``; a NodeMetricsList fails on its items' missing namespace."""
    return decode_json(data, PodMetricsList, what="PodMetricsList")


def _summed(
    pm: PodMetrics, containers: Sequence[ContainerMetrics], resource: str
) -> Fraction | None:
    """Sum one resource exactly over the containers; ``None`` unless every container has it.

    Each container's figure is clamped at zero before summing: metrics-server has served
    ``-250m``, and a negative part would silently hide another container's real usage. Every
    value is parsed even once the sum is known to be absent, so a malformed one is never hidden.
    """
    total: Fraction | None = Fraction(0)
    for container in containers:
        value = container.usage.get(resource)
        if value is None:
            total = None
            continue
        try:
            quantity = parse_quantity(value)
        except QuantityError as exc:
            raise ContractError(
                f"PodMetrics {pm.metadata.namespace}/{pm.metadata.name}: "
                f"container {container.name!r}: usage.{resource}: {exc}"
            ) from exc
        if total is not None:
            total += max(quantity, Fraction(0))
    return total


def usage_from_pod_metrics(pm: PodMetrics, *, pod_created: datetime) -> PodUsage | None:
    """Return the Pod's usage from metrics.k8s.io, or ``None`` when it is not served.

    Not served: no containers, no timestamp (a sample must say when it was taken), an entry
    measured before ``pod_created`` (it belongs to an earlier Pod of the same name; pass an
    aware datetime), neither figure present, or a figure no node can reach. Storage is always
    ``None``: this API has none.
    """
    containers = pm.containers or ()
    if not containers or pm.timestamp is None or pm.timestamp < pod_created:
        return None
    cpu = _summed(pm, containers, CPU)
    memory = _summed(pm, containers, MEMORY)
    if cpu is None and memory is None:
        return None
    usage = PodUsage(
        source=UsageSource.METRICS_API,
        timestamp=pm.timestamp,
        cpu_millicores=None if cpu is None else cpu_to_millicores(cpu),
        memory_mib=None if memory is None else ceil_fraction(memory / MIB),
        storage_mib=None,
    )
    return None if implausible(usage) is not None else usage
