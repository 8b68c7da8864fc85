"""The chart's RBAC grants exactly what the daemons call: derived from a recorded run.

The cluster stand-in authorizes every request it serves with the API server's attributes
(verb, group, resource, subresource, namespace, name). This test wraps that one decision point,
runs the worker's and a Device Manager's code paths against the stand-in — every Instance's
metrics, the kubelet down (the metrics.k8s.io fallback), Instances listed and read, a bearer
token (TokenReview), the settings ConfigMap, the Device Manager's informer and exporter — and
then holds the recording against the RBAC the chart renders for each ServiceAccount:

- every recorded request is allowed by the rendered roles and bindings (so a new call site
  that the chart does not grant fails here, not on a cluster), and
- every grant of the chart's own roles was used by some request (so a grant no code needs
  fails here: least privilege is checked, not promised).

The built-in roles the chart binds (``system:auth-delegator``,
``extension-apiserver-authentication-reader``) cannot be narrowed; their rules are Kubernetes'
bootstrap policy, written out below, and each binding must be used at least once.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from worker_stack import WorkerStack, open_worker_stack

from gpustack_core import contract
from gpustack_kube.client import KubeClient, PatchType
from gpustack_kube.config import load_config
from gpustack_serving.access import AccessReviewer, AccessSettings, Refusal, check
from gpustack_simulator.cluster.app import Caller, Routes
from gpustack_simulator.scenario import Fault
from gpustack_simulator.up import webhook_configurations
from gpustack_worker.settings import OperatorSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "deploy"))
from chart_helm import KIND_VALUES, NAMESPACE, needs_helm, render

from patience import HANG

pytestmark = needs_helm

WORKER_SA = "gpustack-operator-worker"
DM_SA = "gpustack-operator-device-manager"
# The stand-in's users that the daemons' kubeconfig contexts name, and the chart's accounts.
ACCOUNTS = {"worker": WORKER_SA, "device-manager": DM_SA}
V1 = "/apis/worker.gpustack.ai/v1"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# Kubernetes' bootstrap policy (plugin/pkg/auth/authorizer/rbac/bootstrappolicy): the rules of
# the two built-in roles the chart binds the worker to.
BUILTIN: Mapping[tuple[str, str], list[dict[str, Any]]] = {
    ("ClusterRole", "system:auth-delegator"): [
        {
            "apiGroups": ["authentication.k8s.io"],
            "resources": ["tokenreviews"],
            "verbs": ["create"],
        },
        {
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["subjectaccessreviews"],
            "verbs": ["create"],
        },
    ],
    ("Role", "extension-apiserver-authentication-reader"): [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["extension-apiserver-authentication"],
            "verbs": ["get", "list", "watch"],
        }
    ],
}


@dataclass(frozen=True)
class Request:
    """One authorization decision the stand-in made, as the API server would ask it."""

    user: str
    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str

    def __str__(self) -> str:
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        where = f" in {self.namespace}" if self.namespace else " (cluster)"
        return f"{self.user}: {self.verb} {self.group or 'core'}/{what} {self.name!r}{where}"


@dataclass(frozen=True)
class Grant:
    """A rule bound to an account: cluster-wide (``namespace=None``) or in one namespace."""

    binding: str
    role: tuple[str, str]
    rule: Mapping[str, Any]
    namespace: str | None

    def allows(self, request: Request) -> bool:
        """Kubernetes' ``RuleAllows`` plus the binding's scope."""
        if self.namespace is not None and request.namespace != self.namespace:
            return False
        rule = self.rule
        if request.verb not in rule["verbs"] and "*" not in rule["verbs"]:
            return False
        if request.group not in rule["apiGroups"] and "*" not in rule["apiGroups"]:
            return False
        combined = (
            f"{request.resource}/{request.subresource}" if request.subresource else request.resource
        )
        if combined not in rule["resources"] and "*" not in rule["resources"]:
            return False
        names = rule.get("resourceNames") or []
        return not names or request.name in names

    def atoms(self) -> Iterator[tuple[str, str, str]]:
        """Each (group, resource, verb) this rule grants: each must be used."""
        for group in self.rule["apiGroups"]:
            for resource in self.rule["resources"]:
                for verb in self.rule["verbs"]:
                    yield group, resource, verb


def grants_of(objects: list[dict[str, Any]], account: str) -> list[Grant]:
    """The rules bound to ``account`` in the rendered chart, built-in roles included."""
    roles: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for obj in objects:
        if obj["kind"] in {"ClusterRole", "Role"}:
            key = (obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace", ""))
            roles[key] = obj.get("rules") or []
    found: list[Grant] = []
    for obj in objects:
        if obj["kind"] not in {"ClusterRoleBinding", "RoleBinding"}:
            continue
        subjects = obj.get("subjects") or []
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == account and s["namespace"] == NAMESPACE
            for s in subjects
        ):
            continue
        ref = obj["roleRef"]
        scope = obj["metadata"].get("namespace") if obj["kind"] == "RoleBinding" else None
        role_ns = scope if ref["kind"] == "Role" else ""
        rules = roles.get((ref["kind"], ref["name"], role_ns or ""))
        if rules is None:
            rules = BUILTIN.get((ref["kind"], ref["name"]))
        assert rules is not None, f"{obj['metadata']['name']} binds an unknown {ref}"
        found += [
            Grant(obj["metadata"]["name"], (ref["kind"], ref["name"]), rule, scope)
            for rule in rules
        ]
    return found


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[Request]:
    """Every authorization decision the stand-in makes while the test runs."""
    seen: list[Request] = []
    original = Routes.authorize

    def recording(
        self: Routes,
        caller: Caller,
        verb: str,
        resource: str,
        *,
        group: str = "",
        subresource: str = "",
        namespace: str = "",
        name: str = "",
    ) -> None:
        seen.append(Request(caller.name, verb, group, resource, subresource, namespace, name))
        original(
            self,
            caller,
            verb,
            resource,
            group=group,
            subresource=subresource,
            namespace=namespace,
            name=name,
        )

    monkeypatch.setattr(Routes, "authorize", recording)
    return seen


async def _exercise_settings(stack: WorkerStack) -> None:
    """The Setting resource (gpustack.ai/v1): the Secret listed by name, watched, patched.

    All with the worker's account, once the caller is authorized: no grant beyond the
    Settings' own Role (list, watch, patch of gpustack-settings by name).
    """
    merge = [("Content-Type", "application/merge-patch+json")]
    settings = "/apis/gpustack.ai/v1/namespaces/gpustack-system/settings"
    with trio.fail_after(HANG):
        while (
            "resourceVersion"
            not in (await stack.as_aggregator(settings)).json()["items"][0]["metadata"]
        ):
            await trio.sleep(0.1)  # until the worker has seeded the Secret
    one = await stack.as_aggregator(f"{settings}/workload-fit-affinity")
    assert one.status_code == 200, one.text
    watched = await stack.as_aggregator(f"{settings}?watch=1&timeoutSeconds=1")
    assert watched.status_code == 200, watched.text
    flipped = await stack.as_aggregator(
        f"{settings}/workload-fit-affinity", method="PATCH",
        json={"spec": {"value": one.json()["spec"]["value"]}}, headers=merge,
    )  # fmt: skip
    assert flipped.status_code == 200, flipped.text


async def _exercise_metrics_guard(stack: WorkerStack, token: str) -> None:
    """The Device Manager's /metrics guard (metricsAccess, on by default) with its own account.

    The stack's Device Managers serve without it, so a scrape is decided here by the guard's
    own code with the Device Manager's credentials: a TokenReview, then a SubjectAccessReview.
    Whatever the verdict, both requests must be granted (system:auth-delegator).
    """
    kube = load_config(stack.cluster.kubeconfig, context="device-manager")
    assert kube is not None
    async with KubeClient(kube) as client:
        reviewer = AccessReviewer(
            client.post, AccessSettings(frozenset({"/metrics"})), trio.current_time
        )
        scope = {
            "type": "http",
            "method": "GET",
            "path": "/metrics",
            "headers": [(b"authorization", f"Bearer {token}".encode())],
        }
        verdict = await check(reviewer, scope)
    assert not (isinstance(verdict, Refusal) and verdict.status == 503), verdict
    assert (reviewer.statistics.token_reviews, reviewer.statistics.access_reviews) == (1, 1)


async def _exercise(stack: WorkerStack, seen: list[Request]) -> None:
    """Every code path of the worker that reaches the API server, and the Device Manager's."""
    state = stack.cluster.state
    # The kubelet down (before any summary is cached): the metrics.k8s.io fallback.
    state.add_fault(Fault("kubelet-unreachable", "gpu-node-1", 0.0, None))
    assert (await stack.metrics("team-a", "llama-70b")).status_code == 200
    state.clear_faults()
    for instance in state.expanded.instances:
        meta = instance["metadata"]
        response = await stack.metrics(meta["namespace"], meta["name"])
        assert response.status_code == 200, (meta["name"], response.text)
    for path in (f"{V1}/instances", f"{V1}/namespaces/team-a/instances"):
        assert (await stack.as_aggregator(path)).status_code == 200
    assert (await stack.as_aggregator(f"{V1}/namespaces/team-a/instances/qwen-a")).status_code == (
        200
    )
    # A watch through v1 relays the CRD's (a bounded one: it ends by itself).
    watch = await stack.as_aggregator(f"{V1}/namespaces/team-a/instances?watch=1&timeoutSeconds=1")
    assert watch.status_code == 200, watch.text
    # Writes through v1: the caller authorized, the CRD written with the worker's account.
    base = f"{V1}/namespaces/team-a/instances"
    body = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance",
            "metadata": {"name": "rbac-probe"},
            "spec": {"image": "ubuntu:24.04", "stop": True}}  # fmt: skip
    made = await stack.as_aggregator(base, method="POST", json=body)
    assert made.status_code == 201, made.text
    for _ in range(5):  # the controller writes its status meanwhile: update the latest read
        latest = (await stack.as_aggregator(f"{base}/rbac-probe")).json()
        put = await stack.as_aggregator(f"{base}/rbac-probe", method="PUT", json=latest)
        if put.status_code != 409:
            break
    assert put.status_code == 200, put.text
    merge = [("Content-Type", "application/merge-patch+json")]
    patched = await stack.as_aggregator(
        f"{base}/rbac-probe", method="PATCH", json={"spec": {"image": "x"}}, headers=merge
    )
    assert patched.status_code == 200, patched.text
    gone = await stack.as_aggregator(f"{base}/rbac-probe", method="DELETE")
    assert gone.status_code == 200, gone.text
    await _exercise_settings(stack)
    # A bearer token sent to the worker directly: TokenReview, then SubjectAccessReview.
    token = next(u.token for u in state.expanded.users if u.name == "no-metrics")
    direct = await stack.request(
        f"{V1}/namespaces/team-a/instances", headers=[("Authorization", f"Bearer {token}")]
    )
    assert direct.status_code == 200, direct.text
    await _exercise_metrics_guard(stack, token)
    # The Pod admission webhook, called as kube-apiserver calls it (no credential): a MiB slice
    # folds against the cards' memory, so the worker lists the Devices objects.
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "least-privilege",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": "team-a",
            "object": {
                "metadata": {"name": "slice"},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "resources": {
                                "limits": {
                                    "nvidia.com/gpu.sliced": "1",
                                    "nvidia.com/gpu.sliced.memory-mib": "1024",
                                }
                            },
                        }
                    ]
                },
            },
        },
    }
    async with httpx.AsyncClient(verify=stack.tls(), trust_env=False) as client:
        answered = await client.post(stack.url + "/mutate-v1-pod", json=review)
        assert answered.status_code == 200, answered.text
        # The Instance webhook: a pinned node looked up, a typed request's type read (its
        # manufacturer bounds the cards; its preset fills what the Instance leaves out).
        for path in (contract.INSTANCE_VALIDATE_PATH, contract.INSTANCE_MUTATE_PATH):
            answered = await client.post(stack.url + path, json=_instance_review(_a_type(stack)))
            assert answered.status_code == 200, answered.text
    # The Device Manager's informer watches and its exporter reads the kubelet on its own
    # schedule; wait for both rather than assume a round has run.
    with trio.fail_after(HANG):
        while not {("watch", ""), ("get", "proxy")} <= {
            (r.verb, r.subresource) for r in seen if r.user == "device-manager"
        }:
            await trio.sleep(0.2)

    # Publishing: the Device Manager creates its NodeFeature and Devices and writes the
    # ledger; someone editing either makes it write them back (update), once a period.
    def asked(user: str) -> set[tuple[str, str, str]]:
        return {(r.verb, r.resource, r.subresource) for r in seen if r.user == user}

    with trio.fail_after(HANG):
        while not {
            ("create", "nodefeatures", ""),
            ("create", "devices", ""),
            ("update", "devices", "status"),
        } <= asked("device-manager"):
            await trio.sleep(0.2)
    store = state.store
    for kind in ("NodeFeature", "Devices"):
        for obj in store.list(kind):
            edited = dict(obj)
            edited["spec"] = {"labels": {}} if kind == "NodeFeature" else {"groups": []}
            store.put(kind, edited)
    with trio.fail_after(HANG):
        while not {("update", "nodefeatures", ""), ("update", "devices", "")} <= asked(
            "device-manager"
        ):
            await trio.sleep(0.2)
    # The worker's NodeFeature per Node: created, then updated when a Node's CPU model changes.
    with trio.fail_after(HANG):
        while ("create", "nodefeatures", "") not in asked("worker"):
            await trio.sleep(0.2)
    node = store.list("Node")[0]
    meta = node["metadata"]
    cpu = {"feature.gpustack.ai/cpu-name": "AMD EPYC 7R32"}
    store.put(
        "Node",
        {**node, "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}), **cpu}}},
    )
    with trio.fail_after(HANG):
        while ("update", "nodefeatures", "") not in asked("worker"):
            await trio.sleep(0.2)
    await _exercise_instance_controller(stack, asked)
    await _exercise_instance_types(stack, asked)
    await _exercise_node_devices_check(stack, asked)
    await _exercise_device_plugin(stack, asked)
    await _exercise_refused_pod(stack, asked)


def _a_type(stack: WorkerStack) -> str:
    """An InstanceType the stack created (one the scenario's Instances name; nvidia)."""
    return sorted({i["spec"]["type"] for i in stack.cluster.state.expanded.instances
                   if i["spec"].get("type")})[0]  # fmt: skip


def _instance_review(type_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "least-privilege-instance",
            "kind": {"group": "worker.gpustack.ai", "version": "v1alpha1", "kind": "Instance"},
            "operation": "CREATE",
            "namespace": "team-a",
            "object": {
                "metadata": {"name": "probe", "namespace": "team-a"},
                "spec": {"image": "busybox", "nodeName": "gpu-node-1", "type": type_name,
                         "resources": {"accelerator": 1}},
            },
        },
    }  # fmt: skip


