"""``device-manager serve`` and ``monitor``: option parsing and backend selection only.

The simulator is imported only where ``--simulate`` asks for it, so the production serve path
(a DaemonSet Pod per node and manufacturer) never loads the replay machinery.
"""

from __future__ import annotations

import os
import socket
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpustack_core.units import seconds_of
from gpustack_devicemanager.monitor import TickContext, tick
from gpustack_vendors.loading import open_backend
from gpustack_vendors.protocol import Backend

if TYPE_CHECKING:
    from gpustack_devicemanager.daemon import MonitorWrapper


def parse_duration(text: str) -> float:
    """``15s``, ``1m``, ``500ms`` or plain seconds; must be positive (a usage error if not)."""
    try:
        return seconds_of(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def default_node_name() -> str:
    """``KUBERNETES_NODE_NAME`` as the DaemonSet sets it, else this host's name."""
    return os.environ.get("KUBERNETES_NODE_NAME") or socket.gethostname()


def monitor_wrapper(bind_replayed_pids: bool, proc_root: Path) -> MonitorWrapper | None:
    """``--bind-replayed-pids``: the simulator's PID binding over ``proc_root``, plugged in here.

    The Device Manager only offers the seam (``ServeOptions.monitor_wrapper``); which binding
    fills it is the composition root's choice, so the daemon never imports the simulator.
    """
    if not bind_replayed_pids:
        return None
    from gpustack_simulator.pidbind import pid_binding

    return pid_binding(proc_root)


def open_for(
    manufacturer: str | None, simulate: Path | None, proc_root: Path | None
) -> tuple[str, Backend, Path]:
    """The backend (real or replayed) and the proc root attribution reads.

    A replay gets the recording's ``context`` written out as a fake ``/proc`` unless one was
    given, so attribution has the recorded processes to find.
    """
    if simulate is None:
        if manufacturer is None:
            raise typer.BadParameter("--manufacturer is required without --simulate")
        # LibraryUnavailableError is a runtime error (exit 1), reported by the command.
        return manufacturer, open_backend(manufacturer), proc_root or Path("/proc")
    # The simulator only for --simulate: a production Device Manager never imports it.
    from gpustack_simulator.procfs import write_procfs
    from gpustack_simulator.replay.backends import replay_backend
    from gpustack_simulator.replay.validate import load_replayable

    recording = load_replayable(simulate)
    if manufacturer is not None and manufacturer != recording.vendor:
        raise typer.BadParameter(
            f"{simulate} is a {recording.vendor} recording, not {manufacturer}"
        )
    if proc_root is None:
        proc_root = Path(tempfile.mkdtemp(prefix="gpustack-procfs-"))
        write_procfs(proc_root, recording.context.procs)
    return recording.vendor, replay_backend(recording), proc_root


def monitor_once(
    manufacturer: str | None,
    simulate: Path | None,
    proc_root: Path | None,
    period: float,
    fmt: str = "yaml",
) -> str:
    """One monitor sample as YAML or JSON (no cluster: cards only)."""
    from gpustack_cli.output import render

    vendor, backend, root = open_for(manufacturer, simulate, proc_root)
    try:
        backend.detect()
        snapshot = tick(backend, None, TickContext(vendor, period, root), datetime.now(UTC))
    finally:
        backend.close()
    return render(snapshot, fmt)
