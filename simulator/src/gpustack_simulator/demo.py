"""The embedded demo node: example Pods, a kubelet summary and two Device Manager snapshots.

Until the daemons run, this is the product's main job on its embedded default: every document
goes through the same parsers and the same composition code the worker and exporter use, so
the demo's figures are the real core's figures, not a mock-up.
"""

from __future__ import annotations

from datetime import datetime
from importlib import resources
from typing import NamedTuple

import msgspec

from gpustack_core.decoding import decode_json
from gpustack_core.instance_metrics import InstanceMetrics, ObjectMeta
from gpustack_core.kubelet import parse_summary, usage_from_summary
from gpustack_core.pods import Pod, is_instance_pod, parse_pod
from gpustack_core.sample import instance_sample, totals_from_resources
from gpustack_core.snapshot import MonitorSnapshot, parse_snapshot

DEMO_RESOURCE = "demo_node.json"


class DemoInstance(msgspec.Struct, rename="camel", kw_only=True, frozen=True):
    """An Instance of the demo; ``resources`` is its own declaration, used when it has no Pod."""

    name: str
    namespace: str
    uid: str
    pod: str | None = None
    resources: dict[str, str] = {}


class DemoNode(msgspec.Struct, rename="camel", kw_only=True, frozen=True):
    """The demo document; sub-documents stay raw so the real parsers read them."""

    description: str
    node: str
    observed_at: datetime
    instances: tuple[DemoInstance, ...]
    pods: tuple[msgspec.Raw, ...]
    kubelet_summary: msgspec.Raw
    snapshots: dict[str, msgspec.Raw]


class DemoRow(NamedTuple):
    """One Instance's response, plus what a table shows beside it."""

    metrics: InstanceMetrics
    indexes: dict[str, tuple[str, int]]
    """Accelerator entry id → (manufacturer, index), the exporter's extra labels."""
    notes: list[str]


def load_demo(data: bytes | None = None) -> DemoNode:
    """Read the embedded demo document (or ``data``), naming any malformed field."""
    if data is None:
        data = resources.files("gpustack_simulator.examples").joinpath(DEMO_RESOURCE).read_bytes()
    return decode_json(data, DemoNode, what=f"demo document {DEMO_RESOURCE}")


def demo_metrics(node: DemoNode) -> list[DemoRow]:
    """Compute every demo Instance's ``InstanceMetrics`` exactly as the worker would."""
    pods: dict[tuple[str, str], Pod] = {}
    for raw in node.pods:
        parsed = parse_pod(bytes(raw))
        pods[(parsed.metadata.namespace, parsed.metadata.name)] = parsed
    summary = parse_summary(bytes(node.kubelet_summary))
    snapshots: dict[str, MonitorSnapshot] = {
        manufacturer: parse_snapshot(bytes(raw)) for manufacturer, raw in node.snapshots.items()
    }
    rows: list[DemoRow] = []
    for instance in node.instances:
        candidate = pods.get((instance.namespace, instance.pod)) if instance.pod else None
        # Another incarnation's Pod (a different part-of UID) is not this Instance's.
        pod = candidate if candidate and is_instance_pod(candidate, instance.uid) else None
        usage = (
            usage_from_summary(
                summary,
                namespace=pod.metadata.namespace,
                name=pod.metadata.name,
                uid=pod.metadata.uid,
            )
            if pod is not None
            else None
        )
        result = instance_sample(
            pod=pod,
            fallback=totals_from_resources(instance.resources, what=instance.name),
            usage=usage,
            snapshots=snapshots,
            now=node.observed_at,
        )
        metadata = ObjectMeta(name=instance.name, namespace=instance.namespace, uid=instance.uid)
        rows.append(
            DemoRow(
                InstanceMetrics.of(metadata, result.sample),
                {a.metrics.id: (a.manufacturer, a.index) for a in result.accelerators},
                result.notes,
            )
        )
    return rows
