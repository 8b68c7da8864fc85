"""One validator for recordings, used by ``simulator validate`` and by everything that replays.

``validate`` used to check the schema and the recording's own consistency only, so a file it
accepted could still fail in ``replay``/``serve`` (an unknown vendor, a vendor's recording
holding another vendor's library, a function no binding has, a return value of the wrong
shape). Here the schema checks are followed by the checks replay itself relies on — which
vendor, which libraries, which functions — and then by a dry replay: the vendor's real backend
detects and samples once over the stand-ins, in virtual time. Whatever would make replay fail
makes validation fail, with one line naming the file and what is wrong.
"""

from __future__ import annotations

from pathlib import Path

from gpustack_core.decoding import ContractError
from gpustack_simulator.recording import Recording, load_recording
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.replay.standins import library_functions
from gpustack_simulator.synth.timeline import VirtualClock


def replay_problems(recording: Recording) -> list[str]:
    """What would make replay refuse ``recording``, each naming its JSON path; ``[]`` if none."""
    surfaces = library_functions()
    expected = surfaces.get(recording.vendor)
    if expected is None:
        return [
            f"$.vendor: {recording.vendor!r} is not a vendor replay knows ({', '.join(surfaces)})"
        ]
    problems: list[str] = []
    present = {library.id for library in recording.libraries}
    problems.extend(
        f"$.libraries: a {recording.vendor} recording needs library {missing!r}"
        for missing in sorted(set(expected) - present)
    )
    for li, library in enumerate(recording.libraries):
        known = expected.get(library.id)
        if known is None:
            problems.append(
                f"$.libraries[{li}].id: {library.id!r} is not a {recording.vendor} library "
                f"({', '.join(sorted(expected))})"
            )
            continue
        problems.extend(
            f"$.libraries[{li}].calls[{ci}].fn: {call.fn!r} is not a function of {library.id}"
            for ci, call in enumerate(library.calls)
            if call.fn not in known
        )
    if problems:
        return problems
    failure = _dry_replay(recording)
    return [] if failure is None else [f"$: replaying it fails: {failure}"]


def _dry_replay(recording: Recording) -> str | None:
    """Detect and sample once through the vendor's real backend; the first failure, if any.

    Any exception is the answer here (a wrong return type surfaces as whatever the backend
    raises on it), never a crash of the caller.
    """
    clock = VirtualClock()
    try:
        backend = replay_backend(recording, clock=clock)
        try:
            devices = [d.id for d in backend.detect().devices]
            backend.sample()
            backend.processes(devices)
        finally:
            backend.close()
    except Exception as exc:
        text = str(exc).splitlines()[0] if str(exc) else ""
        return f"{type(exc).__name__}: {text}"[:500]
    return None


def load_replayable(path: Path) -> Recording:
    """Read ``path`` and refuse it (``ContractError``, one line) unless replay can run it."""
    recording = load_recording(path)
    problems = replay_problems(recording)
    if problems:
        raise ContractError(f"{path}: " + "; ".join(problems))
    return recording


__all__ = ["library_functions", "load_replayable", "replay_problems"]
