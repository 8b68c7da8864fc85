"""The simulator ships its data and is optional to the CLI (issue #32, item 3).

Its CRDs and recordings are package data (links to the repository's one copy, followed when the
wheel is built), and a CLI installed without the simulator says which extra a command needs.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

from gpustack_simulator import packagedata
from gpustack_simulator.cluster import state
from gpustack_simulator.scenario import RECORDINGS_DIR

REPO = Path(__file__).resolve().parents[3]
SIMULATOR = REPO / "simulator" / "src" / "gpustack_simulator"


def test_the_data_is_the_repositorys_one_copy_linked_into_the_package() -> None:
    for name, truth in (("crds", REPO / "clusters" / "crds"), ("recordings", REPO / "recordings")):
        link = SIMULATOR / "data" / name
        assert link.is_symlink(), f"{link} must link to {truth}, not copy it"
        assert link.resolve() == truth
    assert RECORDINGS_DIR == REPO / "recordings"
    for crd in (state.INSTANCE_CRD, state.DEVICES_CRD, state.INSTANCETYPES_CRD,
                state.INSTANCETYPEFLAVORS_CRD):  # fmt: skip
        assert crd.parent == REPO / "clusters" / "crds"
        assert crd.is_file()
    assert packagedata.crd("instances").name == "instances.worker.gpustack.ai.yaml"


def test_no_module_finds_its_data_by_counting_folders_up() -> None:
    found = []
    for path in SIMULATOR.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Subscript)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "parents"
            ):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []


def test_the_cli_needs_the_simulator_only_as_an_extra() -> None:
    project = tomllib.loads((REPO / "packages" / "cli" / "pyproject.toml").read_text())["project"]
    assert "gpustack-simulator" not in project["dependencies"]
    assert project["optional-dependencies"]["simulator"] == ["gpustack-simulator"]


def test_a_command_needing_the_absent_simulator_says_so_in_one_line() -> None:
    code = (
        "import sys; sys.modules['gpustack_simulator'] = None\n"
        "from gpustack_cli.main import main\n"
        "sys.argv = ['gpustack-operator', 'demo', '--offline']\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "gpustack-operator: this command needs the simulator, which is not installed: "
        "install gpustack-cli[simulator]"
    ]
