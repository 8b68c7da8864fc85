"""Issue #28's security regression suite: every case over real TLS, through the API a user has.

The worker runs as ``simulator up`` runs it (the stand-in's ``worker`` account and its RBAC, the
Instance controller on) with its admission webhooks registered as ``simulator up`` registers
them (``gpustack_simulator.up.webhook_configurations``): the stand-in calls them the way
kube-apiserver does — an ``AdmissionReview`` over HTTPS, the worker's certificate verified.
Instances are written as the ``admin`` user through the stand-in's API, so each refusal is the
answer ``kubectl`` shows; the worker's own API is called as the kube-aggregator calls it.

Every test here failed on the code before #28 (the report names how): Instances were stored
whatever they held, ``spec`` changed under a running Pod, a refused Pod left an empty status,
and the bad-input requests below were answered 500 with a logged traceback.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from gpustack_core import contract
from gpustack_kube.client import ApiError, KubeClient, NotFound
from gpustack_kube.config import load_config
from gpustack_simulator.cluster.server import RunningCluster
from gpustack_simulator.testing import cluster_standin
from gpustack_simulator.up import webhook_configurations
from gpustack_worker.daemon import Running, WorkerOptions, serve
from h2_probe import Answer, H2Probe
from kubewait import eventually
from patience import HANG

NS = "tenant-x"
V1ALPHA1 = f"/apis/worker.gpustack.ai/v1alpha1/namespaces/{NS}/instances"
V1 = f"/apis/worker.gpustack.ai/v1/namespaces/{NS}/instances"
SECRET = "/api/v1/namespaces/gpustack-system/secrets/gpustack-settings"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
NODE = "gpu-node-1"
TYPE = "nvidia-l4"
CARDS = 4
ADMIN = [("X-Remote-User", "admin"), ("X-Remote-Group", "system:masters")]


@dataclass
class Stack:
    cluster: RunningCluster
    worker: Running
    admin: KubeClient

    @property
    def url(self) -> str:
        return self.worker.urls[0]

    def tls(self, *, cert: bool = True) -> ssl.SSLContext:
        """The worker's certificate verified; the front-proxy client's presented (the
        aggregator's) unless ``cert`` is false (kube-apiserver calling a webhook)."""
        context = ssl.create_default_context(cafile=str(self.worker.certificate))
        if cert:
            context.load_cert_chain(str(self.cluster.state.pki.front_proxy_client))
        return context

    def client(self, *, cert: bool = True) -> httpx.AsyncClient:
        """HTTPS to the worker itself, as the aggregator (or kube-apiserver) dials it."""
        return httpx.AsyncClient(verify=self.tls(cert=cert), trust_env=False, timeout=30)

    async def create(self, name: str, **spec: Any) -> dict[str, Any]:
        return await self.admin.create(V1ALPHA1, instance(name, **spec))

    async def patch(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.admin.patch(f"{V1ALPHA1}/{name}", body)

    async def setting(self, key: str, value: str) -> None:
        """``kubectl -n gpustack-system patch secret gpustack-settings --type=merge``."""
        encoded = base64.b64encode(value.encode()).decode()
        await self.admin.patch(SECRET, {"data": {key: encoded}})


def instance(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"image": "ubuntu:24.04", "command": ["sleep", "inf"],
                 "resources": {"cpu": "1", "ram": "1Gi"}, **spec},
    }  # fmt: skip


def devices(node: str, cards: int) -> dict[str, Any]:
    """A ``Devices`` object as a Device Manager publishes it: ``cards`` NVIDIA L4s."""
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Devices",
        "metadata": {"name": node},
        "spec": {"groups": [{
            "id": "l4", "manufacturer": "nvidia", "name": "NVIDIA L4", "memory": 23034,
            "accelerators": [{"id": f"GPU-{i}", "index": i} for i in range(cards)],
        }]},
    }  # fmt: skip


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with (
        cluster_standin("nvidia-mixed", tmp_path / "cluster") as cluster,
        trio.open_nursery() as nursery,
    ):
        admin_config = load_config(cluster.kubeconfig, context="admin", environ={})
        assert admin_config is not None
        async with KubeClient(admin_config) as admin:
            await admin.create("/api/v1/namespaces", {"metadata": {"name": NS}})
            await admin.create("/apis/worker.gpustack.ai/v1alpha1/devices", devices(NODE, CARDS))
            await admin.create("/apis/worker.gpustack.ai/v1alpha1/instancetypes", {
                "apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "InstanceType",
                "metadata": {"name": TYPE},
                "spec": {"acceleratable": True, "manufacturer": "nvidia",
                         "unitResources": {"cpu": "4", "ram": "16Gi", "localStorage": "100Gi"}},
            })  # fmt: skip
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
            await eventually(lambda: admin.get(SECRET), "the worker seeding gpustack-settings")
            try:
                yield Stack(cluster, running, admin)
            finally:
                cluster.state.set_worker(None)
                running.shutdown.set()


