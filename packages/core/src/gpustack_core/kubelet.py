"""The kubelet's ``/stats/summary`` (read through the API server's node proxy), reduced to usage.

Every figure is optional and an absent figure stays ``None``, never ``0``: the kubelet omits a
rate until it has two samples, Windows nodes omit some container figures, and old kubelets
report no pod-level block at all. ``0`` is reserved for "measured and idle". Counters are
``uint64`` in Go, so values up to 2**64 - 1 must decode; negatives are a broken contract.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, NamedTuple, TypeVar

import msgspec

from gpustack_core.decoding import decode_json
from gpustack_core.pods import AwareDatetime
from gpustack_core.units import bytes_to_mib, nanocores_to_millicores
from gpustack_core.usage import PodUsage, UsageSource, implausible
from gpustack_core.wire import Wire

Uint64 = Annotated[int, msgspec.Meta(ge=0)]
"""A Go ``uint64`` counter: a negative one cannot have come from a kubelet. (msgspec cannot
bound integers above int64, so only the sign is checked; Python ints hold 2**64 - 1 exactly.)"""

_S = TypeVar("_S")


class CPUStats(Wire, frozen=True, kw_only=True):
    """CPU as a rate; ``usageNanoCores`` needs two samples, so a new Pod may lack it.

    Every ``time`` is ``null`` on the wire when Go serialised its zero time.
    """

    time: AwareDatetime | None = None
    usage_nano_cores: Uint64 | None = None


class MemoryStats(Wire, frozen=True, kw_only=True):
    """Memory; the working set is what the kubelet evicts on, so it is the figure reported."""

    time: AwareDatetime | None = None
    working_set_bytes: Uint64 | None = None


class FsStats(Wire, frozen=True, kw_only=True):
    """Filesystem usage; at pod level it is the aggregate the ephemeral-storage limit governs."""

    time: AwareDatetime | None = None
    used_bytes: Uint64 | None = None


class ContainerStats(Wire, frozen=True, kw_only=True):
    """Per-container CPU and memory, summed only for kubelets that report no pod-level block."""

    name: str
    cpu: CPUStats | None = None
    memory: MemoryStats | None = None


class PodReference(Wire, frozen=True, kw_only=True):
    """The Pod's identity; the UID is what tells a recreated Pod of the same name apart."""

    name: str
    namespace: str
    uid: str


class PodStats(Wire, frozen=True, kw_only=True):
    """One Pod's entry; ``containers`` is ``null`` on the wire when the kubelet has none yet."""

    pod_ref: PodReference
    cpu: CPUStats | None = None
    memory: MemoryStats | None = None
    ephemeral_storage: FsStats | None = msgspec.field(default=None, name="ephemeral-storage")
    containers: tuple[ContainerStats, ...] | None = None


class NodeStats(Wire, frozen=True, kw_only=True):
    """Required only to recognise the document: any other JSON object is a contract error."""

    node_name: str


class Summary(Wire, frozen=True, kw_only=True):
    """The whole summary; ``pods`` is ``null`` on the wire for a node without Pods."""

    node: NodeStats
    pods: tuple[PodStats, ...] | None = None


def parse_summary(data: bytes | str) -> Summary:
    """Decode a ``/stats/summary`` body; a wrong type is a ContractError naming its JSON path."""
    return decode_json(data, Summary, what="kubelet stats summary")


class _Figure(NamedTuple):
    """A raw figure and when it was measured (``None`` where the kubelet gave no time)."""

    value: int
    time: datetime | None


def _earliest(times: Sequence[datetime | None]) -> datetime | None:
    """Return the oldest of the parts' times: a sum is only as fresh as its stalest part."""
    if any(t is None for t in times):
        return None
    return min(t for t in times if t is not None)


def _container_sum(
    containers: Sequence[ContainerStats],
    block: Callable[[ContainerStats], _S | None],
    value: Callable[[_S], int | None],
    time: Callable[[_S], datetime | None],
) -> _Figure | None:
    """Sum one figure over the containers, or ``None`` unless every container reports it.

    A partial sum would understate usage while looking like a measurement of the whole Pod.
    """
    values: list[int] = []
    times: list[datetime | None] = []
    for container in containers:
        stats = block(container)
        figure = None if stats is None else value(stats)
        if stats is None or figure is None:
            return None
        values.append(figure)
        times.append(time(stats))
    if not values:
        return None
    return _Figure(sum(values), _earliest(times))


