"""The daemons and ``kueue-config`` read the configured resource names (issue #31, item 1).

The chart passes ``GPUSTACK_<MANUFACTURER>_ACCELERATABLE_RESOURCE_NAME`` to the worker and to
every Device Manager; each must act on it, and refuse a bad one in one line before serving.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpustack_cli import logs
from gpustack_cli.main import app
from gpustack_devicemanager import daemon as dm_daemon
from gpustack_devicemanager.daemon import ServeOptions
from gpustack_worker import daemon as worker_daemon
from gpustack_worker.daemon import WorkerOptions

RECORDING = Path(__file__).resolve().parents[2] / "recordings" / "amd" / "rx7800xt.yaml"
DM = ["device-manager", "serve", "--simulate", str(RECORDING), "--node-name", "n"]
VARIABLE = "GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME"


@pytest.fixture
def dm_options(monkeypatch: pytest.MonkeyPatch) -> list[ServeOptions]:
    seen: list[ServeOptions] = []

    async def fake_serve(options: ServeOptions, backend: Any) -> None:
        seen.append(options)
        backend.close()

    monkeypatch.setattr(dm_daemon, "serve_until_signalled", fake_serve)
    monkeypatch.setattr(logs, "configure", lambda level, *, json_logs: None)
    return seen


@pytest.fixture
def worker_options(monkeypatch: pytest.MonkeyPatch) -> list[WorkerOptions]:
    seen: list[WorkerOptions] = []

    async def fake_serve(options: WorkerOptions) -> None:
        seen.append(options)

    monkeypatch.setattr(worker_daemon, "serve_until_signalled", fake_serve)
    monkeypatch.setattr(logs, "configure", lambda level, *, json_logs: None)
    return seen


def test_the_worker_takes_the_configured_bases(worker_options: list[WorkerOptions]) -> None:
    result = CliRunner().invoke(app, ["worker"], env={VARIABLE: "gpustack.ai/nvidia-gpu"})
    assert result.exit_code == 0, result.output
    assert dict(worker_options[-1].resource_bases) == {"nvidia": "gpustack.ai/nvidia-gpu"}


@pytest.mark.parametrize("command", [DM, ["worker"]], ids=["device-manager", "worker"])
def test_a_bad_name_is_refused_in_one_line_before_serving(
    command: list[str],
    dm_options: list[ServeOptions],
    worker_options: list[WorkerOptions],
) -> None:
    result = CliRunner().invoke(app, command, env={VARIABLE: "kubernetes.io/gpu"})
    assert result.exit_code == 2, result.output
    assert f"{VARIABLE}='kubernetes.io/gpu'" in result.output
    assert "Traceback" not in result.output
    assert dm_options == []
    assert worker_options == []


def test_the_device_manager_passes_force(dm_options: list[ServeOptions]) -> None:
    result = CliRunner().invoke(app, DM)
    assert result.exit_code == 0, result.output
    assert dm_options[-1].force_device_plugin is False
    result = CliRunner().invoke(app, [*DM, "--force-device-plugin"])
    assert result.exit_code == 0, result.output
    assert dm_options[-1].force_device_plugin is True


def test_kueue_config_prints_the_renamed_transformations() -> None:
    result = CliRunner().invoke(app, ["kueue-config"], env={VARIABLE: "gpustack.ai/nvidia-gpu"})
    assert result.exit_code == 0, result.output
    block = yaml.safe_load(result.output)["resources"]
    inputs = {t["input"] for t in block["transformations"]}
    assert "gpustack.ai/nvidia-gpu" in inputs
    assert "gpustack.ai/nvidia-gpu.sliced.units" in inputs
    assert "nvidia.com/gpu" not in inputs
    assert "amd.com/gpu" in inputs
