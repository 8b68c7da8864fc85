"""Many simulated Device Managers in one process, for fleets no machine could run one by one.

A Device Manager process costs about 90 MB and a second of CPU to import before it serves
anything, so a thousand simulated nodes as a thousand processes do not fit on a laptop or a
CI runner. Here each node's Device Manager is the unchanged :func:`gpustack_devicemanager.
daemon.serve` — its own secure port on its own loopback address, its own node name, informer,
monitor, exporter and certificate — but all of them run in one trio nursery, so the imports,
the interpreter and the parsed recordings are paid once. Each member gets its own replay
backend (its own replay clock and call counters) over a recording parsed once per file.

This is simulator-only: a real node runs one ``device-manager serve`` per manufacturer, as
its DaemonSet does. This module holds the fleet's description (the simulator's side); the host
that composes it with the daemon is ``gpustack_cli.fleet_host`` (only the CLI composes a
daemon with the simulator), which ``simulator up --fleet`` starts as one process::

    python -m gpustack_cli.fleet_host SPEC.json

where ``SPEC.json`` holds the kubeconfig, the context, the monitor period and one entry per
member (node, manufacturer, recording, proc root, address, port, and the node's fake kubelet
sockets where members are device plugins). SIGTERM or SIGINT stops all.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpustack_simulator.recording import Recording
from gpustack_simulator.replay.validate import load_replayable

STARTING_AT_ONCE = 16
"""Members starting concurrently: enough to overlap their detect threads and binds, few
enough that a thousand do not all generate keys and open watches in the same instant."""


@dataclass(frozen=True)
class Member:
    """One node's Device Manager inside the fleet process."""

    node: str
    manufacturer: str
    recording: str
    proc_root: str
    address: str
    port: int
    kube_socket: str | None = None
    """The node's fake kubelet registration socket: the member is then its node's device plugin
    (and confirms grants against ``pod_resources_socket``). ``None``: no plugin, no check."""
    pod_resources_socket: str | None = None
    context: str | None = None
    """This member's own kubeconfig context (on a real control plane, a token bound to its
    node's Device Manager Pod, as the kubelet would mount it); ``None``: the spec's."""


@dataclass(frozen=True)
class FleetSpec:
    """What the host runs: the members and the settings they share."""

    members: tuple[Member, ...]
    monitor_period: float = 15.0
    kubeconfig: str | None = None
    context: str | None = "device-manager"
    publish: bool = True
    """Whether members publish their NodeFeature and ``Devices`` group (``--no-publish``)."""
    start_interval: float = 0.0
    """Seconds between two members' starts. A DaemonSet rollout does not start a thousand
    Pods in the same instant either, and every member's first Pod list, publish and kubelet
    read land on the one API server: pacing spreads that burst over the start-up."""

    def to_json(self) -> dict[str, Any]:
        """The spec file's JSON."""
        return {
            "monitorPeriod": self.monitor_period,
            "kubeconfig": self.kubeconfig,
            "context": self.context,
            "publish": self.publish,
            "startInterval": self.start_interval,
            "members": [asdict(m) for m in self.members],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FleetSpec:
        """Read the spec file's JSON back."""
        return cls(
            members=tuple(Member(**m) for m in data["members"]),
            monitor_period=float(data.get("monitorPeriod", 15.0)),
            kubeconfig=data.get("kubeconfig"),
            context=data.get("context"),
            publish=bool(data.get("publish", True)),
            start_interval=float(data.get("startInterval", 0.0)),
        )


class Recordings:
    """Each recording file parsed and validated once, however many members replay it."""

    def __init__(self) -> None:
        self._parsed: dict[str, Recording] = {}

    def get(self, path: str) -> Recording:
        """The parsed recording at ``path`` (read on first use)."""
        recording = self._parsed.get(path)
        if recording is None:
            recording = self._parsed[path] = load_replayable(Path(path))
        return recording

    def __len__(self) -> int:
        return len(self._parsed)


def resident_mib() -> float:
    """The resident set of this process now (``VmRSS`` from ``/proc/self/status``), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")