def _is_pre_pod_level(entry: PodStats) -> bool:
    """Whether the entry comes from a kubelet that predates pod-level stats.

    Such kubelets report no pod-level ``cpu``, ``memory`` or ``ephemeral-storage`` at all, so
    the containers are the only source. An entry carrying any pod-level block comes from a
    kubelet that does aggregate; a figure missing there is missing, and a container sum would
    present a guess as a measurement.
    """
    return entry.cpu is None and entry.memory is None and entry.ephemeral_storage is None


def _cpu(entry: PodStats) -> _Figure | None:
    if entry.cpu is not None and entry.cpu.usage_nano_cores is not None:
        return _Figure(entry.cpu.usage_nano_cores, entry.cpu.time)
    if not _is_pre_pod_level(entry):
        return None
    return _container_sum(
        entry.containers or (),
        lambda c: c.cpu,
        lambda s: s.usage_nano_cores,
        lambda s: s.time,
    )


def _memory(entry: PodStats) -> _Figure | None:
    if entry.memory is not None and entry.memory.working_set_bytes is not None:
        return _Figure(entry.memory.working_set_bytes, entry.memory.time)
    if not _is_pre_pod_level(entry):
        return None
    return _container_sum(
        entry.containers or (),
        lambda c: c.memory,
        lambda s: s.working_set_bytes,
        lambda s: s.time,
    )


def _storage(entry: PodStats) -> _Figure | None:
    """Pod level only: container ``rootfs``+``logs`` miss ``emptyDir``, which the limit counts."""
    fs = entry.ephemeral_storage
    if fs is None or fs.used_bytes is None:
        return None
    return _Figure(fs.used_bytes, fs.time)


def find_pod(summary: Summary, *, namespace: str, name: str, uid: str) -> PodStats | None:
    """Find the entry for exactly this Pod; a same-named Pod with another UID is another Pod."""
    for entry in summary.pods or ():
        ref = entry.pod_ref
        if ref.namespace == namespace and ref.name == name and ref.uid == uid:
            return entry
    return None


def usage_from_summary(summary: Summary, *, namespace: str, name: str, uid: str) -> PodUsage | None:
    """Return the Pod's measured usage, or ``None`` when this summary cannot answer for it.

    ``None`` covers "the kubelet does not know this Pod (yet)", "the entry measures nothing"
    and "a figure no node can reach" (:func:`~gpustack_core.usage.implausible`): each sends
    the caller to the metrics.k8s.io fallback. An entry with figures but no time at
    all is also ``None``: a sample must say when it was taken, and inventing "now" would pass a
    stale figure off as fresh. The timestamp is the time of the first figure that has one, in the
    order CPU, memory, storage (CPU's window is what the sample averages over).
    """
    return usage_of(find_pod(summary, namespace=namespace, name=name, uid=uid))


PodKey = tuple[str, str, str]
"""(namespace, name, UID): a same-named Pod with another UID is another Pod."""


def index_pods(summary: Summary) -> dict[PodKey, PodStats]:
    """The summary's entries by Pod, for a caller that looks up many Pods of one summary.

    :func:`find_pod` scans the list: once per Pod that is fine, once per Instance Pod of a node
    every round it is quadratic (~800 Pods, ~300k comparisons). The first entry of a Pod wins,
    as in :func:`find_pod`.
    """
    index: dict[PodKey, PodStats] = {}
    for entry in summary.pods or ():
        ref = entry.pod_ref
        index.setdefault((ref.namespace, ref.name, ref.uid), entry)
    return index


def usage_of(entry: PodStats | None) -> PodUsage | None:
    """One summary entry's usage, as :func:`usage_from_summary` reads it (``None`` likewise)."""
    if entry is None:
        return None
    cpu, memory, storage = _cpu(entry), _memory(entry), _storage(entry)
    figures = [f for f in (cpu, memory, storage) if f is not None]
    timestamp = next((f.time for f in figures if f.time is not None), None)
    if timestamp is None:
        return None
    usage = PodUsage(
        source=UsageSource.KUBELET,
        timestamp=timestamp,
        cpu_millicores=None if cpu is None else nanocores_to_millicores(cpu.value),
        memory_mib=None if memory is None else bytes_to_mib(memory.value),
        storage_mib=None if storage is None else bytes_to_mib(storage.value),
    )
    return None if implausible(usage) is not None else usage