async def _exercise_refused_pod(
    stack: WorkerStack, asked: Callable[[str], set[tuple[str, str, str]]]
) -> None:
    """A Pod the API server refuses again and again (the Pod webhook, registered last so the
    other exercises' Pods are not judged): its Event is counted again (patch events)."""
    config = load_config(stack.cluster.kubeconfig, context="admin")
    assert config is not None
    instances = "/apis/worker.gpustack.ai/v1alpha1/namespaces/team-a/instances"
    async with KubeClient(config) as admin:
        for body in webhook_configurations(stack.url, stack.worker.certificate.read_bytes()):
            body["webhooks"] = [h for h in body["webhooks"] if h["name"].startswith("pods.")]
            await admin.create(
                f"/apis/admissionregistration.k8s.io/v1/{body['kind'].lower()}s", body
            )
        no_such_partition = {"accelerator": 1, "acceleratorPartitionedProfile": "9g.99gb"}
        spec = {"image": "busybox", "type": _a_type(stack), "resources": no_such_partition}
        unfit = {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "Instance",
                 "metadata": {"name": "unfit", "namespace": "team-a"}, "spec": spec}  # fmt: skip
        await admin.create(instances, unfit)
        with trio.fail_after(HANG):
            while ("patch", "events", "") not in asked("worker"):
                await trio.sleep(0.1)


