"""The device plugin's refusals, over real gRPC on unix sockets, against the fake kubelet.

Issue #28's device-plugin cases, each a regression that held on the code before the fix:

- ``Allocate`` with duplicate IDs, IDs the plugin never advertised (another mode's pool, an
  unknown card, another group) or no IDs at all is ``InvalidArgument`` at once, as the kubelet
  API says, not a ``FailedPrecondition`` after the identification wait;
- a refusal's message is bounded, however many and however long the IDs asked;
- a Sliced container without its ``.sliced.units`` (the Pod webhook bypassed) is refused, not
  charged the token count;
- the plugin sockets are ``0600`` whatever the process umask, after a kubelet restart too;
- an allocation annotation a tenant wrote on its own Pod, naming a card the kubelet never gave
  it, does not turn that card's tokens Unhealthy for everyone else, nor reach a sidecar's
  Visibility grant.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
import trio
from test_device_plugin import NAMESPACE, NODE, Stack, nvidia, nvidia_ready, stack, wait_for

from gpustack_core import contract
from gpustack_simulator.cluster.state import POD

IDENTIFY_SECONDS = 60.0
"""The wait for the Pod view, long here (production: 5 s) so a refusal that waited for it
took at least this much, whatever the load."""
PROMPT = IDENTIFY_SECONDS / 2
"""A refusal made "at once" answers within this: it did not wait for the Pod view. Only the
identification wait is distinguished, never a speed (a loaded machine may take seconds)."""
MAX_DETAILS = 1024
"""The bound the plugin documents for a refusal's message (docs/device-plugin.md)."""


async def refused(s: Stack, resource: str, ids: list[str], pod: str = "waiting") -> grpc.RpcError:
    """The error ``Allocate`` answered with; fails if it granted."""
    with pytest.raises(grpc.RpcError) as caught:
        await s.call(s.kubelet.allocate, resource, ids, (NAMESPACE, pod), "main")
    return caught.value


@pytest.mark.parametrize(
    ("resource", "ids", "needle"),
    [
        ("nvidia.com/gpu.shared", ["h100:GPU-0:0001", "h100:GPU-0:0001"], "more than once"),
        ("nvidia.com/gpu", ["h100:GPU-0:0007"], "not advertised"),  # beyond the card's pool
        ("nvidia.com/gpu.sliced", ["h100:GPU-1:0100"], "not advertised"),  # a Visibility token
        ("nvidia.com/gpu", ["h100:GPU-9:0000"], "not advertised"),  # no such card
        ("nvidia.com/gpu", ["a10g:GPU-0:0000"], "not advertised"),  # another group
        ("nvidia.com/gpu", ["h100:GPU-0"], "not advertised"),  # not an ID at all
        ("nvidia.com/gpu", [], "no device IDs"),
    ],
    ids=[
        "duplicate",
        "beyond-pool",
        "other-mode",
        "unknown-card",
        "other-group",
        "malformed",
        "none",
    ],
)
async def test_bad_ids_are_invalid_argument_at_once(
    tmp_path: Path, resource: str, ids: list[str], needle: str
) -> None:
    async with stack(tmp_path, "nvidia", nvidia(), identify_seconds=IDENTIFY_SECONDS) as s:
        await nvidia_ready(s)
        # No Pod awaits these IDs: before the fix the plugin waited the whole identification
        # period for one, then answered FailedPrecondition.
        started = time.monotonic()
        error = await refused(s, resource, ids)
        elapsed = time.monotonic() - started
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error.details()
        assert elapsed < PROMPT, f"refused after {elapsed:.1f} s, not at once"
        assert needle in error.details(), error.details()


async def test_duplicate_ids_for_a_waiting_pod_are_refused_not_granted(tmp_path: Path) -> None:
    async with stack(tmp_path, "nvidia", nvidia()) as s:
        await nvidia_ready(s)
        s.add_pod("twice", {"main": {"nvidia.com/gpu": "2"}})  # two whole cards asked
        error = await refused(s, "nvidia.com/gpu", ["h100:GPU-0:0000", "h100:GPU-0:0000"], "twice")
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error.details()
        assert "more than once" in error.details(), error.details()
        pod = await s.client.get(f"/api/v1/namespaces/{NAMESPACE}/pods/twice")
        assert contract.ALLOCATION_ANNOTATION not in pod["metadata"].get("annotations", {})


