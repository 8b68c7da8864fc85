"""The Device Manager patches only its own node's Pods (issue #31, item 5), on a real control plane.

RBAC cannot scope ``patch pods`` by node, and the Device Manager's token is on every GPU node.
The chart binds its Pod writes to its node with a ValidatingAdmissionPolicy on the request's
``authentication.kubernetes.io/node-name`` extra, which kube-apiserver derives from a token
bound to a Pod (the token the kubelet mounts). Only a real kube-apiserver issues such tokens and
evaluates the policy, so this runs etcd and kube-apiserver alone (``apiserver_fixture``),
applies the chart's own Device Manager objects as rendered (ServiceAccount, ClusterRole,
binding, policy), stores two Nodes with a Device Manager Pod and a tenant Pod on each, and
asks with the tokens those Device Manager Pods would get: node A's token may patch the Pod on
node A, and is refused on node B by the real authorizer and admission; a token bound to no
Pod is refused everywhere; other users are not affected.

Runs with ``GPUSTACK_E2E_CONTROL_PLANE=real``; skipped otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from apiserver_fixture import SYSTEM, Server, created, render_chart
from e2e_system import CONTROL_PLANE

pytestmark = pytest.mark.skipif(
    CONTROL_PLANE != "real",
    reason="bound tokens and ValidatingAdmissionPolicies need a real kube-apiserver",
)

DM = "gpustack-operator-device-manager"
TEAM = "team-a"
PATCH = {"Content-Type": "application/strategic-merge-patch+json"}
APPLIED = {
    ("ServiceAccount", DM): f"/api/v1/namespaces/{SYSTEM}/serviceaccounts",
    ("ClusterRole", DM): "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    ("ClusterRoleBinding", DM): "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    ("ValidatingAdmissionPolicy", f"{DM}-own-node"): (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
    ),
    ("ValidatingAdmissionPolicyBinding", f"{DM}-own-node"): (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
    ),
}


def _chart_objects() -> list[dict[str, Any]]:
    """The chart's Device Manager identity and policy, rendered with the defaults."""
    chosen = [d for d in render_chart() if (d["kind"], d["metadata"]["name"]) in APPLIED]
    assert len(chosen) == len(APPLIED), sorted((d["kind"], d["metadata"]["name"]) for d in chosen)
    return chosen


def _pod(name: str, node: str, account: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "serviceAccountName": account,
            "automountServiceAccountToken": False,
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }


@pytest.fixture(scope="module")
def tokens(server: Server) -> Iterator[dict[str, str]]:
    """Tokens of the Device Manager's account: bound to its Pod on each node, and unbound."""
    with server.client() as admin:
        for name in (SYSTEM, TEAM):
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            created(admin, "/api/v1/namespaces", namespace)
        made = admin.post(
            f"/api/v1/namespaces/{TEAM}/serviceaccounts",
            json={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
        )
        assert made.status_code in (201, 409), made.text  # 409: a controller made it
        for obj in _chart_objects():
            created(admin, APPLIED[obj["kind"], obj["metadata"]["name"]], obj)
        found: dict[str, str] = {}
        for node in ("node-a", "node-b"):
            created(admin, "/api/v1/nodes",
                     {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})  # fmt: skip
            created(admin, f"/api/v1/namespaces/{TEAM}/pods", _pod(f"tenant-{node}", node))
            dm = created(admin, f"/api/v1/namespaces/{SYSTEM}/pods", _pod(f"dm-{node}", node, DM))
            request = {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "expirationSeconds": 3600,
                    "boundObjectRef": {
                        "kind": "Pod",
                        "apiVersion": "v1",
                        "name": dm["metadata"]["name"],
                        "uid": dm["metadata"]["uid"],
                    },
                },
            }
            path = f"/api/v1/namespaces/{SYSTEM}/serviceaccounts/{DM}/token"
            found[node] = created(admin, path, request)["status"]["token"]
        unbound = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "spec": {"expirationSeconds": 3600}}  # fmt: skip
        found["unbound"] = created(
            admin, f"/api/v1/namespaces/{SYSTEM}/serviceaccounts/{DM}/token", unbound
        )["status"]["token"]
        yield found


def _patch(client: httpx.Client, pod: str, value: str) -> httpx.Response:
    body = {"metadata": {"annotations": {"gpustack.ai/e2e-own-node": value}}}
    return client.patch(f"/api/v1/namespaces/{TEAM}/pods/{pod}", json=body, headers=PATCH)


def _refused_once_in_force(client: httpx.Client, pod: str) -> httpx.Response:
    """The policy's first refusal: kube-apiserver picks new policies up from an informer."""
    deadline = time.monotonic() + 20
    while True:
        answer = _patch(client, pod, "cross")
        if answer.status_code != 200 or time.monotonic() > deadline:
            return answer
        time.sleep(0.5)


def test_the_token_names_its_pods_node(server: Server, tokens: dict[str, str]) -> None:
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    with server.as_token(tokens["node-a"]) as client:
        made = client.post("/apis/authentication.k8s.io/v1/selfsubjectreviews", json=review)
    assert made.status_code == 201, made.text
    user = made.json()["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{SYSTEM}:{DM}"
    assert user["extra"]["authentication.kubernetes.io/node-name"] == ["node-a"]


def test_a_device_manager_patches_its_own_nodes_pod_and_no_other(
    server: Server,
    tokens: dict[str, str],
) -> None:
    with server.as_token(tokens["node-a"]) as node_a, server.as_token(tokens["node-b"]) as node_b:
        refused = _refused_once_in_force(node_a, "tenant-node-b")
        assert refused.status_code == 403, refused.text
        assert (
            "the Device Manager on node node-a may not modify Pod team-a/tenant-node-b,"
            " which is not on its node"
        ) in refused.json()["message"]
        mine = _patch(node_a, "tenant-node-a", "own")
        assert mine.status_code == 200, mine.text
        assert mine.json()["metadata"]["annotations"]["gpustack.ai/e2e-own-node"] == "own"
        # And the other way round.
        assert _patch(node_b, "tenant-node-b", "own").status_code == 200
        refused = _patch(node_b, "tenant-node-a", "cross")
        assert refused.status_code == 403, refused.text
        assert "the Device Manager on node node-b may not modify Pod" in refused.json()["message"]


def test_a_token_bound_to_no_pod_is_refused_everywhere(
    server: Server,
    tokens: dict[str, str],
) -> None:
    with server.as_token(tokens["unbound"]) as client:
        for pod in ("tenant-node-a", "tenant-node-b"):
            refused = _refused_once_in_force(client, pod)
            assert refused.status_code == 403, refused.text
            assert "names no node" in refused.json()["message"]


def test_other_users_are_not_judged(server: Server, tokens: dict[str, str]) -> None:
    with server.client() as admin:
        answer = _patch(admin, "tenant-node-b", "admin")
    assert answer.status_code == 200, answer.text
