"""Only the Device Manager writes a Pod's allocation annotation, on a real kube-apiserver.

The annotation ``device.gpustack.ai/accelerator.allocated`` is the Device Manager's record of
the devices it granted, and the cards' ledgers are summed from it. A tenant who may create and
update Pods in its namespace must not forge one (a card over-charged: the other tenants are
refused it) nor erase or alter one (a card in use counted free). The chart's
ValidatingAdmissionPolicy ``<release>-device-manager-allocation-record`` says so in CEL, which
only a real kube-apiserver evaluates (the cluster stand-in evaluates no admission policy), so
this runs etcd and kube-apiserver alone (``apiserver_fixture``), applies the chart's Device
Manager objects as rendered (its account, role and binding, the own-node and the
allocation-record policies), and writes Pods as a tenant ServiceAccount with an ordinary Role
(create, get, update, patch pods in its namespace) and as the Device Manager with the token its
Pod on node A would mount. The expected answers are the issue's: the tenant's forged create,
added, altered and removed record refused with the policy's words; its other annotation changes
allowed; the Device Manager's write of the record allowed on its node's Pod, and refused on
another node's by the own-node policy.

Runs with ``GPUSTACK_E2E_CONTROL_PLANE=real``; skipped otherwise.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from apiserver_fixture import SYSTEM, Server, created, render_chart
from e2e_system import CONTROL_PLANE

from gpustack_core.contract import ALLOCATION_ANNOTATION

pytestmark = pytest.mark.skipif(
    CONTROL_PLANE != "real",
    reason="ValidatingAdmissionPolicies are evaluated by a real kube-apiserver only",
)

DM = "gpustack-operator-device-manager"
POLICY = f"{DM}-allocation-record"
TEAM = "team-a"
TENANT = "tenant"
PODS = f"/api/v1/namespaces/{TEAM}/pods"
MERGE = {"Content-Type": "application/merge-patch+json"}
FORGED_CREATE = "a Pod may not be created with it"
FORGED_UPDATE = "only the Device Manager may add, change or remove it"
RECORD = '{"main":{"devices":"forged"}}'  # any text: the policy judges who writes, not what
VAP = "/apis/admissionregistration.k8s.io/v1"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
APPLIED = {
    ("ServiceAccount", DM): f"/api/v1/namespaces/{SYSTEM}/serviceaccounts",
    ("ClusterRole", DM): f"{RBAC}/clusterroles",
    ("ClusterRoleBinding", DM): f"{RBAC}/clusterrolebindings",
    ("ValidatingAdmissionPolicy", f"{DM}-own-node"): f"{VAP}/validatingadmissionpolicies",
    ("ValidatingAdmissionPolicyBinding", f"{DM}-own-node"): (
        f"{VAP}/validatingadmissionpolicybindings"
    ),
    ("ValidatingAdmissionPolicy", POLICY): f"{VAP}/validatingadmissionpolicies",
    ("ValidatingAdmissionPolicyBinding", POLICY): f"{VAP}/validatingadmissionpolicybindings",
}
TENANT_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "Role",
    "metadata": {"name": "pod-writer"},
    "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "update", "patch"]}
    ],
}
TENANT_BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "RoleBinding",
    "metadata": {"name": "pod-writer"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-writer"},
    "subjects": [{"kind": "ServiceAccount", "name": TENANT, "namespace": TEAM}],
}


@dataclass
class Cluster:
    server: Server
    tenant: str
    """The tenant ServiceAccount's token."""
    device_manager: str
    """The Device Manager's token, bound to its Pod on node-a."""


def _pod(name: str, node: str | None = None, account: str = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "serviceAccountName": account,
        "automountServiceAccountToken": False,
        "containers": [{"name": "main", "image": "busybox"}],
    }
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _annotated(pod: dict[str, Any], annotations: dict[str, str]) -> dict[str, Any]:
    return {**pod, "metadata": {**pod["metadata"], "annotations": annotations}}


def _token(admin: httpx.Client, namespace: str, account: str, pod: dict[str, Any] | None) -> str:
    spec: dict[str, Any] = {"expirationSeconds": 3600}
    if pod is not None:
        meta = pod["metadata"]
        spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1",
                                  "name": meta["name"], "uid": meta["uid"]}  # fmt: skip
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
    token: str = created(admin, path, request)["status"]["token"]
    return token


def _wait_in_force(admin: httpx.Client) -> None:
    """Until the policy refuses a forged create (a dry run: nothing stored either way).

    kube-apiserver reads new policies from an informer; the admin is judged as anyone is.
    """
    probe = _annotated(_pod("probe"), {ALLOCATION_ANNOTATION: RECORD})
    deadline = time.monotonic() + 30
    while True:
        answer = admin.post(PODS, params={"dryRun": "All"}, json=probe)
        if answer.status_code != 201:
            assert FORGED_CREATE in answer.json()["message"], answer.text
            return
        assert time.monotonic() < deadline, "the allocation-record policy never took effect"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster(server: Server) -> Cluster:
    rendered = render_chart()
    chosen = [d for d in rendered if (d["kind"], d["metadata"]["name"]) in APPLIED]
    assert len(chosen) == len(APPLIED), sorted((d["kind"], d["metadata"]["name"]) for d in chosen)
    with server.client() as admin:
        for name in (SYSTEM, TEAM):
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            created(admin, "/api/v1/namespaces", namespace)
        for name in ("default", TENANT):
            account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
            made = admin.post(f"/api/v1/namespaces/{TEAM}/serviceaccounts", json=account)
            assert made.status_code in (201, 409), made.text  # 409: a controller made it
        created(admin, f"{RBAC}/namespaces/{TEAM}/roles", TENANT_ROLE)
        created(admin, f"{RBAC}/namespaces/{TEAM}/rolebindings", TENANT_BINDING)
        for obj in chosen:
            created(admin, APPLIED[obj["kind"], obj["metadata"]["name"]], obj)
        for node in ("node-a", "node-b"):
            created(admin, "/api/v1/nodes",
                    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})  # fmt: skip
            created(admin, PODS, _pod(f"placed-{node}", node))
        dm = created(admin, f"/api/v1/namespaces/{SYSTEM}/pods", _pod("dm-node-a", "node-a", DM))
        tokens = (_token(admin, TEAM, TENANT, None), _token(admin, SYSTEM, DM, dm))
        _wait_in_force(admin)
    return Cluster(server, *tokens)


