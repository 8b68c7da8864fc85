"""The recording format: every committed recording validates, corrupted copies are named."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import yaml

from gpustack_core.decoding import ContractError
from gpustack_simulator.recorder import RecordingProxy, exercise
from gpustack_simulator.recording import (
    Context,
    ProcEntry,
    call_key,
    dump_recording,
    load_recording,
    parse_recording,
)
from gpustack_simulator.redact import FIRST_FAKE_PID, redact_pids
from gpustack_simulator.replay import pynvml_standin
from gpustack_simulator.replay.pynvml_standin import PynvmlCodec
from gpustack_simulator.synth.timeline import VirtualClock
from gpustack_vendors.nvidia.backend import NvidiaBackend

RECORDINGS = Path(__file__).resolve().parents[3] / "recordings"
ALL = sorted(RECORDINGS.glob("*/*.yaml"))
ALL = [p for p in ALL if p.parent.name != "scenarios"]
NVIDIA = sorted(RECORDINGS.glob("nvidia/*.yaml"))


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_committed_recording_validates(path: Path) -> None:
    recording = load_recording(path)
    assert recording.schema == "accel-recording/v1"
    assert recording.provenance.kind in {"recorded", "synthesized"}
    if recording.provenance.kind == "synthesized":
        assert recording.provenance.sources
    # Dumping and parsing again loses nothing.
    assert parse_recording(dump_recording(recording), source="again") == recording


def corrupt(path: Path, mutate: object) -> str:
    document = yaml.safe_load(path.read_text())
    mutate(document)  # type: ignore[operator]
    return yaml.safe_dump(document)


def _set(keys: list[object], value: object):  # type: ignore[no-untyped-def]
    def mutate(document: dict[str, object]) -> None:
        target: object = document
        for key in keys[:-1]:
            target = target[key]  # type: ignore[index]
        target[keys[-1]] = value  # type: ignore[index]

    return mutate


CORRUPTIONS = [
    (_set(["schema"], "accel-recording/v2"), "$.schema"),
    (_set(["libraries", 0, "calls", 2, "fn"], 7), "$.libraries[0].calls[2].fn"),
    (_set(["provenance", "kind"], "guessed"), "$.provenance.kind"),
    (_set(["provenance", "sources"], []), "must list its sources"),
    (
        _set(["libraries", 0, "calls", 4, "args"], [{"_handle": "gpu9"}]),
        "handle 'gpu9' is not in $.libraries[0].handles",
    ),
    (
        _set(["libraries", 0, "calls", 1, "raises"], {"type": "NVMLError", "code": 3}),
        "exactly one of ret, raises, series",
    ),
    (_set(["context", "procs"], {"abc": {"cgroup": "0::/"}}), "a PID must be a decimal number"),
    (
        _set(["faults"], [{"fn": "x", "from": 5, "to": 1, "raises": {"type": "E", "code": 1}}]),
        "must be after 'from'",
    ),
    (_set(["libraries", 0, "calls", 3], {"fn": "nvmlInit", "ret": None}), "recorded twice"),
]


@pytest.mark.parametrize(("mutate", "complaint"), CORRUPTIONS, ids=lambda c: str(c)[:40])
def test_corrupted_copies_are_rejected_naming_the_field(mutate: object, complaint: str) -> None:
    source = NVIDIA[0]
    with pytest.raises(ContractError) as excinfo:
        parse_recording(corrupt(source, mutate), source=f"copy of {source.name}")
    message = str(excinfo.value)
    assert complaint in message
    assert f"copy of {source.name}" in message


def test_not_yaml_is_named() -> None:
    with pytest.raises(ContractError, match=r"broken\.yaml: not valid YAML"):
        parse_recording("a: [unclosed", source="broken.yaml")


@pytest.mark.parametrize("path", NVIDIA, ids=lambda p: p.name)
def test_record_of_replay_round_trips(path: Path) -> None:
    """record(replay(R)) == R on every call made, handles and series included."""
    original = load_recording(path)
    clock = VirtualClock()
    module = pynvml_standin.build_module(original, clock=clock)
    proxy = RecordingProxy(module, PynvmlCodec(module), clock=clock)
    assert original.loop_seconds is not None
    samples = round(original.loop_seconds / 15)
    exercise(NvidiaBackend(proxy), samples=samples, interval=15.0, sleep=clock.sleep)
    again = proxy.library("pynvml", original.libraries[0].binding)
    before = {call_key(c): c for c in original.libraries[0].calls}
    after = {call_key(c): c for c in again.calls}
    assert set(after) == set(before)  # every recorded call was made, and no other
    for key, call in after.items():
        assert call == before[key], call.fn
    assert again.handles == original.libraries[0].handles


def test_redaction_is_consistent_across_rows_args_and_context() -> None:
    recording = load_recording(RECORDINGS / "nvidia" / "h100-8x.yaml")
    context = Context(procs={"4242": ProcEntry(cgroup="0::/x"), "5150": ProcEntry(cgroup="0::/y")})
    redacted = redact_pids(msgspec.structs.replace(recording, context=context))
    text = dump_recording(redacted)
    assert "4242" not in text
    assert "5150" not in text
    assert set(redacted.context.procs) <= {str(FIRST_FAKE_PID + i) for i in range(10)}
    # The same real PID maps to the same fake one in every call that names it.
    lists = [
        c for c in redacted.libraries[0].calls if c.fn == "nvmlDeviceGetComputeRunningProcesses"
    ]
    pids = {p["pid"] for c in lists for p in (c.ret or [])}
    assert pids <= {int(pid) for pid in redacted.context.procs} | set(
        range(FIRST_FAKE_PID, FIRST_FAKE_PID + 10)
    )
    assert min(pids) >= FIRST_FAKE_PID
