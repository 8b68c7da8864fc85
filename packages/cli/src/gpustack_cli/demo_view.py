"""Rendering of the demo: a table an operator reads at a glance, or the raw API objects."""

from __future__ import annotations

from typing import Any

import msgspec
from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Column, Table
from rich.text import Text

from gpustack_simulator.demo import DemoRow, demo_metrics, load_demo

ABSENT = "—"
ARRIVING = "…"
"""Grants of an Instance whose Device Manager has not answered yet (a row noting it, live_demo)."""
"""Shown for an absent figure: unmeasured is not zero, and must not look like it."""


def _pair(used: int | None, total: int | None) -> str:
    return f"{ABSENT if used is None else used} / {ABSENT if total is None else total}"


def _figure(value: float | None, unit: str = "") -> str:
    return ABSENT if value is None else f"{value:g}{unit}"


def _name(row: DemoRow) -> str:
    return f"{row.metrics.metadata.namespace}/{row.metrics.metadata.name}"


SHORT_ID = 16
"""Ids up to this long stay whole in the table (a PCI address is 12); longer ones are cut."""

JOIN = "~"
"""Marks a shortened id: its first and last characters either side, the legend has it whole."""


def short_ids(ids: list[str]) -> dict[str, str]:
    """Every id longer than :data:`SHORT_ID` cut to its head, ``~`` and its tail.

    As short as keeps all of them distinct (from each other and from the ids left whole).

    A GPU or MIG UUID is 40 characters, over half an 80-column terminal: ``GPU-6a7b~5500``
    (its prefix and first hex digits, its last four) tells a node's cards apart whether they
    differ early (real UUIDs) or late (made-up ones). Ids that are short already stay.
    """
    unique = sorted(set(ids))
    for head, tail in ((8, 4), (12, 4), (12, 8), (16, 8), (20, 12)):
        cut = {
            i: i if len(i) <= max(SHORT_ID, head + tail + 1) else f"{i[:head]}{JOIN}{i[-tail:]}"
            for i in unique
        }
        if len(set(cut.values())) == len(unique):
            return cut
    return {i: i for i in unique}


def _whole(header: str, cells: list[str], **options: Any) -> Column:
    """A column whose cells are never cut: as wide as its longest cell.

    Folded only if a terminal is narrower than that alone; never an ellipsis.
    """
    width = max((len(c) for c in cells), default=0)
    return Column(header, min_width=max(width, 1), overflow="fold", **options)


def _table(title: str | None, columns: list[Column]) -> Table:
    # No vertical rules and collapsed padding: two characters between columns, so the tables
    # fit 80 columns; the numbers, not the names, wrap when a terminal is narrower still.
    return Table(
        *columns,
        title=title,
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
        pad_edge=False,
        show_edge=False,
    )


class PodView:
    """One row per Instance: the pod-level Total/Used pairs.

    Each pair is ``used / total`` on one line where the terminal is wide enough, else ``used``
    over ``/ total`` (two lines, deliberately), so that the Instance names stay whole.
    """

    def __init__(self, rows: list[DemoRow], *, title: str) -> None:
        self.rows = rows
        self.title = title

    def table(self, *, stacked: bool) -> Table:
        """The table, each pair on one line or on two."""
        names = [_name(row) for row in self.rows]
        table = _table(
            self.title,
            [
                _whole("Instance", names),
                Column("CPU m", justify="right"),
                Column("Memory MiB", justify="right"),
                Column("Storage MiB", justify="right"),
                Column("Grants", justify="right"),
            ],
        )
        for name, row in zip(names, self.rows, strict=True):
            sample = row.metrics.sample
            pairs = [
                _pair(sample.cpu_used_milli_cores, sample.cpu_total_milli_cores),
                _pair(sample.memory_used_mib, sample.memory_total_mib),
                _pair(sample.storage_used_mib, sample.storage_total_mib),
            ]
            table.add_row(
                name,
                *(pair.replace(" / ", "\n/ ") if stacked else pair for pair in pairs),
                _grants(row),
            )
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """The one-line table if it fits the width the console offers, else the stacked one."""
        flat = self.table(stacked=False)
        natural = console.measure(flat, options=options.update_width(10_000)).maximum
        yield flat if natural <= options.max_width else self.table(stacked=True)