async def _exercise_device_plugin(
    stack: WorkerStack, asked: Callable[[str], set[tuple[str, str, str]]]
) -> None:
    """A Pod asking for an SSH sidecar's Visibility: the node's kubelet (the fake one) asks the
    Device Manager's plugin to allocate, and the plugin writes the annotation (patch pods)."""
    config = load_config(stack.cluster.kubeconfig, context="admin")
    assert config is not None
    node = stack.device_managers[0].node
    manufacturer = stack.device_managers[0].manufacturer
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "least-privilege-plugin", "namespace": "team-a"},
        "spec": {
            "nodeName": node,
            "containers": [{
                "name": "main", "image": "busybox",
                "resources": {"limits": {f"device.gpustack.ai/{manufacturer}.visibility": "1"}},
            }],
        },
    }  # fmt: skip
    async with KubeClient(config) as admin:
        await admin.create("/api/v1/namespaces/team-a/pods", pod)
        with trio.fail_after(HANG):
            while ("patch", "pods", "") not in asked("device-manager"):
                await trio.sleep(0.1)


async def _exercise_instance_controller(
    stack: WorkerStack, asked: Callable[[str], set[tuple[str, str, str]]]
) -> None:
    """Every write the Instance controller makes, driven as a user would (as admin)."""
    config = load_config(stack.cluster.kubeconfig, context="admin")
    assert config is not None
    instances = "/apis/worker.gpustack.ai/v1alpha1/namespaces/team-a/instances"
    policies = "/apis/networking.k8s.io/v1/namespaces/team-a/networkpolicies"
    settings = "/api/v1/namespaces/gpustack-system/secrets/gpustack-settings"

    async def until(*needed: tuple[str, str, str]) -> None:
        with trio.fail_after(HANG):
            while not set(needed) <= asked("worker"):
                await trio.sleep(0.1)

    async with KubeClient(config) as admin:
        body = {
            "apiVersion": "worker.gpustack.ai/v1alpha1",
            "kind": "Instance",
            "metadata": {"name": "least-privilege", "namespace": "team-a"},
            "spec": {"image": "busybox", "ports": [{"port": 22}]},
        }
        await admin.create(instances, body)
        await until(("create", "pods", ""), ("create", "services", ""),
                    ("patch", "instances", "status"), ("create", "events", ""))  # fmt: skip
        await admin.patch(f"{instances}/least-privilege", {"spec": {"ports": [{"port": 2222}]}})
        await until(("patch", "services", ""))
        await admin.patch(f"{instances}/least-privilege", {"spec": {"ports": None}})
        await until(("delete", "services", ""))  # running: at once (stopped: on start)
        await admin.patch(f"{instances}/least-privilege", {"spec": {"stop": True}})
        await until(("delete", "pods", ""))
        untyped = {**body, "metadata": {"name": "untyped", "namespace": "team-a"},
                   "spec": {"image": "busybox", "type": "no-such-type"}}  # fmt: skip
        await admin.create(instances, untyped)
        await until(("patch", "instances", ""))
        # The Settings: the worker created the Secret at start; an administrator sets one.
        await until(("create", "secrets", ""), ("watch", "secrets", ""),
                    ("watch", "configmaps", ""))  # fmt: skip
        await admin.patch(
            settings, {"data": {"instance-isolation-pod-cidrs": b64("10.244.0.0/16")}}
        )
        await until(("create", "networkpolicies", ""))
        await admin.patch(f"{policies}/gpustack-instance-isolation", {"spec": {"ingress": [{}]}})
        await until(("update", "networkpolicies", ""))
        await admin.patch(settings, {"data": {"instance-isolation-pod-cidrs": b64("")}})
        await until(("delete", "networkpolicies", ""))
        await until(("update", "leases", ""))  # the leader renews its Lease
        # A later start back-fills a key the Secret lost (patch), with the worker's account.
        await admin.patch(settings, [{"op": "remove", "path": "/data/instance-cpu-overcommit"}],
                          PatchType.JSON)  # fmt: skip
        worker_config = load_config(stack.cluster.kubeconfig, context="worker")
        assert worker_config is not None
        async with KubeClient(worker_config) as worker, trio.open_nursery() as nursery:
            nursery.start_soon(OperatorSettings(worker, "gpustack-system", environ={}).run)
            await until(("patch", "secrets", ""))
            nursery.cancel_scope.cancel()