async def refused(write: Awaitable[Any]) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await write
    return caught.value


# -- the two gates ---------------------------------------------------------------------------

HOST_A = {"mountPath": "/mnt/a", "hostPath": {"path": "/var/lib/a", "type": "DirectoryOrCreate"}}
HOST_B = {"mountPath": "/mnt/b", "hostPath": {"path": "/var/lib/b", "type": "DirectoryOrCreate"}}


async def test_each_escape_needs_its_setting_read_live(stack: Stack) -> None:
    """Both gates are false by default; each Setting opens only its own, without a restart."""
    error = await refused(stack.create("priv", privileged=True))
    assert error.status == 403
    assert "spec.privileged: Forbidden: privileged Instances are not allowed" in error.message
    assert "instance-privileged-allowed is false" in error.message
    error = await refused(stack.create("host", additionalVolumes=[HOST_A]))
    assert error.status == 403
    assert "spec.additionalVolumes[0].hostPath: Forbidden" in error.message
    with pytest.raises(NotFound):
        await stack.admin.get(f"{V1ALPHA1}/priv")  # refused before anything was stored

    await stack.setting("instance-privileged-allowed", "true")
    await eventually(lambda: _created(stack, "priv", privileged=True), "privileged admitted")
    error = await refused(stack.create("host", additionalVolumes=[HOST_A]))
    assert "instance-host-path-volume-allowed is false" in error.message  # its own gate

    await stack.setting("instance-host-path-volume-allowed", "true")
    await eventually(
        lambda: _created(stack, "host", additionalVolumes=[HOST_A]), "hostPath admitted"
    )


async def _created(stack: Stack, name: str, **spec: Any) -> bool:
    try:
        await stack.create(name, **spec)
    except ApiError as exc:
        if exc.status != 403:
            raise
        return False
    return True


async def test_a_held_escape_stays_but_no_new_one_is_taken(stack: Stack) -> None:
    await stack.setting("instance-privileged-allowed", "true")
    await stack.setting("instance-host-path-volume-allowed", "true")
    await eventually(
        lambda: _created(stack, "held", privileged=True, additionalVolumes=[HOST_A, HOST_B]),
        "both escapes admitted",
    )
    await stack.setting("instance-privileged-allowed", "false")
    await stack.setting("instance-host-path-volume-allowed", "false")
    await eventually(lambda: _refuses_new_privileged(stack), "the gates closing")

    await stack.patch("held", {"spec": {"stop": True}})  # stop: always
    reordered = [HOST_B, HOST_A]
    await stack.patch("held", {"spec": {"additionalVolumes": reordered}})  # no new grant
    await stack.patch("held", {"spec": {"image": "ubuntu:25.04"}})  # editable while stopped
    repointed = [HOST_B, {**HOST_A, "hostPath": {"path": "/", "type": "Directory"}}]
    error = await refused(stack.patch("held", {"spec": {"additionalVolumes": repointed}}))
    assert error.status == 403
    assert "spec.additionalVolumes[1].hostPath: Forbidden" in error.message
    await stack.patch("held", {"spec": {"stop": False}})  # restartable, escapes held
    held = await stack.admin.get(f"{V1ALPHA1}/held")
    assert held["spec"]["privileged"] is True
    assert held["spec"]["additionalVolumes"] == reordered

    await stack.create("idle", stop=True)
    error = await refused(stack.patch("idle", {"spec": {"privileged": True}}))
    assert "spec.privileged: Forbidden" in error.message  # taking it while stopped is taking it


