"""The real control plane's pure parts: module pins, addresses, manifests, the chart's edits.

Expected values are Kubernetes' own (the tag's staging replaces, an RFC 2544 address plan, the
kustomize overlay's names) or read off the rendered objects; where a part needs Go, helm or the
module cache, the test skips and says which.
"""

from __future__ import annotations

import base64
import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gpustack_simulator.controlplane import binaries, bootstrap, kueue, metricsserver, nfd
from gpustack_simulator.controlplane.netns import Netns, NetnsError
from gpustack_simulator.scenario.schema import Rule, UserDoc

REPO = Path(__file__).resolve().parents[3]
CONTROLPLANE = REPO / "clusters" / "controlplane"


def _gomod() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gomod", CONTROLPLANE / "gomod.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_staging_modules_are_read_from_the_tags_replaces() -> None:
    gomod = _gomod()
    text = (
        "module k8s.io/kubernetes\n\nreplace (\n"
        "\tk8s.io/api => ./staging/src/k8s.io/api\n"
        "\tk8s.io/streaming => ./staging/src/k8s.io/streaming\n"
        "\tgithub.com/other/x => github.com/fork/x v1.0.0\n)\n"
    )
    assert gomod.staging_modules(text) == ["k8s.io/api", "k8s.io/streaming"]
    assert gomod.staging_version("v1.37.2") == "v0.37.2"
    with pytest.raises(ValueError, match="major version"):
        gomod.staging_version("v2.0.0")


def test_the_committed_gomod_pins_every_staging_module_at_the_tags_version() -> None:
    """Each staging module the kubernetes module replaces is pinned to v0.<minor>.<patch>."""
    gomod = _gomod()
    text = (CONTROLPLANE / "kubernetes" / "go.mod").read_text()
    replaces = gomod.replaces_of(text)
    expected_version = gomod.staging_version(gomod.KUBERNETES)
    assert len(replaces) >= 30  # 1.37 has 33 staging modules
    for line in replaces:
        source, _, target = line.partition(" => ")
        assert target == f"{source} {expected_version}", line
    assert gomod.pinned(text, "k8s.io/kubernetes", gomod.KUBERNETES)


@pytest.mark.skipif(shutil.which("go") is None, reason="go is not installed here")
def test_the_committed_gomods_match_what_the_script_derives() -> None:
    """``gomod.py --check`` against the module proxy: no staging module added or dropped."""
    done = subprocess.run(
        [sys.executable, str(CONTROLPLANE / "gomod.py"), "--check"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if done.returncode != 0 and "dial tcp" in done.stderr:
        pytest.skip("the Go module proxy is unreachable here")
    assert done.returncode == 0, done.stderr


def test_a_run_plans_addresses_inside_the_benchmarking_range() -> None:
    netns = Netns.plan("abc123", ["node-a", "node-b"])
    assert netns.host_address.startswith("198.18.")
    assert netns.host_address.endswith(".1")
    prefix = netns.host_address.rsplit(".", 1)[0]
    assert netns.node_addresses == {"node-a": f"{prefix}.10", "node-b": f"{prefix}.11"}
    assert Netns.plan("abc123", ["x"]).subnet == netns.subnet  # stable for a run id
    assert len(netns.host_link) <= 15  # Linux's IFNAMSIZ less its NUL
    with pytest.raises(NetnsError, match="240"):
        Netns.plan("big", [f"n{i}" for i in range(241)])


def _rendered() -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "gpustack-operator-worker", "namespace": "gpustack-system"},
         "spec": {"ports": [{"port": 443, "targetPort": "https"}]}},
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
         "metadata": {"name": "v1.worker.gpustack.ai"},
         "spec": {"service": {"name": "gpustack-operator-worker", "namespace": "gpustack-system",
                              "port": 443}, "insecureSkipTLSVerify": True}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": "w"},
         "webhooks": [{"name": "pods.validate.worker.gpustack.ai", "clientConfig": {
             "service": {"name": "gpustack-operator-worker", "namespace": "gpustack-system",
                         "path": "/validate-v1-pod", "port": 443}}}]},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "worker"}},
        {"apiVersion": "v1", "kind": "Secret",
         "metadata": {"name": "gpustack-operator-worker-generated-tls"}},
    ]  # fmt: skip


def test_the_chart_is_applied_with_the_worker_at_loopback_and_no_workloads() -> None:
    kept = bootstrap.for_this_machine(_rendered(), worker_port=31443, worker_ca=b"CA")
    kinds = {o["kind"] for o in kept}
    assert "Deployment" not in kinds  # no kubelet runs images here
    assert not any(o["kind"] == "Secret" for o in kept)  # the chart's self-made TLS pair
    service = next(o for o in kept if o["kind"] == "Service")
    assert service["spec"] == {
        "type": "ExternalName",
        "externalName": "127.0.0.1",
        "ports": [{"name": "https", "port": 31443, "protocol": "TCP"}],
    }
    api = next(o for o in kept if o["kind"] == "APIService")
    assert api["spec"]["service"]["port"] == 31443
    assert api["spec"]["caBundle"] == base64.b64encode(b"CA").decode()
    assert "insecureSkipTLSVerify" not in api["spec"]
    [hook] = next(o for o in kept if o["kind"] == "ValidatingWebhookConfiguration")["webhooks"]
    assert hook["clientConfig"]["service"]["port"] == 31443
    assert hook["clientConfig"]["caBundle"] == base64.b64encode(b"CA").decode()


