"""Two Device Managers on one node: exactly one publishes the Pod-level families, and the
role hands over by itself when that one stops being Ready (no lease, no shared state)."""

from __future__ import annotations

from pathlib import Path

import httpx
import trio
from prometheus_client.parser import text_string_to_metric_families

from gpustack_devicemanager.daemon import Running, ServeOptions, serve
from gpustack_kube.config import load_config
from gpustack_simulator.procfs import write_procfs
from gpustack_simulator.recording import load_recording
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.testing import cluster_standin
from patience import HANG

POD_LEVEL = "gpustack_instance_cpu_total_millicores"
ACCELERATORS = "gpustack_instance_accelerator_memory_total_mib"


async def families(client: httpx.AsyncClient, running: Running) -> dict[str, set[str]]:
    """Family name → the manufacturer labels of its samples ('' where there is none)."""
    text = (await client.get(running.urls[0].replace("http://", "https://") + "/metrics")).text
    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, set()).add(sample.labels.get("manufacturer", ""))
    return found


async def wait_for(
    client: httpx.AsyncClient, running: Running, present: bool
) -> dict[str, set[str]]:
    """Poll until a round with the daemon's own accelerators shows the role as expected.

    A round can run before the daemon's first snapshot exists; such a round has no accelerator
    families yet and says nothing about the role, so it is not an answer.
    """
    with trio.fail_after(HANG):
        while True:
            found = await families(client, running)
            if ACCELERATORS in found and (POD_LEVEL in found) == present:
                return found
            await trio.sleep(0.1)


async def test_role_is_held_by_one_and_handed_over(tmp_path: Path) -> None:
    async with cluster_standin("nvidia-amd", tmp_path / "cluster") as cluster:
        expanded = cluster.state.expanded
        kube = load_config(cluster.kubeconfig, context="device-manager")
        daemons: dict[str, Running] = {}
        async with trio.open_nursery() as nursery:
            for dm in expanded.device_managers:
                root = tmp_path / dm.manufacturer
                write_procfs(root, expanded.procs(dm.node))
                options = ServeOptions(
                    manufacturer=dm.manufacturer,
                    node_name=dm.node,
                    monitor_period=0.3,
                    secure_port=0,
                    bind_address="127.0.0.1",
                    proc_root=root,
                )
                backend = replay_backend(load_recording(dm.recording))
                daemons[dm.manufacturer] = await nursery.start(
                    lambda task_status, o=options, b=backend: serve(
                        o, b, kube=kube, task_status=task_status
                    )
                )
            async with httpx.AsyncClient(verify=False, trust_env=False) as client:
                amd = await wait_for(client, daemons["amd"], present=True)
                nvidia = await wait_for(client, daemons["nvidia"], present=False)
                # "amd" sorts first: it publishes the Pod-level families, nvidia does not.
                # Each publishes its own accelerators, and only its own.
                assert amd[ACCELERATORS] == {"amd"}
                assert nvidia[ACCELERATORS] == {"nvidia"}

                [amd_pod] = [
                    p
                    for p in cluster.state.store.list("Pod")
                    if p["metadata"].get("labels", {}).get("gpustack.ai/manufacturer") == "amd"
                ]

                def not_ready(pod: dict[str, object]) -> None:
                    for condition in pod["status"]["conditions"]:  # type: ignore[index]
                        if condition["type"] == "Ready":
                            condition["status"] = "False"

                cluster.state.update_pod(
                    amd_pod["metadata"]["namespace"], amd_pod["metadata"]["name"], not_ready
                )
                await wait_for(client, daemons["nvidia"], present=True)  # taken over
                await wait_for(client, daemons["amd"], present=False)  # and let go
            for running in daemons.values():
                running.shutdown.set()
