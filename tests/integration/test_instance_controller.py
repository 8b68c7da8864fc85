"""The Instance controller against the stand-in: Pods, Services, status, stop/start, isolation.

The stand-in's API server stores and validates every write (the CRDs' schemas included), its
node simulator schedules and runs the Pods the controller creates, allocates node ports and
collects owned objects, so each behaviour of ``gpu-instances.md`` is observed as a user would
observe it with kubectl: through the API, never by calling the controller's internals.
"""

from __future__ import annotations

import base64
import gc
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from gpustack_core import contract
from gpustack_kube.client import KubeClient, NotFound
from gpustack_kube.config import load_config
from gpustack_simulator.testing import cluster_standin
from gpustack_worker.instances.controller import ControllerOptions, InstanceController
from kubewait import eventually, until_gone, until_object

NS = "tenant-x"
INSTANCES = f"/apis/worker.gpustack.ai/v1alpha1/namespaces/{NS}/instances"
TYPES = "/apis/worker.gpustack.ai/v1alpha1/instancetypes"
PODS = f"/api/v1/namespaces/{NS}/pods"
SERVICES = f"/api/v1/namespaces/{NS}/services"
POLICY = f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/gpustack-instance-isolation"
SETTINGS = "/api/v1/namespaces/gpustack-system/secrets/gpustack-settings"


def cidrs(value: str) -> dict[str, Any]:
    """A merge patch setting ``instance-isolation-pod-cidrs`` in the Settings Secret."""
    return {"data": {"instance-isolation-pod-cidrs": base64.b64encode(value.encode()).decode()}}


def _in_phase(instance: dict[str, Any], phase: str) -> dict[str, Any] | None:
    return instance if (instance.get("status") or {}).get("phase") == phase else None


@dataclass
class Harness:
    client: KubeClient
    controller: InstanceController

    async def eventually(self, probe: Callable[[], Awaitable[Any]], what: str) -> Any:
        """``probe()`` once truthy (a condition no one object's watch reports)."""
        return await eventually(probe, what)

    async def instance(self, name: str) -> dict[str, Any]:
        return await self.client.get(f"{INSTANCES}/{name}")

    async def phase(self, name: str, phase: str) -> dict[str, Any]:
        """The Instance once its status says ``phase``, woken by a watch on it."""
        return await until_object(
            self.client, f"{INSTANCES}/{name}", lambda i: _in_phase(i, phase), f"{name} {phase}"
        )

    async def gone(self, path: str) -> None:
        await until_gone(self.client, path, path)


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    async with cluster_standin("nvidia-mixed", tmp_path) as cluster:
        config = load_config(cluster.kubeconfig, context="admin", environ={})
        assert config is not None
        async with KubeClient(config) as client, trio.open_nursery() as nursery:
            await client.create("/api/v1/namespaces", {"metadata": {"name": NS}})
            # The scenario's Instances name types the stand-in does not hold; an administrator
            # would have created them (a missing type stops its Instances: tested below).
            listed = await client.get("/apis/worker.gpustack.ai/v1alpha1/instances")
            for name in sorted({i["spec"].get("type") for i in listed["items"]} - {None}):
                await client.create(TYPES, {
                    "apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "InstanceType",
                    "metadata": {"name": name},
                    "spec": {"acceleratable": True, "manufacturer": "nvidia"},
                })  # fmt: skip
            controller = InstanceController(client, ControllerOptions(leader_election=False))
            nursery.start_soon(controller.run)
            yield Harness(client, controller)
            await controller.drain()  # no write half-sent when the nursery is cancelled
            nursery.cancel_scope.cancel()


def workspace(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"image": "ubuntu:24.04", "command": ["sleep", "inf"],
                 "resources": {"cpu": "1", "ram": "1Gi"}, **spec},
    }  # fmt: skip


def node_ports(service: dict[str, Any]) -> dict[int, int]:
    return {p["port"]: p["nodePort"] for p in service["spec"]["ports"]}