async def _refuses_new_privileged(stack: Stack) -> bool:
    try:
        await stack.create("probe", privileged=True)
    except ApiError as exc:
        return exc.status == 403
    await stack.admin.delete(f"{V1ALPHA1}/probe")
    return False


# -- immutable while running -----------------------------------------------------------------


async def test_spec_is_immutable_while_running_and_editable_once_stopped(stack: Stack) -> None:
    await stack.create("ws", ports=[{"port": 22}])
    error = await refused(
        stack.patch("ws", {"spec": {"image": "ubuntu:25.04", "ports": [{"port": 2222}]}})
    )
    assert error.status == 403
    assert "spec: Forbidden: spec.image, spec.ports may not change while the Instance runs" in (
        error.message
    )
    assert "stop it first" in error.message
    await stack.patch("ws", {"metadata": {"labels": {"team": "x"}}})  # metadata: always
    await stack.patch("ws", {"spec": {"stop": True}})
    await stack.patch("ws", {"spec": {"image": "ubuntu:25.04", "ports": [{"port": 2222}]}})
    await stack.patch("ws", {"spec": {"stop": False}})
    stored = await stack.admin.get(f"{V1ALPHA1}/ws")
    assert stored["spec"]["image"] == "ubuntu:25.04"
    assert stored["metadata"]["labels"] == {"team": "x"}


# -- refused before anything is stored -------------------------------------------------------

BAD: dict[str, tuple[dict[str, Any], int, str]] = {
    "a pin to no node": (
        {"nodeName": "node-gone"}, 422, 'spec.nodeName: Not found: "node-gone"'),
    "a double slash": (
        {"additionalVolumes": [{"mountPath": "/mnt//x", "configMap": {"name": "c"}}]}, 422,
        'spec.additionalVolumes[0].mountPath: Invalid value: "/mnt//x": must be an absolute, '
        "canonical path"),
    "a trailing slash": (
        {"additionalVolumes": [{"mountPath": "/mnt/x/", "configMap": {"name": "c"}}]}, 422,
        'spec.additionalVolumes[0].mountPath: Invalid value: "/mnt/x/"'),
    "a dot segment": (
        {"additionalVolumes": [{"mountPath": "/mnt/./x", "configMap": {"name": "c"}}]}, 422,
        'spec.additionalVolumes[0].mountPath: Invalid value: "/mnt/./x"'),
    "a dot-dot segment": (
        {"additionalVolumes": [{"mountPath": "/mnt/../etc", "configMap": {"name": "c"}}]}, 422,
        'spec.additionalVolumes[0].mountPath: Invalid value: "/mnt/../etc"'),
    "the root": (
        {"additionalVolumes": [{"mountPath": "/", "configMap": {"name": "c"}}]}, 422,
        'spec.additionalVolumes[0].mountPath: Invalid value: "/"'),
    "the workspace's path": (
        {"additionalVolumes": [{"mountPath": "/workspace", "configMap": {"name": "c"}}]}, 422,
        "must be unique: spec.volumeMount mounts there already"),
    "negative CPU": (
        {"resources": {"cpu": "-1"}}, 422,
        'spec.resources.cpu: Invalid value: "-1": must be greater than or equal to 0'),
    "negative RAM": (
        {"resources": {"ram": "-1Gi"}}, 422,
        'spec.resources.ram: Invalid value: "-1Gi": must be greater than or equal to 0'),
    "absurd CPU": (
        {"resources": {"cpu": "1e12"}}, 422,
        'spec.resources.cpu: Invalid value: "1e12": must be no more than 65536 cores'),
    "a million cards": (
        {"type": TYPE, "resources": {"accelerator": 1000000}}, 422,
        "spec.resources.accelerator: Invalid value: 1000000: must be no more than 1024 cards"),
    "more cards than the largest node": (
        {"type": TYPE, "resources": {"accelerator": CARDS + 1}}, 422,
        f"spec.resources.accelerator: Invalid value: {CARDS + 1}: no node can hold it: the "
        f"largest, {NODE}, has {CARDS} nvidia accelerators"),
    "a path as an SSH key": (
        {"sshPublicKey": {"name": "../../etc/shadow"}}, 422,
        'spec.sshPublicKey.name: Invalid value: "../../etc/shadow": a lowercase RFC 1123'),
    "a command as an SSH key": (
        {"sshPublicKey": {"name": "a;rm -rf /"}}, 422,
        'spec.sshPublicKey.name: Invalid value: "a;rm -rf /"'),
}  # fmt: skip