async def test_a_refusal_message_is_bounded(tmp_path: Path) -> None:
    async with stack(tmp_path, "nvidia", nvidia(), identify_seconds=IDENTIFY_SECONDS) as s:
        await nvidia_ready(s)
        many = [f"h100:GPU-{'x' * 200}-{i}:0000" for i in range(2000)]  # ~420 KB of IDs
        error = await refused(s, "nvidia.com/gpu", many)
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert 0 < len(error.details()) <= MAX_DETAILS, len(error.details())
        assert "2000 device IDs" in error.details() or "1999 more" in error.details()

        one_long = ["h100:GPU-0:" + "9" * 100_000]
        error = await refused(s, "nvidia.com/gpu", one_long)
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert 0 < len(error.details()) <= MAX_DETAILS, len(error.details())


async def test_a_sliced_container_without_units_is_refused_not_charged(tmp_path: Path) -> None:
    async with stack(tmp_path, "nvidia", nvidia()) as s:
        await nvidia_ready(s)
        s.add_pod("bypassed", {"main": {"nvidia.com/gpu.sliced": "1"}})  # no .sliced.units
        error = await refused(s, "nvidia.com/gpu.sliced", ["h100:GPU-0:0000"], "bypassed")
        assert error.code() is grpc.StatusCode.FAILED_PRECONDITION, error.details()
        assert "nvidia.com/gpu.sliced.units" in error.details(), error.details()
        pod = await s.client.get(f"/api/v1/namespaces/{NAMESPACE}/pods/bypassed")
        assert contract.ALLOCATION_ANNOTATION not in pod["metadata"].get("annotations", {})
        # Nothing was charged: the card's other modes stay Healthy.
        await trio.sleep(0.5)
        assert s.kubelet.devices("nvidia.com/gpu")["h100:GPU-0:0000"] == "Healthy"


def _modes(sockets: dict[Any, Path]) -> dict[str, int]:
    return {path.name: stat.S_IMODE(path.stat().st_mode) for path in sockets.values()}


async def test_plugin_sockets_are_private_whatever_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0)  # the most permissive umask a process can run under
    try:
        async with stack(tmp_path, "nvidia", nvidia()) as s:
            await nvidia_ready(s)
            modes = _modes(s.plugins.sockets)
            assert modes, "no plugin socket"
            assert set(modes.values()) == {0o600}, modes

            await s.call(s.kubelet.restart)  # the plugins serve afresh on new sockets
            await wait_for(s, lambda: len(s.kubelet.registrations) == 10)
            modes = _modes(s.plugins.sockets)
            assert set(modes.values()) == {0o600}, modes
    finally:
        os.umask(previous)