async def _exercise_instance_types(
    stack: WorkerStack, asked: Callable[[str], set[tuple[str, str, str]]]
) -> None:
    """Every write the InstanceType controller makes: what it derives from the scenario's
    nodes, and what it puts back after an administrator's hand edits (as admin)."""
    config = load_config(stack.cluster.kubeconfig, context="admin")
    assert config is not None
    kueue = "/apis/kueue.x-k8s.io/v1beta2"
    ours = "/apis/worker.gpustack.ai/v1alpha1"
    store = stack.cluster.state.store

    async def until(*needed: tuple[str, str, str]) -> None:
        with trio.fail_after(HANG):
            while not set(needed) <= asked("worker"):
                await trio.sleep(0.1)

    async with KubeClient(config) as admin:
        # Derived from the scenario's nodes: flavors, types and their status, queues, catalog.
        await until(("create", "resourceflavors", ""), ("create", "instancetypes", ""),
                    ("patch", "instancetypes", "status"), ("create", "clusterqueues", ""),
                    ("create", "instancetypeflavors", ""), ("get", "admissionchecks", ""),
                    ("watch", "namespaces", ""))  # fmt: skip
        # A namespace that appears gets the entrances.
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-lp"}}
        await admin.create("/api/v1/namespaces", namespace)
        await until(("create", "localqueues", ""))
        # Hand edits put back: a flavor's label, a queue's stop, a catalog entry's product.
        flavor = store.list("ResourceFlavor")[0]["metadata"]
        key = next(k for k in flavor["labels"] if k.endswith(".count"))
        await admin.patch(f"{kueue}/resourceflavors/{flavor['name']}",
                          {"metadata": {"labels": {key: "99"}}})  # fmt: skip
        queue = store.list("ClusterQueue")[0]["metadata"]["name"]
        await admin.patch(f"{kueue}/clusterqueues/{queue}", {"spec": {"stopPolicy": "Hold"}})
        entry = store.list("InstanceTypeFlavor")[0]["metadata"]["name"]
        await admin.patch(f"{ours}/instancetypeflavors/{entry}", {"spec": {"product": "edited"}})
        await until(("patch", "resourceflavors", ""), ("patch", "clusterqueues", ""),
                    ("patch", "instancetypeflavors", ""))  # fmt: skip
        # What no node forms goes: a stray flavor, a stray catalog entry; a custom type deleted
        # takes its queue and its entrances with it.
        stray = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                 "metadata": {"name": "gpustack--stray-linux-amd64-1c",
                              "labels": {"resource.gpustack.ai/type": "nodes"}}}  # fmt: skip
        await admin.create(f"{kueue}/resourceflavors", stray)
        listed = {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "InstanceTypeFlavor",
                  "metadata": {"name": "gpustack--stray"},
                  "spec": {"acceleratable": False}}  # fmt: skip
        await admin.create(f"{ours}/instancetypeflavors", listed)
        custom = {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "InstanceType",
                  "metadata": {"name": "lp-custom"},
                  "spec": {"os": "linux", "arch": "amd64"}}  # fmt: skip
        await admin.create(f"{ours}/instancetypes", custom)
        with trio.fail_after(HANG):
            while store.get("LocalQueue", "team-lp", "gpustack-fnv64-" + _fnv("lp-custom")) is None:
                await trio.sleep(0.1)
        await admin.delete(f"{ours}/instancetypes/lp-custom")
        await until(("delete", "resourceflavors", ""), ("delete", "instancetypeflavors", ""),
                    ("delete", "clusterqueues", ""), ("delete", "localqueues", ""))  # fmt: skip