# What the CRD's schema itself refuses: kube-apiserver validates a custom resource against its
# schema (list-map keys, oneOf) before any validating webhook is called, so these never reach
# the worker (tests/contract/golden: "an Instance with one port twice", "… two sources").
BY_SCHEMA: dict[str, tuple[dict[str, Any], str]] = {
    "two entries at one path": (
        {"additionalVolumes": [{"mountPath": "/d", "configMap": {"name": "c"}},
                               {"mountPath": "/d", "secret": {"name": "s"}}]},
        "spec.additionalVolumes[1]: Duplicate value: "),
    "no source": (
        {"additionalVolumes": [{"mountPath": "/d"}]},
        '"spec.additionalVolumes[0]" must validate one and only one schema (oneOf). Found none '
        "valid"),
    "two sources": (
        {"additionalVolumes": [{"mountPath": "/d", "configMap": {"name": "c"},
                                "secret": {"name": "s"}}]},
        '"spec.additionalVolumes[0]" must validate one and only one schema (oneOf). Found 2 '
        "valid alternatives"),
    "a duplicate port": (
        {"ports": [{"port": 22}, {"port": 22, "protocol": "TCP"}]},  # protocol defaults to TCP
        "spec.ports[1]: Duplicate value: "),
    "a duplicate variable": (
        {"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]},
        "spec.env[1]: Duplicate value: "),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BY_SCHEMA))
async def test_what_the_crd_schema_refuses_never_reaches_the_webhook(
    stack: Stack, case: str
) -> None:
    spec, expected = BY_SCHEMA[case]
    error = await refused(stack.create("bad", **spec))
    assert error.status == 422, error.message
    assert expected in error.message
    assert "admission webhook" not in error.message
    with pytest.raises(NotFound):
        await stack.admin.get(f"{V1ALPHA1}/bad")


@pytest.mark.parametrize("case", list(BAD))
async def test_a_bad_instance_is_refused_with_the_field_and_not_stored(
    stack: Stack, case: str
) -> None:
    spec, code, expected = BAD[case]
    error = await refused(stack.create("bad", **spec))
    assert error.status == code, error.message
    assert expected in error.message
    assert 'admission webhook "instances.validate.worker.gpustack.ai" denied' in error.message
    with pytest.raises(NotFound):
        await stack.admin.get(f"{V1ALPHA1}/bad")


@pytest.mark.parametrize(("name", "why"), [("1abc", "DNS-1035"), ("a" * 64, "63 characters")])
async def test_a_name_that_cannot_name_the_service_is_refused(
    stack: Stack, name: str, why: str
) -> None:
    error = await refused(stack.admin.create(V1ALPHA1, instance(name)))
    assert error.status == 422
    assert f'metadata.name: Invalid value: "{name}"' in error.message
    assert why in error.message


async def test_the_pin_is_checked_at_creation_only(stack: Stack) -> None:
    await stack.create("pinned", nodeName=NODE)
    stack.cluster.state.store.delete("Node", "", NODE)  # the node leaves the cluster
    await stack.patch("pinned", {"spec": {"stop": True}})
    await stack.patch("pinned", {"spec": {"image": "ubuntu:25.04"}})  # pin unchanged: no check


