"""``simulator up --log-level``: the stack's daemons log at the chosen level (issue #31).

Before, the fleet host ran every Device Manager at ``warning``, so the reasons the spec says
are "in the Device Manager log" (at ``info``) never were, and nothing could change it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from gpustack_cli.main import app
from gpustack_simulator import up as up_module
from gpustack_simulator.controlplane import start as real_start
from gpustack_simulator.scenario import expand, find_scenario, load_scenario
from gpustack_simulator.up import RECORDINGS_DIR, Endpoints


class Spawned:
    def __init__(self) -> None:
        self.commands: dict[str, list[str]] = {}

    def __call__(
        self, name: str, command: list[str], logs: Path, env: dict[str, str] | None = None
    ) -> Any:
        self.commands[name] = command
        return SimpleNamespace(log=logs / f"{name}.log")


def _level(command: list[str]) -> str | None:
    return command[command.index("--log-level") + 1] if "--log-level" in command else None


@pytest.mark.parametrize("level", ["debug", "info", "warning"])
def test_every_daemon_up_starts_logs_at_the_chosen_level(
    level: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spawned = Spawned()
    monkeypatch.setattr(up_module, "_spawn", spawned)
    expanded = expand(load_scenario(find_scenario("demo")), base=RECORDINGS_DIR)
    addresses = [f"127.0.0.{i + 2}" for i in range(len(expanded.device_managers))]
    (tmp_path / "logs").mkdir()
    kubeconfig = tmp_path / "kubeconfig"
    for starter in (up_module._start_fleet, up_module._start_device_managers):
        starter(expanded, addresses, 1, tmp_path, kubeconfig, "2s", [], None, level)
    up_module._start_worker(kubeconfig, 2, tmp_path, "2s", tmp_path / "logs", level)
    assert spawned.commands[up_module.FLEET_PROCESS][:3] == [sys.executable, "-m",
                                                            "gpustack_cli.fleet_host"]  # fmt: skip
    managers = [c for n, c in spawned.commands.items() if n.startswith("device-manager-gpu")]
    assert managers  # one process each, too
    for name, command in spawned.commands.items():
        assert _level(command) == level, name


def test_the_default_is_info_the_daemons_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def fake_up(scenario: str, state_dir: Path, **options: Any) -> Endpoints:
        seen.update(options)
        return Endpoints(scenario="demo", cluster="c", worker="w", kubeconfig="k")

    monkeypatch.setattr(up_module, "up", fake_up)
    result = CliRunner().invoke(app, ["simulator", "up", "--state-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert seen["log_level"] == "info"
    result = CliRunner().invoke(
        app, ["simulator", "up", "--state-dir", str(tmp_path), "--log-level", "debug"]
    )
    assert result.exit_code == 0, result.output
    assert seen["log_level"] == "debug"
    # The hint to stop it names a command that runs as typed: no bare `gpustack-operator`.
    [hint] = [line for line in result.output.splitlines() if line.startswith("stop with")]
    command = hint.split()[2]
    assert command != "gpustack-operator"
    assert Path(command).is_file(), hint
    result = CliRunner().invoke(
        app, ["simulator", "up", "--state-dir", str(tmp_path), "--log-level", "loud"]
    )
    assert result.exit_code == 2
    assert "'loud' is not one of" in result.output


def test_the_real_control_planes_fleet_host_logs_at_the_chosen_level(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, list[str]] = {}

    def spawn_in(netns: object, name: str, command: list[str], logs: Path, **_: Any) -> Any:
        seen[name] = command
        return SimpleNamespace(log=logs / f"{name}.log")

    monkeypatch.setattr(real_start, "_spawn_in", spawn_in)
    expanded = expand(load_scenario(find_scenario("demo")), base=RECORDINGS_DIR)
    addresses = {f"{dm.namespace}/{dm.name}": "10.0.0.2" for dm in expanded.device_managers}
    (tmp_path / "logs").mkdir()
    real_start._start_device_managers(
        expanded, tmp_path, tmp_path / "kubeconfig", "2s", addresses, tmp_path, object(), [],
        "debug",
    )  # fmt: skip
    assert _level(seen[up_module.FLEET_PROCESS]) == "debug"
