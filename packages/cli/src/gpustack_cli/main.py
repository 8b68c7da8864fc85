"""The single ``gpustack-operator`` console script.

Each daemon is a subcommand so one image serves every role. Subcommands that belong to later
milestones are present with their help text and fail with exit code 2 and a message saying so,
rather than pretending to run.
"""

from __future__ import annotations

from importlib.metadata import version as package_version
from typing import Annotated, NoReturn

import typer

app = typer.Typer(
    name="gpustack-operator",
    help="Instance utilization for GPU clusters: Device Manager, worker API and simulator.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
device_manager = typer.Typer(
    help="Per-node, per-manufacturer accelerator sampler and exporter.", no_args_is_help=True
)
simulator = typer.Typer(
    help="Replay recorded vendor payloads, record new ones, validate recordings.",
    no_args_is_help=True,
)
app.add_typer(device_manager, name="device-manager")
app.add_typer(simulator, name="simulator")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpustack-operator {package_version('gpustack-cli')}")
        raise typer.Exit


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Instance utilization for GPU clusters: Device Manager, worker API and simulator."""


def _not_yet(command: str) -> NoReturn:
    typer.echo(f"gpustack-operator {command}: not available in this release yet", err=True)
    raise typer.Exit(code=2)


@app.command()
def demo(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print every InstanceMetrics object as JSON.")
    ] = False,
    once: Annotated[
        bool, typer.Option("--once", help="Print once and exit (the default for now).")
    ] = True,
) -> None:
    """Compute and print the InstanceMetrics of the embedded demo node through the real core."""
    from gpustack_cli.demo_view import run_demo

    run_demo(as_json=as_json)


@app.command()
def worker() -> None:
    """Serve the worker.gpustack.ai/v1 aggregated API (instances and instances/metrics)."""
    _not_yet("worker")


@device_manager.command("serve")
def dm_serve() -> None:
    """Sample accelerators every monitor period and serve /monitor/snapshot and /metrics."""
    _not_yet("device-manager serve")


@device_manager.command("detect")
def dm_detect() -> None:
    """Print the accelerators this node's library reports, as YAML."""
    _not_yet("device-manager detect")


@device_manager.command("monitor")
def dm_monitor() -> None:
    """Take one monitor sample and print it as YAML."""
    _not_yet("device-manager monitor")


@simulator.command("record")
def sim_record() -> None:
    """Record a real vendor library's answers into a recording."""
    _not_yet("simulator record")


@simulator.command("replay")
def sim_replay() -> None:
    """Replay a recording through the vendor library interface."""
    _not_yet("simulator replay")


@simulator.command("validate")
def sim_validate() -> None:
    """Validate recordings and scenarios, naming every malformed field."""
    _not_yet("simulator validate")


@simulator.command("list")
def sim_list() -> None:
    """List the recordings and scenarios shipped with this release."""
    _not_yet("simulator list")


def main() -> None:
    """Console-script entry point."""
    app()
