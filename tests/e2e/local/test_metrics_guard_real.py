"""The Device Manager's ``/metrics`` guard decides as the real API server says (issue #31 item 7).

The chart turns the guard on by default (``metricsAccess``): the Device Manager asks
kube-apiserver who a scraper is (TokenReview) and whether it may ``get /metrics``
(SubjectAccessReview), with its own ServiceAccount's rights (``system:auth-delegator``, bound by
the chart), and the ClusterRole ``gpustack-metrics-reader`` is what a scraper is bound to. The
unit tests answer the reviews with a mock; here kube-apiserver answers them. etcd and
kube-apiserver run alone (``apiserver_fixture``); the chart's Device Manager account, its roles
and the reader role with its binding (``metricsAccess.readers`` naming one ServiceAccount) are
applied as ``helm template`` renders them; a Device Manager runs on a recorded card (``--simulate``)
with a token of the chart's account and the guard flags of the chart's DaemonSet. Then, by
what kube-rbac-proxy answers (401 unauthenticated, 403 unauthorized):

- the bound reader's token: 200 and the exposition (a family the spec names);
- a token of another ServiceAccount, bound to nothing: 403, in kube-rbac-proxy's words;
- no token, or one the API server does not know: 401.

Runs with ``GPUSTACK_E2E_CONTROL_PLANE=real``; skipped otherwise.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from apiserver_fixture import REPO, SYSTEM, Server, created, free_ports, render_chart
from e2e_system import CONTROL_PLANE

pytestmark = pytest.mark.skipif(
    CONTROL_PLANE != "real",
    reason="TokenReview and SubjectAccessReview are answered by a real kube-apiserver",
)

DM = "gpustack-operator-device-manager"
READER_ROLE = "gpustack-metrics-reader"
MONITORING = "monitoring"
SCRAPER = "prometheus"
STRANGER = "stranger"
RECORDING = REPO / "recordings" / "nvidia" / "t4.yaml"
# The spec's exporter self-report (instance-metrics-reference.md, "Collector health"): present
# in every exposition the Device Manager makes, Pods or none.
FAMILY = 'gpustack_instance_metrics_collector_success{source="snapshot"}'
CLUSTER_RBAC = "/apis/rbac.authorization.k8s.io/v1"
APPLIED = {
    ("ServiceAccount", DM): f"/api/v1/namespaces/{SYSTEM}/serviceaccounts",
    ("ClusterRole", DM): f"{CLUSTER_RBAC}/clusterroles",
    ("ClusterRoleBinding", DM): f"{CLUSTER_RBAC}/clusterrolebindings",
    ("ClusterRoleBinding", f"{DM}:auth-delegator"): f"{CLUSTER_RBAC}/clusterrolebindings",
    ("ClusterRole", READER_ROLE): f"{CLUSTER_RBAC}/clusterroles",
    ("ClusterRoleBinding", READER_ROLE): f"{CLUSTER_RBAC}/clusterrolebindings",
}


@dataclass
class Guarded:
    """The running Device Manager's address and the tokens to scrape it with."""

    url: str
    tokens: dict[str, str]


def _rendered() -> tuple[list[dict[str, Any]], list[str]]:
    """The chart's objects this needs, and the guard flags its NVIDIA DaemonSet passes."""
    reader = {"kind": "ServiceAccount", "name": SCRAPER, "namespace": MONITORING}
    sets = [f"metricsAccess.readers[0].{key}={value}" for key, value in reader.items()]
    rendered = render_chart("--set", ",".join(sets))
    chosen = [d for d in rendered if (d["kind"], d["metadata"]["name"]) in APPLIED]
    assert len(chosen) == len(APPLIED), sorted((d["kind"], d["metadata"]["name"]) for d in chosen)
    [daemonset] = [
        d for d in rendered if d["kind"] == "DaemonSet" and d["metadata"]["name"] == f"{DM}-nvidia"
    ]
    [container] = daemonset["spec"]["template"]["spec"]["containers"]
    guard = [
        a for a in container["args"] if a.startswith(("--authorize-path=", "--authorization-"))
    ]
    assert "--authorize-path=/metrics" in guard, container["args"]
    return chosen, guard


