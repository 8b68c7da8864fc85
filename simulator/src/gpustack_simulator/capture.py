"""Recording a real card: the binding wrapped in a proxy, the backend driving it.

What leaves the machine: the binding's answers, the ``/proc`` context of the PIDs seen (so
attribution can be replayed), and host facts that identify hardware and software but not the
host — never its name, serials or real PIDs.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from gpustack_simulator.recorder import RecordingProxy, assemble, exercise
from gpustack_simulator.recording import (
    Binding,
    Context,
    ProcEntry,
    Provenance,
    Recording,
)
from gpustack_simulator.redact import redact_pids, returned_pids
from gpustack_simulator.replay.pynvml_standin import PynvmlCodec
from gpustack_vendors.loading import import_quietly
from gpustack_vendors.nvidia import NvidiaBackend


def _dist_version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return ""


def read_proc(pid: int, proc_root: Path = Path("/proc")) -> ProcEntry | None:
    """What attribution reads for a PID; ``None`` once the process is gone."""
    base = proc_root / str(pid)
    try:
        cgroup = (base / "cgroup").read_text().strip()
        stat = (base / "stat").read_text()
        comm = (base / "comm").read_text().strip()
    except OSError:
        return None
    state = stat.rpartition(")")[2].split()[0] if ")" in stat else "?"
    return ProcEntry(cgroup=cgroup, state=state, comm=comm)


def record_nvidia(
    *,
    samples: int,
    interval: float,
    description: str,
    progress: Callable[[int], None] | None = None,
    redact: bool = True,
) -> Recording:
    """Record this machine's NVIDIA cards through the real ``pynvml``."""
    module = import_quietly("pynvml")
    proxy = RecordingProxy(module, PynvmlCodec(module))
    backend = NvidiaBackend(proxy)
    exercise(backend, samples=samples, interval=interval, progress=progress)
    library = proxy.library(
        "pynvml",
        Binding(module="pynvml", dist="nvidia-ml-py", version=_dist_version("nvidia-ml-py")),
    )
    procs = {
        str(pid): entry
        for pid in sorted(returned_pids([library]))
        if (entry := read_proc(pid)) is not None
    }
    driver = next((c.ret for c in library.calls if c.fn == "nvmlSystemGetDriverVersion"), "")
    names = sorted(
        {
            str(c.ret)
            for c in library.calls
            if c.fn == "nvmlDeviceGetName" and isinstance(c.ret, str)
        }
    )
    recording = assemble(
        vendor="nvidia",
        description=description,
        provenance=Provenance(
            kind="recorded",
            recorded_at=datetime.now(UTC).replace(microsecond=0),
            recorder="gpustack-operator simulator record",
            host={
                "driver": str(driver),
                "kernel": platform.release(),
                "machine": platform.machine(),
                "gpus": "; ".join(names),
            },
        ),
        libraries=[library],
        node={"driver": str(driver), "pidNamespace": "host"},
        context=Context(procs=procs),
        loop_seconds=samples * interval,
    )
    return redact_pids(recording) if redact else recording
