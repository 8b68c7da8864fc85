"""The ``Setting`` resource on the real control plane: kube-aggregator, real RBAC, real kubectl.

``simulator up --control-plane real`` applies the chart as rendered, so the APIService
``v1.gpustack.ai`` is the chart's, pointing at the worker's Service; kube-aggregator proxies
``gpustack.ai/v1`` to the worker with its front-proxy certificate and the caller's identity,
and the worker asks the real authorizer (a SubjectAccessReview) before it reads or patches the
Secret. Every command is the reference's (``shared/reference/instancetypes.md``, "Settings the
chain reads"). Users other than the administrator are impersonated (``kubectl --as``), which
the aggregator forwards as the impersonated identity, so RBAC is decided for them.

Runs only with ``GPUSTACK_E2E_CONTROL_PLANE=real``: the stand-in's half is
``tests/integration/test_settings_resource.py``.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import yaml
from e2e_system import CONTROL_PLANE, System

from gpustack_core.settings import KEYS
from patience import HANG

pytestmark = [
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl here"),
    pytest.mark.skipif(CONTROL_PLANE != "real", reason="GPUSTACK_E2E_CONTROL_PLANE=real only"),
]

T = TypeVar("T")
SYSTEM = "gpustack-system"
EDITOR = "settings-editor@example.com"
ROLE = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "gpustack-settings-editor", "namespace": SYSTEM},
        "rules": [
            {
                "apiGroups": ["gpustack.ai"],
                "resources": ["settings"],
                "verbs": ["get", "list", "watch", "patch", "update"],
            }
        ],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "gpustack-settings-editor", "namespace": SYSTEM},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "gpustack-settings-editor",
        },
        "subjects": [{"kind": "User", "name": EDITOR, "apiGroup": "rbac.authorization.k8s.io"}],
    },
]
"""docs/settings.md's Role, bound to one user."""
EDITOR_SED = """sed -i 's/^  value: .*/  value: "true"/'"""
"""``kubectl edit``'s editor (run through ``sh -c``): sets ``spec.value`` to ``"true"``."""


def eventually(probe: Callable[[], T | None], what: str, timeout: float = HANG) -> T:
    """``probe()`` once truthy; the bound (``timeout`` or HANG, the longer) only catches a hang."""
    deadline = time.monotonic() + max(timeout, HANG)
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.5)
    pytest.fail(f"not within {timeout}s: {what}")


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def secret(system: System) -> dict[str, str]:
    out = ok(system.kubectl("-n", SYSTEM, "get", "secret", "gpustack-settings", "-o", "json"))
    return {k: base64.b64decode(v).decode() for k, v in json.loads(out)["data"].items()}


def patch(
    system: System, name: str, value: object, *extra: str
) -> subprocess.CompletedProcess[str]:
    body = json.dumps({"spec": {"value": value}})
    return system.kubectl(
        "-n", SYSTEM, "patch", "setting", name, "--type", "merge", "-p", body, *extra
    )


@pytest.fixture
def served(system: System) -> Iterator[System]:
    """The APIService Available and kubectl discovering ``settings``; the values put back."""

    def available() -> bool:
        done = system.kubectl("get", "apiservice", "v1.gpustack.ai", "-o", "json")
        if done.returncode != 0:
            return False
        conditions = json.loads(done.stdout).get("status", {}).get("conditions", [])
        return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)

    eventually(available, "the APIService v1.gpustack.ai Available")
    eventually(
        lambda: "settings" in system.kubectl("api-resources", "--api-group=gpustack.ai").stdout,
        "kubectl discovering settings.gpustack.ai",
    )
    before = secret(system)
    yield system
    for key in ("instance-type-aware-cpu-manufacturer", "workload-fit-affinity"):
        patch(system, key, before[key])


def test_get_and_patch_through_the_real_aggregator(served: System) -> None:
    system = served
    table = ok(system.kubectl("-n", SYSTEM, "get", "settings"))
    rows = [re.split(r"\s{2,}", line.strip()) for line in table.splitlines() if line.strip()]
    assert rows[0] == ["NAME", "VALUE", "DESCRIPTION", "AGE"]
    assert [row[0] for row in rows[1:]] == [key.name for key in KEYS]
    assert ok(system.kubectl("-n", SYSTEM, "get", "set", "-o", "name")).split() == [
        f"setting.gpustack.ai/{key.name}" for key in KEYS
    ]

    name = "instance-type-aware-cpu-manufacturer"
    shown = yaml.safe_load(ok(system.kubectl("-n", SYSTEM, "get", "setting", name, "-o", "yaml")))
    assert shown["apiVersion"] == "gpustack.ai/v1"
    assert shown["kind"] == "Setting"
    assert shown["metadata"]["namespace"] == SYSTEM
    assert shown["spec"] == {"value": secret(system)[name]}

    assert ok(patch(system, name, "true")).strip() == f"setting.gpustack.ai/{name} patched"
    assert secret(system)[name] == "true"
    value = system.kubectl("-n", SYSTEM, "get", "setting", name, "-o", "jsonpath={.spec.value}")
    assert ok(value) == "true"