async def test_the_preset_fills_what_the_instance_leaves_out(stack: Stack) -> None:
    body = instance("typed", type=TYPE, resources={"accelerator": 2})
    made = await stack.admin.create(V1ALPHA1, body)
    assert made["spec"]["resources"] == {
        "accelerator": 2, "cpu": "8", "ram": "32Gi", "localStorage": "100Gi"}  # fmt: skip


# -- what only the Pod's creation can tell ---------------------------------------------------


async def test_a_refused_pod_reaches_the_instance_not_only_the_log(stack: Stack) -> None:
    """The Pod webhook refuses a partition no card offers: status, condition and one Event."""
    await stack.create(
        "unfit", type=TYPE,
        resources={"accelerator": 1, "acceleratorPartitionedProfile": "9g.99gb"},
    )  # fmt: skip

    async def reported() -> dict[str, Any] | None:
        found = await stack.admin.get(f"{V1ALPHA1}/unfit")
        conditions = {c["type"]: c for c in found.get("status", {}).get("conditions") or []}
        return found if conditions.get("PodCreated", {}).get("status") == "False" else None

    found = await eventually(reported, "PodCreated False on the Instance")
    status = found["status"]
    (condition,) = [c for c in status["conditions"] if c["type"] == "PodCreated"]
    assert condition["reason"] == "Forbidden"
    assert 'admission webhook "pods.mutate.worker.gpustack.ai" denied' in condition["message"]
    assert "nvidia.com/gpu.partitioned.mig-9g.99gb" in condition["message"]
    assert status["phaseMessage"] == condition["message"]
    assert status["phase"] == "Starting"

    async def counted() -> dict[str, Any] | None:
        listed = await stack.admin.get(f"/api/v1/namespaces/{NS}/events")
        refusals = [e for e in listed["items"] if e["reason"] == "FailedCreate"
                    and e["involvedObject"]["name"] == "unfit"]  # fmt: skip
        return refusals[0] if len(refusals) == 1 and refusals[0]["count"] >= 2 else None

    event = await eventually(counted, "one FailedCreate Event, counted again on retry")
    assert event["type"] == "Warning"
    assert event["message"] == condition["message"]
    assert event["involvedObject"]["kind"] == "Instance"


# -- the worker's own API: every bad input a 4xx Status --------------------------------------