def _forge(s: Stack, name: str, claim: dict[str, Any]) -> None:
    """A tenant's own running Pod whose annotation it wrote itself (``patch pods``)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-11-29T08:00:00Z",
            "resourceVersion": "1",
            "annotations": {contract.ALLOCATION_ANNOTATION: json.dumps(claim)},
        },
        "spec": {"nodeName": NODE, "containers": [{"name": "main"}, {"name": "sshd"}]},
        "status": {"phase": "Running"},
    }
    s.cluster.state.store.put(POD, pod)
    s.cluster.state.pods_changed()


def _claim(card: str, mode: int, allocated: int | None, ids: list[str]) -> dict[str, Any]:
    accelerator: dict[str, Any] = {"id": card, "mode": mode}
    if allocated is not None:
        accelerator["allocated"] = allocated
    return {
        "devices": {
            "groups": [{"id": "h100", "manufacturer": "nvidia", "accelerators": [accelerator]}]
        },
        "deviceIDs": ids,
    }


async def test_a_forged_annotation_poisons_no_card(tmp_path: Path) -> None:
    async with stack(tmp_path, "nvidia", nvidia()) as s:
        kubelet = s.kubelet
        await nvidia_ready(s)
        # Exclusive on GPU-0, naming the very ID a real grant would carry: never assigned.
        _forge(s, "forger", {"main": _claim("GPU-0", 1, 1_600_000, ["h100:GPU-0:0000"])})
        await trio.sleep(1.0)  # the informer has delivered it; a refresh would have run
        shared = kubelet.devices("nvidia.com/gpu.shared")
        assert {h for i, h in shared.items() if ":GPU-0:" in i} == {"Healthy"}
        assert kubelet.devices("nvidia.com/gpu.sliced")["h100:GPU-0:0000"] == "Healthy"

        # Another tenant's slice of that card is granted, not refused as held Exclusive.
        s.add_pod(
            "victim",
            {"main": {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "400000"}},
        )
        answer = await s.call(
            kubelet.allocate,
            "nvidia.com/gpu.sliced",
            ["h100:GPU-0:0001"],
            (NAMESPACE, "victim"),
            "main",
        )
        assert dict(answer.envs)["NVIDIA_VISIBLE_DEVICES"] == "GPU-0"

        # The real grant does count: the other modes of GPU-0 turn Unhealthy.
        await wait_for(
            s, lambda: kubelet.devices("nvidia.com/gpu")["h100:GPU-0:0000"] == "Unhealthy"
        )


async def test_a_forged_sibling_does_not_reach_a_visibility_grant(tmp_path: Path) -> None:
    async with stack(tmp_path, "nvidia", nvidia()) as s:
        kubelet = s.kubelet
        await nvidia_ready(s)
        # GPU-1 really belongs to someone else, Exclusive.
        s.add_pod("owner", {"main": {"nvidia.com/gpu": "1"}})
        await s.call(
            kubelet.allocate, "nvidia.com/gpu", ["h100:GPU-1:0000"], (NAMESPACE, "owner"), "main"
        )
        # A tenant's Pod claims, for its main container, that very card; its sidecar then asks
        # the Visibility grant that shows a container its sibling's cards.
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "peeker",
                "namespace": NAMESPACE,
                "uid": "uid-peeker",
                "creationTimestamp": "2026-11-29T09:30:00Z",
                "resourceVersion": "1",
                "annotations": {
                    contract.ALLOCATION_ANNOTATION: json.dumps(
                        {"main": _claim("GPU-1", 1, 1_600_000, ["h100:GPU-1:0000"])}
                    )
                },
            },
            "spec": {
                "nodeName": NODE,
                "containers": [
                    {"name": "main"},
                    {
                        "name": "sshd",
                        "resources": {
                            "limits": {"device.gpustack.ai/nvidia.visibility": "1"},
                            "requests": {"device.gpustack.ai/nvidia.visibility": "1"},
                        },
                    },
                ],
            },
            "status": {"phase": "Pending"},
        }
        s.cluster.state.store.put(POD, pod)
        s.cluster.state.pods_changed()
        answer = await s.call(
            kubelet.allocate,
            "device.gpustack.ai/nvidia.visibility",
            ["h100:GPU-0:0100"],
            (NAMESPACE, "peeker"),
            "sshd",
        )
        assert "GPU-1" not in dict(answer.envs).get("NVIDIA_VISIBLE_DEVICES", ""), dict(answer.envs)


async def test_a_deleted_pods_grant_is_forgotten_at_once(tmp_path: Path) -> None:
    """The plugin's own ledger counts a grant while its Pod exists, not a moment longer: the
    same Instance's Pod recreated under its name (another UID) gets its card back at once."""
    async with stack(tmp_path, "nvidia", nvidia()) as s:
        kubelet = s.kubelet
        await nvidia_ready(s)
        s.add_pod("again", {"main": {"nvidia.com/gpu": "1"}})
        ids = ["h100:GPU-0:0000"]
        await s.call(kubelet.allocate, "nvidia.com/gpu", ids, (NAMESPACE, "again"), "main")
        await wait_for(
            s, lambda: kubelet.devices("nvidia.com/gpu.shared")["h100:GPU-0:0000"] == "Unhealthy"
        )
        s.cluster.state.store.delete(POD, NAMESPACE, "again")
        s.cluster.state.pods_changed()
        kubelet.forget(NAMESPACE, "again")
        await wait_for(
            s, lambda: kubelet.devices("nvidia.com/gpu.shared")["h100:GPU-0:0000"] == "Healthy"
        )
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "again",
                "namespace": NAMESPACE,
                "uid": "uid-again-2",
                "creationTimestamp": "2026-11-29T10:00:00Z",
            },
            "spec": {
                "nodeName": NODE,
                "containers": [
                    {
                        "name": "main",
                        "resources": {
                            "limits": {"nvidia.com/gpu": "1"},
                            "requests": {"nvidia.com/gpu": "1"},
                        },
                    }
                ],
            },
            "status": {"phase": "Pending"},
        }
        s.cluster.state.store.put(POD, pod)
        s.cluster.state.pods_changed()
        answer = await s.call(kubelet.allocate, "nvidia.com/gpu", ids, (NAMESPACE, "again"), "main")
        assert dict(answer.envs) == {"NVIDIA_VISIBLE_DEVICES": "GPU-0"}