async def _exercise_node_devices_check(
    stack: WorkerStack, asked: Callable[[str], set[tuple[str, str, str]]]
) -> None:
    """The node-devices check: its AdmissionCheck and Active condition, the fit labels on the
    Nodes, and a Workload's entry answered (Kueue's part played by admin: the Workload written
    with its quota reserved and the check Pending; nothing fits, so Retry and its Event)."""
    config = load_config(stack.cluster.kubeconfig, context="admin")
    assert config is not None

    async def until(*needed: tuple[str, str, str]) -> None:
        with trio.fail_after(HANG):
            while not set(needed) <= asked("worker"):
                await trio.sleep(0.1)

    await until(("create", "admissionchecks", ""), ("patch", "admissionchecks", "status"),
                ("watch", "workloads", ""), ("watch", "resourceflavors", ""),
                ("patch", "nodes", ""))  # fmt: skip
    limits = {"nvidia.com/gpu": "64"}  # more whole cards than any node has
    workload = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {"name": "lp-workload", "namespace": "team-a"},
                "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1, "template": {
                    "spec": {"containers": [{"name": "main", "image": "busybox",
                                             "resources": {"limits": limits}}]}}}]}}  # fmt: skip
    status = {"conditions": [{"type": "QuotaReserved", "status": "True", "reason": "x",
                              "message": "", "lastTransitionTime": "2026-12-03T17:00:00Z"}],
              "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main"}]},
              "admissionChecks": [{"name": "gpustack-node-devices", "state": "Pending",
                                   "message": "",
                                   "lastTransitionTime": "2026-12-03T17:00:00Z"}]}  # fmt: skip
    path = "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads"
    async with KubeClient(config) as admin:
        made = await admin.create(path, workload)
        await admin.update(f"{path}/lp-workload/status", {**made, "status": status})
    await until(("patch", "workloads", "status"))


