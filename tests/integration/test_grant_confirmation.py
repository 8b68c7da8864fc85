"""A forged allocation annotation reads no card's figures: the kubelet's record decides.

A tenant who may ``patch pods`` copies another Pod's allocation annotation onto its own Pod.
The Device Manager (the real daemon, replaying an H100 node, its plugin registered with a fake
kubelet that serves PodResources over gRPC) lists in its snapshot only the grants the kubelet
assigned, so the worker's calculation drops the copy; the reason is logged.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
from test_device_plugin import NAMESPACE, NODE, RECORDINGS, add_pod, device_manager

from gpustack_core import contract
from gpustack_core.pods import pod_from_object
from gpustack_core.sample import instance_sample
from gpustack_core.snapshot import MonitorSnapshot
from gpustack_core.usage import DeclaredTotals
from gpustack_devicemanager.daemon import Running, ServeOptions, serve
from gpustack_simulator.cluster.state import POD
from gpustack_simulator.fakekubelet import FakeKubelet
from gpustack_simulator.recording import load_recording
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.testing import cluster_standin
from patience import HANG


async def _snapshot_with(
    running: Running, ok: Callable[[MonitorSnapshot], bool]
) -> MonitorSnapshot:
    with trio.fail_after(HANG):
        while True:
            snapshot = running.holder.current.snapshot
            if snapshot is not None and ok(snapshot):
                return snapshot
            await trio.sleep(0.1)


async def test_a_copied_annotation_is_not_believed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    short = Path(tempfile.mkdtemp(prefix="gc-", dir="/tmp"))
    kubelet = FakeKubelet(short / "device-plugins", short / "pod-resources")
    kubelet.start()
    options = ServeOptions(
        manufacturer="nvidia",
        node_name=NODE,
        monitor_period=0.5,
        secure_port=0,
        bind_address="127.0.0.1",
        publish=False,
        device_plugin=True,
        kube_socket=kubelet.socket,
        pod_resources_socket=kubelet.pod_resources_socket,
    )
    assert options.confirms_grants  # automatic: the PodResources socket exists
    caplog.set_level(logging.WARNING, "gpustack.devicemanager.confirmation")
    recording = load_recording(RECORDINGS / "nvidia/h100-8x.yaml")
    try:
        async with (
            cluster_standin("nvidia-mixed", tmp_path) as cluster,
            trio.open_nursery() as nursery,
        ):
            running: Running = await nursery.start(
                lambda task_status: serve(
                    options, replay_backend(recording), kube=device_manager(cluster),
                    task_status=task_status,
                )
            )  # fmt: skip
            await trio.to_thread.run_sync(
                kubelet.wait, lambda: len(kubelet.devices("nvidia.com/gpu")) == 8
            )
            add_pod(cluster, "owner", {"main": {"nvidia.com/gpu": "1"}})
            token = sorted(kubelet.devices("nvidia.com/gpu"))[0]
            await trio.to_thread.run_sync(
                kubelet.allocate, "nvidia.com/gpu", [token], (NAMESPACE, "owner"), "main"
            )
            store = cluster.state.store
            with trio.fail_after(HANG):  # the plugin's annotation on the owner
                while contract.ALLOCATION_ANNOTATION not in (
                    store.get(POD, NAMESPACE, "owner") or {}
                ).get("metadata", {}).get("annotations", {}):
                    await trio.sleep(0.05)
            owner = store.get(POD, NAMESPACE, "owner")
            assert owner is not None
            text = owner["metadata"]["annotations"][contract.ALLOCATION_ANNOTATION]
            card = json.loads(text)["main"]["devices"]["groups"][0]["accelerators"][0]["id"]
            # The thief copies it, device IDs and all, onto its own Pod.
            add_pod(cluster, "thief", {"main": {}})
            thief = store.get(POD, NAMESPACE, "thief")
            assert thief is not None
            thief["metadata"]["annotations"] = {contract.ALLOCATION_ANNOTATION: text}
            store.put(POD, thief)
            cluster.state.pods_changed()

            def settled(s: MonitorSnapshot) -> bool:
                listed = {g.pod_uid for g in s.grants or ()}
                return "uid-owner" in listed

            snapshot = await _snapshot_with(running, settled)
            await trio.sleep(1.2)  # two more ticks with the thief's copy in the Pod view
            snapshot = await _snapshot_with(running, settled)
            confirmed = {(g.pod_uid, g.container, g.device_id) for g in snapshot.grants or ()}
            assert ("uid-owner", "main", card) in confirmed
            assert not any(uid == "uid-thief" for uid, _, _ in confirmed)
            running.shutdown.set()
    finally:
        await trio.to_thread.run_sync(kubelet.stop)
        shutil.rmtree(short, ignore_errors=True)
    reasons = [r.getMessage() for r in caplog.records]
    assert any(f"{NAMESPACE}/thief" in r and "did not assign it" in r for r in reasons), reasons
    # What the worker computes from that snapshot: the owner's card, nothing for the thief.
    totals = DeclaredTotals(cpu_millicores=1000, memory_mib=1024, storage_mib=0)
    for name, expected in (("owner", [card]), ("thief", [])):
        obj = store.get(POD, NAMESPACE, name)
        assert obj is not None
        obj = {**obj, "status": {"containerStatuses": [{"name": "main",
                                                          "state": {"running": {}}}]}}  # fmt: skip
        result = instance_sample(
            pod=pod_from_object(obj),
            fallback=totals,
            usage=None,
            snapshots={"nvidia": snapshot},
            now=snapshot.timestamp,
        )
        assert [a.id for a in result.sample.accelerators or []] == expected, name
