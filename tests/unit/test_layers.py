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
