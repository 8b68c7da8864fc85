"""What every ctypes-bound manufacturer must do alike, asserted once over a table of them.

Iluvatar (IXML), MetaX (MXSML) and Cambricon (CNDev) each load a C library, replay from a
recording, and are driven by the same CLI; these checks were written three times, once per
``test_<vendor>.py``, and drifted (one asserted a failure message names every path tried, another
did not). Here each is one test over a row per manufacturer, with the facts that differ (library
file, environment variables, search paths, the recorded cards) written in the row, from the
vendor's documentation and its recording, never read from the binding. What only one
manufacturer does stays in its own module.
"""

from __future__ import annotations

import importlib
import pickle
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpustack_cli.main import app
from gpustack_simulator.recorder import RecordingProxy, exercise
from gpustack_simulator.recording import call_key, load_recording
from gpustack_simulator.synth.timeline import VirtualClock

RECORDINGS = Path(__file__).resolve().parents[3] / "recordings"
runner = CliRunner()


@dataclass(frozen=True)
class Row:
    """One manufacturer's facts for the shared checks."""

    name: str
    library: str
    """The recording's library key and the binding module's name."""
    file: str
    """The shared object's file name."""
    backend: str
    """The backend class in ``gpustack_vendors.<name>.backend``."""
    codec: str
    """The stand-in module (``gpustack_simulator.replay.<codec>_standin``) and codec prefix."""
    not_found: str
    """The binding's library-not-found exception."""
    env: Callable[[Path], dict[str, str]]
    """The library variables naming places under ``root`` (the explicit path under ``x/``)."""
    tried: Callable[[Path], tuple[str, ...]]
    """Every path ``load_library()`` tries, in order, for ``env(root)``."""
    one_clear_line: Callable[[Path], tuple[str, ...]]
    """What ``detect`` without the library names, the explicit path unset."""
    recording: str
    fields: tuple[str, ...]
    """The ``detect --simulate`` device fields compared, and their values card by card."""
    cards: tuple[tuple[object, ...], ...]


def _home(var: str, root: Path, home: str) -> dict[str, str]:
    return {var: str(root / "x" / "lib.so"), **({} if not home else {home: str(root / "home")})}


ROWS = (
    Row(
        name="iluvatar",
        library="ixml",
        file="libixml.so",
        backend="IluvatarBackend",
        codec="ixml",
        not_found="IxmlLibraryNotFound",
        env=lambda root: _home("IXML_LIB", root, "COREX_HOME"),
        tried=lambda root: (
            str(root / "x" / "lib.so"),
            str(root / "home" / "lib64" / "libixml.so"),
            str(root / "home" / "lib" / "libixml.so"),
            "libixml.so",
        ),
        one_clear_line=lambda root: (str(root / "home" / "lib64" / "libixml.so"),),
        recording="iluvatar/bi-v150.yaml",
        fields=("id", "memory_mib", "pci_bus_id"),
        cards=(
            ("GPU-1b7e3c52-9a04-4f6d-b8e1-37c2d5a90f46", 32768, "0000:3b:00.0"),
            ("GPU-e40a9d17-5c3b-4e82-9f16-a8d3c07b5e21", 32768, "0000:5e:00.0"),
        ),
    ),
    Row(
        name="metax",
        library="mxsml",
        file="libmxsml.so",
        backend="MetaxBackend",
        codec="mxsml",
        not_found="MxsmlLibraryNotFound",
        env=lambda root: _home("MXSML_LIB", root, "MACA_HOME"),
        tried=lambda root: (
            str(root / "x" / "lib.so"),
            "/opt/mxdriver/lib/libmxsml.so",
            str(root / "home" / "lib64" / "libmxsml.so"),
            str(root / "home" / "lib" / "libmxsml.so"),
            "/opt/mxn100/lib/libmxsml.so",
            "libmxsml.so",
        ),
        one_clear_line=lambda root: (
            "/opt/mxdriver/lib/libmxsml.so",
            str(root / "home" / "lib64" / "libmxsml.so"),
        ),
        recording="metax/c600.yaml",
        fields=("id", "name", "pci_bus_id"),
        cards=(
            ("GPU-6e1f9a42-3b7c-4d85-a0e9-52c8f1d7b364", "MXC600", "0000:0e:00.0"),
            ("GPU-b70d25c8-91e4-4f3a-86d2-0c5e7a4f19b8", "MXC600", "0000:0f:00.0"),
        ),
    ),
    Row(
        name="cambricon",
        library="cndev",
        file="libcndev.so",
        backend="CambriconBackend",
        codec="cndev",
        not_found="CndevLibraryNotFound",
        env=lambda root: _home("CNDEV_LIB", root, "NEUWARE_HOME"),
        tried=lambda root: (
            str(root / "x" / "lib.so"),
            str(root / "home" / "lib64" / "libcndev.so"),
            str(root / "home" / "lib" / "libcndev.so"),
            "libcndev.so",
        ),
        one_clear_line=lambda root: (
            str(root / "home" / "lib64" / "libcndev.so"),
            str(root / "home" / "lib"),
        ),
        recording="cambricon/mlu370-x8.yaml",
        fields=("id", "name", "memory_mib"),
        cards=(
            ("MLU-5a3c1f0e-7b2d-4c9a-8e61-0d4f2b7a9c13", "MLU370-X8", 49152),
            ("MLU-c8e2904b-13f5-4a6d-b27e-9f60d1c4e385", "MLU370-X8", 49152),
        ),
    ),
)
RECORDED = [
    pytest.param(row, path, id=f"{row.name}-{path.name}")
    for row in ROWS
    for path in sorted((RECORDINGS / row.name).glob("*.yaml"))
]


