"""Recording a node: each library wrapped in a proxy, the unchanged backend driving it.

:func:`record` works for every manufacturer of :data:`gpustack_vendors.registry.VENDORS`, and
for every source of bindings: the real libraries (:func:`gpustack_vendors.registry.
open_bindings`, what ``gpustack-operator simulator record`` uses), the replay of a recording
(:func:`gpustack_simulator.replay.standins.replay_bindings`, which is how the round trip
``record(replay(R)) == R`` is proved without hardware) or synthetic ones. For each library the
vendor lists, the binding is wrapped in a :class:`~gpustack_simulator.recorder.RecordingProxy`
(through its stand-in's module view and codec), the registry builds the backend over the
proxies, and :func:`~gpustack_simulator.recorder.exercise` makes every call a Device Manager
makes.

What leaves the machine: the bindings' answers, the ``/proc`` context of the PIDs seen (so
attribution can be replayed), and host facts that identify hardware and software but not the
host. PIDs, serials and host names are replaced (:mod:`gpustack_simulator.redact`) and the
provenance says so. Everything the recorder reads of the host comes through :class:`Host`, so a
test can stand in for the host as the replay stands in for the library.
"""

from __future__ import annotations

import platform
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import gpustack_core
from gpustack_simulator.recorder import RecordingProxy, assemble, exercise
from gpustack_simulator.recording import (
    Binding,
    Context,
    Library,
    Load,
    ProcEntry,
    Provenance,
    Recording,
)
from gpustack_simulator.redact import redact, returned_pids
from gpustack_simulator.replay.engine import Clock
from gpustack_simulator.replay.standins import recorded_error, standin
from gpustack_vendors.model import Detection
from gpustack_vendors.registry import Bindings, Vendor, open_bindings, start, vendor

RECORDER = "gpustack-operator simulator record"


def dist_version(dist: str) -> str:
    """The installed version of ``dist``; empty when it is not installed."""
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


def _cgroup_version(root: Path = Path("/sys/fs/cgroup")) -> str:
    return "v2" if (root / "cgroup.controllers").exists() else "v1"


def _host_names() -> tuple[str, ...]:
    name = socket.gethostname()
    return tuple(dict.fromkeys([name, name.split(".")[0], socket.getfqdn()]))


@dataclass(frozen=True)
class Host:
    """What the recorder reads of the machine besides the vendor libraries."""

    read_proc: Callable[[int], ProcEntry | None] = read_proc
    dist_version: Callable[[str], str] = dist_version
    """A binding's distribution → its installed version (``libraries[].binding.version``)."""
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC).replace(microsecond=0))
    kernel: str = field(default_factory=platform.release)
    machine: str = field(default_factory=platform.machine)
    cgroup: str = field(default_factory=_cgroup_version)
    names: tuple[str, ...] = field(default_factory=_host_names)
    """This host's names, replaced wherever an answer holds one."""


def record(
    manufacturer: str,
    *,
    samples: int,
    interval: float,
    description: str,
    open_bindings: Callable[[Vendor], Bindings] = open_bindings,
    host: Host | None = None,
    clock: Clock = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    progress: Callable[[int], None] | None = None,
    redacted: bool = True,
) -> Recording:
    """Record ``manufacturer``'s libraries as opened by ``open_bindings``, through its backend.

    ``samples`` monitor-style passes ``interval`` seconds apart (``loopSeconds`` is their span);
    ``progress`` is told each finished pass. Raises
    :class:`~gpustack_vendors.registry.LibraryUnavailableError` (one line naming the library
    and every path tried) when a required library does not open or its first call fails.
    """
    entry = vendor(manufacturer)
    host = host or Host()
    bindings = open_bindings(entry)
    proxies = {
        library_id: _proxy(entry, library_id, binding, clock)
        for library_id, binding in bindings.opened.items()
    }
    backend = start(entry, Bindings(opened=proxies, absent=bindings.absent, clock=clock))
    detection = exercise(
        backend, samples=samples, interval=interval, sleep=sleep, progress=progress
    )
    libraries = [_library(entry, library_id, proxies, bindings, host) for library_id in _ids(entry)]
    procs = {
        str(pid): found
        for pid in sorted(returned_pids(libraries))
        if (found := host.read_proc(pid)) is not None
    }
    driver, runtime = _versions(detection)
    recording = assemble(
        vendor=entry.name,
        description=description,
        provenance=Provenance(
            kind="recorded",
            recorded_at=host.now(),
            recorder=f"{RECORDER} {gpustack_core.__version__}",
            host=_host_facts(detection, libraries, host),
        ),
        libraries=libraries,
        node={
            **({"driver": driver} if driver else {}),
            **({"runtime": runtime} if runtime else {}),
            "cgroup": host.cgroup,
            "pidNamespace": "host",
        },
        context=Context(procs=procs),
        loop_seconds=samples * interval,
    )
    return redact(recording, host_names=host.names) if redacted else recording


def _proxy(entry: Vendor, library_id: str, binding: object, clock: Clock) -> RecordingProxy:
    """``binding`` behind a recording proxy, through its stand-in's module view and codec."""
    counterpart = standin(entry.name, library_id)
    view = counterpart.view(binding)
    return RecordingProxy(view, counterpart.codec(view), clock=clock)


def _ids(entry: Vendor) -> list[str]:
    return [library.id for library in entry.libraries]


def _library(
    entry: Vendor,
    library_id: str,
    proxies: Mapping[str, RecordingProxy],
    bindings: Bindings,
    host: Host,
) -> Library:
    """One library's entry: what it answered, or why it did not load."""
    spec = entry.library(library_id)
    binding = Binding(module=spec.module, dist=spec.dist, version=host.dist_version(spec.dist))
    proxy = proxies.get(library_id)
    if proxy is not None:
        return proxy.library(library_id, binding)
    failure = bindings.absent[library_id]
    return Library(
        id=library_id,
        binding=binding,
        load=Load(ok=False, raises=recorded_error(failure, spec.absent_code)),
    )


def _versions(detection: Detection) -> tuple[str, str]:
    """The driver and runtime versions the backend read (the first device that has one)."""
    driver = next((d.driver_version for d in detection.devices if d.driver_version), "")
    runtime = next((d.runtime_version for d in detection.devices if d.runtime_version), "")
    return driver, runtime


def _host_facts(detection: Detection, libraries: list[Library], host: Host) -> dict[str, str]:
    """Hardware and software facts, never the host's name: what a reader of the file needs."""
    driver, runtime = _versions(detection)
    names: dict[str, int] = {}
    for device in detection.devices:
        names[device.name] = names.get(device.name, 0) + 1
    facts = {
        "driver": driver,
        "runtime": runtime,
        "kernel": host.kernel,
        "machine": host.machine,
        "cards": "; ".join(f"{count}x {name}" for name, count in names.items()),
        "libraries": "; ".join(
            f"{lib.id} ({lib.binding.module} {lib.binding.version or '?'}"
            + ("" if lib.load.ok else ", not loaded")
            + ")"
            for lib in libraries
        ),
    }
    return {key: value for key, value in facts.items() if value}


__all__ = ["RECORDER", "Host", "dist_version", "read_proc", "record"]
