"""Issue #28 through kubectl on ``simulator up``: the gates, immutability, admission refusals.

The stand-in calls the worker's webhooks as kube-apiserver would (registered by ``up`` as the
chart registers them); every command is the one a user types and every assertion is on what
kubectl prints or reads back.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
import yaml
from e2e_system import System

from patience import HANG

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl here")

T = TypeVar("T")
INSTANCE = "instances.v1alpha1.worker.gpustack.ai"


def eventually(probe: Callable[[], T | None], what: str, timeout: float = HANG) -> T:
    """``probe()`` once truthy; the bound (``timeout`` or HANG, the longer) only catches a hang."""
    deadline = time.monotonic() + max(timeout, HANG)
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.25)
    pytest.fail(f"not within {timeout}s: {what}")


def create(system: System, body: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", system.endpoints.kubeconfig, "--context", "admin",
         "create", "--validate=false", "-f", "-"],
        input=yaml.safe_dump(body), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def instance(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "Instance",
            "metadata": {"name": name, "namespace": "team-ops"},
            "spec": {"image": "ubuntu:24.04", "command": ["sleep", "infinity"],
                     "resources": {"cpu": "1", "ram": "1Gi"}, **spec}}  # fmt: skip


def setting(system: System, key: str, value: str) -> None:
    encoded = base64.b64encode(value.encode()).decode()
    done = system.kubectl("-n", "gpustack-system", "patch", "secret", "gpustack-settings",
                          "--type=merge", "-p", json.dumps({"data": {key: encoded}}))  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.fixture
def gates_closed_after(system: System) -> Iterator[None]:
    yield
    setting(system, "instance-privileged-allowed", "false")
    setting(system, "instance-host-path-volume-allowed", "false")


def test_the_seeded_settings_are_the_defaults(system: System) -> None:
    done = system.kubectl("-n", "gpustack-system", "get", "secret", "gpustack-settings",
                          "-o", "json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = {k: base64.b64decode(v).decode() for k, v in json.loads(done.stdout)["data"].items()}
    assert data["instance-privileged-allowed"] == "false"
    assert data["instance-host-path-volume-allowed"] == "false"
    assert data["instance-ssh-server-image"] == "registry.example/gpustack/sshd:9.6"  # the demo's


def test_the_gates_through_kubectl(system: System, gates_closed_after: None) -> None:
    host = [{"mountPath": "/host", "hostPath": {"path": "/", "type": "Directory"}}]
    escape = instance("e2e-escape", privileged=True, additionalVolumes=host)
    refused = create(system, escape)
    assert refused.returncode != 0
    assert "spec.privileged: Forbidden: privileged Instances are not allowed" in refused.stderr
    assert "spec.additionalVolumes[0].hostPath: Forbidden" in refused.stderr
    setting(system, "instance-privileged-allowed", "true")
    setting(system, "instance-host-path-volume-allowed", "true")
    eventually(lambda: create(system, escape).returncode == 0, "admitted once both are true")
    setting(system, "instance-privileged-allowed", "false")
    setting(system, "instance-host-path-volume-allowed", "false")

    def patch(spec: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return system.kubectl("-n", "team-ops", "patch", INSTANCE, "e2e-escape",
                              "--type=merge", "-p", json.dumps({"spec": spec}))  # fmt: skip

    running = patch({"image": "ubuntu:25.04"})
    assert running.returncode != 0
    assert "spec.image may not change while the Instance runs: stop it first" in running.stderr
    assert patch({"stop": True}).returncode == 0
    assert patch({"image": "ubuntu:25.04"}).returncode == 0  # stopped: editable
    repointed = patch({"additionalVolumes": [{**host[0], "hostPath": {"path": "/etc"}}]})
    assert "spec.additionalVolumes[0].hostPath: Forbidden" in repointed.stderr
    assert patch({"stop": False}).returncode == 0  # restartable, holding both escapes
    done = system.kubectl("delete", INSTANCE, "-n", "team-ops", "e2e-escape", "--wait=false")
    assert done.returncode == 0, done.stderr


def test_a_bad_instance_is_refused_with_each_field(system: System) -> None:
    # Only what the CRD schema lets through (a real kube-apiserver refuses a duplicate list-map
    # key or a volume without a source itself, before any webhook): the webhook names each.
    bad = instance(
        "e2e-bad",
        nodeName="node-gone",
        resources={"cpu": "-1"},
        sshPublicKey={"name": "../../etc/shadow"},
        additionalVolumes=[{"mountPath": "/mnt//x", "configMap": {"name": "c"}}],
    )
    refused = create(system, bad)
    assert refused.returncode != 0
    for expected in (
        'spec.nodeName: Not found: "node-gone"',
        'spec.resources.cpu: Invalid value: "-1": must be greater than or equal to 0',
        'spec.sshPublicKey.name: Invalid value: "../../etc/shadow"',
        'spec.additionalVolumes[0].mountPath: Invalid value: "/mnt//x": must be an absolute, '
        "canonical path",
    ):
        assert expected in refused.stderr, refused.stderr
    assert system.kubectl("get", INSTANCE, "-n", "team-ops", "e2e-bad").returncode != 0


def test_a_refused_pod_is_on_the_instance(system: System) -> None:
    no_such_profile = {"accelerator": 1, "acceleratorPartitionedProfile": "9g.99gb"}
    unfit = instance("e2e-unfit", type="nvidia-h100-80gb-hbm3", resources=no_such_profile)
    made = create(system, unfit)
    assert made.returncode == 0, made.stderr

    def condition() -> dict[str, Any] | None:
        done = system.kubectl("get", INSTANCE, "-n", "team-ops", "e2e-unfit", "-o", "json")
        status = json.loads(done.stdout).get("status", {}) if done.returncode == 0 else {}
        found = [c for c in status.get("conditions") or [] if c["type"] == "PodCreated"]
        return found[0] if found and found[0]["status"] == "False" else None

    found = eventually(condition, "PodCreated False")
    assert "profile '9g.99gb' is not offered" in found["message"]
    done = system.kubectl("delete", INSTANCE, "-n", "team-ops", "e2e-unfit", "--wait=false")
    assert done.returncode == 0, done.stderr
