"""The kind cluster as a target for the local end-to-end suite's assertions.

``tests/e2e/local`` drives ``simulator up`` through a ``System``: ``api(user)``, ``metrics``,
``exposition(node, manufacturer)``, ``snapshot(node, manufacturer)`` and ``kubectl``. A
:class:`KindTarget` answers the same calls against a real cluster (``clusters/kind/e2e.sh``
creates it and installs the chart in simulation mode), so the local suite's assertion functions
run unchanged against it. The local suite is loaded by path (:func:`load_local_suite`) rather
than refactored, so it stays exactly as it is.

The cluster is populated from the same demo scenario the local suite runs: each scenario node
whose Device Managers replay the recordings the kind values simulate is mapped to the kind
worker labelled for that manufacturer, and its running Instances are created there as a real
Instance plus a real Pod (a ``sleep`` process, the scenario's limits and allocation annotation,
owned by the Instance). CPU, memory and storage then come from the real kubelet; accelerator
figures from the simulated Device Manager on that node.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import httpx
import yaml

from gpustack_core.allocation import ANNOTATION
from gpustack_core.pods import PART_OF_LABEL
from gpustack_simulator.scenario import RECORDINGS_DIR, Expanded, expand, find_scenario
from gpustack_simulator.scenario import load_scenario as _load_scenario

REPO = Path(__file__).resolve().parents[3]
LOCAL = REPO / "tests" / "e2e" / "local"
KIND_VALUES = REPO / "clusters" / "kind" / "values-simulate.yaml"
KUBECONFIG_ENV = "GPUSTACK_E2E_KIND_KUBECONFIG"
IMAGE_ENV = "GPUSTACK_E2E_KIND_IMAGE"
SYSTEM_NAMESPACE = "gpustack-system"
SIMULATE_LABEL = "gpustack.ai/simulate"
COMPONENT_SELECTOR = "app.kubernetes.io/component=device-manager"
DEVICE_MANAGER_PORT = 32443
INSTANCES = "/apis/worker.gpustack.ai/v1alpha1"
SCENARIO = "demo"
# Kubernetes' own resources; an extended resource (nvidia.com/gpu…) has no device plugin here.
CORE_RESOURCES = ("cpu", "memory", "ephemeral-storage")
# Requests stay tiny so the scenario's limits (64Gi…) schedule on a laptop-sized kind node:
# limits may exceed allocatable, requests may not. The totals are limits, so nothing changes.
SMALL_REQUESTS = {"cpu": "5m", "memory": "16Mi", "ephemeral-storage": "16Mi"}
# Users the local suite's assertions act as, and what each may do on the cluster.
E2E_LABEL = {"gpustack.ai/e2e": "kind"}

T = TypeVar("T")


def skip_reason() -> str | None:
    """Why the kind suite cannot run here, or ``None`` when ``e2e.sh`` pointed it at a cluster."""
    if os.environ.get(KUBECONFIG_ENV):
        return None
    engines = [name for name in ("docker", "podman") if shutil.which(name)]
    if not engines:
        here = "no container engine here: neither docker nor podman is installed"
    elif not (os.environ.get("DOCKER_HOST") or Path("/var/run/docker.sock").exists()):
        here = (
            f"no container engine runs here: {' and '.join(engines)} client only, no daemon socket"
        )
    else:
        here = f"{' and '.join(engines)} available: run `just e2e-kind`"
    return (
        f"the kind e2e runs against the cluster `just e2e-kind` (clusters/kind/e2e.sh) creates, "
        f"which sets {KUBECONFIG_ENV}; it is unset ({here})"
    )


# -- the local suite, loaded by path ---------------------------------------------------------


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_local_suite() -> ModuleType:
    """``tests/e2e/local/test_local_e2e.py`` as a module of helpers and assertions.

    It imports ``e2e_system`` by name (its ``System``, ``cli``, ``V1``), which is loaded from the
    local suite's folder first unless pytest collected that suite already. The module gets a name
    of its own, so pytest's own collection of it is unaffected.
    """
    if "e2e_system" not in sys.modules:
        _load("e2e_system", LOCAL / "e2e_system.py")
    return _load("gpustack_e2e_local_suite", LOCAL / "test_local_e2e.py")


# -- waiting ---------------------------------------------------------------------------------


def eventually(check: Callable[[], T], timeout: float, interval: float = 2.0) -> T:
    """``check()``'s value once it stops raising ``AssertionError``; its last error after that."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except (AssertionError, httpx.HTTPError):
            if time.monotonic() >= deadline:
                raise
        time.sleep(interval)


