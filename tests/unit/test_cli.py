"""The console script's command tree."""

import json
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from gpustack_cli.main import app

runner = CliRunner()

LEVELS = [
    [],
    ["device-manager"],
    ["simulator"],
    ["demo"],
    ["worker"],
    ["device-manager", "serve"],
    ["device-manager", "detect"],
    ["device-manager", "monitor"],
    ["simulator", "record"],
    ["simulator", "replay"],
    ["simulator", "validate"],
    ["simulator", "list"],
]


@pytest.mark.parametrize("path", LEVELS, ids=lambda p: " ".join(p) or "root")
def test_help_at_every_level(path: list[str]) -> None:
    result = runner.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_groups_list_their_subcommands() -> None:
    root = runner.invoke(app, ["--help"]).output
    for name in ("demo", "worker", "device-manager", "simulator"):
        assert name in root
    dm = runner.invoke(app, ["device-manager", "--help"]).output
    assert all(name in dm for name in ("serve", "detect", "monitor"))
    sim = runner.invoke(app, ["simulator", "--help"]).output
    assert all(name in sim for name in ("record", "replay", "validate", "list"))


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert re.fullmatch(r"gpustack-operator \d+\.\d+\.\d+\n", result.output)


@pytest.mark.parametrize("path", [["worker"], ["device-manager", "serve"], ["simulator", "list"]])
def test_unbuilt_commands_say_so_and_fail(path: list[str]) -> None:
    result = runner.invoke(app, path)
    assert result.exit_code == 2
    assert "not available in this release yet" in result.output


def test_demo_prints_the_tables_and_an_object() -> None:
    result = runner.invoke(app, ["demo"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "team-a/qwen-7b" in result.output
    assert "19876 / 20389" in result.output  # the slice's own pair
    assert "0 / 9856" in result.output  # the idle partition's measured zero
    body = json.loads(result.output[result.output.index("{") :])
    assert body["kind"] == "InstanceMetrics"
    assert body["sample"]["accelerators"][0]["mode"] == "Sliced"


def test_demo_json_prints_every_object() -> None:
    result = runner.invoke(app, ["demo", "--json"])
    assert result.exit_code == 0
    decoder = json.JSONDecoder()
    text, objects = result.output.strip(), []
    while text:
        obj, end = decoder.raw_decode(text)
        objects.append(obj)
        text = text[end:].strip()
    assert len(objects) == 7
    assert all(o["apiVersion"] == "worker.gpustack.ai/v1" for o in objects)


def test_console_script_is_installed() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gpustack_cli", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("gpustack-operator ")