def as_rendered(request: Request, objects: list[dict[str, Any]]) -> Request:
    """``request`` as the rendered chart's daemon makes it.

    The stack's daemons read each kubelet summary through the stand-in's node proxy
    (``get nodes/proxy``). Where the chart runs a daemon with ``--kubelet-access=direct`` (the
    Device Manager by default, issue #31 item 5), that same read goes to the kubelet itself,
    which authorizes it as ``get nodes/stats`` (the kubelet's authorizer maps ``/stats/*``
    there): the request its ServiceAccount must be granted.
    """
    if (request.verb, request.resource, request.subresource) != ("get", "nodes", "proxy"):
        return request
    workloads = [
        o
        for o in objects
        if o["kind"] in {"DaemonSet", "Deployment"}
        and o["spec"]["template"]["spec"].get("serviceAccountName") == ACCOUNTS[request.user]
    ]
    args = {a for w in workloads for c in w["spec"]["template"]["spec"]["containers"]
            for a in c.get("args", [])}  # fmt: skip
    if "--kubelet-access=direct" in args:
        return Request(request.user, "get", "", "nodes", "stats", "", request.name)
    return request


def _fnv(text: str) -> str:
    """64-bit FNV-1a in hex (the entrance LocalQueue's name), written out here."""
    value = 0xCBF29CE484222325
    for byte in text.encode():
        value = ((value ^ byte) * 0x100000001B3) % 2**64
    return f"{value:016x}"


