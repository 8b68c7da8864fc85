"""The node exporter's round: which series exist and what they say, decided once per period.

Pure composition lives here (role, Instance Pods, samples through the same core code as the
subresource); the poller around it only fetches. A scrape never does I/O: the round's first scrape
of a format renders it (off the loop, only what changed since the last round), the others serve
those bytes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import trio

from gpustack_core import contract
from gpustack_core.allocation import Grant
from gpustack_core.decoding import ContractError
from gpustack_core.kubelet import Summary, index_pods, parse_summary, usage_of
from gpustack_core.pods import Pod, is_instance_pod, is_ready, is_terminating
from gpustack_core.sample import instance_sample
from gpustack_core.snapshot import (
    DEFAULT_FRESHNESS_POLICY,
    MAX_MONITOR_PERIOD,
    Freshness,
    MonitorSnapshot,
)
from gpustack_core.usage import DeclaredTotals
from gpustack_devicemanager.exposition import ExpositionHolder, Family
from gpustack_devicemanager.holder import SnapshotHolder
from gpustack_devicemanager.podview import PodEntry, decoded
from gpustack_kube.client import KubeClient, KubeError
from gpustack_kube.kubelet import KubeletAccess, SummaryReader

log = logging.getLogger("gpustack.devicemanager.exporter")

COMPONENT_LABEL = contract.COMPONENT_LABEL
COMPONENT = contract.DEVICE_MANAGER_COMPONENT
MANUFACTURER_LABEL = contract.MANUFACTURER_LABEL
SUMMARY_LIMIT = 32 << 20
"""A node summary larger than this is refused rather than buffered without bound."""

POD_FIELDS = (
    ("cpu", "total", "millicores", "cpu_total_milli_cores", "The Instance's CPU limit."),
    ("cpu", "used", "millicores", "cpu_used_milli_cores", "Pod CPU usage."),
    ("memory", "total", "mib", "memory_total_mib", "The Instance's memory limit."),
    ("memory", "used", "mib", "memory_used_mib", "Pod working-set memory."),
    ("storage", "total", "mib", "storage_total_mib", "The Instance's ephemeral-storage limit."),
    ("storage", "used", "mib", "storage_used_mib", "Pod ephemeral-storage usage."),
)
ACCELERATOR_FIELDS = (
    ("memory_total_mib", "memory_total_mib", "Memory granted to the Instance."),
    ("memory_used_mib", "memory_used_mib", "Memory measured held of that grant."),
    ("memory_utilization_percent", "memory_utilization_percent", "Used over granted memory."),
    (
        "cores_utilization_percent",
        "cores_utilization_percent",
        "Compute used against the Instance's own allowance.",
    ),
    ("temperature_celsius", "temperature_celsius", "The whole device's temperature."),
    ("power_usage_watts", "power_usage_watts", "The whole device's power draw."),
    ("unhealthy", "unhealthy", "1 when the whole device is unhealthy."),
)
POD_LABELS = ("namespace", "instance_name", "instance_uid", "node")
ACCELERATOR_LABELS = (*POD_LABELS, "id", "index", "manufacturer", "mode")


def instance_pods(pods: Sequence[Pod]) -> list[Pod]:
    """The node's Instance Pods, not terminating, the newest per Instance."""
    newest: dict[str, Pod] = {}
    for pod in pods:
        if not is_instance_pod(pod) or is_terminating(pod):
            continue
        owner = pod.metadata.labels.get(contract.PART_OF_LABEL, "")
        current = newest.get(owner)
        if current is None or pod.metadata.creation_timestamp > current.metadata.creation_timestamp:
            newest[owner] = pod
    return sorted(newest.values(), key=lambda p: (p.metadata.namespace, p.metadata.name))


