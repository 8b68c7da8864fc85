"""The two halves of a sample before composition: what was declared and what was measured."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Final, NamedTuple

MAX_PLAUSIBLE_MILLICORES: Final = 65_536 * 1000
"""No node has more than 65,536 CPUs (the largest single-system images stop well short)."""
MAX_PLAUSIBLE_MEMORY_MIB: Final = 1 << 32
"""4 PiB of memory, far beyond any node."""
MAX_PLAUSIBLE_STORAGE_MIB: Final = 1 << 40
"""1 EiB of ephemeral storage, far beyond any node's disks."""


class UsageSource(StrEnum):
    """Where a CPU/memory/storage measurement came from (named in 503 messages and logs)."""

    KUBELET = "kubelet"
    METRICS_API = "metrics.k8s.io"


class DeclaredTotals(NamedTuple):
    """The Instance's declaration: sums of app-container limits, init containers excluded.

    Bytes are summed exactly first and rounded up to MiB once, so two 1.5 MiB limits total 3.
    """

    cpu_millicores: int
    memory_mib: int
    storage_mib: int


class PodUsage(NamedTuple):
    """One measurement of a Pod. ``None`` means that source did not measure the figure."""

    source: UsageSource
    timestamp: datetime
    cpu_millicores: int | None
    memory_mib: int | None
    storage_mib: int | None


def implausible(usage: PodUsage) -> str | None:
    """Why a measurement cannot be a real Pod's (a figure no node can reach), or ``None``.

    The kubelet's and metrics-server's figures are upstream claims: a ``usageNanoCores`` of
    10^30 would otherwise be published as 10^24 milli-cores. A source answering that is treated
    as not having answered for the Pod, so the caller falls back to the next source.
    """
    for what, value, bound in (
        ("CPU", usage.cpu_millicores, MAX_PLAUSIBLE_MILLICORES),
        ("memory", usage.memory_mib, MAX_PLAUSIBLE_MEMORY_MIB),
        ("storage", usage.storage_mib, MAX_PLAUSIBLE_STORAGE_MIB),
    ):
        if value is not None and not 0 <= value <= bound:
            return f"{usage.source} {what} figure {value} is beyond any node's capacity ({bound})"
    return None