# -- the target ------------------------------------------------------------------------------


@dataclass
class KindTarget:
    """The local suite's ``System`` calls, answered by a kind cluster.

    ``api(user)`` speaks to the API server with the kubeconfig's admin client certificate and
    impersonates any other user, which is how the suite's ``no-metrics`` and ``prometheus``
    callers are made real; ``exposition``/``snapshot`` go through the API server's Pod proxy to
    the Device Manager on the node that stands for the scenario's node.
    """

    kubeconfig: Path
    server: str
    tls: ssl.SSLContext
    nodes: dict[str, str] = field(default_factory=dict)
    """Scenario node name → kind node name."""
    manufacturers: dict[str, str] = field(default_factory=dict)
    """Kind node name → the manufacturer simulated there."""

    @classmethod
    def from_kubeconfig(cls, path: Path, folder: Path) -> KindTarget:
        document = yaml.safe_load(path.read_text())
        current = document["current-context"]
        context = next(c["context"] for c in document["contexts"] if c["name"] == current)
        cluster = next(
            c["cluster"] for c in document["clusters"] if c["name"] == context["cluster"]
        )
        user = next(u["user"] for u in document["users"] if u["name"] == context["user"])
        files = {
            "ca.crt": cluster["certificate-authority-data"],
            "client.crt": user["client-certificate-data"],
            "client.key": user["client-key-data"],
        }
        for name, data in files.items():
            (folder / name).write_bytes(base64.b64decode(data))
            (folder / name).chmod(0o600)
        tls = ssl.create_default_context(cafile=str(folder / "ca.crt"))
        tls.load_cert_chain(str(folder / "client.crt"), str(folder / "client.key"))
        return cls(path, cluster["server"], tls)

    # The System interface ----------------------------------------------------------------

    def api(self, user: str = "admin") -> httpx.Client:
        headers = {}
        if user != "admin":
            headers = {"Impersonate-User": user, "Impersonate-Group": "system:authenticated"}
        return httpx.Client(
            base_url=self.server, verify=self.tls, headers=headers, timeout=30, trust_env=False
        )

    def metrics(self, namespace: str, name: str, user: str = "admin") -> httpx.Response:
        with self.api(user) as client:
            return client.get(
                f"/apis/worker.gpustack.ai/v1/namespaces/{namespace}/instances/{name}/metrics"
            )

    def control(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        raise NotImplementedError(
            "a real cluster has no virtual clock or fault injection (the stand-in's control API)"
        )

    def device_manager(self, node: str, manufacturer: str) -> str:
        """The Ready Device Manager Pod of ``manufacturer`` on the scenario's ``node``."""
        kind_node = self.nodes[node]
        selector = f"{COMPONENT_SELECTOR},gpustack.ai/manufacturer={manufacturer}"
        with self.api() as client:
            pods = client.get(
                f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/pods",
                params={
                    "labelSelector": selector,
                    "fieldSelector": f"spec.nodeName={kind_node}",
                },
            ).json()["items"]
        ready = [p for p in pods if _ready(p)]
        assert ready, f"no Ready {manufacturer} Device Manager on {kind_node} (for {node})"
        name: str = ready[0]["metadata"]["name"]
        return name

    def _proxied(self, node: str, manufacturer: str, path: str) -> httpx.Response:
        return self.proxied(self.device_manager(node, manufacturer), path)

    def proxied(self, pod: str, path: str) -> httpx.Response:
        """``GET path`` on a Device Manager Pod's secure port, through the API server."""
        with self.api() as client:
            response = client.get(
                f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/pods/"
                f"https:{pod}:{DEVICE_MANAGER_PORT}/proxy{path}"
            )
        assert response.status_code == 200, f"{pod}{path}: {response.status_code} {response.text}"
        return response

    def exposition(self, node: str, manufacturer: str) -> str:
        return self._proxied(node, manufacturer, "/metrics").text

    def snapshot(self, node: str, manufacturer: str) -> dict[str, Any]:
        body: dict[str, Any] = self._proxied(node, manufacturer, "/monitor/snapshot").json()
        return body

    def kubectl(self, *args: str, context: str = "admin") -> subprocess.CompletedProcess[str]:
        kubectl = shutil.which("kubectl")
        assert kubectl is not None, "kubectl is required against the kind cluster"
        who = [] if context == "admin" else ["--as", context, "--as-group", "system:authenticated"]
        return subprocess.run(
            [kubectl, "--kubeconfig", str(self.kubeconfig), *who, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "KUBECONFIG": ""},
        )

    # Writing ---------------------------------------------------------------------------------

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body``; an object that already exists is read back instead."""
        with self.api() as client:
            response = client.post(path, json=body)
            if response.status_code == 409:
                name = body["metadata"]["name"]
                response = client.get(f"{path}/{name}")
        assert response.status_code in {200, 201}, f"POST {path}: {response.text}"
        created: dict[str, Any] = response.json()
        return created

    def delete(self, path: str) -> None:
        with self.api() as client:
            client.delete(path)


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) and not pod[
        "metadata"
    ].get("deletionTimestamp")


# -- the scenario on the cluster -----------------------------------------------------------


def simulated_recordings() -> dict[str, str]:
    """Manufacturer → recording (relative to recordings/) the kind values simulate."""
    values = yaml.safe_load(KIND_VALUES.read_text())
    return {m: s["recording"] for m, s in (values.get("simulate") or {}).items() if s}


def demo() -> Expanded:
    return expand(_load_scenario(find_scenario(SCENARIO)), base=RECORDINGS_DIR)


def node_map(expanded: Expanded, by_label: dict[str, str]) -> dict[str, str]:
    """Scenario node → kind node, for each scenario node whose Device Managers are exactly one
    simulated manufacturer's recording (``by_label``: manufacturer → kind node labelled for it)."""
    simulated = simulated_recordings()
    mapped = {}
    for node in sorted({dm.node for dm in expanded.device_managers}):
        managers = [dm for dm in expanded.device_managers if dm.node == node]
        if len(managers) != 1:
            continue
        [dm] = managers
        recording = dm.recording.resolve().relative_to(RECORDINGS_DIR.resolve()).as_posix()
        if simulated.get(dm.manufacturer) == recording and dm.manufacturer in by_label:
            mapped[node] = by_label[dm.manufacturer]
    return mapped


def _placeable(pod: dict[str, Any], instance_uid: str) -> bool:
    """A running, non-terminating Pod that belongs to its Instance (not a predecessor's)."""
    meta = pod["metadata"]
    owners = [o["uid"] for o in meta.get("ownerReferences", []) if o.get("controller")]
    return (
        pod["status"]["phase"] == "Running"
        and "deletionTimestamp" not in meta
        and meta["labels"].get(PART_OF_LABEL) == instance_uid
        and owners == [instance_uid]
    )


def _container(spec: dict[str, Any], image: str, command: list[str]) -> dict[str, Any]:
    limits = {
        k: v for k, v in spec.get("resources", {}).get("limits", {}).items() if k in CORE_RESOURCES
    }
    requests = {k: SMALL_REQUESTS[k] for k in limits}
    return {
        "name": spec["name"],
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "resources": {"limits": limits, "requests": requests},
        "securityContext": {"allowPrivilegeEscalation": False},
    }


def _kind_pod(pod: dict[str, Any], manufacturer: str, image: str) -> dict[str, Any]:
    """The scenario's Pod as a real one: a sleep per container, the scenario's limits and
    allocation annotation, on the kind node simulating ``manufacturer``. :func:`bind` adds the
    owner once the Instance has its server-assigned UID."""
    meta, spec = pod["metadata"], pod["spec"]
    annotations = {k: v for k, v in meta.get("annotations", {}).items() if k == ANNOTATION}
    labels = {k: v for k, v in meta.get("labels", {}).items() if k != PART_OF_LABEL}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": {**labels, **E2E_LABEL},
            "annotations": annotations,
        },
        "spec": {
            "nodeSelector": {SIMULATE_LABEL: manufacturer},
            "containers": [_container(c, image, ["sleep", "infinity"]) for c in spec["containers"]],
            "initContainers": [_container(c, image, ["true"]) for c in spec["initContainers"]],
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532},
        },
    }


