"""The single ``gpustack-operator`` console script.

Each daemon is a subcommand so one image serves every role. Subcommands that belong to later
milestones are present with their help text and fail with exit code 2 and a message saying so,
rather than pretending to run.
"""

from __future__ import annotations

from importlib.metadata import version as package_version
from pathlib import Path
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
def dm_detect(
    manufacturer: Annotated[
        str | None, typer.Option(help="The manufacturer whose library to open (nvidia, amd).")
    ] = None,
    simulate: Annotated[
        Path | None, typer.Option(help="Replay this recording instead of the real library.")
    ] = None,
) -> None:
    """Print the accelerators this node's library reports, as YAML."""
    from gpustack_cli.simulator_cmds import detect
    from gpustack_vendors.loading import LibraryUnavailableError

    try:
        typer.echo(detect(manufacturer, simulate), nl=False)
    except LibraryUnavailableError as exc:
        typer.echo(f"device-manager detect: {exc}", err=True)
        raise typer.Exit(code=1) from exc


@device_manager.command("monitor")
def dm_monitor() -> None:
    """Take one monitor sample and print it as YAML."""
    _not_yet("device-manager monitor")


@simulator.command("record")
def sim_record(
    output: Annotated[Path, typer.Option("-o", "--output", help="Recording file to write.")],
    vendor: Annotated[str, typer.Option(help="Which library to record: nvidia or amd.")],
    samples: Annotated[int, typer.Option(min=1, help="Monitor-style passes to record.")] = 4,
    interval: Annotated[float, typer.Option(min=0, help="Seconds between passes.")] = 15.0,
    description: Annotated[str, typer.Option(help="What the recording shows.")] = "recorded",
) -> None:
    """Record a real vendor library's answers into a recording (PIDs redacted)."""
    from rich.console import Console

    from gpustack_cli.simulator_cmds import record

    record(vendor, samples, interval, output, description, Console(stderr=True))


@simulator.command("replay")
def sim_replay(
    recording: Annotated[Path, typer.Argument(help="The recording to replay.")],
    samples: Annotated[int, typer.Option(min=1, help="Monitor passes to print.")] = 4,
    interval: Annotated[float, typer.Option(min=0, help="Virtual seconds between passes.")] = 15.0,
) -> None:
    """Replay a recording through the backend and print each pass's card figures."""
    from rich.console import Console

    from gpustack_cli.simulator_cmds import replay

    replay(recording, samples, interval, Console())


@simulator.command("cluster")
def sim_cluster(
    state_dir: Annotated[Path, typer.Option(help="Where the kubeconfig and PKI are written.")],
    scenario: Annotated[
        str, typer.Option(help="Scenario name (recordings/scenarios/NAME.yaml) or file.")
    ] = "nvidia-mixed",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free one).")] = 0,
) -> None:
    """Serve the Kubernetes endpoints the daemons use, from a scenario, until interrupted."""
    import trio

    from gpustack_simulator.cluster.server import run_until_signalled

    trio.run(run_until_signalled, scenario, state_dir, port)


@simulator.command("validate")
def sim_validate(
    files: Annotated[list[Path], typer.Argument(help="Recordings to check.")],
) -> None:
    """Validate recordings, naming the file, path and field of every problem."""
    from rich.console import Console

    from gpustack_cli.simulator_cmds import validate

    raise typer.Exit(code=validate(files, Console(width=200)))


@simulator.command("list")
def sim_list(
    root: Annotated[
        Path | None, typer.Argument(help="Folder to search (default: ./recordings).")
    ] = None,
) -> None:
    """List recordings with their vendor, card count and provenance."""
    from rich.console import Console

    from gpustack_cli.simulator_cmds import DEFAULT_RECORDINGS, list_recordings

    raise typer.Exit(code=list_recordings(root or DEFAULT_RECORDINGS, Console(width=200)))


def main() -> None:
    """Console-script entry point."""
    app()