async def test_the_charts_rbac_grants_exactly_what_the_daemons_call(
    tmp_path: Path, recorded: list[Request]
) -> None:
    async with open_worker_stack(
        "nvidia-mixed",
        tmp_path,
        instance_controller=True,
        device_plugins=True,
        instance_types=True,
        node_devices_check=True,
    ) as stack:
        await _exercise(stack, recorded)
    daemons = [r for r in recorded if r.user in ACCOUNTS]
    assert {r.user for r in daemons} == set(ACCOUNTS)
    for values in (None, KIND_VALUES):
        objects = render(files=(values,) if values else ())
        for user, account in ACCOUNTS.items():
            grants = grants_of(objects, account)
            asked = {as_rendered(r, objects) for r in daemons if r.user == user}
            refused = sorted(str(r) for r in asked if not any(g.allows(r) for g in grants))
            assert not refused, f"{account} is not granted what its daemon calls: {refused}"
            for grant in grants:
                used = [r for r in asked if grant.allows(r)]
                if grant.role in BUILTIN:
                    continue  # Kubernetes' own role: checked as a binding below
                for group, resource, verb in grant.atoms():
                    needed = [
                        r
                        for r in used
                        if r.verb == verb
                        and r.group == group
                        and (f"{r.resource}/{r.subresource}" if r.subresource else r.resource)
                        == resource
                    ]
                    assert needed, (
                        f"{grant.binding} grants {verb} {group or 'core'}/{resource}"
                        f"{' in ' + grant.namespace if grant.namespace else ''}, "
                        "which no code path of its daemon called"
                    )
            for role in {g.role for g in grants if g.role in BUILTIN}:
                assert any(g.allows(r) for g in grants if g.role == role for r in asked), (
                    f"{account}'s binding to {role} is used by no request"
                )


def test_a_cluster_wide_grant_is_not_used_for_a_namespaced_need() -> None:
    """The evaluator itself: a RoleBinding's rule allows only in its own namespace."""
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}
    scoped = Grant("b", ("Role", "r"), rule, NAMESPACE)
    here = Request("worker", "list", "", "pods", "", NAMESPACE, "")
    elsewhere = Request("worker", "list", "", "pods", "", "team-a", "")
    cluster = Request("worker", "list", "", "pods", "", "", "")
    assert scoped.allows(here)
    assert not scoped.allows(elsewhere)
    assert not scoped.allows(cluster)
    sub = Grant("b", ("ClusterRole", "c"), {**rule, "resources": ["nodes"], "verbs": ["get"]}, None)
    assert not sub.allows(Request("worker", "get", "", "nodes", "proxy", "", "n"))