def bind(pod: dict[str, Any], instance: dict[str, Any]) -> dict[str, Any]:
    """``pod`` owned by the created ``instance``: controller reference and part-of label."""
    uid = instance["metadata"]["uid"]
    owner = {
        "apiVersion": instance["apiVersion"],
        "kind": "Instance",
        "name": instance["metadata"]["name"],
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    metadata = {
        **pod["metadata"],
        "labels": {**pod["metadata"]["labels"], PART_OF_LABEL: uid},
        "ownerReferences": [owner],
    }
    return {**pod, "metadata": metadata}


def _instance(doc: dict[str, Any]) -> dict[str, Any]:
    meta = doc["metadata"]
    return {
        "apiVersion": doc["apiVersion"],
        "kind": "Instance",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": {**meta.get("labels", {}), **E2E_LABEL},
        },
        "spec": doc["spec"],
    }


@dataclass
class Plan:
    """The demo's Instances the kind nodes can host, each with its Pod (``None``: stopped)."""

    nodes: dict[str, str]
    objects: list[tuple[dict[str, Any], dict[str, Any] | None]]

    @property
    def running(self) -> list[tuple[str, str]]:
        return [_key(i) for i, pod in self.objects if pod is not None]

    @property
    def stopped(self) -> list[tuple[str, str]]:
        return [_key(i) for i, pod in self.objects if pod is None]

    @property
    def namespaces(self) -> list[str]:
        return sorted({i["metadata"]["namespace"] for i, _ in self.objects})


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["metadata"]["namespace"], obj["metadata"]["name"]


