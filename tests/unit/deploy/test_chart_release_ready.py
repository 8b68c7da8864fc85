"""What a platform engineer hits installing and upgrading a release (issue #31, item 6).

The release's chart deploys the release's image (never ``docker.io/library/…``), upgrades say
how the CRDs move and keep values with ``--reset-then-reuse-values``, GKE gets the quota its
critical priority classes need outside kube-system, GitOps has a CA that does not change at every
render, and the PodResources directory is mounted read-only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helm import CHART, NAMESPACE, REPO, find, helm, needs_helm, of_kind, render, render_fails

DEPLOY = REPO / "docs" / "deploy.md"
RELEASE = REPO / ".github" / "workflows" / "release.yml"
PROJECT_IMAGE = "ghcr.io/gpustack/gpustack-operator"


def _app_version() -> str:
    version: str = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    return version


def _containers(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        c
        for w in of_kind(objects, "DaemonSet") + of_kind(objects, "Deployment")
        for c in w["spec"]["template"]["spec"]["containers"]
    ]


@needs_helm
def test_the_default_image_is_the_projects_at_the_app_version() -> None:
    images = {c["image"] for c in _containers(render())}
    assert images == {f"{PROJECT_IMAGE}:{_app_version()}"}
    for image in images:
        registry = image.split("/", 1)[0]
        assert "." in registry  # a registry host, never docker.io/library by default
        assert registry != "docker.io"


@needs_helm
@pytest.mark.parametrize("repository", ["gpustack-operator", "gpustack/gpustack-operator"])
def test_a_repository_that_is_not_fully_qualified_is_refused(repository: str) -> None:
    said = render_fails({"image": {"repository": repository}})
    assert "/image/repository" in said


def _release_script() -> str:
    workflow = yaml.safe_load(RELEASE.read_text())
    [script] = [s["run"] for s in workflow["jobs"]["chart"]["steps"] if "run" in s]
    text: str = script
    return text


def test_the_release_writes_its_own_image_into_the_packaged_values(tmp_path: Path) -> None:
    """The release job's own lines, run up to packaging, on a copy of the chart's values."""
    script = _release_script()
    before_helm = script[: script.index("\nhelm ")]
    (tmp_path / "clusters" / "chart").mkdir(parents=True)
    original = (CHART / "values.yaml").read_text()
    (tmp_path / "clusters" / "chart" / "values.yaml").write_text(original)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", before_helm],
        cwd=tmp_path,
        env={"REPOSITORY_OWNER": "Some-Org", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    written = (tmp_path / "clusters" / "chart" / "values.yaml").read_text()
    assert yaml.safe_load(written)["image"]["repository"] == "ghcr.io/some-org/gpustack-operator"
    changed = [
        (a, b) for a, b in zip(original.splitlines(), written.splitlines(), strict=True) if a != b
    ]
    assert changed == [
        (f"  repository: {PROJECT_IMAGE}", "  repository: ghcr.io/some-org/gpustack-operator")
    ]
    # And it packages at the tag's version as appVersion, the image's tag.
    assert '--version "$VERSION" --app-version "$VERSION"' in script
    helm_lines = [line for line in script.splitlines() if line.lstrip().startswith("helm ")]
    assert not any("--set" in line for line in helm_lines)  # the lint checks what is packaged


@needs_helm
def test_pod_resources_is_mounted_read_only() -> None:
    for daemonset in of_kind(render(), "DaemonSet"):
        [container] = daemonset["spec"]["template"]["spec"]["containers"]
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["pod-resources"]["readOnly"] is True
        # The plugin's own sockets are created beside kubelet.sock: that one stays writable.
        assert not mounts["device-plugins"].get("readOnly", False)


QUOTA = "gpustack-operator-critical-pods"


@needs_helm
def test_the_critical_priority_classes_get_their_quota_outside_kube_system() -> None:
    quota = find(render(), "ResourceQuota", QUOTA)
    assert quota["metadata"]["namespace"] == NAMESPACE
    assert quota["spec"]["scopeSelector"] == {
        "matchExpressions": [
            {
                "scopeName": "PriorityClass",
                "operator": "In",
                "values": ["system-cluster-critical", "system-node-critical"],
            }
        ]
    }
    assert quota["spec"]["hard"] == {"pods": "1G"}
    only_dm = render({"worker": {"priorityClassName": "high"}})
    values = find(only_dm, "ResourceQuota", QUOTA)["spec"]["scopeSelector"]["matchExpressions"]
    assert values[0]["values"] == ["system-node-critical"]
    for objects in (
        render({"criticalPodsQuota": {"enabled": False}}),
        render({"worker": {"priorityClassName": ""}, "deviceManager": {"priorityClassName": ""}}),
        render(extra=("--namespace", "kube-system")),
    ):
        assert not of_kind(objects, "ResourceQuota")


def _twice(values: dict[str, Any]) -> tuple[str, str]:
    """Two independent ``helm template`` runs (not the cached renderer): what GitOps does."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        handle.write(json.dumps(values))
    try:
        args = ("template", "gpustack-operator", str(CHART), "--namespace", NAMESPACE)
        first, second = (helm(*args, "-f", handle.name) for _ in range(2))
    finally:
        os.unlink(handle.name)
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    return first.stdout, second.stdout