def _refused(answer: httpx.Response, words: str) -> None:
    assert answer.status_code == 403, answer.text
    message = answer.json()["message"]
    assert f"ValidatingAdmissionPolicy '{POLICY}'" in message, message
    assert words in message, message


def _patch(client: httpx.Client, pod: str, annotations: dict[str, str | None]) -> httpx.Response:
    body = {"metadata": {"annotations": annotations}}
    return client.patch(f"{PODS}/{pod}", json=body, headers=MERGE)


def _record_of(client: httpx.Client, pod: str) -> str | None:
    stored = client.get(f"{PODS}/{pod}")
    assert stored.status_code == 200, stored.text
    annotations = stored.json()["metadata"].get("annotations") or {}
    value: str | None = annotations.get(ALLOCATION_ANNOTATION)
    return value


def test_a_tenant_cannot_create_a_pod_with_a_record(cluster: Cluster) -> None:
    with cluster.server.as_token(cluster.tenant) as tenant:
        forged = _annotated(_pod("forged"), {ALLOCATION_ANNOTATION: RECORD})
        _refused(tenant.post(PODS, json=forged), FORGED_CREATE)
        # The same Pod without the record, and with other annotations, is the tenant's to make.
        plain = _annotated(_pod("plain"), {"team-a.example/owner": "alice"})
        made = tenant.post(PODS, json=plain)
        assert made.status_code == 201, made.text
        made = tenant.post(PODS, json=_pod("bare"))  # no metadata.annotations at all
        assert made.status_code == 201, made.text


def test_the_device_manager_records_a_grant_on_its_nodes_pod_only(cluster: Cluster) -> None:
    with cluster.server.as_token(cluster.device_manager) as dm:
        mine = _patch(dm, "placed-node-a", {ALLOCATION_ANNOTATION: RECORD})
        assert mine.status_code == 200, mine.text
        assert mine.json()["metadata"]["annotations"][ALLOCATION_ANNOTATION] == RECORD
        # The own-node policy still holds it to its node.
        other = _patch(dm, "placed-node-b", {ALLOCATION_ANNOTATION: RECORD})
        assert other.status_code == 403, other.text
        assert "which is not on its node" in other.json()["message"]


def test_a_tenant_cannot_add_alter_or_remove_a_record(cluster: Cluster) -> None:
    with cluster.server.as_token(cluster.device_manager) as dm:
        assert _patch(dm, "placed-node-a", {ALLOCATION_ANNOTATION: RECORD}).status_code == 200
    with cluster.server.as_token(cluster.tenant) as tenant:
        # Add, to a Pod the Device Manager never annotated (its annotations absent entirely).
        _refused(_patch(tenant, "placed-node-b", {ALLOCATION_ANNOTATION: RECORD}), FORGED_UPDATE)
        # Alter, and remove (a merge patch's null), the Device Manager's record.
        _refused(_patch(tenant, "placed-node-a", {ALLOCATION_ANNOTATION: "{}"}), FORGED_UPDATE)
        _refused(_patch(tenant, "placed-node-a", {ALLOCATION_ANNOTATION: None}), FORGED_UPDATE)
        # A whole-object update that leaves annotations out removes it too.
        stored = tenant.get(f"{PODS}/placed-node-a").json()
        del stored["metadata"]["annotations"]
        _refused(tenant.put(f"{PODS}/placed-node-a", json=stored), FORGED_UPDATE)
        assert _record_of(tenant, "placed-node-a") == RECORD
        assert _record_of(tenant, "placed-node-b") is None


def test_a_tenant_changes_its_other_annotations_freely(cluster: Cluster) -> None:
    with cluster.server.as_token(cluster.device_manager) as dm:
        assert _patch(dm, "placed-node-a", {ALLOCATION_ANNOTATION: RECORD}).status_code == 200
    with cluster.server.as_token(cluster.tenant) as tenant:
        # Beside the record: added, changed, removed; the record stays as it was.
        for value in ("one", "two", None):
            answer = _patch(tenant, "placed-node-a", {"team-a.example/note": value})
            assert answer.status_code == 200, answer.text
        assert _record_of(tenant, "placed-node-a") == RECORD
        # On a Pod with no record: the annotations map appears and goes, the record stays absent.
        for value in ("one", None):
            answer = _patch(tenant, "placed-node-b", {"team-a.example/note": value})
            assert answer.status_code == 200, answer.text
        # A whole-object update carrying the record unchanged is not a forgery.
        stored = tenant.get(f"{PODS}/placed-node-a").json()
        stored["metadata"]["labels"] = {"team-a.example/tier": "gold"}
        replaced = tenant.put(f"{PODS}/placed-node-a", json=stored)
        assert replaced.status_code == 200, replaced.text
        assert replaced.json()["metadata"]["annotations"][ALLOCATION_ANNOTATION] == RECORD
