"""Rendering of the demo: a table an operator reads at a glance, or the raw API objects."""

from __future__ import annotations

import msgspec
from rich.console import Console
from rich.table import Table

from gpustack_simulator.demo import DemoRow, demo_metrics, load_demo

ABSENT = "—"
"""Shown for an absent figure: unmeasured is not zero, and must not look like it."""


def _pair(used: int | None, total: int | None) -> str:
    return f"{ABSENT if used is None else used} / {ABSENT if total is None else total}"


def _figure(value: float | None, unit: str = "") -> str:
    return ABSENT if value is None else f"{value:g}{unit}"


def _name(row: DemoRow) -> str:
    return f"{row.metrics.metadata.namespace}/{row.metrics.metadata.name}"


def pod_table(rows: list[DemoRow], *, title: str) -> Table:
    """One row per Instance: the pod-level Total/Used pairs."""
    table = Table(title=title)
    table.add_column("Instance")
    table.add_column("CPU m used/total", justify="right")
    table.add_column("Memory MiB", justify="right")
    table.add_column("Storage MiB", justify="right")
    table.add_column("Accelerators", justify="right")
    for row in rows:
        sample = row.metrics.sample
        table.add_row(
            _name(row),
            _pair(sample.cpu_used_milli_cores, sample.cpu_total_milli_cores),
            _pair(sample.memory_used_mib, sample.memory_total_mib),
            _pair(sample.storage_used_mib, sample.storage_total_mib),
            ABSENT if sample.accelerators is None else str(len(sample.accelerators)),
        )
    return table


def accelerator_table(rows: list[DemoRow]) -> Table:
    """One row per grant: the figures an Instance reads as its own, whatever the mode."""
    table = Table(title="accelerators[] — one entry per grant")
    table.add_column("Instance")
    known = any(row.indexes for row in rows)  # the API itself carries no index: omit, not "?"
    if known:
        table.add_column("Device")
    table.add_column("Id")
    table.add_column("Mode")
    table.add_column("Memory MiB", justify="right")
    table.add_column("Mem %", justify="right")
    table.add_column("Cores %", justify="right")
    table.add_column("°C", justify="right")
    table.add_column("W", justify="right")
    table.add_column("Healthy")
    for row in rows:
        for entry in row.metrics.sample.accelerators or []:
            manufacturer, index = row.indexes.get(entry.id, ("?", -1))
            device = [f"{manufacturer}#{index}"] if known else []
            table.add_row(
                _name(row),
                *device,
                entry.id,
                entry.mode,
                _pair(entry.memory_used_mib, entry.memory_total_mib),
                _figure(entry.memory_utilization_percent),
                _figure(entry.cores_utilization_percent),
                _figure(entry.temperature_celsius),
                _figure(entry.power_usage_watts),
                "no" if entry.unhealthy else "yes",
            )
    return table


def run_demo(*, as_json: bool, console: Console | None = None) -> None:
    """Compute the demo node's metrics and print them."""
    console = console or Console()
    node = load_demo()
    rows = demo_metrics(node)
    if as_json:
        for row in rows:
            console.print_json(msgspec.json.encode(row.metrics).decode())
        return
    console.print(node.description)
    console.print(pod_table(rows, title=f"InstanceMetrics on {node.node} at {node.observed_at}"))
    console.print(accelerator_table(rows))
    for row in rows:
        for note in row.notes:
            console.print(f"[dim]{row.metrics.metadata.name}: {note}[/dim]")
    # Show the object of a carved share: the case where "the Instance's own figures" matters.
    example = next(
        (r for r in rows if any(a.mode == "Sliced" for a in r.metrics.sample.accelerators or [])),
        rows[0],
    )
    name = example.metrics.metadata
    console.print(
        f"\nGET /apis/worker.gpustack.ai/v1/namespaces/{name.namespace}/instances/"
        f"{name.name}/metrics"
    )
    console.print_json(msgspec.json.encode(example.metrics).decode())