CA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="


@needs_helm
@pytest.mark.parametrize(
    "values",
    [
        {"worker": {"tls": {"certManager": {"enabled": True}}}},
        {"worker": {"tls": {"secretName": "worker-tls", "caBundle": CA}}},
    ],
    ids=["cert-manager", "pre-made-secret"],
)
def test_the_gitops_paths_render_the_same_at_every_sync(values: dict[str, Any]) -> None:
    first, second = _twice(values)
    assert first == second
    assert "gpustack-operator-worker-generated-tls" not in first


@needs_helm
def test_the_default_issues_a_new_ca_at_every_render_which_the_notes_say() -> None:
    """Why GitOps needs one of the paths above: without lookup, every render is a new CA."""
    first, second = _twice({})
    assert first != second
    done = helm("install", "gpustack-operator", str(CHART), "--namespace", NAMESPACE,
                "--dry-run=client")  # fmt: skip
    assert done.returncode == 0, done.stderr
    notes = done.stdout[done.stdout.index("NOTES:") :]
    assert "Argo CD and Flux" in notes
    assert "worker.tls.certManager.enabled=true" in notes


def _section(title: str) -> str:
    text = DEPLOY.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end]


def test_the_upgrade_applies_every_crd_server_side_and_resets_then_reuses_values() -> None:
    upgrade = _section("Upgrade and uninstall")
    commands = re.findall(r"```bash\n(.*?)```", upgrade, re.S)
    joined = "\n".join(commands)
    assert (
        "kubectl apply --server-side --force-conflicts -f /tmp/gpustack/gpustack-operator/crds/"
        in (joined)
    )
    assert joined.index("kubectl apply --server-side") < joined.index("helm upgrade")
    assert "--reset-then-reuse-values" in joined
    assert not re.search(r"--reuse-values\b", joined.replace("--reset-then-reuse-values", ""))
    # The whole crds/ directory: every CRD the chart ships is applied, not one named file.
    assert len(list((CHART / "crds").glob("*.yaml"))) > 1
    assert "clusters/chart/crds/" in upgrade


def test_the_docs_say_which_ca_to_use_under_gitops() -> None:
    section = _section("The worker's serving certificate")
    gitops = section[section.index("**Argo CD and Flux.**") :]
    assert "worker.tls.certManager.enabled: true" in gitops
    assert "`worker.tls.secretName` and `worker.tls.caBundle`" in gitops


def test_the_gke_note_names_the_quota() -> None:
    managed = _section("Managed clusters: GKE, EKS, AKS")
    assert "gpustack-operator-critical-pods" in managed
    assert "insufficient quota to match these scopes" in managed
