"""Helpers the vendor tests share: a scripted C-ABI answer source and one tick over a scenario."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gpustack_devicemanager.monitor import TickContext, tick
from gpustack_simulator.procfs import write_procfs
from gpustack_simulator.recording import load_recording
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.scenario import RECORDINGS_DIR, expand, find_scenario, load_scenario
from gpustack_simulator.synth.timeline import VirtualClock


class Script:
    """An ``answer`` callback serving successive values per function, logging its calls.

    Each function's queue is served in order and its last value repeats; a value that is an
    exception is raised instead of returned.
    """

    def __init__(self, **answers: list[object]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, tuple[object, ...]]] = []

    def __call__(self, name: str, args: tuple[object, ...]) -> object:
        self.asked.append((name, args))
        queue = self.answers[name]
        value = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(value, BaseException):
            raise value
        return value

    def count(self, name: str) -> int:
        """How many times ``name`` was called."""
        return sum(1 for asked, _ in self.asked if asked == name)


def slice_usages(
    name: str, recording_path: Path, t: float, root: Path
) -> dict[str, tuple[int | None, int | None]]:
    """Instance name → (memoryUsedMiB, coresUtilizationPercent) of one tick over a scenario."""
    scenario = expand(load_scenario(find_scenario(name)), base=RECORDINGS_DIR)
    [node] = [n["metadata"]["name"] for n in scenario.nodes]
    recording = load_recording(recording_path)
    clock = VirtualClock()
    backend = replay_backend(recording, clock=clock)
    backend.detect()
    clock.now = t
    write_procfs(root, scenario.procs(node))
    snapshot = tick(
        backend,
        [p for p in scenario.pods if p["spec"].get("nodeName") == node],
        TickContext(recording.vendor, 15.0, root),
        datetime.now(UTC),
    )
    assert snapshot.slices is not None
    names = {p["metadata"]["uid"]: p["metadata"]["name"] for p in scenario.pods}
    return {
        names[u.pod_uid]: (u.memory_used_mib, u.cores_utilization_percent)
        for u in snapshot.slices.usages
    }