def _grants(row: DemoRow) -> str:
    """The grant count; absent (no Device Manager answered), or arriving when the row says so."""
    accelerators = row.metrics.sample.accelerators
    if accelerators is not None:
        return str(len(accelerators))
    return ARRIVING if ARRIVING in row.notes else ABSENT


def pod_table(rows: list[DemoRow], *, title: str) -> PodView:
    """One row per Instance (see :class:`PodView`)."""
    return PodView(rows, title=title)


class AcceleratorView:
    """One row per grant: the figures an Instance reads as its own, whatever the mode.

    Rendered as one table where the terminal is wide enough, else as two (who holds what,
    then the figures, matched by the grant's number), so that no Instance name, id or mode is
    ever cut. Ids longer than :data:`SHORT_ID` are shortened, with a legend of the full ids below.
    """

    TITLE = "accelerators[] — one entry per grant"

    def __init__(self, rows: list[DemoRow]) -> None:
        self.grants = [
            (row, entry) for row in rows for entry in row.metrics.sample.accelerators or []
        ]
        # The API itself carries no index: omit the column rather than show "?".
        self.known = any(row.indexes for row in rows)
        self.short = short_ids([entry.id for _, entry in self.grants])

    def _cells(self) -> tuple[list[str], list[list[str]], int]:
        """The headers, a row of cells per grant, and how many lead columns say who holds it."""
        who = ["Instance", *(["Device"] if self.known else []), "Id", "Mode"]
        headers = [*who, "Memory MiB", "Mem %", "Cores %", "°C", "W", "Healthy"]
        cells = []
        for row, entry in self.grants:
            manufacturer, index = row.indexes.get(entry.id, ("?", -1))
            cells.append(
                [
                    _name(row),
                    *([f"{manufacturer}#{index}"] if self.known else []),
                    self.short[entry.id],
                    entry.mode,
                    _pair(entry.memory_used_mib, entry.memory_total_mib),
                    _figure(entry.memory_utilization_percent),
                    _figure(entry.cores_utilization_percent),
                    _figure(entry.temperature_celsius),
                    _figure(entry.power_usage_watts),
                    "no" if entry.unhealthy else "yes",
                ]
            )
        return headers, cells, len(who)

    @staticmethod
    def _build(title: str, headers: list[str], cells: list[list[str]], whole: int) -> Table:
        """A table of ``cells``' columns; the first ``whole`` are never cut, the rest numbers."""
        columns = [
            _whole(header, [line[i] for line in cells])
            if i < whole
            else Column(header, justify="left" if header == "Healthy" else "right")
            for i, header in enumerate(headers)
        ]
        table = _table(title, columns)
        for line in cells:
            table.add_row(*line)
        return table

    def tables(self, width: int, console: Console) -> list[Table]:
        """One table if it fits ``width`` unfolded, else who holds what and the figures apart."""
        headers, cells, who = self._cells()
        one = self._build(self.TITLE, headers, cells, who)
        # Measured unbounded: a table's measurement is clamped to the width it is offered.
        natural = console.measure(one, options=console.options.update_width(10_000)).maximum
        if natural <= width:
            return [one]
        # Split: a grant's number ("#") matches its figures to who holds it.
        numbered = [[str(n), *line] for n, line in enumerate(cells, start=1)]
        held = self._build(
            self.TITLE, ["#", *headers[:who]], [line[: who + 1] for line in numbered], who + 1
        )
        figures = self._build(
            "their figures, by #",
            ["#", *headers[who:]],
            [[line[0], *line[who + 1 :]] for line in numbered],
            1,
        )
        return [held, figures]

    def legend(self) -> list[str]:
        """``short  full`` for every shortened id, in table order."""
        seen: dict[str, str] = {}
        for _, entry in self.grants:
            if self.short[entry.id] != entry.id:
                seen.setdefault(self.short[entry.id], entry.id)
        return [f"  {short}  {full}" for short, full in seen.items()]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """The table(s) at the width the console offers, then the id legend."""
        yield from self.tables(options.max_width, console)
        legend = self.legend()
        if legend:
            yield Text("\n".join(["ids in full:", *legend]), no_wrap=True, overflow="fold")


def accelerator_table(rows: list[DemoRow]) -> AcceleratorView:
    """One row per grant (see :class:`AcceleratorView`)."""
    return AcceleratorView(rows)


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
