"""A Device Manager whose vendor library does not open names the chart value that mounts it.

On a node the message is all the operator sees (a crash-looping Pod's log), so it must say what
to set. These machines have no vendor library, so each open fails for real; a manufacturer
whose library does open here is skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpustack_core.modes import Manufacturer
from gpustack_vendors.loading import LibraryUnavailableError, open_backend

SCHEMA = Path(__file__).resolve().parents[3] / "clusters" / "chart" / "values.schema.json"


def _failure(manufacturer: str) -> str:
    try:
        open_backend(manufacturer).close()
    except LibraryUnavailableError as exc:
        return str(exc)
    pytest.skip(f"the {manufacturer} library opens on this machine")


@pytest.mark.parametrize("manufacturer", ["amd", "hygon", "ascend", "cambricon", "metax"])
def test_a_missing_library_names_the_chart_value_that_mounts_it(manufacturer: str) -> None:
    message = _failure(manufacturer)
    assert f"deviceManager.manufacturers.{manufacturer}.libraryPath" in message
    # The value exists in the chart's schema, spelled the same way.
    schema = json.loads(SCHEMA.read_text())
    entry = schema["properties"]["deviceManager"]["properties"]["manufacturers"]
    assert "libraryPath" in entry["additionalProperties"]["properties"]


def test_nvidia_names_the_runtime_class() -> None:
    assert "deviceManager.manufacturers.nvidia.runtimeClassName" in _failure("nvidia")


def test_a_manufacturer_without_a_backend_gets_no_chart_advice() -> None:
    assert Manufacturer("mthreads")
    message = _failure("mthreads")
    assert "no backend" in message
    assert "Helm chart" not in message
