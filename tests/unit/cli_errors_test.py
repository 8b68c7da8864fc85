"""User errors: one line on stderr, exit 1 (runtime) or 2 (usage), never a traceback.

The table is the one docs/cli.md lists ("User errors"): each command with each bad input a user
can give it, the exit code and a piece of the one line it prints.
"""

import json
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest
import yaml
from typer.testing import CliRunner

from gpustack_cli.errors import NVML_ERRORS, one_line
from gpustack_cli.main import app

RECORDINGS = Path(__file__).resolve().parents[2] / "recordings"
T4 = str(RECORDINGS / "nvidia" / "t4.yaml")
runner = CliRunner()


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    garbage = tmp_path / "garbage.yaml"
    garbage.write_text(": : not yaml: [\n")
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("foo: 1\n")
    return {
        "MISSING": str(tmp_path / "absent.yaml"),
        "GARBAGE": str(garbage),
        "WRONG": str(wrong),
        "OUT": str(tmp_path / "out.yaml"),
        "T4": T4,
        "FILE": str(wrong),
        "DIR": str(tmp_path),
        "SCENARIO": str(RECORDINGS / "scenarios" / "demo.yaml"),
    }


@pytest.fixture
def no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML as on a machine without the driver, whatever this machine has."""

    def absent() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", absent)


CASES: list[tuple[str, list[str], int, str]] = [
    # (case, argv, exit code, in the line)
    ("detect missing file", ["device-manager", "detect", "--simulate", "MISSING"], 1, "absent"),
    ("detect garbage", ["device-manager", "detect", "--simulate", "GARBAGE"], 1, "not valid YAML"),
    ("detect not a recording", ["device-manager", "detect", "--simulate", "WRONG"], 1, "schema"),
    ("detect no flags", ["device-manager", "detect"], 2, "--manufacturer is required"),
    (
        "detect no NVML",
        ["device-manager", "detect", "--manufacturer", "nvidia"],
        1,
        "NVML error 12 (library not found",
    ),
    (
        "detect unknown manufacturer",
        ["device-manager", "detect", "--manufacturer", "bogus"],
        1,
        "no backend for manufacturer 'bogus'",
    ),
    (
        "detect other vendor's recording",
        ["device-manager", "detect", "--manufacturer", "amd", "--simulate", "T4"],
        2,
        "is a nvidia recording, not amd",
    ),
    (
        "detect bad -o",
        ["device-manager", "detect", "--simulate", "T4", "-o", "xml"],
        2,
        "'xml' is not yaml or json",
    ),
    ("monitor missing file", ["device-manager", "monitor", "--simulate", "MISSING"], 1, "absent"),
    (
        "monitor garbage",
        ["device-manager", "monitor", "--simulate", "GARBAGE"],
        1,
        "not valid YAML",
    ),
    (
        "monitor no NVML",
        ["device-manager", "monitor", "--manufacturer", "nvidia"],
        1,
        "NVML error 12 (library not found",
    ),
    (
        "monitor bad period",
        ["device-manager", "monitor", "--simulate", "T4", "--monitor-period", "xx"],
        2,
        "'xx' is not a positive duration",
    ),
    (
        "serve no NVML",
        ["device-manager", "serve", "--manufacturer", "nvidia"],
        1,
        "NVML error 12 (library not found",
    ),
    ("serve missing file", ["device-manager", "serve", "--simulate", "MISSING"], 1, "absent"),
    (
        "serve bad log level",
        ["device-manager", "serve", "--log-level", "loud"],
        2,
        "'loud' is not one of debug, info, warning, error",
    ),
    ("serve unknown flag", ["device-manager", "serve", "--bogus"], 2, "No such option: --bogus"),
    ("replay missing file", ["simulator", "replay", "MISSING"], 1, "absent"),
    ("replay garbage", ["simulator", "replay", "GARBAGE"], 1, "not valid YAML"),
    ("replay not a recording", ["simulator", "replay", "WRONG"], 1, "schema"),
    (
        "record unknown vendor",
        ["simulator", "record", "--vendor", "mthreads", "-o", "OUT"],
        2,
        "--vendor mthreads: not a manufacturer with a backend",
    ),
    (
        "record no ROCm SMI",
        ["simulator", "record", "--vendor", "amd", "-o", "OUT", "--samples", "1"],
        1,
        "cannot record amd: librocm_smi64.so could not be loaded. Tried: ",
    ),
    (
        "record no NVML",
        ["simulator", "record", "--vendor", "nvidia", "-o", "OUT", "--samples", "1"],
        1,
        "NVML error 12 (library not found",
    ),
    ("record no vendor", ["simulator", "record", "-o", "OUT"], 2, "Missing option '--vendor'"),
    ("worker port out of range", ["worker", "--secure-port", "99999"], 2, "--secure-port"),
    ("unknown command", ["bogus"], 2, "No such command 'bogus'"),
    ("worker bad log level", ["worker", "--log-level", "loud"], 2, "'loud' is not one of"),
    ("demo --json without --offline", ["demo", "--json"], 2, "--json needs --offline"),
    ("up into a file", ["simulator", "up", "--state-dir", "FILE"], 1, "Not a directory"),
    ("down from a file", ["simulator", "down", "--state-dir", "FILE"], 1, "Not a directory"),
    (
        "cluster into a file",
        ["simulator", "cluster", "--state-dir", "FILE", "--scenario", "demo"],
        1,
        "Not a directory",
    ),
    ("list a missing folder", ["simulator", "list", "MISSING"], 1, "is not a folder"),
    ("replay a folder", ["simulator", "replay", "DIR"], 1, "Is a directory"),
    (
        "detect a scenario, not a recording",
        ["device-manager", "detect", "--simulate", "SCENARIO"],
        1,
        "$.schema",
    ),
]


@pytest.mark.usefixtures("no_nvml")
@pytest.mark.parametrize(("case", "argv", "code", "needle"), CASES, ids=[c[0] for c in CASES])
def test_a_user_error_is_one_line_and_an_exit_code(
    files: dict[str, str], case: str, argv: list[str], code: int, needle: str
) -> None:
    args = [files.get(arg, arg) for arg in argv]
    result = runner.invoke(app, args, env={"KUBECONFIG": "", "KUBERNETES_SERVICE_HOST": ""})
    assert result.exit_code == code, (case, result.output)
    assert "Traceback" not in result.output
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(("gpustack-operator", "device-manager detect: ")), line
    assert needle in line, line


@pytest.mark.usefixtures("no_nvml")
@pytest.mark.parametrize(
    ("argv", "code", "needle"),
    [
        (["device-manager", "serve", "--manufacturer", "nvidia", "--log-json"], 1, "NVML"),
        (["device-manager", "serve", "--simulate", "MISSING", "--log-json"], 1, "absent"),
        (["device-manager", "serve", "--log-json", "--bogus"], 2, "No such option"),
        (["worker", "--log-json", "--secure-port", "0"], 1, "no Kubernetes configuration"),
        (["worker", "--log-json", "--secure-port", "99999"], 2, "--secure-port"),
    ],
)
def test_with_log_json_the_error_is_one_json_line(
    files: dict[str, str], argv: list[str], code: int, needle: str
) -> None:
    args = [files.get(arg, arg) for arg in argv]
    result = runner.invoke(app, args, env={"KUBECONFIG": "", "KUBERNETES_SERVICE_HOST": ""})
    assert result.exit_code == code, result.output
    [line] = result.stderr.splitlines()
    document = json.loads(line)
    assert document["level"] == "error"
    assert needle in document["message"]


def test_serve_with_an_unreadable_kubeconfig_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "kubeconfig"
    result = runner.invoke(
        app,
        [
            "device-manager",
            "serve",
            "--simulate",
            T4,
            "--kubeconfig",
            str(missing),
            "--secure-port",
            "0",
            "--bind-address",
            "127.0.0.1",
            "--no-device-plugin",
            "--log-json",
        ],
    )
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    failures = [json.loads(line) for line in result.stderr.splitlines()]
    [error] = [doc for doc in failures if doc["level"] == "error"]
    assert f"{missing}: cannot read" in error["message"]


def test_the_console_script_prints_no_traceback(tmp_path: Path) -> None:
    """The real process (``main()``, not the test runner's invocation) for one of each kind."""
    script = str(Path(sys.executable).parent / "gpustack-operator")
    for argv, code in (
        (["device-manager", "detect", "--simulate", str(tmp_path / "absent.yaml")], 1),
        (["device-manager", "detect"], 2),
    ):
        done = subprocess.run([script, *argv], capture_output=True, text=True, check=False)
        assert done.returncode == code, done.stderr
        assert done.stdout == ""
        [line] = done.stderr.splitlines()
        assert line.startswith("gpustack-operator device-manager detect: ")


def test_a_group_without_a_subcommand_still_shows_its_help() -> None:
    result = runner.invoke(app, ["device-manager"])
    assert "serve" in result.output
    assert "detect" in result.output


def test_nvml_codes_are_named_as_pynvml_names_them() -> None:
    constants = {
        value: name
        for name, value in vars(pynvml).items()
        if name.startswith("NVML_ERROR_") and isinstance(value, int)
    }
    assert set(NVML_ERRORS) <= set(constants)
    for code, name in (
        (12, "LIBRARY_NOT_FOUND"),
        (9, "DRIVER_NOT_LOADED"),
        (4, "NO_PERMISSION"),
        (18, "LIB_RM_VERSION_MISMATCH"),
    ):
        assert constants[code] == f"NVML_ERROR_{name}"
    assert NVML_ERRORS[12].startswith("library not found")
    assert NVML_ERRORS[9] == "driver not loaded"
    assert one_line("nvmlInit: NVML error 12\n more") == (
        "nvmlInit: NVML error 12 (library not found: libnvidia-ml.so.1 is not on this"
        " machine's loader path) more"
    )
    assert one_line("NVML error 12 (already said)") == "NVML error 12 (already said)"
    assert one_line("NVML error 4242") == "NVML error 4242"


def test_record_help_names_what_can_be_recorded() -> None:
    result = runner.invoke(app, ["simulator", "record", "--help"], env={"COLUMNS": "200"})
    text = " ".join(result.output.replace("│", " ").split())
    assert "nvidia (NVML through pynvml), amd (ROCm SMI, then AMD SMI)" in text
    assert "or metax (MXSML)" in text


@pytest.mark.parametrize("command", ["detect", "monitor"])
def test_output_json_and_yaml_carry_the_same_document(command: str) -> None:
    base = ["device-manager", command, "--simulate", str(RECORDINGS / "nvidia" / "h100-mig.yaml")]
    as_json = runner.invoke(app, [*base, "-o", "json"])
    as_yaml = runner.invoke(app, [*base, "--output", "yaml"])
    default = runner.invoke(app, base)
    assert as_json.exit_code == as_yaml.exit_code == default.exit_code == 0, as_json.output
    document = json.loads(as_json.stdout)
    assert as_json.stdout.endswith("}\n")
    loaded = yaml.safe_load(as_yaml.stdout)
    if command == "monitor":  # the sample's own time differs between the two runs
        for doc in (document, loaded):
            doc.pop("timestamp")
            for group in doc["groups"]:
                group.pop("timestamp")
        assert document["groups"][0]["accelerators"][0]["id"].startswith("GPU-")
    else:
        assert default.stdout == as_yaml.stdout
        assert list(document) == ["manufacturer", "devices", "notes"]
        [card] = document["devices"]
        assert [p["profile"] for p in card["partitions"]] == ["3g.40gb", "1g.10gb", "1g.10gb"]
        # Stable: the same recording gives the same bytes.
        assert runner.invoke(app, [*base, "-o", "json"]).stdout == as_json.stdout
    assert document == json.loads(json.dumps(loaded, default=str))