def test_people_get_their_scenario_rules_as_rbac_and_tokens() -> None:
    viewer = UserDoc(
        name="viewer",
        groups=("system:authenticated",),
        rules=(Rule(api_groups=("worker.gpustack.ai",), resources=("instances",),
                    verbs=("get",), namespaces=("team-a",)),),
    )  # fmt: skip
    objects = bootstrap.user_rbac([viewer], skip=())
    binding = next(o for o in objects if o["kind"] == "RoleBinding")
    assert binding["metadata"]["namespace"] == "team-a"
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "viewer"}
    ]
    assert not any(o["kind"] == "ClusterRoleBinding" for o in objects)  # namespaced only
    line = bootstrap.token_file([viewer], {"viewer": "t0k"}).strip()
    assert line == 't0k,viewer,viewer,""'  # system:authenticated is implied


def _module_source(who: str, find: Callable[[Path], Path], folder: str) -> Path:
    """A component's source as ``clusters/controlplane/<folder>`` pins it; skip without Go."""
    if shutil.which("go") is None:
        pytest.skip("go is not installed here")
    try:
        return find(CONTROLPLANE / folder)
    except binaries.BinariesError as exc:
        pytest.skip(f"{who} module is not in the module cache: {exc}")


@pytest.fixture(scope="module")
def kueue_source() -> Path:
    return _module_source("Kueue's", kueue.module_dir, "kueue")


def test_kueue_is_installed_as_its_default_overlay_would(kueue_source: Path) -> None:
    objects = kueue.manifests(kueue_source, port=9443)
    crds = {o["spec"]["names"]["plural"]: o for o in objects
            if o["kind"] == "CustomResourceDefinition"}  # fmt: skip
    for plural in kueue.CONVERTED:
        conversion = crds[plural]["spec"]["conversion"]
        assert conversion["strategy"] == "Webhook"
        service = conversion["webhook"]["clientConfig"]["service"]
        assert (service["name"], service["namespace"], service["path"]) == (
            "kueue-webhook-service", "kueue-system", "/convert",
        )  # fmt: skip
    assert "conversion" not in crds["resourceflavors"]["spec"]
    configurations = [o for o in objects if o["kind"].endswith("WebhookConfiguration")]
    # The names Kueue's rotator injects its CA into (webhook service base name + type).
    assert {o["metadata"]["name"] for o in configurations} == {
        "kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration",
    }  # fmt: skip
    pods = next(w for o in configurations for w in o["webhooks"] if w["name"] == "mpod.kb.io")
    assert pods["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "kube-system", "kueue-system",
    ]  # fmt: skip
    bindings = [o for o in objects if o["kind"] in {"ClusterRoleBinding", "RoleBinding"}]
    assert bindings
    for binding in bindings:
        assert binding["subjects"] == [{"kind": "ServiceAccount",
                                        "name": "kueue-controller-manager",
                                        "namespace": "kueue-system"}]  # fmt: skip
        assert binding["roleRef"]["name"].startswith("kueue-")


def test_kueue_mounts_its_rotators_pair_only_once_it_is_written(tmp_path: Path) -> None:
    empty = {"data": {"tls.crt": "", "tls.key": ""}}
    assert not kueue.mount_secret(empty, tmp_path / "certs")
    written = {"data": {"tls.crt": base64.b64encode(b"CERT").decode(),
                        "tls.key": base64.b64encode(b"KEY").decode()}}  # fmt: skip
    assert kueue.mount_secret(written, tmp_path / "certs")
    assert (tmp_path / "certs" / "tls.crt").read_bytes() == b"CERT"
    assert (tmp_path / "certs" / "tls.key").stat().st_mode & 0o777 == 0o600


@pytest.fixture(scope="module")
def nfd_source() -> Path:
    return _module_source("NFD's", nfd.module_dir, "nfd")


def test_nfd_master_is_installed_from_its_own_deployment_base(nfd_source: Path) -> None:
    objects = nfd.manifests(nfd_source)
    crds = {
        o["spec"]["names"]["plural"] for o in objects if o["kind"] == "CustomResourceDefinition"
    }
    assert {"nodefeatures", "nodefeaturerules"} <= crds
    [binding] = [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "nfd-master", "namespace": "node-feature-discovery"}
    ]
    command = nfd.command(Path("/bin/nfd-master"), Path("/k"), 1234)
    allowed = next(a for a in command if a.startswith("-extra-label-ns="))
    # The namespaces docs/deploy.md tells an NFD install to allow for the chart's labels.
    deploy = (REPO / "docs" / "deploy.md").read_text()
    for namespace in allowed.removeprefix("-extra-label-ns=").split(","):
        assert namespace in deploy


@pytest.fixture(scope="module")
def metrics_server_source() -> Path:
    return _module_source("metrics-server's", metricsserver.module_dir, "metricsserver")


def test_metrics_server_is_installed_from_its_own_manifests(metrics_server_source: Path) -> None:
    """Its APIService and RBAC as shipped; only the Service and port say where it listens."""
    objects = metricsserver.manifests(metrics_server_source, port=4321)
    by_kind = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    service = by_kind["APIService", "v1beta1.metrics.k8s.io"]["spec"]
    assert (service["group"], service["version"]) == ("metrics.k8s.io", "v1beta1")
    expected = {"name": "metrics-server", "namespace": "kube-system", "port": 4321}
    assert service["service"] == expected
    assert by_kind["Service", "metrics-server"]["spec"]["externalName"] == "127.0.0.1"
    # what it needs of the cluster: reading nodes' metrics and Pods, delegated auth
    role = by_kind["ClusterRole", "system:metrics-server"]
    assert any("nodes/metrics" in r["resources"] for r in role["rules"])
    assert ("ClusterRoleBinding", "metrics-server:system:auth-delegator") in by_kind
    assert not any(o["kind"] == "Deployment" for o in objects)
