"""The kubelet's ``/metrics/resource``, written from the same figures as its ``stats/summary``.

metrics-server scrapes this endpoint (not the summary) from every node, so a simulated node must
serve it for metrics-server to serve ``metrics.k8s.io``. The families and labels are the
kubelet's resource-metrics collector's, all ``[STABLE]``: node and container cumulative CPU in
core-seconds, working-set bytes, and container start times, each sample stamped in milliseconds
with the time the figure was taken. The Pod-level families are written too, as the kubelet does.

A figure the summary leaves out is left out here (absent is not zero); a container whose CPU or
memory is absent gets neither sample, which metrics-server reads as "no complete metric", as it
would from a kubelet that could not measure it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_HELP = {
    "container_cpu_usage_seconds_total": (
        "counter", "Cumulative cpu time consumed by the container in core-seconds"),
    "container_memory_working_set_bytes": (
        "gauge", "Current working set of the container in bytes"),
    "container_start_time_seconds": (
        "gauge", "Start time of the container since unix epoch in seconds"),
    "node_cpu_usage_seconds_total": (
        "counter", "Cumulative cpu time consumed by the node in core-seconds"),
    "node_memory_working_set_bytes": ("gauge", "Current working set of the node in bytes"),
    "pod_cpu_usage_seconds_total": (
        "counter", "Cumulative cpu time consumed by the pod in core-seconds"),
    "pod_memory_working_set_bytes": ("gauge", "Current working set of the pod in bytes"),
    "resource_scrape_error": (
        "gauge", "1 if there was an error while getting container metrics, 0 otherwise"),
}  # fmt: skip


def _millis(stamp: object) -> int | None:
    """An RFC 3339 time as Unix milliseconds; ``None`` when absent or unreadable."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return int(datetime.fromisoformat(stamp).timestamp() * 1000)
    except ValueError:
        return None


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _number(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def _figure(block: object, key: str, per_unit: int = 1) -> tuple[float, int] | None:
    """``(figure ÷ per_unit, ms stamp)`` of a summary block's ``key``, when both are present."""
    if not isinstance(block, Mapping):
        return None
    used, at = block.get(key), _millis(block.get("time"))
    if not isinstance(used, int) or isinstance(used, bool) or at is None:
        return None
    return used / per_unit, at


def _cpu_seconds(block: object) -> tuple[float, int] | None:
    """Core-seconds of a summary ``cpu`` block (it counts nanoseconds)."""
    return _figure(block, "usageCoreNanoSeconds", 1_000_000_000)


def _working_set(block: object) -> tuple[float, int] | None:
    return _figure(block, "workingSetBytes")


def render(summary: Mapping[str, Any]) -> str:
    """The text exposition of ``summary`` (a ``stats/summary`` document)."""
    samples: dict[str, list[str]] = {name: [] for name in _HELP}

    def add(family: str, labels: str, figure: tuple[float, int] | None) -> None:
        if figure is not None:
            value, at = figure
            samples[family].append(f"{family}{labels} {_number(value)} {at}")

    node = summary.get("node") or {}
    add("node_cpu_usage_seconds_total", "", _cpu_seconds(node.get("cpu")))
    add("node_memory_working_set_bytes", "", _working_set(node.get("memory")))
    for pod in summary.get("pods") or ():
        ref = pod.get("podRef") or {}
        pod_labels = [("namespace", str(ref.get("namespace", ""))), ("pod", str(ref.get("name")))]
        add("pod_cpu_usage_seconds_total", _labels(pod_labels), _cpu_seconds(pod.get("cpu")))
        add("pod_memory_working_set_bytes", _labels(pod_labels), _working_set(pod.get("memory")))
        for container in pod.get("containers") or ():
            labels = _labels([("container", str(container.get("name"))), *pod_labels])
            cpu = _cpu_seconds(container.get("cpu"))
            add("container_cpu_usage_seconds_total", labels, cpu)
            add("container_memory_working_set_bytes", labels, _working_set(container.get("memory")))
            started = _millis(container.get("startTime"))
            if started is not None and cpu is not None:
                add("container_start_time_seconds", labels, (started / 1000, cpu[1]))
    samples["resource_scrape_error"].append("resource_scrape_error 0")
    lines: list[str] = []
    for family, (kind, text) in _HELP.items():
        if samples[family]:
            lines += [f"# HELP {family} [STABLE] {text}", f"# TYPE {family} {kind}"]
            lines += samples[family]
    return "\n".join(lines) + "\n"