def publishes_pod_level(pods: Sequence[Pod], *, namespace: str, manufacturer: str) -> bool:
    """Whether this Device Manager publishes the Pod-level families on its node.

    Among the node's Ready, non-terminating Device Manager Pods of our namespace, the one whose
    manufacturer label sorts first does. No lease: when it stops being Ready the next one's
    round sees that and takes over by itself. With no such Pod visible (ours not Ready yet),
    nobody claims it this round.
    """
    candidates = sorted(
        pod.metadata.labels.get(MANUFACTURER_LABEL, "")
        for pod in pods
        if pod.metadata.namespace == namespace
        and pod.metadata.labels.get(COMPONENT_LABEL) == COMPONENT
        and is_ready(pod)
        and not is_terminating(pod)
        and pod.metadata.labels.get(MANUFACTURER_LABEL)
    )
    return bool(candidates) and candidates[0] == manufacturer


@dataclass(frozen=True)
class RoundInputs:
    """Everything one round read; ``summary`` is ``None`` when the kubelet read failed."""

    node: str
    manufacturer: str
    pods: Sequence[Pod] | None
    """``None``: the node's Pods are unknown (index not synced): the round failed outright."""
    publisher: bool
    summary: Summary | None
    kubelet_seconds: float | None
    snapshot: MonitorSnapshot | None
    now: datetime
    freshness: Freshness = DEFAULT_FRESHNESS_POLICY
    """This Device Manager's own monitor period decides whether its snapshot is fresh."""
    grants: Mapping[str, Sequence[Grant]] = field(default_factory=dict)
    """Pod UID → grants the informer already parsed; a Pod not here has its annotation parsed
    in the round (raw input, or an annotation that did not parse and must say why)."""


@dataclass
class Round:
    """The families one round publishes, and why figures are missing."""

    families: list[Family] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _family(name: str, documentation: str, labels: Sequence[str]) -> Family:
    return Family(name, documentation, tuple(labels))


def compose(inputs: RoundInputs) -> Round:
    """Decide every series of the round (the subresource's figures, by the same code)."""
    fresh = inputs.snapshot is not None and inputs.freshness.is_fresh(inputs.snapshot, inputs.now)
    result = Round(families=_collector(inputs, fresh))
    if inputs.pods is None:
        result.notes.append("the node's Pods are not known yet: no figures this round")
        return result
    snapshot = inputs.snapshot if fresh else None
    result.families.extend(_instances(inputs, inputs.pods, snapshot, result.notes))
    result.families.append(_capability(inputs, snapshot))
    return result


def _collector(inputs: RoundInputs, fresh: bool) -> list[Family]:
    """The collector's verdict on itself, published whatever else fails."""
    success = _family(
        "gpustack_instance_metrics_collector_success",
        "Whether that source's last sampling round succeeded.",
        ("source",),
    )
    duration = _family(
        "gpustack_instance_metrics_collector_duration_seconds",
        "How long the last kubelet poll took, whether it succeeded or not.",
        ("source",),
    )
    success.add(("snapshot",), 1.0 if fresh else 0.0)
    if inputs.publisher:
        read = inputs.summary is not None and inputs.pods is not None
        success.add(("kubelet",), 1.0 if read else 0.0)
        if inputs.kubelet_seconds is not None:
            duration.add(("kubelet",), inputs.kubelet_seconds)
    return [success, duration]


