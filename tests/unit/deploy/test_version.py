"""Every place that states the release version agrees, and ``set`` changes them all at once."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import yaml

import gpustack_core

REPO = Path(__file__).resolve().parents[3]


def _version_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "release_version", REPO / "clusters" / "version.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("release_version", module)
    spec.loader.exec_module(module)
    return module


def test_every_stated_version_agrees_read_independently() -> None:
    """Read with the real parsers (tomllib, YAML, the imported package), not the script's regex."""
    versions = {
        str(p.relative_to(REPO)): tomllib.loads(p.read_text())["project"]["version"]
        for p in [*REPO.glob("packages/*/pyproject.toml"), REPO / "simulator" / "pyproject.toml"]
    }
    chart = yaml.safe_load((REPO / "clusters" / "chart" / "Chart.yaml").read_text())
    versions["Chart.yaml version"] = chart["version"]
    versions["Chart.yaml appVersion"] = chart["appVersion"]
    versions["gpustack_core.__version__"] = gpustack_core.__version__
    assert len(versions) == 11
    assert len(set(versions.values())) == 1, versions
    # The script knows every one of those places, and agrees.
    module = _version_module()
    assert len(module.PLACES) == 11
    assert module.check(chart["version"]) == []


def test_set_changes_every_place_and_check_then_agrees(tmp_path: Path) -> None:
    module = _version_module()
    copied = []
    for path, key, pattern in module.PLACES:
        target = tmp_path / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            shutil.copy(path, target)
        copied.append((target, key, pattern))
    module.PLACES = copied
    module.REPO = tmp_path
    module.set_version("1.2.3")
    assert module.check("1.2.3") == []
    chart = yaml.safe_load((tmp_path / "clusters" / "chart" / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == ("1.2.3", "1.2.3")
    core = tomllib.loads((tmp_path / "packages" / "core" / "pyproject.toml").read_text())
    assert core["project"]["version"] == "1.2.3"
    assert module.check("0.1.0")  # the old version no longer matches anywhere