def test_refusals_on_the_real_control_plane(served: System) -> None:
    system = served
    before = secret(system)
    refused = patch(system, "workload-fit-affinity", "maybe")
    assert refused.returncode == 1
    assert (
        'The Setting "workload-fit-affinity" is invalid: spec.value: Invalid value: '
        "'maybe': workload-fit-affinity: 'maybe' is not a boolean (true or false)"
    ) in refused.stderr
    refused = patch(system, "workload-fit-affinity", False)
    assert refused.returncode == 1
    assert "must be a string" in refused.stderr
    missing = system.kubectl("-n", SYSTEM, "get", "setting", "no-such-setting")
    assert missing.returncode == 1
    assert 'settings.gpustack.ai "no-such-setting" not found' in missing.stderr
    elsewhere = system.kubectl(
        "-n", "default", "patch", "setting", "workload-fit-affinity", "--type", "merge",
        "-p", '{"spec":{"value":"false"}}',
    )  # fmt: skip
    assert elsewhere.returncode == 1
    assert 'settings.gpustack.ai "workload-fit-affinity" not found' in elsewhere.stderr
    deleted = system.kubectl("-n", SYSTEM, "delete", "setting", "workload-fit-affinity")
    assert deleted.returncode == 1
    assert "MethodNotAllowed" in deleted.stderr or "not allowed" in deleted.stderr
    assert secret(system) == before


def test_rbac_decides_for_the_impersonated_caller(served: System) -> None:
    system = served
    ok(_apply(system))
    as_editor = ("--as", EDITOR)
    listed = ok(system.kubectl("-n", SYSTEM, "get", "settings", "-o", "name", *as_editor))
    assert len(listed.split()) == len(KEYS)
    ok(patch(system, "workload-fit-affinity", "false", *as_editor))
    assert secret(system)["workload-fit-affinity"] == "false"
    cluster_wide = system.kubectl("get", "settings", "-A", *as_editor)
    assert cluster_wide.returncode == 1
    assert "at the cluster scope" in cluster_wide.stderr
    stranger = system.kubectl("-n", SYSTEM, "get", "settings", "--as", "nobody@example.com")
    assert stranger.returncode == 1
    assert (
        'settings.gpustack.ai is forbidden: User "nobody@example.com" cannot list resource '
        '"settings" in API group "gpustack.ai" in the namespace "gpustack-system"'
    ) in stranger.stderr


def _apply(system: System) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", system.endpoints.kubeconfig, "--context", "admin",
         "apply", "-f", "-"],
        input=yaml.safe_dump_all(ROLE), capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "KUBECONFIG": ""},
    )  # fmt: skip


def test_edit_replace_and_watch(served: System) -> None:
    system = served
    name = "instance-type-aware-cpu-manufacturer"
    ok(patch(system, name, "false"))
    # kubectl edit, with an editor that flips the value.
    edited = subprocess.run(
        ["kubectl", "--kubeconfig", system.endpoints.kubeconfig, "--context", "admin",
         "-n", SYSTEM, "edit", "setting", name],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "KUBECONFIG": "", "KUBE_EDITOR": EDITOR_SED},
    )  # fmt: skip
    assert edited.returncode == 0, edited.stderr
    assert secret(system)[name] == "true"
    # kubectl replace of what was read: an update conditional on the Secret's version.
    obj = json.loads(ok(system.kubectl("-n", SYSTEM, "get", "setting", name, "-o", "json")))
    obj["spec"]["value"] = "false"
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as manifest:
        json.dump(obj, manifest)
    replaced = system.kubectl("replace", "-f", manifest.name)
    assert replaced.returncode == 0, replaced.stderr
    assert secret(system)[name] == "false"
    stale = system.kubectl("replace", "-f", manifest.name)
    assert stale.returncode == 1
    assert f'Operation cannot be fulfilled on settings.gpustack.ai "{name}"' in stale.stderr
    Path(manifest.name).unlink()

    with tempfile.TemporaryFile("w+") as out:
        watcher = subprocess.Popen(
            ["kubectl", "--kubeconfig", system.endpoints.kubeconfig, "--context", "admin",
             "-n", SYSTEM, "get", "settings", "-w"],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "KUBECONFIG": ""},
        )  # fmt: skip
        try:

            def printed(predicate: Callable[[list[str]], bool]) -> bool:
                out.seek(0)
                return any(predicate(line.split()) for line in out.read().splitlines())

            eventually(lambda: printed(lambda cells: cells[:1] == [name]), "the initial list")
            ok(patch(system, name, "true"))
            eventually(lambda: printed(lambda cells: cells[:2] == [name, "true"]), "the change")
        finally:
            watcher.kill()
            watcher.wait()
