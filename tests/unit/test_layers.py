"""The layer check finds a forbidden import, and the tree has none."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

LAYERS = Path(__file__).resolve().parents[1] / "lint" / "layers.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("layers", LAYERS)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["layers"] = module
    spec.loader.exec_module(module)
    return module


def test_the_tree_keeps_every_layer_contract() -> None:
    assert _load().violations() == []


@pytest.mark.parametrize(
    ("package", "line", "needle"),
    [
        ("gpustack_core", "import trio", "gpustack_core does no I/O; trio is I/O"),
        ("gpustack_core", "from gpustack_kube import paths", "may not import gpustack_kube"),
        ("gpustack_vendors", "import gpustack_devicemanager", "may not import"),
        ("gpustack_worker", "from gpustack_devicemanager import server", "may not import"),
        ("gpustack_devicemanager", "from gpustack_simulator import up", "may not import"),
        ("gpustack_simulator", "from gpustack_cli import main", "may not import"),
        ("gpustack_simulator", "from gpustack_devicemanager import cgroup", "may not import"),
        ("gpustack_core", "import os.path", "gpustack_core does no I/O; os is I/O"),
        ("gpustack_core", "import socket", "gpustack_core does no I/O; socket is I/O"),
        ("gpustack_core", "import httpx", "gpustack_core does no I/O; httpx is I/O"),
        ("gpustack_core", "from trio import open_file", "gpustack_core does no I/O; trio is I/O"),
        ("gpustack_core", "open('x').read()", "gpustack_core does no I/O; open() is I/O"),
        ("gpustack_core", "print('x')", "gpustack_core does no I/O; print() is I/O"),
        ("gpustack_vendors", "from gpustack_kube import client", "may not import gpustack_kube"),
        ("gpustack_devicemanager", "from gpustack_worker import api", "may not import"),
        ("gpustack_worker", "from gpustack_simulator import up", "may not import"),
        ("gpustack_kube", "from gpustack_vendors import model", "may not import"),
        ("gpustack_worker", "from gpustack_cli import main", "may not import"),
        ("gpustack_worker", "import gpustack_elsewhere", "no package of the layer contracts"),
    ],
)
def test_a_forbidden_import_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, package: str, line: str, needle: str
) -> None:
    layers = _load()
    module = tmp_path / "packages" / "x" / "src" / package / "bad.py"
    module.parent.mkdir(parents=True)
    module.write_text(f"def lazy() -> None:\n    {line}\n")
    monkeypatch.setattr(layers, "ROOT", tmp_path)
    [problem] = layers.violations()
    assert needle in problem
    assert problem.startswith(f"packages/x/src/{package}/bad.py:2:")


def _plant(root: Path, package: str, name: str, line: str) -> None:
    module = root / "packages" / "x" / "src" / package / name
    module.parent.mkdir(parents=True, exist_ok=True)
    module.write_text(f"{line}\n")


def test_only_the_plugin_module_may_read_the_device_manager(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layers = _load()
    monkeypatch.setattr(layers, "ROOT", tmp_path)
    _plant(tmp_path, "gpustack_simulator", "pidbind.py", "from gpustack_devicemanager import x")
    assert layers.violations() == []
    _plant(tmp_path, "gpustack_simulator", "pidbind.py", "from gpustack_worker import x")
    [problem] = layers.violations()
    assert "gpustack_simulator may not import gpustack_worker" in problem
    _plant(tmp_path, "gpustack_simulator", "pidbind.py", "")
    _plant(tmp_path, "gpustack_simulator", "up.py", "from gpustack_devicemanager import x")
    [problem] = layers.violations()
    assert problem.startswith("packages/x/src/gpustack_simulator/up.py:1:")


def test_a_package_without_a_contract_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layers = _load()
    monkeypatch.setattr(layers, "ROOT", tmp_path)
    _plant(tmp_path, "gpustack_newthing", "mod.py", "import gpustack_core")
    [problem] = layers.violations()
    assert "gpustack_newthing has no layer contract" in problem


def test_the_checker_exits_1_on_a_violation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    layers = _load()
    monkeypatch.setattr(layers, "ROOT", tmp_path)
    _plant(tmp_path, "gpustack_core", "bad.py", "import gpustack_simulator")
    assert layers.main() == 1
    err = capsys.readouterr().err
    assert "gpustack_core may not import gpustack_simulator" in err


@pytest.mark.parametrize(
    ("line", "constant"),
    [
        ('NS = "gpustack-system"', "SYSTEM_NAMESPACE"),
        ("PORT = 32443", "DEVICE_MANAGER_PORT"),
        ('KEY = "gpustack.ai/manufacturer"', "MANUFACTURER_LABEL"),
        ('LABELS = {"app.kubernetes.io/component": "x"}', "COMPONENT_LABEL"),
        ('VERSION = "worker.gpustack.ai/v1alpha1"', "API_GROUP/CRD_VERSION"),
        ('ANNOTATION = "device.gpustack.ai/accelerator.allocated"', "ALLOCATION_ANNOTATION"),
    ],
)
def test_a_contract_restated_in_the_simulator_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str, constant: str
) -> None:
    layers = _load()
    monkeypatch.setattr(layers, "ROOT", tmp_path)
    _plant(
        tmp_path, "gpustack_simulator", "bad.py", f'"""Prose may name gpustack-system."""\n{line}'
    )
    [problem] = layers.violations()
    assert problem == (
        "packages/x/src/gpustack_simulator/bad.py:2: gpustack_simulator restates "
        f"gpustack_core.contract.{constant}; import it"
    )


def test_words_the_contract_shares_with_kubernetes_are_not_restatements(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layers = _load()
    monkeypatch.setattr(layers, "ROOT", tmp_path)
    # The core API's v1, NFD's v1alpha1, a container named device-manager, a docstring.
    plain = 'A = ("v1", "v1alpha1", "device-manager")\nB = True\nC = 1'
    _plant(tmp_path, "gpustack_simulator", "fine.py", plain)
    # Only the simulator is held to it (the contract module itself defines them).
    _plant(tmp_path, "gpustack_core", "contract.py", 'NS = "gpustack-system"')
    assert layers.violations() == []