def _instances(
    inputs: RoundInputs, pods: Sequence[Pod], snapshot: MonitorSnapshot | None, notes: list[str]
) -> list[Family]:
    """Pod-level (publisher only) and own-accelerator families for every Instance Pod."""
    pod_families = [
        _family(f"gpustack_instance_{resource}_{kind}_{unit}", text, POD_LABELS)
        for resource, kind, unit, _, text in POD_FIELDS
    ]
    accelerator_families = [
        _family(f"gpustack_instance_accelerator_{suffix}", text, ACCELERATOR_LABELS)
        for suffix, _, text in ACCELERATOR_FIELDS
    ]
    snapshots = {inputs.manufacturer: snapshot} if snapshot is not None else {}
    entries = index_pods(inputs.summary) if inputs.summary is not None else {}
    for pod in instance_pods(pods):
        meta = pod.metadata
        usage = usage_of(entries.get((meta.namespace, meta.name, meta.uid)))
        composed = instance_sample(
            pod=pod,
            fallback=DeclaredTotals(0, 0, 0),
            usage=usage,
            snapshots=snapshots,
            now=inputs.now,
            freshness=inputs.freshness,
            held=inputs.grants.get(pod.metadata.uid),
        )
        notes.extend(composed.notes)
        labels = (
            pod.metadata.namespace,
            pod.metadata.name,
            pod.metadata.labels.get(contract.PART_OF_LABEL, ""),
            inputs.node,
        )
        if inputs.publisher:
            for family, (_, _, _, attribute, _) in zip(pod_families, POD_FIELDS, strict=True):
                _add(family, labels, getattr(composed.sample, attribute))
        for entry in composed.accelerators:
            if entry.manufacturer != inputs.manufacturer:
                continue  # another Device Manager publishes its own accelerators
            accelerator_labels = (
                *labels,
                entry.metrics.id,
                str(entry.index),
                entry.manufacturer,
                entry.metrics.mode,
            )
            for family, (_, attribute, _) in zip(
                accelerator_families, ACCELERATOR_FIELDS, strict=True
            ):
                _add(family, accelerator_labels, getattr(entry.metrics, attribute))
    return [*pod_families, *accelerator_families]


def _add(family: Family, labels: tuple[str, ...], value: float | bool | None) -> None:
    """An unmeasured figure publishes no sample: a gauge cannot say "unknown"."""
    if value is not None:
        family.add(labels, float(value))


def _capability(inputs: RoundInputs, snapshot: MonitorSnapshot | None) -> Family:
    """Per device (and partition) and entry point, whether the per-process query answered."""
    capability = _family(
        "gpustack_accelerator_process_capability",
        "Whether the per-process query answered on this node's driver (1) or not (0).",
        ("node", "manufacturer", "id", "entry_point", "reason"),
    )
    if snapshot is None or snapshot.slices is None:
        return capability
    section = snapshot.slices
    answers = [
        *((d.device_id, d.memory_reason, d.cores_reason) for d in section.devices),
        *((p.id, p.memory_reason, p.cores_reason) for p in section.partitions),
    ]
    seen: set[str] = set()
    for device_id, memory_reason, cores_reason in answers:
        if device_id in seen:
            continue
        seen.add(device_id)
        for entry_point, reason in (("memory", memory_reason), ("cores", cores_reason)):
            capability.add(
                (inputs.node, inputs.manufacturer, device_id, entry_point, reason),
                0.0 if reason else 1.0,
            )
    return capability


InstanceUids = Callable[[Sequence[Pod]], Awaitable[Mapping[tuple[str, str], str] | None]]
"""How a round learns its Instance Pods' Instances' current UIDs (``ExporterSource``)."""


async def _unknown_uids() -> Mapping[tuple[str, str], str] | None:
    return None


@dataclass
class ExporterSource:
    """Where a round's inputs come from: the node-pod index, the kubelet, our snapshot."""

    node: str
    manufacturer: str
    namespace: str
    pods: Callable[[], Sequence[PodEntry] | None]
    client: KubeClient | None
    holder: SnapshotHolder
    kubelet: KubeletAccess = field(default_factory=KubeletAccess)
    """How the kubelet's summary is read (through the API server unless told otherwise)."""
    node_address: str | None = None
    """This node's address, for a kubelet read directly."""
    instance_uids: InstanceUids = field(default=lambda pods: _unknown_uids())
    """Given the round's Pods, (namespace, name) → the *current* UID of each Instance they
    reference, or ``None`` when that cannot be known (no API access): an Instance Pod is
    published only while its part-of UID is its Instance's current UID, so a recreated
    Instance never shows its predecessor's Pod (incarnations.py reads them)."""


