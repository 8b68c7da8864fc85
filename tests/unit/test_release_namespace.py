"""The system namespace is the release's (issue #31, item 3).

The chart installs into any namespace and passes it as ``POD_NAMESPACE`` (the downward API's
``metadata.namespace``); both daemons read it, and fall back to ``gpustack-system`` only when
nothing says otherwise. Before, the Device Manager always published into ``gpustack-system``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpustack_cli import logs
from gpustack_cli.main import app
from gpustack_devicemanager import daemon as dm_daemon
from gpustack_devicemanager.daemon import ServeOptions
from gpustack_worker import daemon as worker_daemon
from gpustack_worker.daemon import WorkerOptions

RECORDING = Path(__file__).resolve().parents[2] / "recordings" / "amd" / "rx7800xt.yaml"
DM = ["device-manager", "serve", "--simulate", str(RECORDING), "--node-name", "n"]


@pytest.fixture
def dm_options(monkeypatch: pytest.MonkeyPatch) -> list[ServeOptions]:
    seen: list[ServeOptions] = []

    async def fake_serve(options: ServeOptions, backend: Any) -> None:
        seen.append(options)
        backend.close()

    monkeypatch.setattr(dm_daemon, "serve_until_signalled", fake_serve)
    monkeypatch.setattr(logs, "configure", lambda level, *, json_logs: None)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    return seen


@pytest.fixture
def worker_options(monkeypatch: pytest.MonkeyPatch) -> list[WorkerOptions]:
    seen: list[WorkerOptions] = []

    async def fake_serve(options: WorkerOptions) -> None:
        seen.append(options)

    monkeypatch.setattr(worker_daemon, "serve_until_signalled", fake_serve)
    monkeypatch.setattr(logs, "configure", lambda level, *, json_logs: None)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    return seen


def test_the_device_manager_publishes_into_the_pods_namespace(
    dm_options: list[ServeOptions],
) -> None:
    result = CliRunner().invoke(app, DM, env={"POD_NAMESPACE": "ops"})
    assert result.exit_code == 0, result.output
    assert dm_options[-1].namespace == "ops"


def test_the_device_manager_flag_wins_and_the_default_stays(
    dm_options: list[ServeOptions],
) -> None:
    result = CliRunner().invoke(app, [*DM, "--namespace", "gpu-ops"], env={"POD_NAMESPACE": "ops"})
    assert result.exit_code == 0, result.output
    assert dm_options[-1].namespace == "gpu-ops"
    result = CliRunner().invoke(app, DM)
    assert result.exit_code == 0, result.output
    assert dm_options[-1].namespace == "gpustack-system"


def test_the_worker_reads_the_pods_namespace(worker_options: list[WorkerOptions]) -> None:
    result = CliRunner().invoke(app, ["worker"], env={"POD_NAMESPACE": "ops"})
    assert result.exit_code == 0, result.output
    assert worker_options[-1].system_namespace == "ops"
    result = CliRunner().invoke(app, ["worker", "--system-namespace", "gpu-ops"])
    assert result.exit_code == 0, result.output
    assert worker_options[-1].system_namespace == "gpu-ops"


@pytest.mark.parametrize("command", [DM, ["worker"]], ids=["device-manager", "worker"])
def test_a_namespace_that_is_no_dns_label_is_refused_in_one_line(
    command: list[str],
    dm_options: list[ServeOptions],
    worker_options: list[WorkerOptions],
) -> None:
    result = CliRunner().invoke(app, command, env={"POD_NAMESPACE": "Ops/../kube-system"})
    assert result.exit_code == 2, result.output
    assert "'Ops/../kube-system'" in result.output
    assert "Traceback" not in result.output
    assert dm_options == []
    assert worker_options == []
