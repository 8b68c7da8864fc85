"""``simulator validate`` refuses exactly what replay would refuse, in one line (issue: probe #5).

Every corruption here passed ``validate`` before the shared validator and then failed in
``replay``/``serve``, or crashed ``validate`` itself with a traceback. Each is checked through
every command that reads a recording.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpustack_cli.main import app
from gpustack_simulator.replay.validate import load_replayable

RECORDINGS = Path(__file__).resolve().parents[3] / "recordings"
A10G = RECORDINGS / "nvidia" / "a10g.yaml"
RX7800 = RECORDINGS / "amd" / "rx7800xt.yaml"
runner = CliRunner()

COMMANDS = [
    ["simulator", "validate"],
    ["simulator", "replay"],
    ["device-manager", "detect", "--simulate"],
    ["device-manager", "monitor", "--simulate"],
]


def _doc(path: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(path.read_text())
    assert isinstance(loaded, dict)
    return loaded


def _calls(doc: dict[str, Any]) -> list[dict[str, Any]]:
    calls = doc["libraries"][0]["calls"]
    assert isinstance(calls, list)
    return calls


def _call(doc: dict[str, Any], fn: str) -> dict[str, Any]:
    return next(c for c in _calls(doc) if c["fn"] == fn)


def unknown_vendor() -> dict[str, Any]:
    doc = _doc(A10G)
    doc["vendor"] = "mthreads"
    return doc


def vendor_content_mismatch() -> dict[str, Any]:
    doc = _doc(RX7800)  # AMD's two libraries under an NVIDIA label
    doc["vendor"] = "nvidia"
    return doc


def unknown_call_name() -> dict[str, Any]:
    doc = _doc(A10G)
    _calls(doc).append({"fn": "nvmlDeviceGetEverything", "ret": 1})
    return doc


def dangling_handle_in_answer() -> dict[str, Any]:
    doc = _doc(A10G)
    _call(doc, "nvmlDeviceGetHandleByIndex")["ret"] = {"_handle": "gpu7"}
    return doc


def wrong_return_type() -> dict[str, Any]:
    doc = _doc(A10G)
    _call(doc, "nvmlDeviceGetCount")["ret"] = "one"
    return doc


def wrong_struct_type() -> dict[str, Any]:
    doc = _doc(A10G)
    _call(doc, "nvmlDeviceGetMemoryInfo")["ret"] = {"_type": "c_nvmlNoSuchStruct_t", "total": 1}
    return doc


CORRUPTIONS = {
    "unknown vendor": (unknown_vendor, "$.vendor"),
    "vendor/content mismatch": (vendor_content_mismatch, "$.libraries"),
    "unknown call name": (unknown_call_name, "nvmlDeviceGetEverything"),
    "dangling handle": (dangling_handle_in_answer, "gpu7"),
    "wrong return type": (wrong_return_type, "replaying it fails"),
    "wrong struct type": (wrong_struct_type, "replaying it fails"),
}


def _write(tmp_path: Path, doc: dict[str, Any] | str) -> Path:
    path = tmp_path / "corrupt.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return path


def _assert_one_line_refusal(output: str, path: Path, needle: str) -> None:
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert str(path) in lines[0]
    assert needle in lines[0]


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_refuses_what_replay_cannot_run(
    tmp_path: Path, name: str, command: list[str]
) -> None:
    build, needle = CORRUPTIONS[name]
    path = _write(tmp_path, build())
    result = runner.invoke(app, [*command, str(path)])
    assert result.exit_code == 1, result.output
    _assert_one_line_refusal(result.output, path, needle)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("a: " + "[" * 20_000 + "]" * 20_000 + "\n", "nested deeper than 64 levels"),
        ("schema: " + "9" * 5_000 + "\n", "an integer of 5000 digits"),
        ("a: &x [1, 2]\nb: *x\n", "aliases are not accepted"),
        ("a: [1, 2\n", "not valid YAML"),
    ],
    ids=["deep", "huge-integer", "alias", "unclosed"],
)
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_hostile_yaml_is_one_line_not_a_traceback(
    tmp_path: Path, text: str, needle: str, command: list[str]
) -> None:
    path = _write(tmp_path, text)
    result = runner.invoke(app, [*command, str(path)])
    assert result.exit_code == 1, result.output
    _assert_one_line_refusal(result.output, path, needle)


def test_serve_refuses_before_binding_anything(tmp_path: Path) -> None:
    path = _write(tmp_path, unknown_vendor())
    result = runner.invoke(
        app, ["device-manager", "serve", "--simulate", str(path), "--secure-port", "0"]
    )
    assert result.exit_code == 1
    _assert_one_line_refusal(result.output, path, "$.vendor")


def test_every_committed_recording_is_replayable() -> None:
    files = [p for p in sorted(RECORDINGS.glob("*/*.yaml")) if p.parent.name != "scenarios"]
    assert len(files) >= 17
    for path in files:
        assert load_replayable(path).vendor == path.parent.name