def current_incarnations(
    pods: Sequence[Pod], instance_uids: Mapping[tuple[str, str], str] | None
) -> list[Pod]:
    """``pods`` without the Instance Pods of an Instance that is gone or was recreated.

    The Pod of a deleted Instance lingers until the garbage collector reaches it, and a new
    Instance of the same name may already exist: that Pod is labelled with the old UID, so it
    is left out rather than published under the new Instance's name.
    """
    if instance_uids is None:
        return list(pods)
    kept = []
    for pod in pods:
        if is_instance_pod(pod):
            owner = next((r for r in pod.metadata.owner_references if r.controller), None)
            key = (pod.metadata.namespace, owner.name if owner is not None else "")
            if instance_uids.get(key) != pod.metadata.labels.get(contract.PART_OF_LABEL):
                continue
        kept.append(pod)
    return kept


async def read_inputs(
    source: ExporterSource, now: datetime, freshness: Freshness = DEFAULT_FRESHNESS_POLICY
) -> RoundInputs:
    """One round's reads: the kubelet afresh (no cache), everything else from memory."""
    raw = source.pods()
    pods: list[Pod] | None = None
    grants: dict[str, Sequence[Grant]] = {}
    if raw is not None:
        skipped: list[str] = []
        entries = decoded(raw, skipped)
        every = [entry.pod for entry in entries]
        pods = current_incarnations(every, await source.instance_uids(every))
        grants = {e.pod.metadata.uid: e.grants for e in entries if e.grant_error is None}
        for problem in skipped:
            log.debug("skipping a Pod the API returned: %s", problem)
    publisher = pods is not None and publishes_pod_level(
        pods, namespace=source.namespace, manufacturer=source.manufacturer
    )
    summary: Summary | None = None
    seconds: float | None = None
    if publisher and source.client is not None:
        started = time.monotonic()
        try:
            # A reader per round: a direct kubelet connection every period costs one handshake,
            # and nothing is left open between rounds.
            async with SummaryReader(source.client, source.kubelet) as reader:
                body = await reader.read(source.node, source.node_address, limit=SUMMARY_LIMIT)
            summary = parse_summary(body)
        except (KubeError, ContractError) as exc:
            log.warning("kubelet summary of %s unavailable: %s", source.node, exc)
        seconds = time.monotonic() - started
    return RoundInputs(
        source.node,
        source.manufacturer,
        pods,
        publisher,
        summary,
        seconds,
        source.holder.current.snapshot,
        now,
        freshness,
        grants,
    )


def _compose_round(inputs: RoundInputs) -> list[Family]:
    return compose(inputs).families


async def run_exporter(
    source: ExporterSource,
    exposition: ExpositionHolder,
    *,
    period: float,
    wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    run_sync: Callable[
        [Callable[[RoundInputs], list[Family]], RoundInputs], Awaitable[list[Family]]
    ] = trio.to_thread.run_sync,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Compose a round from each snapshot the monitor publishes; a round never reuses figures.

    The round is triggered by the publish, not by a timer of its own: a timer drifts against
    the monitor's, so ``/metrics`` served figures up to a period older than the snapshot
    beside it, and a render could coincide with a tick. The kubelet is still read afresh in
    every round. When no snapshot comes for ``period`` plus half of it (ticks have stopped), a
    round runs anyway, so the collector's ``snapshot`` success gauge falls to 0 instead of the
    last good figures staying up. ``run_sync`` takes the compose off the loop (inline in
    tests under a mock clock, which would otherwise jump while the thread works). The round
    publishes families; each format is rendered when a scrape first asks for it.
    """
    freshness = Freshness(min(timedelta(seconds=period), MAX_MONITOR_PERIOD))
    # Before the first tick, wait for it; with a snapshot already there, build on it at once.
    current = source.holder.current
    seen = current if current.snapshot is None else None
    task_status.started()
    while True:
        seen = await source.holder.next_publication(seen, timeout=period * 1.5)
        inputs = await read_inputs(source, wall_clock(), freshness)
        # Composing ~10k series takes tens of ms: off the loop, so scrapes and probes keep
        # being answered while a round is built.
        exposition.publish(await run_sync(_compose_round, inputs))