def plan_demo(expanded: Expanded, by_label: dict[str, str], image: str) -> Plan:
    """What to create: running Instances on mapped nodes, and stopped Instances (no Pod)."""
    nodes = node_map(expanded, by_label)
    manufacturers = {name: manufacturer for manufacturer, name in by_label.items()}
    pods = {_key(p): p for p in expanded.pods}
    objects: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    for doc in expanded.instances:
        pod = pods.get(_key(doc))
        if pod is None:
            if doc["spec"].get("stop"):
                objects.append((_instance(doc), None))
        elif pod["spec"].get("nodeName") in nodes and _placeable(pod, doc["metadata"]["uid"]):
            manufacturer = manufacturers[nodes[pod["spec"]["nodeName"]]]
            objects.append((_instance(doc), _kind_pod(pod, manufacturer, image)))
    return Plan(nodes, objects)


def simulation_nodes(target: KindTarget) -> dict[str, str]:
    """Manufacturer → the kind node labelled gpustack.ai/simulate=<manufacturer>."""
    with target.api() as client:
        nodes = client.get("/api/v1/nodes").json()["items"]
    return {
        n["metadata"]["labels"][SIMULATE_LABEL]: n["metadata"]["name"]
        for n in nodes
        if SIMULATE_LABEL in n["metadata"].get("labels", {})
    }


def place_demo(target: KindTarget, image: str) -> Plan:
    """Create the plan on the cluster: namespaces, then each Instance and its owned Pod."""
    by_label = simulation_nodes(target)
    plan = plan_demo(demo(), by_label, image)
    assert plan.nodes, f"no demo node matches the simulated recordings {simulated_recordings()}"
    target.nodes = plan.nodes
    target.manufacturers = {name: manufacturer for manufacturer, name in by_label.items()}
    for namespace in plan.namespaces:
        target.create("/api/v1/namespaces", {"metadata": {"name": namespace, "labels": E2E_LABEL}})
    for instance, pod in plan.objects:
        namespace = instance["metadata"]["namespace"]
        created = target.create(f"{INSTANCES}/namespaces/{namespace}/instances", instance)
        if pod is not None:
            target.create(f"/api/v1/namespaces/{namespace}/pods", bind(pod, created))
    return plan


def wait_running(target: KindTarget, plan: Plan, timeout: float = 240) -> None:
    def all_ready() -> None:
        with target.api() as client:
            for namespace, name in plan.running:
                pod = client.get(f"/api/v1/namespaces/{namespace}/pods/{name}").json()
                assert _ready(pod), f"{namespace}/{name}: {json.dumps(pod.get('status'))[:500]}"

    eventually(all_ready, timeout)


