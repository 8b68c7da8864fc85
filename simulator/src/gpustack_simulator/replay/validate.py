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

from collections.abc import Mapping
from functools import cache
from pathlib import Path

import pynvml

from gpustack_core.decoding import ContractError
from gpustack_simulator.recording import Recording, load_recording
from gpustack_simulator.replay import (
    amdsmi_standin,
    cndev_standin,
    dcmi_standin,
    hgml_standin,
    ixml_standin,
    mxsml_standin,
    pynvml_standin,
    rocm_smi_standin,
)
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.replay.hygon_standin import HYDMI_ID, ROCM_SMI_ID
from gpustack_simulator.synth.timeline import VirtualClock
from gpustack_vendors.bindings import hydmi, hygon_rocm_smi


@cache
def library_functions() -> Mapping[str, Mapping[str, frozenset[str]]]:
    """Vendor → library id → the function names its replay stand-in answers.

    Built from the stand-ins' own tables, so a name is known here exactly when replay can
    answer it.
    """
    nvml = frozenset(name for name in dir(pynvml) if name.startswith("nvml"))
    return {
        "nvidia": {pynvml_standin.LIBRARY_ID: nvml},
        "amd": {
            amdsmi_standin.LIBRARY_ID: frozenset(amdsmi_standin.FUNCTIONS),
            rocm_smi_standin.LIBRARY_ID: frozenset(rocm_smi_standin.FUNCTIONS),
        },
        "hygon": {
            ROCM_SMI_ID: frozenset(hygon_rocm_smi.FUNCTIONS),
            HYDMI_ID: frozenset(hydmi.FUNCTIONS),
        },
        "ascend": {dcmi_standin.LIBRARY_ID: frozenset(dcmi_standin.FUNCTIONS)},
        "thead": {hgml_standin.LIBRARY_ID: frozenset(hgml_standin.FUNCTIONS)},
        "cambricon": {cndev_standin.LIBRARY_ID: frozenset(cndev_standin.FUNCTIONS)},
        "metax": {mxsml_standin.LIBRARY_ID: frozenset(mxsml_standin.FUNCTIONS)},
        "iluvatar": {ixml_standin.LIBRARY_ID: frozenset(ixml_standin.FUNCTIONS)},
    }


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
