"""The real Device Manager daemon on loopback: replayed library, stand-in cluster, real HTTPS.

Each test starts the stand-in for a scenario, writes the Device Manager's fake ``/proc`` from
the scenario (its recording's processes, lined up with the scenario's containers), starts
``serve`` with ``--simulate`` semantics, and reads ``/monitor/snapshot`` over TLS.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio
from dm_stack import RECORDINGS, Stack, scenario, stack

from gpustack_core.snapshot import MonitorSnapshot
from gpustack_devicemanager.daemon import Running, ServeOptions, serve
from gpustack_simulator.procfs import write_procfs
from gpustack_simulator.recording import load_recording
from gpustack_simulator.replay.backends import replay_backend
from patience import HANG

# pytest finds the imported fixtures by name; listing them is what marks the import as used.
__all__ = ["scenario", "stack"]


def _usages(snapshot: MonitorSnapshot) -> dict[tuple[str, str], Any]:
    assert snapshot.slices is not None
    return {(u.pod_uid, u.container): u for u in snapshot.slices.usages}


def _pod_uid(stack: Stack, namespace: str, name: str) -> str:
    pod = stack.cluster.state.pod(namespace, name)
    assert pod is not None
    return str(pod["metadata"]["uid"])


async def test_card_figures_and_envelope(stack: Stack) -> None:
    body, snapshot = await stack.snapshot()
    [group] = snapshot.groups
    assert group.manufacturer == "nvidia"
    assert len(group.accelerators) == 4
    for card in group.accelerators:
        assert card.memory > 0
        assert card.memory_usage is not None
        assert card.temperature is not None
    assert snapshot.period_seconds == 1  # 0.5 s rounded up
    assert snapshot.slices is not None
    assert snapshot.slices.schema_version == 1
    keys = set(json.loads(body))
    assert keys == {"timestamp", "periodSeconds", "groups", "slices"}


async def test_sliced_pods_get_usage_records_per_container(stack: Stack) -> None:
    snapshot = await stack.next_tick()
    usages = _usages(snapshot)
    qwen_a = usages[(_pod_uid(stack, "team-a", "qwen-a"), "main")]
    qwen_b = usages[(_pod_uid(stack, "team-b", "qwen-b"), "main")]
    assert qwen_a.device_id == qwen_b.device_id == "GPU-8d2f4a61-3c7e-4b19-a5d0-6e1f2b3c4d03"
    assert qwen_a.memory_used_mib is not None
    assert qwen_a.memory_used_mib > 0
    assert qwen_b.memory_used_mib is not None
    assert snapshot.slices is not None
    [device] = [d for d in snapshot.slices.devices if d.device_id == qwen_a.device_id]
    assert device.rows_attributed == device.rows_returned >= 2
    assert device.memory_reason == ""
    # Exclusive and Shared cards are never queried per process.
    assert {d.device_id for d in snapshot.slices.devices} == {qwen_a.device_id}


async def test_partition_records_carry_their_own_ids(stack: Stack) -> None:
    _, snapshot = await stack.snapshot()
    assert snapshot.slices is not None
    [record] = snapshot.slices.partitions
    assert record.id == "MIG-8d2f4a61-3c7e-5b19-a5d0-6e1f2b3c4d40"
    assert record.pod_uid == _pod_uid(stack, "team-a", "mig-3g")
    assert record.device_id.startswith("GPU-")
    assert record.memory_total_mib is not None
    assert record.memory_used_mib is not None


async def test_an_exited_pid_poisons_the_device(stack: Stack) -> None:
    procs = {pid: entry for pid, entry in stack.procs.items() if pid != "8302"}
    write_procfs(stack.proc_root, procs)
    snapshot = await stack.next_tick()
    await stack.next_tick()
    snapshot = (await stack.snapshot())[1]
    assert snapshot.slices is not None
    [device] = snapshot.slices.devices
    assert device.memory_reason == device.cores_reason == "exited"
    assert snapshot.slices.usages == ()


async def test_a_mediated_pid_poisons_the_device(stack: Stack) -> None:
    procs = dict(stack.procs)
    procs["8301"] = msgspec.structs.replace(procs["8301"], comm="nvidia-cuda-mps-server")
    write_procfs(stack.proc_root, procs)
    await stack.next_tick()
    snapshot = await stack.next_tick()
    assert snapshot.slices is not None
    [device] = snapshot.slices.devices
    assert device.memory_reason == "mediated"


async def test_no_pid_appears_in_the_body(stack: Stack) -> None:
    body, _ = await stack.snapshot()
    text = body.decode()
    for pid in stack.procs:
        assert f":{pid}," not in text
        assert f":{pid}}}" not in text
        assert f'"{pid}"' not in text


async def test_routes_methods_probes_and_debug(stack: Stack) -> None:
    async with httpx.AsyncClient(verify=False, trust_env=False) as client:
        post = await client.post(stack.url + "/monitor/snapshot")
        assert post.status_code == 405
        assert post.headers["allow"] == "GET"
        assert (await client.get(stack.url + "/readyz")).status_code == 200
        assert (await client.get(stack.url + "/livez")).status_code == 200
        local = await client.get(stack.url + "/debug/state")
        assert local.status_code == 200
        assert local.json()["podsSynced"] is True
        # The peer decides, not the header: a loopback peer naming another host is local.
        # (A non-loopback peer is refused: tests/unit/devicemanager/test_server_guard.py.)
        named = await client.get(
            stack.url + "/debug/state", headers={"Host": "gpu-node-1.example:32443"}
        )
        assert named.status_code == 200
        assert (await client.get(stack.url + "/nothing-here")).status_code == 404


@pytest.mark.parametrize("scenario", ["amd-rdna3"])
async def test_rdna3_slices_read_memory_and_say_why_compute_is_absent(stack: Stack) -> None:
    snapshot = await stack.next_tick()
    assert snapshot.groups[0].manufacturer == "amd"
    assert snapshot.slices is not None
    [device] = snapshot.slices.devices
    assert device.device_id == "0000:04:00.0"
    assert device.memory_reason == ""
    assert device.cores_reason == "unsupported"
    usages = _usages(snapshot)
    for name in ("chat-a", "chat-b"):
        usage = usages[(_pod_uid_any(stack, name), "main")]
        assert usage.memory_used_mib is not None
        assert usage.memory_used_mib > 0
        assert usage.cores_utilization_percent is None  # absent, never a zero


def _pod_uid_any(stack: Stack, name: str) -> str:
    for pod in stack.cluster.state.store.list("Pod"):
        if pod["metadata"]["name"] == name:
            return str(pod["metadata"]["uid"])
    raise AssertionError(name)


async def test_standalone_without_kubernetes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    recording = load_recording(RECORDINGS / "nvidia" / "h100-mig.yaml")
    write_procfs(tmp_path / "proc", recording.context.procs)
    options = ServeOptions(
        manufacturer="nvidia",
        node_name="workstation",
        monitor_period=0.5,
        secure_port=0,
        bind_address="127.0.0.1",
        proc_root=tmp_path / "proc",
        cert_dir=None,
    )
    async with trio.open_nursery() as nursery:
        running: Running = await nursery.start(
            lambda task_status: serve(
                options, replay_backend(recording), kube=None, task_status=task_status
            )
        )
        with trio.fail_after(HANG):
            while running.holder.current.snapshot is None:
                await trio.sleep(0.05)
        async with httpx.AsyncClient(verify=False, trust_env=False) as client:
            body = (
                await client.get(
                    running.urls[0].replace("http://", "https://") + "/monitor/snapshot"
                )
            ).json()
        running.shutdown.set()
    assert "slices" not in body  # could not measure: absent, not empty
    assert body["groups"][0]["accelerators"][0]["memory"] == 81559


async def test_scrapes_and_snapshots_ship_precompressed_bytes_and_revalidate(
    stack: Stack,
) -> None:
    await stack.next_tick()
    async with httpx.AsyncClient(verify=False, trust_env=False) as client:
        for path in ("/monitor/snapshot", "/metrics"):
            plain = await client.get(stack.url + path, headers={"Accept-Encoding": "identity"})
            assert "content-encoding" not in plain.headers
            zipped = await client.get(stack.url + path, headers={"Accept-Encoding": "gzip"})
            if zipped.headers["etag"] != plain.headers["etag"]:
                continue  # a tick or round landed between the two reads
            assert zipped.headers["content-encoding"] == "gzip"
            assert zipped.headers["vary"] == "Accept-Encoding"
            assert zipped.content == plain.content  # httpx inflated it
            assert int(zipped.headers["content-length"]) < len(plain.content)
            again = await client.get(
                stack.url + path, headers={"If-None-Match": plain.headers["etag"]}
            )
            if again.status_code == 200:  # a newer publication since: a new tag, a full body
                assert again.headers["etag"] != plain.headers["etag"]
            else:
                assert again.status_code == 304
                assert again.content == b""
                assert again.headers["etag"] == plain.headers["etag"]
