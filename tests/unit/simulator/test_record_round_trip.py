"""``record(replay(R)) == R`` for every committed recording, every vendor, byte for byte.

The recorder (:func:`gpustack_simulator.capture.record`, what ``simulator record --vendor X``
runs) is handed the replay of a committed recording instead of the real libraries: for the
ctypes vendors our real bindings over their C-ABI fakes (so the bindings' own size negotiation,
out-parameters and struct layouts run), for NVIDIA and AMD the ``pynvml``/``amdsmi`` stand-ins.
The unchanged backend drives them for the recording's own loop length (``loopSeconds`` / 15 s
passes), and the document the recorder writes must serialise to the committed file's bytes.

What the recorder does not produce is carried over from the original, and only that:

- ``description``: the user's words (``--description``);
- ``provenance``: the committed recordings are ``synthesized`` from public sources; a recording
  says ``recorded`` with its own date, tool version and host facts (checked separately below);
- ``node``: host facts the recorder reads off the host (cgroup version, PID namespace) plus, in
  a synthesized file, the stack versions its spec names (``dtk``, ``rocm``, ``maca``) that no
  backend reads. The recorder's ``node.driver`` is still checked against the original's.

Everything else is the recorder's own output: ``schema``, ``vendor``, every library (id, binding
module and distribution from the registry, load status, handles, calls with their series and
filters), ``loopSeconds``, ``faults`` and ``context`` (read through the recorder's ``/proc``
reader, which here reads the recording's own process table, as replay's fake ``/proc`` does).
The binding *version* is read through the recorder's host as well, here answered from the
original (the version of the binding that answered when it was made, not today's).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from gpustack_cli.simulator_cmds import detect
from gpustack_devicemanager.monitor import TickContext, tick
from gpustack_simulator.capture import Host, record
from gpustack_simulator.recording import Recording, dump_recording, load_recording
from gpustack_simulator.redact import redact
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.replay.standins import STANDINS, replay_bindings
from gpustack_simulator.synth.timeline import VirtualClock
from gpustack_simulator.synth.write import SYNTHESIS, synthesize
from gpustack_vendors.registry import VENDORS

RECORDINGS = Path(__file__).resolve().parents[3] / "recordings"
PATHS = sorted(p for p in RECORDINGS.glob("*/*.yaml") if p.parent.name != "scenarios")
INTERVAL = 15.0
NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def host_of(original: Recording) -> Host:
    """The recorded node as the recorder's host: its process table and binding versions."""
    versions = {lib.binding.dist: lib.binding.version for lib in original.libraries}
    return Host(
        read_proc=lambda pid: original.context.procs.get(str(pid)),
        dist_version=versions.__getitem__,
        now=lambda: NOW,
        kernel="6.8.0",
        machine="x86_64",
        cgroup="v2",
        names=(),
    )


def rerecord(original: Recording, *, redacted: bool = False) -> Recording:
    """Record ``original``'s replay through the recorder, for its own loop length."""
    assert original.loop_seconds is not None
    clock = VirtualClock()
    return record(
        original.vendor,
        samples=round(original.loop_seconds / INTERVAL),
        interval=INTERVAL,
        description=original.description,
        open_bindings=lambda entry: replay_bindings(original, clock=clock),
        host=host_of(original),
        clock=clock,
        sleep=clock.sleep,
        redacted=redacted,
    )


def carried(again: Recording, original: Recording) -> Recording:
    """``again`` with the fields the recorder does not produce taken from ``original``."""
    return msgspec.structs.replace(again, provenance=original.provenance, node=original.node)


def test_every_vendor_has_a_committed_recording() -> None:
    assert {load_recording(p).vendor for p in PATHS} == set(VENDORS) == set(STANDINS)


def test_the_simulator_tables_are_keyed_as_the_registry() -> None:
    """Replay and synthesis name each manufacturer and library as the vendor registry does."""
    assert list(STANDINS) == list(VENDORS) == list(SYNTHESIS)
    for name, entry in VENDORS.items():
        assert list(STANDINS[name]) == [library.id for library in entry.libraries], name


def test_the_synthesizer_writes_every_committed_file_through_the_recorder() -> None:
    written = {
        RECORDINGS / name / spec.file: synthesize(name, spec)
        for name, synthesis in SYNTHESIS.items()
        for spec in synthesis.nodes
    }
    assert sorted(written) == PATHS
    assert [p for p, text in written.items() if p.read_text() != text] == []


@pytest.mark.parametrize("path", PATHS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_record_of_replay_is_the_committed_file_byte_for_byte(path: Path) -> None:
    original = load_recording(path)
    again = rerecord(original)
    assert again.description == original.description
    assert dump_recording(carried(again, original)) == path.read_text()
    if "driver" in original.node:
        assert again.node["driver"] == original.node["driver"]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_redaction_commutes_with_the_round_trip(path: Path) -> None:
    """What a user would share: the redacted re-recording is the redacted original."""
    original = load_recording(path)
    again = redact(carried(rerecord(original), original))
    assert dump_recording(again) == dump_recording(redact(original))
    assert again == carried(rerecord(original, redacted=True), redact(original))


@pytest.mark.parametrize("path", PATHS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_rerecording_detects_and_monitors_as_the_original(path: Path, tmp_path: Path) -> None:
    """As recorded, and as redacted for sharing: the same detection and the same passes."""
    original = load_recording(path)
    pairs = {
        "recorded": (rerecord(original), original),
        "shared": (rerecord(original, redacted=True), redact(original)),
    }
    for name, (again, before) in pairs.items():
        again_file, before_file = tmp_path / f"{name}-again.yaml", tmp_path / f"{name}.yaml"
        again_file.write_text(dump_recording(again))
        before_file.write_text(dump_recording(before))
        # The CLI's `device-manager detect --simulate FILE`.
        assert detect(None, again_file, "json") == detect(None, before_file, "json"), name
        # A Device Manager's monitor passes over the loop: cards, then every device's
        # processes and every partition, at each pass's time.
        assert passes(again) == passes(before), name
    # Redaction replaces nothing detection reads: the shared file detects as the committed one.
    assert detect(None, tmp_path / "shared.yaml", "json") == detect(None, path, "json")


def passes(recording: Recording) -> list[object]:
    """Every monitor pass a Device Manager makes over the loop, as plain values."""
    assert recording.loop_seconds is not None
    clock = VirtualClock()
    backend = replay_backend(recording, clock=clock)
    seen: list[object] = []
    try:
        detection = backend.detect()
        devices = [d.id for d in detection.devices]
        partitions = [p.id for d in detection.devices for p in d.partitions]
        context = TickContext(recording.vendor, INTERVAL, Path("/nonexistent"))
        for index in range(round(recording.loop_seconds / INTERVAL)):
            clock.now = index * INTERVAL
            snapshot = tick(backend, None, context, NOW)
            seen.append(
                msgspec.to_builtins(
                    (
                        snapshot,
                        backend.processes(devices),
                        backend.partitions(partitions),
                    ),
                    enc_hook=repr,
                )
            )
    finally:
        backend.close()
    return seen