async def test_an_instance_becomes_a_ready_pod_and_a_service(harness: Harness) -> None:
    two = workspace("ws", ports=[{"port": 22}, {"port": 8080}])
    made = await harness.client.create(INSTANCES, two)
    ready = await harness.phase("ws", "Ready")
    pod = await harness.client.get(f"{PODS}/ws")
    uid = made["metadata"]["uid"]
    assert pod["metadata"]["labels"]["app.kubernetes.io/part-of"] == uid
    assert pod["metadata"]["labels"]["resource.gpustack.ai/type"] == "instances"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == uid
    assert pod["spec"]["hostIPC"] is True
    assert pod["spec"]["automountServiceAccountToken"] is False
    (main,) = pod["spec"]["containers"]
    assert main["name"] == "main"
    assert main["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}
    service = await harness.client.get(f"{SERVICES}/ws")
    assert service["spec"]["type"] == "NodePort"
    assert service["metadata"]["ownerReferences"][0]["kind"] == "Instance"
    ports = node_ports(service)
    assert all(30000 <= p <= 32767 for p in ports.values())
    status = ready["status"]
    assert status["nodeName"] == pod["spec"]["nodeName"]
    assert status["observedGeneration"] == 1
    assert {p["port"]: p["nodePort"] for p in status["ports"]} == ports
    assert status["podIPs"] == [{"ip": pod["status"]["podIP"]}]
    assert len(status["accessAddresses"]) == 2
    events = await harness.client.get(f"/api/v1/namespaces/{NS}/events")
    reasons = {e["reason"] for e in events["items"] if e["involvedObject"]["name"] == "ws"}
    assert {"Created", "Ready"} <= reasons


async def test_stop_keeps_the_service_and_start_gets_the_same_node_ports(harness: Harness) -> None:
    await harness.client.create(INSTANCES, workspace("ws", ports=[{"port": 22}, {"port": 80}]))
    await harness.phase("ws", "Ready")
    before = node_ports(await harness.client.get(f"{SERVICES}/ws"))
    await harness.client.patch(f"{INSTANCES}/ws", {"spec": {"stop": True}})
    await harness.phase("ws", "Stopped")
    await harness.gone(f"{PODS}/ws")
    assert node_ports(await harness.client.get(f"{SERVICES}/ws")) == before
    # Edited while stopped: 22 kept, 80 removed, 8888 added — applied when it starts again.
    edit = {"spec": {"ports": [{"port": 22}, {"port": 8888}]}}
    await harness.client.patch(f"{INSTANCES}/ws", edit)
    await _quiet(harness)
    assert node_ports(await harness.client.get(f"{SERVICES}/ws")) == before  # untouched
    await harness.client.patch(f"{INSTANCES}/ws", {"spec": {"stop": False}})

    async def edited() -> dict[int, int] | None:
        ports = node_ports(await harness.client.get(f"{SERVICES}/ws"))
        return ports if set(ports) == {22, 8888} else None

    after = await harness.eventually(edited, "the ports edited while stopped, on start")
    assert after[22] == before[22]
    ready = await harness.phase("ws", "Ready")
    assert {p["port"]: p["nodePort"] for p in ready["status"]["ports"]} == after
    # Clearing the ports deletes the Service with its allocations.
    await harness.client.patch(f"{INSTANCES}/ws", {"spec": {"ports": None}})
    await harness.gone(f"{SERVICES}/ws")


async def test_deleting_collects_and_a_recreated_instance_gets_a_fresh_pod(
    harness: Harness,
) -> None:
    first = await harness.client.create(INSTANCES, workspace("ws", ports=[{"port": 22}]))
    await harness.phase("ws", "Ready")
    await harness.client.delete(f"{INSTANCES}/ws")
    await harness.gone(f"{PODS}/ws")
    await harness.gone(f"{SERVICES}/ws")
    second = await harness.client.create(INSTANCES, workspace("ws"))
    await harness.phase("ws", "Ready")
    pod = await harness.client.get(f"{PODS}/ws")
    assert pod["metadata"]["labels"]["app.kubernetes.io/part-of"] == second["metadata"]["uid"]
    assert second["metadata"]["uid"] != first["metadata"]["uid"]


async def test_a_spec_change_replaces_the_pod(harness: Harness) -> None:
    await harness.client.create(INSTANCES, workspace("ws"))
    await harness.phase("ws", "Ready")
    old = await harness.client.get(f"{PODS}/ws")
    await harness.client.patch(f"{INSTANCES}/ws", {"spec": {"image": "ubuntu:26.04"}})

    async def replaced() -> dict[str, Any] | None:
        pod = await harness.client.get(f"{PODS}/ws")
        fresh = pod["metadata"]["uid"] != old["metadata"]["uid"]
        return pod if fresh and pod["spec"]["containers"][0]["image"] == "ubuntu:26.04" else None

    await harness.eventually(replaced, "the Pod rendered from the new spec")
    await harness.phase("ws", "Ready")


async def test_an_inactive_or_missing_type_stops_the_instance(harness: Harness) -> None:
    await harness.client.create(TYPES, {
        "apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "InstanceType",
        "metadata": {"name": "cpu-small"},
        "spec": {"acceleratable": False, "os": "linux", "arch": "amd64"},
    })  # fmt: skip
    await harness.client.create(INSTANCES, workspace("typed", type="cpu-small"))
    await harness.phase("typed", "Ready")
    await harness.client.patch(f"{TYPES}/cpu-small", {"spec": {"inactive": True}})
    stopped = await harness.phase("typed", "Stopped")
    assert stopped["spec"]["stop"] is True
    await harness.client.create(INSTANCES, workspace("orphan", type="no-such-type"))
    orphan = await harness.phase("orphan", "Stopped")
    assert orphan["spec"]["stop"] is True
    events = await harness.client.get(f"/api/v1/namespaces/{NS}/events")
    messages = [e["message"] for e in events["items"] if e["reason"] == "TypeUnavailable"]
    assert any("InstanceType cpu-small is inactive" in m for m in messages)
    assert any("InstanceType no-such-type does not exist" in m for m in messages)


async def test_an_impossible_request_is_reported_not_retried_forever(harness: Harness) -> None:
    bad = workspace("bad")
    bad["spec"]["resources"] = {"accelerator": 1}  # no type, so no manufacturer to ask of
    await harness.client.create(INSTANCES, bad)
    found = await harness.phase("bad", "Starting")
    assert "names no manufacturer" in found["status"]["phaseMessage"]
    with pytest.raises(NotFound):
        await harness.client.get(f"{PODS}/bad")


async def _hand_over(harness: Harness, namespace: str) -> list[str]:
    """Give the scenario's Instances of ``namespace`` to the controller (drop managed-by)."""
    listed = await harness.client.get(
        f"/apis/worker.gpustack.ai/v1alpha1/namespaces/{namespace}/instances"
    )
    names = [i["metadata"]["name"] for i in listed["items"]]
    for name in names:
        await harness.client.patch(
            f"/apis/worker.gpustack.ai/v1alpha1/namespaces/{namespace}/instances/{name}",
            {"metadata": {"labels": {contract.INSTANCE_MANAGED_BY_LABEL: None}}},
        )
    return names


async def test_instances_another_manager_owns_are_left_alone(harness: Harness) -> None:
    """The scenario's Instances name their manager: no Pod, Service or status is written."""
    await harness.eventually(lambda: _quiet(harness), "the controller settling")
    scenario = await harness.client.get(
        "/apis/worker.gpustack.ai/v1alpha1/namespaces/team-a/instances"
    )
    assert scenario["items"], "the scenario has Instances in team-a"
    for item in scenario["items"]:
        assert item["metadata"]["labels"][contract.INSTANCE_MANAGED_BY_LABEL] != (
            contract.INSTANCE_CONTROLLER
        )
    touched = [w for w in harness.controller.writes if "team-a/" in w[1]]
    assert touched == []


async def test_existing_pods_are_adopted_not_recreated(harness: Harness) -> None:
    """Instance Pods that predate the controller: handed to it, it leaves them running."""
    pods = await harness.client.get("/api/v1/namespaces/team-a/pods")
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods["items"]}
    assert await _hand_over(harness, "team-a")
    await harness.eventually(lambda: _quiet(harness), "the controller settling")
    pods = await harness.client.get("/api/v1/namespaces/team-a/pods")
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods["items"]}
    assert {k: v for k, v in after.items() if k in before} == before, "\n".join(
        map(str, harness.controller.writes)
    )
    assert not [w for w in harness.controller.writes if w[0] == "delete" or "stop" in w[1]]


