"""docs/deploy.md's values reference is what clusters/values_reference.py generates, and it
names every key the schema accepts and every default values.yaml sets."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "clusters" / "values_reference.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("values_reference", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("values_reference", module)
    spec.loader.exec_module(module)
    return module


def test_the_reference_in_deploy_md_is_the_generated_one() -> None:
    generator = _generator()
    document = (REPO / "docs" / "deploy.md").read_text()
    assert generator.START in document
    assert generator.replaced(document) == document, (
        "docs/deploy.md's values reference is stale: run `just chart-docs`"
    )


def _leaves(values: Any, path: str = "") -> list[str]:
    if isinstance(values, dict) and values:
        return [
            leaf for k, v in values.items() for leaf in _leaves(v, f"{path}.{k}" if path else k)
        ]
    return [path]


def test_every_default_in_values_yaml_has_a_row() -> None:
    table = _generator().table()
    keys = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `")}
    values = yaml.safe_load((REPO / "clusters" / "chart" / "values.yaml").read_text())
    for leaf in _leaves(values):
        parts = leaf.split(".")
        if parts[:2] == ["deviceManager", "manufacturers"] and len(parts) > 2:
            parts[2] = "<m>"
        # A row may stand for an object (resources, affinity, rollingUpdate): a prefix counts.
        # An empty map (simulate: {}) is documented by its members' rows.
        assert any(".".join(parts[:n]) in keys for n in range(len(parts), 0, -1)) or any(
            k.startswith(leaf + ".") for k in keys
        ), leaf


def test_every_schema_key_is_a_row() -> None:
    schema = json.loads((REPO / "clusters" / "chart" / "values.schema.json").read_text())
    table = _generator().table()
    for key in schema["properties"]:
        if key != "global":
            assert f"| `{key}" in table, key
