"""``gpustack-operator simulator record --vendor X``: every manufacturer, end to end.

Without hardware, each vendor's real loader is stood in for by the replay of one committed
recording (the binding module's own ``load_library``, or the import of ``pynvml``/``amdsmi``),
so the command runs exactly as on a node: the registry opens the libraries in their load order,
the backend is built over recording proxies, the file is redacted, written and validated. A
machine without the vendor's library gets one line naming it (and every path searched), exit 1.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpustack_cli.main import app
from gpustack_simulator.capture import Host, record
from gpustack_simulator.recording import load_recording
from gpustack_simulator.redact import FIRST_FAKE_PID, returned_pids
from gpustack_simulator.replay.standins import replay_bindings
from gpustack_simulator.replay.validate import load_replayable
from gpustack_simulator.synth.timeline import VirtualClock
from gpustack_vendors import registry
from gpustack_vendors.ascend import dcmi
from gpustack_vendors.bindings import rocm_smi as rocm_smi_binding
from gpustack_vendors.cambricon import cndev
from gpustack_vendors.hygon import hydmi
from gpustack_vendors.hygon import rocm_smi as hygon_rocm_smi
from gpustack_vendors.iluvatar import ixml
from gpustack_vendors.metax import mxsml
from gpustack_vendors.registry import VENDORS
from gpustack_vendors.thead import hgml

RECORDINGS = Path(__file__).resolve().parents[3] / "recordings"
runner = CliRunner()
LOADERS: dict[str, types.ModuleType] = {
    # Library id (per vendor) → the binding module whose load_library opens it.
    "amd/rocm_smi": rocm_smi_binding,
    "hygon/rocm_smi": hygon_rocm_smi,
    "hygon/hydmi_mig": hydmi,
    "ascend/dcmi": dcmi,
    "thead/hgml": hgml,
    "cambricon/cndev": cndev,
    "iluvatar/ixml": ixml,
    "metax/mxsml": mxsml,
}
IMPORTED = {"pynvml", "amdsmi"}
"""Libraries that are official Python packages, opened by ``registry.import_quietly``."""


def test_record_names_exactly_the_registry() -> None:
    result = runner.invoke(app, ["simulator", "record", "--help"], env={"COLUMNS": "200"})
    text = " ".join(result.output.replace("│", " ").split())
    named = [v for v in ("mthreads", *VENDORS) if f"{v} (" in text]
    assert named == list(VENDORS)


def _first(vendor: str) -> Path:
    return sorted((RECORDINGS / vendor).glob("*.yaml"))[0]


def _stand_in_loaders(monkeypatch: pytest.MonkeyPatch, vendor: str, source: Path) -> None:
    """Every loader of ``vendor`` answers with the replay of ``source``; order is logged."""
    bindings = replay_bindings(load_recording(source))
    for library in VENDORS[vendor].libraries:
        binding = bindings.opened.get(library.id)
        if library.id in IMPORTED:
            continue
        module = LOADERS[f"{vendor}/{library.id}"]
        if binding is None:
            failure = bindings.absent[library.id]

            def absent(failure: BaseException = failure) -> object:
                raise hydmi.HyDmiLibraryNotFound(hydmi.LIBRARY_NAME, [("/opt/x", str(failure))])

            monkeypatch.setattr(module, "load_library", absent)
        else:
            monkeypatch.setattr(module, "load_library", lambda binding=binding: binding)
    imported = {i: bindings.opened[i] for i in IMPORTED if i in bindings.opened}
    if imported:
        monkeypatch.setattr(registry, "import_quietly", imported.__getitem__)


@pytest.mark.parametrize("vendor", list(VENDORS))
def test_record_writes_a_redacted_recorded_file_for_every_vendor(
    vendor: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    source = _first(vendor)
    _stand_in_loaders(monkeypatch, vendor, source)
    out = tmp_path / "node.yaml"
    result = runner.invoke(
        app,
        [
            "simulator", "record", "--vendor", vendor, "-o", str(out),
            "--samples", "2", "--interval", "0", "--description", "a node",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    written = load_replayable(out)  # what validate and every replay accept
    assert written.vendor == vendor
    assert written.provenance.kind == "recorded"
    assert written.provenance.recorded_at is not None
    assert written.provenance.recorder.startswith("gpustack-operator simulator record ")
    assert [line.split(":")[0] for line in written.provenance.redacted] == [
        "pid",
        "serial",
        "hostname",
    ]
    assert [lib.id for lib in written.libraries] == [lib.id for lib in VENDORS[vendor].libraries]
    original = load_recording(source)
    assert {lib.id: lib.load.ok for lib in written.libraries} == {
        lib.id: lib.load.ok for lib in original.libraries
    }
    pids = returned_pids(written.libraries)
    assert all(pid >= FIRST_FAKE_PID for pid in pids)
    assert not pids & returned_pids(original.libraries)


def test_amd_opens_rocm_smi_before_amd_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    bindings = replay_bindings(load_recording(_first("amd")))
    monkeypatch.setattr(
        rocm_smi_binding,
        "load_library",
        lambda: order.append("rocm_smi") or bindings["rocm_smi"],
    )
    monkeypatch.setattr(
        registry, "import_quietly", lambda name: order.append(name) or bindings["amdsmi"]
    )
    registry.open_bindings(VENDORS["amd"])
    assert order == ["rocm_smi", "amdsmi"]


def test_progress_is_told_every_pass() -> None:
    original = load_recording(_first("cambricon"))
    clock = VirtualClock()
    done: list[int] = []
    record(
        "cambricon",
        samples=3,
        interval=15.0,
        description="x",
        open_bindings=lambda entry: replay_bindings(original, clock=clock),
        host=Host(names=()),
        clock=clock,
        sleep=clock.sleep,
        progress=done.append,
    )
    assert done == [1, 2, 3]


def test_a_host_name_in_an_answer_is_replaced() -> None:
    original = load_recording(_first("cambricon"))
    [name] = {
        c.ret for c in original.library("cndev").calls if c.fn == "cndevGetCardNameStringByDevId"
    }
    clock = VirtualClock()
    recording = record(
        "cambricon",
        samples=1,
        interval=15.0,
        description="x",
        open_bindings=lambda entry: replay_bindings(original, clock=clock),
        host=Host(names=(str(name),)),
        clock=clock,
        sleep=clock.sleep,
    )
    names = {
        c.ret for c in recording.library("cndev").calls if c.fn == "cndevGetCardNameStringByDevId"
    }
    assert names == {"redacted-host"}
    assert recording.provenance.redacted[-1].startswith("hostname: ")
    assert str(name) not in recording.provenance.host.get("cards", "")


@pytest.mark.parametrize("vendor", list(VENDORS))
def test_a_missing_library_is_one_line_naming_it(vendor: str, tmp_path: Path) -> None:
    """On this machine (no vendor driver), the real loaders fail: one line, exit 1."""
    result = runner.invoke(
        app, ["simulator", "record", "--vendor", vendor, "-o", str(tmp_path / "x.yaml")]
    )
    if result.exit_code == 0:
        pytest.skip(f"the {vendor} library opens on this machine")
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(f"gpustack-operator simulator record: cannot record {vendor}: ")
    first = VENDORS[vendor].opening_order()[0]
    assert first.soname in line
    if first.dist == registry.OURS:
        assert "could not be loaded. Tried: " in line
    assert not (tmp_path / "x.yaml").exists()


def test_an_unknown_vendor_is_a_usage_error(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["simulator", "record", "--vendor", "mthreads", "-o", str(tmp_path / "x.yaml")]
    )
    assert result.exit_code == 2
    assert "--vendor mthreads: not a manufacturer with a backend (nvidia, amd," in result.stderr
