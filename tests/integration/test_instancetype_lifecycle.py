"""Custom InstanceTypes and the Instances on them, over real TLS against the stand-in.

The worker runs as ``simulator up`` runs it (the stand-in's ``worker`` account, the Instance
controller on) with its admission webhooks registered as ``simulator up`` registers them: the
stand-in calls each as kube-apiserver does, an ``AdmissionReview`` over HTTPS. Objects are
written as the ``admin`` user, so a refusal is what ``kubectl`` prints. The cluster is the
walkthrough's four nodes; ``node-a10g``'s features are published as its NodeFeature (the
stand-in's NFD turns them into the §1 Node labels) and its ``Devices`` as its Device Manager
publishes them.

What is checked is the walkthrough's §4 and §5's end (``shared/spec/instancetype-walkthrough.md``):
a custom type defaulted from its catalog flavor, refused field by field when wrong, immutable
but for ``displayName``/``inactive``; an Instance whose type is deleted, deleting or inactive
stopped by the operator (``spec.stop: true``, ``Stopped``) and started again once re-pointed.
Kueue: without it Instances run unqueued and the worker says so once; with its CRDs served
(stand-in copies, ``standin_kueue_crds``: nothing admits there) a Pod is queued only where its
LocalQueue exists, and the Instance says why the Workload waits.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from standin_kueue_crds import install as install_kueue_crds
from standin_kueue_crds import local_queue, workload_of

from gpustack_kube.client import ApiError, KubeClient, NotFound
from gpustack_kube.config import load_config
from gpustack_simulator.testing import cluster_standin
from gpustack_simulator.up import webhook_configurations
from gpustack_worker.daemon import Running, WorkerOptions, serve
from kubewait import eventually, until_object
from walkthrough_expected import A10G_TYPE, CUSTOM_ENTRANCE, CUSTOM_TYPE

NS = "default"
OTHER_NS = "team-b"
API = "/apis/worker.gpustack.ai/v1alpha1"
TYPES = f"{API}/instancetypes"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
A = "acceleratable.feature.gpustack.ai/"
G = "general.feature.gpustack.ai/"
# §1's Node, label for label (those NFD applies: its feature namespaces).
A10G_LABELS = {
    "gpustack.ai/managed": "true",
    G + "amd": "true", G + "amd-epyc-7r32": "true", G + "amd-epyc-7r32.count": "4",
    A + "nvidia": "true", A + "nvidia-a10g": "true", A + "nvidia-a10g.count": "1",
    A + "nvidia-a10g.memory": "24Gi", A + "nvidia-a10g.cores": "10240",
    A + "nvidia-a10g.family": "Ampere", A + "nvidia-a10g.product": "NVIDIA-A10G",
    A + "nvidia-a10g.comcap": "8.6",
}  # fmt: skip
A10G_DEVICES = {
    "apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "Devices",
    "metadata": {"name": "node-a10g"},
    "spec": {"groups": [{
        "id": "a10g", "manufacturer": "nvidia", "name": "NVIDIA A10G", "memory": 23028,
        "accelerators": [{"id": "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575", "index": 0,
                          "status": {"logicalSliced": {"count": 128,
                                                       "coresPercentageOvercommit": True}}}],
    }]},
}  # fmt: skip
# §4's type (walkthrough_expected), as kubectl would send it.
CUSTOM = {"apiVersion": "worker.gpustack.ai/v1alpha1", **CUSTOM_TYPE}
# §1's derived A10G type: the descriptors the custom one is enriched with (physicalSliced's
# maxSize 0 is the default: omitted).
A10G_DESCRIPTORS = {
    key: A10G_TYPE["spec"][key]
    for key in ("generalGroup", "manufacturer", "product", "family", "memory", "cores")
} | {"feature": {**A10G_TYPE["spec"]["feature"], "physicalSliced": {}}}
IMMUTABLE = (
    "field is immutable after creation (only displayName and inactive may change): to re-size "
    "or re-point a pool, delete the InstanceType and create it again"
)


@dataclass
class Stack:
    admin: KubeClient
    worker: Running

    async def create_type(self, name: str, **spec: Any) -> dict[str, Any]:
        spec = {"acceleratable": False, "os": "linux", "arch": "amd64", **spec}
        body = {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "InstanceType",
                "metadata": {"name": name}, "spec": spec}  # fmt: skip
        return await self.admin.create(TYPES, body)

    async def create(self, name: str, type_name: str, ns: str = NS, **spec: Any) -> None:
        await self.admin.create(f"{API}/namespaces/{ns}/instances", {
            "apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "Instance",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"type": type_name, "image": "ubuntu:24.04", "command": ["sleep", "inf"],
                     "resources": {"cpu": "1", "ram": "1Gi"}, **spec},
        })  # fmt: skip

    async def instance(self, name: str, ns: str = NS) -> dict[str, Any]:
        return await self.admin.get(f"{API}/namespaces/{ns}/instances/{name}")

    async def phase(self, name: str, phase: str, ns: str = NS) -> dict[str, Any]:
        """The Instance once its status says ``phase``, woken by a watch on it."""

        def reached(found: dict[str, Any]) -> dict[str, Any] | None:
            return found if (found.get("status") or {}).get("phase") == phase else None

        path = f"{API}/namespaces/{ns}/instances/{name}"
        return await until_object(self.admin, path, reached, f"{ns}/{name} {phase}")

    async def events(self, reason: str, ns: str = NS) -> list[str]:
        listed = await self.admin.get(f"/api/v1/namespaces/{ns}/events")
        return [e["message"] for e in listed["items"] if e.get("reason") == reason]


async def refused(write: Awaitable[Any]) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await write
    return caught.value


@asynccontextmanager
async def open_stack(tmp: Path, *, kueue: bool) -> AsyncIterator[Stack]:
    """The walkthrough's stand-in, node-a10g's features and Devices, the worker, its webhooks.

    ``kueue``: serve stand-in copies of Kueue's CRDs before the worker starts (it looks for
    Kueue at start, then every 30 s).
    """
    async with (
        cluster_standin("walkthrough", tmp / "cluster") as cluster,
        trio.open_nursery() as nursery,
    ):
        admin_config = load_config(cluster.kubeconfig, context="admin", environ={})
        assert admin_config is not None
        async with KubeClient(admin_config) as admin:
            await admin.create("/api/v1/namespaces", {"metadata": {"name": OTHER_NS}})
            await admin.create(f"{API}/devices", A10G_DEVICES)
            await admin.create(
                "/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/gpustack-system/nodefeatures",
                {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
                 "metadata": {"name": "node-a10g-test", "namespace": "gpustack-system",
                              "labels": {"nfd.node.kubernetes.io/node-name": "node-a10g"}},
                 "spec": {"labels": A10G_LABELS}},
            )  # fmt: skip
            if kueue:
                await install_kueue_crds(admin)
            options = WorkerOptions(
                secure_port=0,
                bind_address="127.0.0.1",
                instance_controller=True,
                node_features=False,
                settings_environ={},
            )
            kube = load_config(cluster.kubeconfig, context="worker", environ={})
            running: Running = await nursery.start(
                lambda task_status: serve(options, kube=kube, task_status=task_status)
            )
            cluster.state.set_worker(running.urls[0], str(running.certificate))
            for body in webhook_configurations(running.urls[0], running.certificate.read_bytes()):
                await admin.create(f"{ADMISSION}/{body['kind'].lower()}s", body)
            try:
                yield Stack(admin, running)
            finally:
                cluster.state.set_worker(None)
                running.shutdown.set()


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with open_stack(tmp_path, kueue=False) as opened:
        yield opened


@pytest.fixture
async def kueue_stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with open_stack(tmp_path, kueue=True) as opened:
        yield opened


# -- the webhook ------------------------------------------------------------------------------


async def test_the_section_4_type_is_defaulted_from_its_catalog_flavor(stack: Stack) -> None:
    made = await stack.admin.create(TYPES, CUSTOM)
    assert made["spec"] == {**CUSTOM["spec"], **A10G_DESCRIPTORS}
    assert made["metadata"]["labels"] == {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "feature.gpustack.ai/acceleratable": "true",
        A + "nvidia-a10g": "true",
        # The reference's current rule; the walkthrough's §4 shows an older hash.
        "schedule.gpustack.ai/queue-entrance": CUSTOM_ENTRANCE,
    }


BAD: dict[str, tuple[dict[str, Any], str]] = {
    "no accelerator key": (
        {"acceleratable": True},
        "spec.acceleratorGroup: Required value: an acceleratable InstanceType names its "
        "accelerator key, the catalog's acceleratorGroup (kubectl get instancetypeflavor), "
        "e.g. nvidia-a10g",
    ),
    "a key no label can carry": (
        {"acceleratable": True, "acceleratorGroup": "NVIDIA A10G"},
        'spec.acceleratorGroup: Invalid value: "NVIDIA A10G": a lowercase RFC 1123 label',
    ),
    "a unit of nothing": (
        {"unitResources": {"cpu": "0"}},
        'spec.unitResources.cpu: Invalid value: "0": must be greater than 0',
    ),
    "an absurd unit": (
        {"unitResources": {"ram": "2Pi"}},
        'spec.unitResources.ram: Invalid value: "2Pi": must be no more than 1Pi: no node holds '
        "more",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
async def test_a_wrong_type_is_refused_with_its_field_and_not_stored(
    stack: Stack, case: str
) -> None:
    spec, expected = BAD[case]
    error = await refused(stack.create_type("bad", **spec))
    assert error.status == 422, error.message
    assert 'admission webhook "instancetypes.validate.worker.gpustack.ai" denied' in error.message
    assert expected in error.message
    with pytest.raises(NotFound):
        await stack.admin.get(f"{TYPES}/bad")


async def test_only_display_name_and_inactive_change_after_creation(stack: Stack) -> None:
    await stack.admin.create(TYPES, CUSTOM)
    path = f"{TYPES}/a10g-12c128g"
    error = await refused(stack.admin.patch(path, {"spec": {"unitResources": {"cpu": "16"}}}))
    assert error.status == 403
    assert f"spec.unitResources: Forbidden: {IMMUTABLE}" in error.message
    error = await refused(stack.admin.patch(path, {"spec": {"acceleratorGroup": "nvidia-l4"}}))
    assert f"spec.acceleratorGroup: Forbidden: {IMMUTABLE}" in error.message
    renamed = await stack.admin.patch(path, {"spec": {"displayName": "A10G, big unit"}})
    assert renamed["spec"]["displayName"] == "A10G, big unit"
    # The manifest as first written, replaced whole: what defaulting added is kept.
    stored = await stack.admin.get(path)
    version = stored["metadata"]["resourceVersion"]
    again = {**CUSTOM, "metadata": {**CUSTOM["metadata"], "resourceVersion": version}}
    replaced = await stack.admin.update(path, again)
    assert replaced["spec"] == {**CUSTOM["spec"], **A10G_DESCRIPTORS}
    assert replaced["metadata"]["labels"] == stored["metadata"]["labels"]


# -- the Instances on a type ------------------------------------------------------------------


async def test_deleting_a_type_stops_its_instances_and_repointing_starts_them(
    stack: Stack,
) -> None:
    """§4's end and §5's: the operator sets ``spec.stop``; re-point and clear it to start."""
    await stack.create_type("cpu-a")
    await stack.create_type("cpu-b")
    await stack.create("custom-demo", "cpu-a")
    await stack.phase("custom-demo", "Ready")
    await stack.admin.delete(f"{TYPES}/cpu-a")
    stopped = await stack.phase("custom-demo", "Stopped")
    assert stopped["spec"]["stop"] is True
    assert await stack.events("TypeUnavailable") == [
        "InstanceType cpu-a does not exist: stopping the Instance"
    ]
    with pytest.raises(NotFound):
        await stack.admin.get(f"/api/v1/namespaces/{NS}/pods/custom-demo")
    await stack.admin.patch(
        f"{API}/namespaces/{NS}/instances/custom-demo",
        {"spec": {"type": "cpu-b", "stop": False}},
    )
    ready = await stack.phase("custom-demo", "Ready")
    assert (ready["spec"]["type"], ready["spec"]["stop"]) == ("cpu-b", False)
    assert (await stack.admin.get(f"/api/v1/namespaces/{NS}/pods/custom-demo"))["status"][
        "phase"
    ] == "Running"


async def test_a_type_being_deleted_stops_its_instances(stack: Stack) -> None:
    """A finalizer (another controller's) holds the type in deletion: its Instances stop."""
    body = {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "InstanceType",
            "metadata": {"name": "held", "finalizers": ["test.gpustack.ai/hold"]},
            "spec": {"acceleratable": False, "os": "linux", "arch": "amd64"}}  # fmt: skip
    await stack.admin.create(TYPES, body)
    await stack.create("on-held", "held")
    await stack.phase("on-held", "Ready")
    await stack.admin.delete(f"{TYPES}/held")
    assert (await stack.admin.get(f"{TYPES}/held"))["metadata"]["deletionTimestamp"]
    stopped = await stack.phase("on-held", "Stopped")
    assert stopped["spec"]["stop"] is True
    assert await stack.events("TypeUnavailable") == [
        "InstanceType held is being deleted: stopping the Instance"
    ]
    await stack.admin.patch(f"{TYPES}/held", {"metadata": {"finalizers": None}})


async def test_an_inactive_type_stops_its_instances(stack: Stack) -> None:
    await stack.create_type("cpu-a")
    await stack.create("worker-1", "cpu-a")
    await stack.phase("worker-1", "Ready")
    await stack.admin.patch(f"{TYPES}/cpu-a", {"spec": {"inactive": True}})  # the webhook: free
    stopped = await stack.phase("worker-1", "Stopped")
    assert stopped["spec"]["stop"] is True
    assert await stack.events("TypeUnavailable") == [
        "InstanceType cpu-a is inactive: stopping the Instance"
    ]


# -- Kueue ------------------------------------------------------------------------------------


async def test_without_kueue_pods_run_unqueued_and_the_worker_says_so_once(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gpustack.worker.instances.kueue")
    typed = await stack.create_type("cpu-a")
    entrance = typed["metadata"]["labels"]["schedule.gpustack.ai/queue-entrance"]
    assert entrance.startswith("gpustack-fnv64-")
    for name in ("one", "two"):
        await stack.create(name, "cpu-a")
        await stack.phase(name, "Ready")
        pod = await stack.admin.get(f"/api/v1/namespaces/{NS}/pods/{name}")
        assert "kueue.x-k8s.io/queue-name" not in pod["metadata"]["labels"]
        instance = await stack.instance(name)
        assert "Admitted" not in {c["type"] for c in instance["status"].get("conditions", [])}
    said = [r.getMessage() for r in caplog.records if "Kueue does not serve" in r.getMessage()]
    assert len(said) == 1
    assert "Instances run without its queue" in said[0]


async def test_a_pod_is_queued_only_where_its_local_queue_exists(kueue_stack: Stack) -> None:
    stack = kueue_stack
    typed = await stack.create_type("cpu-a")
    entrance = typed["metadata"]["labels"]["schedule.gpustack.ai/queue-entrance"]
    await stack.admin.create(
        f"{KUEUE}/namespaces/{NS}/localqueues", local_queue(NS, entrance, "cpu-a")
    )

    async def labelled(name: str, ns: str) -> dict[str, Any] | None:
        async def probe() -> dict[str, Any] | None:
            pod: dict[str, Any] = await stack.admin.get(f"/api/v1/namespaces/{ns}/pods/{name}")
            return pod

        found: dict[str, Any] = await eventually(probe, f"Pod {ns}/{name}")
        return found

    await eventually(
        lambda: stack.admin.get(f"{KUEUE}/namespaces/{NS}/localqueues/{entrance}"), "the queue"
    )
    await trio.sleep(0.5)  # the worker's LocalQueue informer sees it
    await stack.create("queued", "cpu-a")
    await stack.create("unqueued", "cpu-a", ns=OTHER_NS)
    queued = await labelled("queued", NS)
    unqueued = await labelled("unqueued", OTHER_NS)
    assert queued["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == entrance
    assert "kueue.x-k8s.io/queue-name" not in unqueued["metadata"]["labels"]


async def test_a_new_pod_waits_for_a_local_queue_written_moments_later(
    kueue_stack: Stack,
) -> None:
    """Where Kueue runs, a Pod is not created unqueued while its queue is still on its way
    (the InstanceType controller writes it just after the type): it waits, then is queued."""
    stack = kueue_stack
    typed = await stack.create_type("cpu-a")
    entrance = typed["metadata"]["labels"]["schedule.gpustack.ai/queue-entrance"]
    await stack.create("early", "cpu-a")
    await trio.sleep(2)
    with pytest.raises(NotFound):
        await stack.admin.get(f"/api/v1/namespaces/{NS}/pods/early")
    await stack.admin.create(
        f"{KUEUE}/namespaces/{NS}/localqueues", local_queue(NS, entrance, "cpu-a")
    )

    async def pod() -> dict[str, Any]:
        found: dict[str, Any] = await stack.admin.get(f"/api/v1/namespaces/{NS}/pods/early")
        return found

    made = await eventually(pod, "the Pod, once its queue is there")
    assert made["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == entrance


async def test_the_instance_says_why_its_workload_waits(kueue_stack: Stack) -> None:
    """Pending on quota in Kueue's words, then the admission check's reason, then admitted.

    The stand-in runs no Kueue: the test writes the Workload as Kueue's Pod integration
    would; the Pod asks for node-a10g's one card, which another Instance holds, so it stays
    unscheduled as a gated one would.
    """
    stack = kueue_stack
    typed = await stack.admin.create(TYPES, CUSTOM)
    entrance = typed["metadata"]["labels"]["schedule.gpustack.ai/queue-entrance"]
    await stack.admin.create(
        f"{KUEUE}/namespaces/{NS}/localqueues", local_queue(NS, entrance, "a10g-12c128g")
    )
    await trio.sleep(0.5)
    one_card = {"accelerator": 1}
    await stack.create("holder", "a10g-12c128g", resources=one_card, nodeName="node-a10g")
    await stack.phase("holder", "Ready")
    await stack.create("waits", "a10g-12c128g", resources=one_card, nodeName="node-a10g")

    async def pod() -> dict[str, Any]:
        found: dict[str, Any] = await stack.admin.get(f"/api/v1/namespaces/{NS}/pods/waits")
        return found

    made = await eventually(pod, "the Pod")
    assert made["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == entrance
    pending = (
        "couldn't assign flavors to pod set main: insufficient unused quota for "
        "credits.gpustack.ai/nvidia in flavor gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d"
        ", 1600k more needed"
    )
    workloads = f"{KUEUE}/namespaces/{NS}/workloads"
    workload = await stack.admin.create(workloads, workload_of(made, entrance))
    path = f"{workloads}/{workload['metadata']['name']}/status"
    await stack.admin.patch(path, {"status": {"conditions": [
        {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": pending,
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})  # fmt: skip

    async def says(message: str) -> dict[str, Any] | None:
        found = await stack.instance("waits")
        return found if found.get("status", {}).get("phaseMessage") == message else None

    found = await eventually(lambda: says(f"Pending: {pending}"), "Pending on quota")
    assert found["status"]["phase"] == "Starting"
    admitted = {c["type"]: c for c in found["status"]["conditions"]}["Admitted"]
    assert (admitted["status"], admitted["reason"], admitted["message"]) == (
        "False", "Pending", pending,
    )  # fmt: skip
    retry = "no node has one card with 20 % of its memory free"
    await stack.admin.patch(path, {"status": {
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                        "message": "Quota reserved in ClusterQueue a10g-12c128g",
                        "lastTransitionTime": "2026-01-01T00:00:01Z"}],
        "admissionChecks": [{"name": "gpustack-node-devices", "state": "Retry",
                             "message": retry, "lastTransitionTime": "2026-01-01T00:00:01Z"}],
    }})  # fmt: skip
    await eventually(lambda: says(f"Retry: gpustack-node-devices: {retry}"), "the check's reason")
    await stack.admin.patch(path, {"status": {
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                        "message": "Quota reserved", "lastTransitionTime": "2026-01-01T00:00:02Z"},
                       {"type": "Admitted", "status": "True", "reason": "Admitted",
                        "message": "The workload is admitted",
                        "lastTransitionTime": "2026-01-01T00:00:02Z"}],
        "admissionChecks": [{"name": "gpustack-node-devices", "state": "Ready",
                             "lastTransitionTime": "2026-01-01T00:00:02Z"}],
    }})  # fmt: skip
    # Admitted: what it waits for now is the scheduler (the card is held).
    found = await eventually(lambda: says("waiting to be scheduled"), "admitted")
    admitted = {c["type"]: c for c in found["status"]["conditions"]}["Admitted"]
    assert (admitted["status"], admitted["reason"]) == ("True", "Admitted")