def _binding(row: Row) -> Any:
    return importlib.import_module(f"gpustack_vendors.{row.name}.{row.library}")


@pytest.fixture(params=ROWS, ids=lambda row: row.name)
def row(request: pytest.FixtureRequest) -> Row:
    return request.param  # type: ignore[no-any-return]


def test_recordings_exist(row: Row) -> None:
    assert (RECORDINGS / row.recording).is_file()


@pytest.mark.parametrize(("row", "path"), RECORDED)
def test_record_of_replay_round_trips(row: Row, path: Path) -> None:
    """record(replay(R)) == R: every call, version arguments and series included."""
    standin = importlib.import_module(f"gpustack_simulator.replay.{row.codec}_standin")
    codec = getattr(standin, f"{row.codec.capitalize()}Codec")
    backend = getattr(importlib.import_module(f"gpustack_vendors.{row.name}.backend"), row.backend)
    original = load_recording(path)
    clock = VirtualClock()
    proxy = RecordingProxy(
        standin.as_module(standin.build_binding(original, clock=clock)), codec(), clock=clock
    )
    assert original.loop_seconds is not None
    exercise(
        backend(proxy),
        samples=round(original.loop_seconds / 15),
        interval=15.0,
        sleep=clock.sleep,
    )
    before = original.library(row.library)
    again = proxy.library(row.library, before.binding)
    assert {call_key(c): c for c in again.calls} == {call_key(c): c for c in before.calls}
    assert again.handles == before.handles


LAZY = """
import ctypes
def refuse(*args, **kwargs):
    raise SystemExit("a library was opened at import: " + repr(args))
ctypes.CDLL = refuse
import gpustack_vendors.{name}.{library}, gpustack_vendors.{name}.backend
import gpustack_vendors.loading
"""


def test_importing_the_binding_and_backend_opens_no_library(row: Row) -> None:
    """A fresh interpreter whose ``ctypes.CDLL`` refuses: importing must not call it."""
    code = LAZY.format(name=row.name, library=row.library)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_load_library_names_every_path_tried(
    row: Row, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for var, value in row.env(tmp_path).items():
        monkeypatch.setenv(var, value)
    binding = _binding(row)
    with pytest.raises(getattr(binding, row.not_found)) as raised:
        binding.load_library()
    expected = row.tried(tmp_path)
    assert raised.value.tried == expected
    assert all(path in str(raised.value) for path in expected)
    assert isinstance(raised.value, OSError)
    assert pickle.loads(pickle.dumps(raised.value)).tried == expected


def test_detect_without_the_library_is_one_clear_line(row: Row, tmp_path: Path) -> None:
    # The explicit library variable set empty, the install home pointing at nothing.
    env = {var: "" if var.endswith("_LIB") else value for var, value in row.env(tmp_path).items()}
    result = runner.invoke(app, ["device-manager", "detect", "--manufacturer", row.name], env=env)
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert f"{row.file} could not be loaded" in lines[0]
    for fragment in row.one_clear_line(tmp_path):
        assert fragment in lines[0]


def test_detect_simulate_lists_the_cards(row: Row) -> None:
    result = runner.invoke(
        app, ["device-manager", "detect", "--simulate", str(RECORDINGS / row.recording)]
    )
    assert result.exit_code == 0, result.output
    detection = yaml.safe_load(result.output)
    assert detection["manufacturer"] == row.name
    found = [tuple(d[field] for field in row.fields) for d in detection["devices"]]
    assert found == list(row.cards)
