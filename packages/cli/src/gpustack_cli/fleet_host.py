"""The fleet host: many simulated Device Managers in one process (``simulator up --fleet``).

The composition of the unchanged daemon (:func:`gpustack_devicemanager.daemon.serve`) with the
simulator's replay backends and fleet description (:mod:`gpustack_simulator.fleet_host`), which
is why it lives in the CLI: only the CLI composes a daemon with the simulator. Started as::

    python -m gpustack_cli.fleet_host SPEC.json
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import trio

from gpustack_devicemanager.daemon import Running, ServeOptions, serve
from gpustack_kube.config import KubeConfig, load_config
from gpustack_serving.signals import serve_until_signalled as until_signalled
from gpustack_simulator.fleet_host import (
    STARTING_AT_ONCE,
    FleetSpec,
    Member,
    Recordings,
    resident_mib,
)
from gpustack_simulator.replay.backends import replay_backend

log = logging.getLogger("gpustack.simulator.fleet")


@dataclass
class FleetRunning:
    """What a caller learns once every member listens."""

    members: list[Running]
    recordings_parsed: int
    shutdown: trio.Event


def options_for(member: Member, monitor_period: float, *, publish: bool = True) -> ServeOptions:
    """The member's ``device-manager serve`` flags, as one process of its own would get.

    Without its node's kubelet sockets a member serves no plugin and checks no grants, set
    explicitly: the automatic default would look at this host's real ``/var/lib/kubelet``.
    """
    options = ServeOptions(
        manufacturer=member.manufacturer,
        node_name=member.node,
        monitor_period=monitor_period,
        secure_port=member.port,
        bind_address=member.address,
        proc_root=Path(member.proc_root),
        publish=publish,
        device_plugin=False,
        confirm_grants=False,
    )
    if member.kube_socket is None or member.pod_resources_socket is None:
        return options
    return replace(
        options,
        device_plugin=True,
        confirm_grants=True,
        kube_socket=Path(member.kube_socket),
        pod_resources_socket=Path(member.pod_resources_socket),
    )


async def serve_fleet(
    spec: FleetSpec,
    *,
    kube: KubeConfig | None = None,
    task_status: trio.TaskStatus[FleetRunning] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run every member until ``FleetRunning.shutdown`` is set; one failing start fails all."""
    if kube is None and spec.kubeconfig is not None:
        kube = load_config(Path(spec.kubeconfig), context=spec.context)
    recordings = Recordings()
    shutdown = trio.Event()
    running: list[Running | None] = [None] * len(spec.members)
    starting = trio.CapacityLimiter(STARTING_AT_ONCE)

    async with trio.open_nursery() as nursery:

        async def start(index: int, member: Member) -> None:
            async with starting:
                backend = replay_backend(recordings.get(member.recording))
                own = kube
                if member.context is not None and spec.kubeconfig is not None:
                    # Its own identity: the token bound to its node's Device Manager Pod.
                    own = load_config(Path(spec.kubeconfig), context=member.context)
                running[index] = await nursery.start(
                    lambda task_status: serve(
                        options_for(member, spec.monitor_period, publish=spec.publish),
                        backend,
                        kube=own,
                        task_status=task_status,
                    )
                )

        async with trio.open_nursery() as starters:
            for index, member in enumerate(spec.members):
                starters.start_soon(start, index, member)
                if spec.start_interval:
                    await trio.sleep(spec.start_interval)
        members = [r for r in running if r is not None]
        task_status.started(FleetRunning(members, len(recordings), shutdown))
        await shutdown.wait()
        for member_running in members:
            member_running.shutdown.set()


async def serve_until_signalled(spec: FleetSpec) -> None:
    """The process's foreground mode: SIGTERM or SIGINT stops every member gracefully."""
    started = time.monotonic()

    def announce(fleet: FleetRunning) -> None:
        log.info(
            "%d Device Managers listening %.1f s after start (RSS %.0f MiB, %d recordings parsed)",
            len(fleet.members),
            time.monotonic() - started,
            resident_mib(),
            fleet.recordings_parsed,
        )

    await until_signalled(
        lambda task_status: serve_fleet(spec, task_status=task_status), announce, log
    )


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m gpustack_cli.fleet_host SPEC.json``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("spec", type=Path, help="the fleet spec (JSON) simulator up wrote")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(levelname)s %(name)s %(message)s"
    )
    log.setLevel(logging.INFO)  # the host's own start line, whatever the members' level
    spec = FleetSpec.from_json(json.loads(args.spec.read_text()))
    trio.run(serve_until_signalled, spec)


if __name__ == "__main__":
    main()
