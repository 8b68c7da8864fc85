"""The console script's command tree."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpustack_cli.main import app
from gpustack_cli.simulator_cmds import cards
from gpustack_simulator.recording import load_recording

runner = CliRunner()

LEVELS = [
    [],
    ["device-manager"],
    ["simulator"],
    ["demo"],
    ["worker"],
    ["kueue-config"],
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


def test_worker_without_a_cluster_says_what_is_missing(tmp_path: Path) -> None:
    env = {"KUBECONFIG": "", "KUBERNETES_SERVICE_HOST": ""}
    result = runner.invoke(app, ["worker", "--secure-port", "0"], env=env)
    assert result.exit_code == 1
    assert "no Kubernetes configuration" in result.output
    missing = tmp_path / "absent.yaml"
    result = runner.invoke(app, ["worker", "--kubeconfig", str(missing)], env=env)
    assert result.exit_code == 1
    assert str(missing) in result.output


def test_worker_refuses_to_start_without_a_front_proxy_ca(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    result = runner.invoke(
        app,
        ["worker", "--kubeconfig", str(kubeconfig), "--authentication-skip-lookup"],
    )
    assert result.exit_code == 1
    assert "no requestheader client CA" in result.output
    assert "--requestheader-client-ca-file" in result.output


def test_demo_prints_the_tables_and_an_object() -> None:
    result = runner.invoke(app, ["demo", "--offline"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "team-a/qwen-7b" in result.output
    assert "19876 / 20389" in result.output  # the slice's own pair
    assert "0 / 9856" in result.output  # the idle partition's measured zero
    body = json.loads(result.output[result.output.index("{") :])
    assert body["kind"] == "InstanceMetrics"
    assert body["sample"]["accelerators"][0]["mode"] == "Sliced"


def test_demo_json_prints_every_object() -> None:
    result = runner.invoke(app, ["demo", "--offline", "--json"])
    assert result.exit_code == 0
    decoder = json.JSONDecoder()
    text, objects = result.output.strip(), []
    while text:
        obj, end = decoder.raw_decode(text)
        objects.append(obj)
        text = text[end:].strip()
    assert len(objects) == 7
    assert all(o["apiVersion"] == "worker.gpustack.ai/v1" for o in objects)


@pytest.mark.parametrize(
    "command",
    [
        [str(Path(sys.executable).parent / "gpustack-operator")],
        [sys.executable, "-m", "gpustack_cli"],
    ],
    ids=["console-script", "python-m"],
)
def test_installed_entry_points(command: list[str]) -> None:
    result = subprocess.run([*command, "--version"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("gpustack-operator ")


RECORDINGS = Path(__file__).resolve().parents[2] / "recordings"


def test_detect_simulated_mig_node_lists_partitions_with_their_own_ids() -> None:
    result = runner.invoke(
        app, ["device-manager", "detect", "--simulate", str(RECORDINGS / "nvidia/h100-mig.yaml")]
    )
    assert result.exit_code == 0, result.output
    [card] = yaml.safe_load(result.output)["devices"]
    partitions = {(p["profile"], p["memory_mib"]) for p in card["partitions"]}
    assert ("1g.10gb", 9856) in partitions
    assert all(p["id"].startswith("MIG-") for p in card["partitions"])


def test_detect_refuses_a_recording_of_another_manufacturer() -> None:
    result = runner.invoke(
        app,
        [
            "device-manager",
            "detect",
            "--manufacturer",
            "amd",
            "--simulate",
            str(RECORDINGS / "nvidia/t4.yaml"),
        ],
    )
    assert result.exit_code == 2
    assert "is a nvidia recording, not amd" in " ".join(result.output.replace("│", " ").split())


def test_validate_exit_codes(tmp_path: Path) -> None:
    good = RECORDINGS / "nvidia/t4.yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.read_text().replace("schema: accel-recording/v1", "schema: nope"))
    ok = runner.invoke(app, ["simulator", "validate", str(good)])
    assert ok.exit_code == 0
    assert "ok (nvidia" in ok.output
    failed = runner.invoke(app, ["simulator", "validate", str(good), str(bad)])
    assert failed.exit_code == 1
    assert f"{bad}: invalid" in failed.output
    assert "$.schema" in failed.output


def test_list_shows_every_recording() -> None:
    result = runner.invoke(app, ["simulator", "list", str(RECORDINGS)], env={"COLUMNS": "250"})
    assert result.exit_code == 0
    for name in ("h100-mig.yaml", "rx7800xt.yaml", "mi300x-8x.yaml"):
        assert name in result.output
    assert "synthesized" in result.output


@pytest.mark.parametrize(
    ("relative", "expected"),
    [
        ("nvidia/h100-mig.yaml", 1),
        ("amd/mi300x-8x.yaml", 8),
        ("hygon/bw-c3000-mig.yaml", 2),
        ("hygon/k100-ai.yaml", 2),
        ("ascend/910b2-8x.yaml", 8),
        ("thead/ppu-zw810e-4x.yaml", 4),
        ("cambricon/mlu370-x8.yaml", 2),
        ("metax/c600.yaml", 2),
        ("iluvatar/bi-v150.yaml", 2),
    ],
)
def test_list_counts_cards_for_every_vendor(relative: str, expected: int) -> None:
    """Cards as detection sees them: not partitions, and not zero where handles are not cards."""
    assert cards(load_recording(RECORDINGS / relative)) == expected


def test_list_shows_a_recording_that_does_not_replay_as_invalid(tmp_path: Path) -> None:
    text = (RECORDINGS / "nvidia" / "t4.yaml").read_text()
    (tmp_path / "other.yaml").write_text(text.replace("vendor: nvidia", "vendor: mthreads", 1))
    (tmp_path / "t4.yaml").write_text(text)
    result = runner.invoke(app, ["simulator", "list", str(tmp_path)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    [bad] = [line for line in result.output.splitlines() if "other.yaml" in line]
    assert "invalid" in bad
    assert "does not replay" in bad
    [good] = [line for line in result.output.splitlines() if "t4.yaml" in line]
    assert "│ 1 " in good  # the listing goes on past the bad one


def test_kueue_config_prints_a_resources_block_kueue_reads() -> None:
    """YAML with one ``resources`` key whose entries are Kueue's field names; nvidia's card is
    1,600,000 credits (the reference's credit unit)."""
    result = runner.invoke(app, ["kueue-config"])
    assert result.exit_code == 0, result.output
    block = yaml.safe_load(result.output)
    assert list(block) == ["resources"]
    assert set(block["resources"]) == {"excludeResourcePrefixes", "transformations"}
    card = [t for t in block["resources"]["transformations"] if t["input"] == "nvidia.com/gpu"]
    assert card == [{"input": "nvidia.com/gpu", "strategy": "Replace",
                     "outputs": {"credits.gpustack.ai/nvidia": "1600000"}}]  # fmt: skip
