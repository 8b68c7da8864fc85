"""``gpustack-operator simulator …`` and ``device-manager detect``: recordings in and out."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from gpustack_core.decoding import ContractError
from gpustack_simulator.recorder import exercise
from gpustack_simulator.recording import Recording, dump_recording, load_recording
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.replay.validate import load_replayable
from gpustack_simulator.synth.timeline import VirtualClock
from gpustack_vendors.loading import LibraryUnavailableError, open_backend
from gpustack_vendors.protocol import Backend

DEFAULT_RECORDINGS = Path(os.environ.get("GPUSTACK_RECORDINGS", "recordings"))


def validate(files: list[Path], console: Console) -> int:
    """Check each file; print one line per file; the exit code counts failures."""
    from gpustack_simulator.scenario import expand, is_scenario, load_scenario, recordings_for

    failures = 0
    for path in files:
        if is_scenario(path):
            try:
                expanded = expand(load_scenario(path), base=recordings_for(path))
            except ContractError as exc:
                failures += 1
                console.print(f"[red]{path}: invalid[/red]: {exc}", soft_wrap=True)
                continue
            console.print(
                f"{path}: ok (scenario, {len(expanded.nodes)} nodes, "
                f"{len(expanded.instances)} Instances, {len(expanded.pods)} Pods)"
            )
            continue
        try:
            recording = load_replayable(path)
        except (ContractError, OSError) as exc:
            failures += 1
            console.print(f"[red]{path}: invalid[/red]: {exc}", soft_wrap=True)
            continue
        calls = sum(len(library.calls) for library in recording.libraries)
        console.print(
            f"{path}: ok ({recording.vendor}, {calls} calls, {recording.provenance.kind})"
        )
    return 1 if failures else 0


def cards(recording: Recording) -> int:
    """Cards the recording's backend detects (not their partitions), for every vendor.

    Counted by replaying the recording through its vendor's backend, because how a library
    names its cards differs (Hygon's first library may be the MIG one, Ascend's handles are
    chips): only detection knows what a card is.
    """
    backend = replay_backend(recording)
    try:
        return len(backend.detect().devices)
    finally:
        backend.close()


def list_recordings(root: Path, console: Console) -> int:
    """A table of every recording under ``root``; invalid ones are listed as such.

    A ``root`` that is not a folder is one line on stderr and exit 1.
    """
    if not root.is_dir():
        from gpustack_cli.errors import fail

        fail("gpustack-operator simulator list", f"{root} is not a folder of recordings")
    table = Table(title=f"recordings under {root}")
    for column in ("File", "Vendor", "Cards", "Provenance", "Description"):
        table.add_column(column)
    from gpustack_simulator.scenario import expand, is_scenario, load_scenario, recordings_for

    files = sorted(root.glob("**/*.yaml"))
    for path in files:
        if is_scenario(path):
            name = str(path.relative_to(root))
            try:
                scenario = load_scenario(path)
                nodes = len(expand(scenario, base=recordings_for(path)).nodes)
            except ContractError as exc:
                table.add_row(name, "scenario", "?", "[red]invalid[/red]", str(exc))
                continue
            table.add_row(name, "scenario", str(nodes), "-", scenario.description)
            continue
        try:
            recording = load_recording(path)
        except (ContractError, OSError) as exc:
            table.add_row(str(path.relative_to(root)), "?", "?", "[red]invalid[/red]", str(exc))
            continue
        try:
            count = str(cards(recording))
        except Exception as exc:  # a recording that loads but does not replay: still a row
            table.add_row(
                str(path.relative_to(root)),
                recording.vendor,
                "?",
                "[red]invalid[/red]",
                f"does not replay: {exc}",
            )
            continue
        table.add_row(
            str(path.relative_to(root)),
            recording.vendor,
            count,
            recording.provenance.kind,
            recording.description,
        )
    console.print(table)
    return 0 if files else 1


def backend_for(manufacturer: str | None, simulate: Path | None) -> Backend:
    """The real library, or a replay of ``simulate``; a mismatched manufacturer is refused."""
    if simulate is None:
        if manufacturer is None:
            raise typer.BadParameter("--manufacturer is required without --simulate")
        return open_backend(manufacturer)
    recording = load_replayable(simulate)
    if manufacturer is not None and manufacturer != recording.vendor:
        raise typer.BadParameter(
            f"{simulate} is a {recording.vendor} recording, not {manufacturer}"
        )
    return replay_backend(recording)


def detect(manufacturer: str | None, simulate: Path | None, fmt: str = "yaml") -> str:
    """Detection as YAML or JSON (what the Devices object's spec is built from)."""
    from gpustack_cli.output import render

    backend = backend_for(manufacturer, simulate)
    try:
        detection = backend.detect()
    finally:
        backend.close()
    return render(detection, fmt)


def replay(path: Path, samples: int, interval: float, console: Console) -> None:
    """Drive the backend over a recording in virtual time and print each pass's cards."""
    recording = load_replayable(path)
    clock = VirtualClock()
    backend = replay_backend(recording, clock=clock)
    devices = [d.id for d in backend.detect().devices]
    for index in range(samples):
        table = Table(title=f"{path.name} at t={clock.now:g}s")
        for column in ("Device", "Memory MiB", "Cores %", "°C", "W", "Processes"):
            table.add_column(column)
        processes = backend.processes(devices)
        for card in backend.sample():
            rows = processes[card.id]
            reason = rows.memory_reason or rows.cores_reason
            table.add_row(
                card.id,
                f"{card.memory_used_mib} / {card.memory_total_mib}",
                str(card.cores_utilization_percent),
                str(card.temperature_celsius),
                str(card.power_watts),
                f"{len(rows.rows)}" + (f" ({reason})" if reason else ""),
            )
        console.print(table)
        if index + 1 < samples:
            clock.sleep(interval)
    backend.close()


def recordable() -> tuple[str, ...]:
    """The manufacturers ``simulator record`` can record: every one of the vendor registry.

    Read from the registry when asked (the record command imports it anyway), so a manufacturer
    added there is recordable at once; the help text reads the core table instead, so that
    ``--help`` imports no vendor binding.
    """
    from gpustack_vendors.registry import VENDORS

    return tuple(VENDORS)


def record(
    vendor: str, samples: int, interval: float, output: Path, description: str, console: Console
) -> None:
    """Record this machine's cards and write a recording ``validate`` accepts.

    A library that does not open (or whose first call fails) is a one-line error, exit 1: it
    names the library and, for our ctypes bindings, every path searched.
    """
    from gpustack_cli.errors import fail
    from gpustack_simulator.capture import record as record_node
    from gpustack_vendors.calling import CallError

    # No bar where stderr is not a terminal: a log or a pipe reads only the outcome's line.
    with Progress(console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task(f"recording {vendor}", total=samples)
        try:
            recording = record_node(
                vendor,
                samples=samples,
                interval=interval,
                description=description,
                progress=lambda done: progress.update(task, completed=done),
            )
        except (LibraryUnavailableError, CallError) as exc:
            failure: Exception | None = exc
        else:
            failure = None
    if failure is not None:
        detail = str(failure).removeprefix(f"{vendor}: ")  # Hygon's loader names itself too
        fail("gpustack-operator simulator record", f"cannot record {vendor}: {detail}")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(dump_recording(recording))
    load_recording(output)  # what we write must be what validate accepts
    console.print(f"wrote {output}")
    for line in recording.provenance.redacted:
        console.print(f"  redacted {line}")


__all__ = [
    "DEFAULT_RECORDINGS",
    "detect",
    "exercise",
    "list_recordings",
    "record",
    "replay",
    "validate",
]