# -- RBAC the suite's users need ------------------------------------------------------------


def _cluster_role(name: str, rules: list[dict[str, Any]], user: str) -> Iterator[tuple[str, Any]]:
    yield (
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {"metadata": {"name": name, "labels": E2E_LABEL}, "rules": rules},
    )
    yield (
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": name, "labels": E2E_LABEL},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


def grant_users(target: KindTarget, viewer_namespace: str) -> list[str]:
    """The stand-in's built-in users, made real: what each may do, and nothing more.

    ``no-metrics`` may read Instances but not their metrics; ``prometheus`` may do what
    ``kubernetes_sd_configs`` (role: endpoints) does; ``team-a-viewer`` holds only the default
    ``view`` role in its namespace, which the chart's aggregated role extends.
    """
    objects = [
        *_cluster_role(
            "e2e-no-metrics",
            [
                {
                    "apiGroups": ["worker.gpustack.ai"],
                    "resources": ["instances"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
            "no-metrics",
        ),
        *_cluster_role(
            "e2e-prometheus",
            [
                {
                    "apiGroups": [""],
                    "resources": ["pods", "services", "endpoints"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
            "prometheus",
        ),
        (
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{viewer_namespace}/rolebindings",
            {
                "metadata": {"name": "e2e-team-a-viewer", "labels": E2E_LABEL},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "view",
                },
                "subjects": [
                    {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "User",
                        "name": "team-a-viewer",
                    }
                ],
            },
        ),
    ]
    created = []
    for path, body in objects:
        target.create(path, body)
        created.append(f"{path}/{body['metadata']['name']}")
    return created


def new_target() -> tuple[KindTarget, str]:
    """The target for ``$GPUSTACK_E2E_KIND_KUBECONFIG`` and the image the Pods run."""
    folder = Path(tempfile.mkdtemp(prefix="gpustack-kind-e2e-"))
    target = KindTarget.from_kubeconfig(Path(os.environ[KUBECONFIG_ENV]), folder)
    return target, os.environ.get(IMAGE_ENV, "gpustack-operator:e2e")


# -- the spec's relabelling, applied as Prometheus applies it -------------------------------


def relabel(labels: dict[str, str], rules: list[dict[str, Any]]) -> dict[str, str] | None:
    """The ``keep`` and ``replace`` actions (full-match regex, ``$n`` references)."""
    out = dict(labels)
    for rule in rules:
        joined = ";".join(out.get(name, "") for name in rule["source_labels"])
        match = re.fullmatch(rule.get("regex", "(.*)"), joined)
        if rule.get("action", "replace") == "keep":
            if match is None:
                return None
        elif match is not None:
            template = re.sub(r"\$(\d+)", r"\\g<\1>", rule.get("replacement", "$1"))
            out[rule["target_label"]] = match.expand(template)
    return out


# -- the operator half on kind: the plugin and the controller with the real kubelet ----------


def plugin_pod(name: str, namespace: str, node: str, image: str) -> dict[str, Any]:
    """A Pod asking the nvidia plugin for one share, with no allocation annotation.

    The demo's placement holds every card of the simulated H100 node in some mode, but card 1
    is Shared with nine shares free, so a share is what the real kubelet can still admit there.
    """
    container = {
        **_container({"name": "main", "resources": {}}, image, ["sleep", "infinity"]),
        "resources": {
            "limits": {"nvidia.com/gpu.shared": "1", "cpu": "50m", "memory": "64Mi"},
            "requests": {"nvidia.com/gpu.shared": "1", **SMALL_REQUESTS},
        },
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(E2E_LABEL)},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
        },
    }


def controller_instance(name: str, namespace: str, node: str, image: str) -> dict[str, Any]:
    """An Instance the chart's controller renders (no type, no accelerator), with two ports."""
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(E2E_LABEL)},
        "spec": {
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["sleep", "infinity"],
            "nodeName": node,
            "ports": [{"port": 22}, {"port": 8888}],
            "resources": {"cpu": "50m", "ram": "64Mi"},
        },
    }
