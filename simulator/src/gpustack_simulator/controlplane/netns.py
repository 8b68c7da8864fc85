"""A network namespace holding the scenario's node addresses, and nothing else.

kube-apiserver refuses to proxy to a loopback or link-local node address (the node proxy the
worker reads ``stats/summary`` through), so nodes need real addresses. They live in a network
namespace this run creates: one veth pair, the host end ``198.18.<n>.1/24`` and the namespace
end one address per node (``198.18.<n>.10`` …). 198.18.0.0/15 is the benchmarking range
(RFC 2544), never routed on the Internet, so the one route the host gains cannot shadow a real
network. Traffic goes only between the host end and the namespace.

The API server listens on the host end's address, so processes inside the namespace (the node
agent, the Device Managers, which run there as a node's daemons would) reach it, and so do the
host's kubectl and the worker.

Creating a namespace needs ``CAP_NET_ADMIN`` and ``CAP_SYS_ADMIN`` (root): the caller learns
why it failed from :class:`NetnsError`. :meth:`Netns.delete` removes the namespace and with it
both veth ends; it is idempotent and runs on every exit path of the caller.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

NETNS_DIR = Path("/run/netns")
NETNS_FILE = "netns.json"
"""Where ``up`` records the namespace it made, in the state directory, for ``down``."""
BASE = (198, 18)
FIRST_NODE_HOST = 10


class NetnsError(Exception):
    """The namespace could not be made (or torn down); the message names the step."""


def _ip(*args: str, netns: str | None = None) -> None:
    command = ["ip", *(["-n", netns] if netns else []), *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NetnsError(f"`{' '.join(command)}` failed: {done.stderr.strip()}")


def available() -> str | None:
    """Why no namespace can be made here, or ``None`` when one can."""
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "creating a network namespace needs root"
    return None


@dataclass
class Netns:
    """One run's namespace: its name, the host end's address and each node's address."""

    name: str
    subnet: int
    host_address: str
    node_addresses: dict[str, str] = field(default_factory=dict)
    created: bool = False

    @property
    def host_link(self) -> str:
        """The veth end in the host's namespace (holds the API server's address)."""
        return f"gsh{self.subnet}"

    @property
    def inner_link(self) -> str:
        """The veth end inside the namespace (holds the node and Pod addresses)."""
        return f"gsn{self.subnet}"

    @classmethod
    def plan(cls, run_id: str, nodes: list[str]) -> Netns:
        """Names and addresses for ``nodes``; a /24 per run chosen from the run's id.

        Two runs side by side (CI beside a developer's demo) pick different subnets unless
        their ids collide; :meth:`create` refuses a subnet whose link already exists.
        """
        if len(nodes) > 240:
            raise NetnsError(f"{len(nodes)} nodes: at most 240 fit one namespace's /24")
        subnet = int(hashlib.sha256(run_id.encode()).hexdigest(), 16) % 254 + 1
        prefix = f"{BASE[0]}.{BASE[1] + subnet // 256}.{subnet % 256}"
        return cls(
            name=f"gpustack-{run_id}",
            subnet=subnet,
            host_address=f"{prefix}.1",
            node_addresses={n: f"{prefix}.{FIRST_NODE_HOST + i}" for i, n in enumerate(nodes)},
        )

    def create(self) -> None:
        """Make the namespace, the veth pair and the addresses; undo all on any failure."""
        why = available()
        if why is not None:
            raise NetnsError(f"cannot create network namespace {self.name}: {why}")
        if (Path("/sys/class/net") / self.host_link).exists():
            raise NetnsError(
                f"link {self.host_link} already exists: another run holds subnet {self.subnet}"
            )
        try:
            _ip("netns", "add", self.name)
            self.created = True
            _ip("link", "add", self.host_link, "type", "veth", "peer", "name", self.inner_link)
            _ip("link", "set", self.inner_link, "netns", self.name)
            _ip("addr", "add", f"{self.host_address}/24", "dev", self.host_link)
            _ip("link", "set", self.host_link, "up")
            _ip("link", "set", "lo", "up", netns=self.name)
            for address in self.node_addresses.values():
                _ip("addr", "add", f"{address}/24", "dev", self.inner_link, netns=self.name)
            _ip("link", "set", self.inner_link, "up", netns=self.name)
        except NetnsError:
            self.delete()
            raise

    def delete(self) -> None:
        """Remove the namespace (both veth ends go with it); nothing left is not an error."""
        if (NETNS_DIR / self.name).exists():
            subprocess.run(["ip", "netns", "delete", self.name], capture_output=True, check=False)
        if (Path("/sys/class/net") / self.host_link).exists():
            subprocess.run(
                ["ip", "link", "delete", self.host_link], capture_output=True, check=False
            )
        self.created = False

    def exec_prefix(self) -> list[str]:
        """The argv prefix that runs a command inside the namespace."""
        return ["ip", "netns", "exec", self.name]


def record(state_dir: Path, netns: Netns) -> None:
    """Note ``netns`` in the state directory before anything runs in it."""
    (state_dir / NETNS_FILE).write_text(json.dumps({"name": netns.name, "subnet": netns.subnet}))


def delete_recorded(state_dir: Path) -> str | None:
    """Delete the namespace ``up`` recorded (its processes already stopped); its name."""
    path = state_dir / NETNS_FILE
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        netns = Netns(name=str(data["name"]), subnet=int(data["subnet"]), host_address="")
    except (OSError, ValueError, KeyError, TypeError):
        path.unlink(missing_ok=True)
        return None
    netns.delete()
    path.unlink(missing_ok=True)
    return netns.name