MERGE = ("Content-Type", "application/merge-patch+json")
JSON_PATCH = ("Content-Type", "application/json-patch+json")
PLAIN = ("Content-Type", "application/json")
BAD_REQUESTS: dict[str, tuple[str, str, bytes, tuple[str, str], int, str]] = {
    "a grace period that is no number": (
        "DELETE", f"{V1}/target?gracePeriodSeconds=abc", b"", PLAIN, 400,
        "gracePeriodSeconds must be a whole number"),
    "a JSON patch that is an object": (
        "PATCH", f"{V1}/target", b'{"spec": {"stop": true}}', JSON_PATCH, 400,
        "a JSON patch (application/json-patch+json) is a list"),
    "a merge patch that is a list": (
        "PATCH", f"{V1}/target", b'[{"op": "add"}]', MERGE, 400,
        "a merge patch (application/merge-patch+json) is a JSON object"),
    "a number past a double": (
        "PATCH", f"{V1}/target", b'{"spec": {"resources": {"cpu": 1e400}}}', MERGE, 400,
        "out of range"),
    "NaN": (
        "PATCH", f"{V1}/target", b'{"spec": {"resources": {"cpu": NaN}}}', MERGE, 400,
        "NaN is not JSON"),
    "a body that is not JSON": (
        "POST", V1, b"image: ubuntu", ("Content-Type", "text/plain"), 415,
        "content type text/plain is not supported"),
    "DeleteOptions that are a list": (
        "DELETE", f"{V1}/target", b"[1]", PLAIN, 400, "DeleteOptions body is not a JSON object"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
async def test_a_bad_request_to_the_worker_is_a_4xx_status_not_a_500(
    stack: Stack, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    await stack.create("target")
    method, path, body, content_type, code, says = BAD_REQUESTS[case]
    caplog.set_level(logging.INFO)
    async with stack.client() as client:
        answer = await client.request(
            method, stack.url + path, content=body, headers=[*ADMIN, content_type]
        )
        assert answer.status_code == code, answer.text
        status = answer.json()
        assert (status["kind"], status["code"]) == ("Status", code)
        assert says in status["message"], status["message"]
        assert (await client.get(stack.url + "/readyz")).status_code == 200  # still serving
    assert not [r for r in caplog.records if r.exc_info], "a user's mistake logged a traceback"
    stored = await stack.admin.get(f"{V1ALPHA1}/target")
    assert (stored["spec"]["image"], stored["spec"].get("stop")) == ("ubuntu:24.04", None)


async def test_an_over_size_body_is_a_413_status(stack: Stack) -> None:
    """Answered as soon as the length is known, as a ``Status``; the worker serves on."""
    probe = await H2Probe.open(stack.url, stack.tls())
    try:
        with trio.fail_after(HANG):
            answer = await probe.upload(
                "POST", V1, 4 << 20, [*ADMIN, ("content-type", "application/json")]
            )
            assert answer.status == 413, bytes(answer.body[:300])
            status = json.loads(bytes(answer.body))
            assert (status["kind"], status["reason"]) == ("Status", "RequestEntityTooLarge")
    finally:
        await probe.aclose()
    async with stack.client() as client:
        assert (await client.get(stack.url + "/readyz")).status_code == 200


async def test_a_body_trickled_past_its_deadline_is_408(stack: Stack) -> None:
    """Half a body, then silence: 408 once the worker's 10 s body deadline passes."""
    probe = await H2Probe.open(stack.url, stack.tls())
    try:
        sid = probe.conn.get_next_available_stream_id()
        head = [*ADMIN, ("content-type", "application/json"), ("content-length", "100")]
        probe.conn.send_headers(sid, probe._headers("POST", V1, head))
        probe.conn.send_data(sid, b'{"apiVersion": "worker.gpustack.ai/v1", ')
        await probe._flush()
        answer = probe.answers.setdefault(sid, Answer())
        with trio.fail_after(HANG):
            while not (answer.ended or answer.reset is not None or probe.closed):
                await probe._pump()
        assert answer.status == 408, bytes(answer.body[:300])
        status = json.loads(bytes(answer.body))
        assert (status["kind"], status["reason"]) == ("Status", "Timeout")
        assert (await probe.get("/readyz")).status == 200
    finally:
        await probe.aclose()


@pytest.mark.parametrize("path", [contract.INSTANCE_VALIDATE_PATH, contract.INSTANCE_MUTATE_PATH,
                                  contract.POD_VALIDATE_PATH])  # fmt: skip
async def test_webhook_paths_refuse_what_is_not_a_review(stack: Stack, path: str) -> None:
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "u", "kind": {"group": "worker.gpustack.ai", "version":
                          "v1alpha1", "kind": "Instance"}, "operation": "CREATE"}}  # fmt: skip
    async with stack.client(cert=False) as client:
        wrong_type = await client.post(
            stack.url + path, json=review, headers={"Content-Type": "text/plain"}
        )
        assert wrong_type.status_code == 400
        assert "content type must be application/json" in wrong_type.text
        for body in (b"[]", b'{"kind": "Pod"}', b"not json"):
            answer = await client.post(
                stack.url + path, content=body, headers={"Content-Type": "application/json"}
            )
            assert answer.status_code == 400, (body, answer.text)
            assert answer.text.startswith("AdmissionReview")
        if path != contract.POD_VALIDATE_PATH:  # an Instance CREATE without the Instance
            empty = await client.post(stack.url + path, json=review)
            assert empty.status_code == 400
            assert "carries no object" in empty.text
