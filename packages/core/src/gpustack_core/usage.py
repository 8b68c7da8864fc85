"""The two halves of a sample before composition: what was declared and what was measured."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import NamedTuple


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