async def _quiet(harness: Harness) -> bool:
    seen = harness.controller.reconciles
    await trio.sleep(0.5)
    return harness.controller.reconciles == seen and len(harness.controller.queue) == 0


async def test_network_isolation_follows_the_setting(harness: Harness) -> None:
    await harness.client.create(INSTANCES, workspace("ws"))
    await harness.phase("ws", "Ready")
    with pytest.raises(NotFound):  # the Setting is blank: nothing rendered
        await harness.client.get(POLICY)
    # As an administrator sets it: the Secret the worker seeded (docs/settings.md).
    await harness.eventually(lambda: harness.client.get(SETTINGS), "the Settings seeded")
    await harness.client.patch(SETTINGS, cidrs("10.244.0.0/16"))
    policy = await harness.eventually(lambda: harness.client.get(POLICY), "the policy")
    assert policy["spec"]["podSelector"] == {
        "matchLabels": {"resource.gpustack.ai/type": "instances"}
    }
    assert policy["spec"]["ingress"][0]["from"][1] == {
        "ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.244.0.0/16"]}
    }
    # A manual edit is reverted.
    await harness.client.patch(POLICY, {"spec": {"ingress": [{}]}})

    async def reverted() -> bool:
        return (await harness.client.get(POLICY))["spec"] == policy["spec"]

    await harness.eventually(reverted, "the manual edit reverted")
    # Emptying the Setting collects it.
    await harness.client.patch(SETTINGS, cidrs(""))
    await harness.gone(POLICY)
    # A hand-written policy of the same name is never touched, whatever the Setting says.
    hand = {"metadata": {"name": "gpustack-instance-isolation", "namespace": NS},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}  # fmt: skip
    await harness.client.create(f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies", hand)
    await harness.client.patch(SETTINGS, cidrs("10.0.0.0/8"))
    await trio.sleep(1)
    kept = await harness.client.get(POLICY)
    assert kept["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    await harness.client.patch(SETTINGS, cidrs(""))
    await trio.sleep(1)
    assert (await harness.client.get(POLICY))["spec"] == kept["spec"]  # not collected either


# Killing the leader mid-renewal is the point of this test: the request it was sending is
# abandoned, as a crashed process's would be, and httpx's body generator is collected unexhausted.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_only_the_leader_reconciles_and_a_follower_takes_over(tmp_path: Path) -> None:
    async with cluster_standin("nvidia-mixed", tmp_path) as cluster:
        config = load_config(cluster.kubeconfig, context="admin", environ={})
        assert config is not None
        async with KubeClient(config) as client, trio.open_nursery() as nursery:
            await client.create("/api/v1/namespaces", {"metadata": {"name": NS}})
            replicas: dict[str, InstanceController] = {}
            scopes: dict[str, trio.CancelScope] = {}
            for name in ("worker-0", "worker-1"):
                replicas[name] = InstanceController(
                    client,
                    ControllerOptions(identity=name, lease_duration=1.5, renew_deadline=1.0,
                                      retry_period=0.2),
                )  # fmt: skip
                scopes[name] = trio.CancelScope()

                async def run(name: str = name) -> None:
                    with scopes[name]:
                        await replicas[name].run()

                nursery.start_soon(run)
            harness = Harness(client, replicas["worker-0"])
            await client.create(INSTANCES, workspace("ws"))
            await harness.phase("ws", "Ready")
            leaders = [n for n, r in replicas.items() if r.elector.leading]
            assert len(leaders) == 1
            (leader,) = leaders
            (follower,) = set(replicas) - {leader}
            assert not replicas[follower].writes  # a follower never writes
            scopes[leader].cancel()  # the leader dies without handing over
            await client.create(INSTANCES, workspace("after"))
            await harness.phase("after", "Ready")  # reconciled: the follower took the lease
            assert replicas[follower].elector.leading
            assert any("after" in what for _, what in replicas[follower].writes)
            await replicas[follower].drain()
            nursery.cancel_scope.cancel()
    gc.collect()  # the abandoned request's generator is finalized here, not in a later test


async def test_a_moved_resource_base_is_what_the_pod_asks_for(tmp_path: Path) -> None:
    """Beside the GPU Operator ours runs on another base (issue #31): the Instance's Pod must
    ask for the name our device plugin registers, not the default one the other plugin
    serves."""
    moved = "gpustack.ai/nvidia-gpu"
    async with cluster_standin("nvidia-mixed", tmp_path) as cluster:
        config = load_config(cluster.kubeconfig, context="admin", environ={})
        assert config is not None
        async with KubeClient(config) as client, trio.open_nursery() as nursery:
            await client.create("/api/v1/namespaces", {"metadata": {"name": NS}})
            await client.create(TYPES, {
                "apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "InstanceType",
                "metadata": {"name": "moved"},
                "spec": {"acceleratable": True, "manufacturer": "nvidia"},
            })  # fmt: skip
            options = ControllerOptions(leader_election=False, resource_bases={"nvidia": moved})
            controller = InstanceController(client, options)
            nursery.start_soon(controller.run)
            harness = Harness(client, controller)
            await client.create(
                INSTANCES,
                workspace("mv", type="moved", resources={"cpu": "1", "ram": "1Gi",
                                                         "accelerator": "1"}),
            )  # fmt: skip

            async def created() -> dict[str, Any] | None:
                try:
                    return await client.get(f"{PODS}/mv")
                except NotFound:
                    return None

            pod = await harness.eventually(created, "the Pod created")
            (main,) = pod["spec"]["containers"]
            assert main["resources"]["limits"][moved] == "1"
            assert "nvidia.com/gpu" not in main["resources"]["limits"]
            await controller.drain()
            nursery.cancel_scope.cancel()