def _token(admin: httpx.Client, namespace: str, account: str) -> str:
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"expirationSeconds": 3600}}  # fmt: skip
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
    token: str = created(admin, path, request)["status"]["token"]
    return token


def _kubeconfig(api: Server, token: str, path: Path) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "real", "cluster": {"server": api.url,
                                                  "certificate-authority": str(api.ca)}}],
        "users": [{"name": DM, "user": {"token": token}}],
        "contexts": [{"name": "real", "context": {"cluster": "real", "user": DM}}],
        "current-context": "real",
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config))
    return path


def _scrape(url: str, token: str | None = None) -> httpx.Response:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    # The Device Manager's self-signed serving certificate: who it is is not under test here.
    with httpx.Client(verify=False, timeout=30, trust_env=False) as client:
        return client.get(f"{url}/metrics", headers=headers)


def _wait_listening(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            with httpx.Client(verify=False, timeout=5, trust_env=False) as client:
                if client.get(f"{url}/readyz").status_code == 200:
                    return
        except httpx.HTTPError:
            pass
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"the Device Manager never listened: {log}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def guarded(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guarded]:
    root = tmp_path_factory.mktemp("metrics-guard")
    objects, guard = _rendered()
    with server.client() as admin:
        for name in (SYSTEM, MONITORING):
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            created(admin, "/api/v1/namespaces", namespace)
        for obj in objects:
            created(admin, APPLIED[obj["kind"], obj["metadata"]["name"]], obj)
        for account in (SCRAPER, STRANGER):
            created(admin, f"/api/v1/namespaces/{MONITORING}/serviceaccounts",
                    {"apiVersion": "v1", "kind": "ServiceAccount",
                     "metadata": {"name": account}})  # fmt: skip
        tokens = {a: _token(admin, MONITORING, a) for a in (SCRAPER, STRANGER)}
        kubeconfig = _kubeconfig(server, _token(admin, SYSTEM, DM), root / "kubeconfig")
    [port] = free_ports(1)
    command = [
        sys.executable, "-m", "gpustack_cli", "device-manager", "serve",
        "--manufacturer=nvidia", f"--simulate={RECORDING}", "--monitor-period=1s",
        "--bind-address=127.0.0.1", f"--secure-port={port}", "--node-name=node-a",
        f"--namespace={SYSTEM}", f"--kubeconfig={kubeconfig}",
        "--no-publish", "--no-device-plugin", "--no-confirm-grants", *guard,
    ]  # fmt: skip
    log = root / "device-manager.log"
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"https://127.0.0.1:{port}"
        _wait_listening(url, process, log)
        yield Guarded(url, tokens)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def test_a_scraper_bound_to_the_reader_role_reads_the_exposition(guarded: Guarded) -> None:
    deadline = time.monotonic() + 30
    while True:  # the exporter's first round follows the first monitor tick
        answer = _scrape(guarded.url, guarded.tokens[SCRAPER])
        if (answer.status_code == 200 and FAMILY in answer.text) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain"), answer.headers
    assert f"{FAMILY} 1.0" in answer.text


def test_an_account_bound_to_nothing_is_forbidden(guarded: Guarded) -> None:
    answer = _scrape(guarded.url, guarded.tokens[STRANGER])
    assert answer.status_code == 403, answer.text
    who = f"system:serviceaccount:{MONITORING}:{STRANGER}"
    assert answer.text.strip() == f'403 Forbidden: User "{who}" cannot get path "/metrics"'
    assert "gpustack_" not in answer.text


def test_no_token_is_unauthorized(guarded: Guarded) -> None:
    answer = _scrape(guarded.url)
    assert answer.status_code == 401, answer.text
    assert "gpustack_" not in answer.text


def test_a_token_the_api_server_does_not_know_is_unauthorized(guarded: Guarded) -> None:
    answer = _scrape(guarded.url, "not-a-token-anyone-issued")
    assert answer.status_code == 401, answer.text
    assert answer.text.strip() == "401 Unauthorized: the bearer token is not valid"
