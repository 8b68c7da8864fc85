"""``kubectl get settings`` / ``patch setting`` against the stand-in, through the aggregator.

The worker runs as ``simulator up`` runs it (the stand-in's ``worker`` account, whose rules are
the chart's: the Secret ``gpustack-settings`` by name for list, watch and patch), serving over
real TLS; the stand-in's aggregator proxies ``gpustack.ai/v1`` to it with the front-proxy client
certificate, as kube-aggregator proxies the chart's APIService ``v1.gpustack.ai``. Every request
is real kubectl, as the reference's commands (``shared/reference/instancetypes.md``, "Settings
the chain reads") spell them.

Before this change every command here failed: ``gpustack.ai`` was not served, so kubectl
answered ``the server doesn't have a resource type "settings"``.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from gpustack_core.settings import KEYS
from gpustack_kube.client import KubeClient
from gpustack_kube.config import load_config
from gpustack_simulator.cluster.server import RunningCluster
from gpustack_simulator.scenario.schema import Rule, UserSpec
from gpustack_simulator.testing import cluster_standin
from gpustack_worker.daemon import Running, WorkerOptions, serve
from kubewait import eventually

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed here")

SYSTEM = "gpustack-system"
SECRET = f"/api/v1/namespaces/{SYSTEM}/secrets/gpustack-settings"
EDITOR = "settings-editor"
"""A user a Role in the release namespace grants the Settings (docs/settings.md's Role)."""
EDITOR_TOKEN = "settings-editor-token"


@dataclass
class Stack:
    cluster: RunningCluster
    worker: Running
    admin: KubeClient

    async def kubectl(
        self, *args: str, user: str = "admin", check: bool = True
    ) -> tuple[int, str, str]:
        assert KUBECTL is not None
        auth = ["--token", EDITOR_TOKEN] if user == EDITOR else ["--context", user]
        done = await trio.run_process(
            [KUBECTL, "--kubeconfig", str(self.cluster.kubeconfig), *auth, *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        out, err = done.stdout.decode(), done.stderr.decode()
        if check:
            assert done.returncode == 0, err
        return done.returncode, out, err

    async def secret(self) -> dict[str, str]:
        found = await self.admin.get(SECRET)
        return {k: base64.b64decode(v).decode() for k, v in found["data"].items()}


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with (
        cluster_standin("nvidia-mixed", tmp_path / "cluster") as cluster,
        trio.open_nursery() as nursery,
    ):
        # What docs/settings.md tells an administrator to bind: the Settings, in the release
        # namespace only.
        cluster.state.expanded.users.append(
            UserSpec(EDITOR, EDITOR_TOKEN, ("system:authenticated",))
        )
        cluster.state.expanded.rules[EDITOR] = (
            Rule(
                api_groups=("gpustack.ai",),
                resources=("settings",),
                verbs=("get", "list", "watch", "patch", "update"),
                namespaces=(SYSTEM,),
            ),
        )
        admin_config = load_config(cluster.kubeconfig, context="admin", environ={})
        assert admin_config is not None
        async with KubeClient(admin_config) as admin:
            # The release namespace exists on a cluster (kubectl checks it when a get is 404).
            await admin.create("/api/v1/namespaces", {"metadata": {"name": SYSTEM}})
            options = WorkerOptions(
                secure_port=0,
                bind_address="127.0.0.1",
                node_features=False,
                node_capacity=False,
                settings_environ={"GPUSTACK_INSTANCE_CPU_OVERCOMMIT": "2"},
            )
            kube = load_config(cluster.kubeconfig, context="worker", environ={})
            running: Running = await nursery.start(
                lambda task_status: serve(options, kube=kube, task_status=task_status)
            )
            cluster.state.set_worker(running.urls[0], str(running.certificate))
            await eventually(lambda: admin.get(SECRET), "the worker seeding gpustack-settings")
            try:
                yield Stack(cluster, running, admin)
            finally:
                cluster.state.set_worker(None)
                running.shutdown.set()


def rows(table: str) -> dict[str, list[str]]:
    """``kubectl get`` output: NAME → the row's cells split on runs of two or more spaces."""
    lines = [line for line in table.splitlines() if line.strip()]
    return {cells[0]: cells for cells in (re.split(r"\s{2,}", line.strip()) for line in lines)}


async def test_get_settings_prints_every_key_with_its_value_and_description(stack: Stack) -> None:
    _, out, _ = await stack.kubectl("-n", SYSTEM, "get", "settings")
    table = rows(out)
    assert table.pop("NAME") == ["NAME", "VALUE", "DESCRIPTION", "AGE"]
    assert list(table) == [key.name for key in KEYS]  # one Setting per key, the catalog's order
    assert table["instance-privileged-allowed"][1:3] == [
        "false",
        "whether an Instance may take spec.privileged (the container escape)",
    ]
    assert table["instance-cpu-overcommit"][1] == "2"  # seeded from GPUSTACK_INSTANCE_CPU_…
    # The short name and the category answer the same rows.
    _, short, _ = await stack.kubectl("-n", SYSTEM, "get", "set", "-o", "name")
    assert short.split() == [f"setting.gpustack.ai/{key.name}" for key in KEYS]
    _, category, _ = await stack.kubectl("-n", SYSTEM, "get", "gpustack", "-o", "name")
    assert category.split() == short.split()


async def test_get_one_setting_as_yaml(stack: Stack) -> None:
    _, out, _ = await stack.kubectl(
        "-n", SYSTEM, "get", "setting", "instance-type-aware-cpu-manufacturer", "-o", "json"
    )
    obj = json.loads(out)
    secret = await stack.admin.get(SECRET)
    assert obj["apiVersion"] == "gpustack.ai/v1"
    assert obj["kind"] == "Setting"
    assert obj["metadata"]["name"] == "instance-type-aware-cpu-manufacturer"
    assert obj["metadata"]["namespace"] == SYSTEM
    assert obj["metadata"]["resourceVersion"] == secret["metadata"]["resourceVersion"]
    assert obj["spec"] == {"value": "false"}
    _, text, _ = await stack.kubectl(
        "-n", SYSTEM, "get", "setting", "instance-type-aware-cpu-manufacturer", "-o", "yaml"
    )
    assert "kind: Setting" in text
    assert 'value: "false"' in text


async def test_patch_setting_writes_the_secret_and_the_worker_applies_it(stack: Stack) -> None:
    surface = stack.worker.surface
    assert surface.settings().instance_privileged_allowed is False
    _, out, _ = await stack.kubectl(
        "-n", SYSTEM, "patch", "setting", "instance-privileged-allowed",
        "--type", "merge", "-p", '{"spec":{"value":"true"}}',
    )  # fmt: skip
    assert out.strip() == "setting.gpustack.ai/instance-privileged-allowed patched"
    held = await stack.secret()
    assert held["instance-privileged-allowed"] == "true"
    assert held["instance-cpu-overcommit"] == "2"  # only its key was written
    await eventually(
        lambda: _true(surface.settings().instance_privileged_allowed), "the worker applying it"
    )
    _, shown, _ = await stack.kubectl(
        "-n", SYSTEM, "get", "setting", "instance-privileged-allowed",
        "-o", "jsonpath={.spec.value}",
    )  # fmt: skip
    assert shown == "true"


async def _true(value: bool) -> bool:
    return value


async def test_refusals_are_the_api_servers_and_change_nothing(stack: Stack) -> None:
    before = await stack.secret()
    code, _, err = await stack.kubectl(
        "-n", SYSTEM, "patch", "setting", "instance-privileged-allowed",
        "--type", "merge", "-p", '{"spec":{"value":"maybe"}}', check=False,
    )  # fmt: skip
    assert code == 1
    assert (
        'The Setting "instance-privileged-allowed" is invalid: spec.value: Invalid '
        "value: 'maybe': instance-privileged-allowed: 'maybe' is not a boolean (true or false)"
    ) in err
    code, _, err = await stack.kubectl(
        "-n", SYSTEM, "patch", "setting", "instance-privileged-allowed",
        "-p", '{"spec":{"value":"true"}}', check=False,
    )  # fmt: skip
    assert code == 1  # kubectl's default strategic merge: refused, naming --type=merge
    assert "application/strategic-merge-patch+json is not supported for Settings" in err
    assert "--type=merge" in err
    code, _, err = await stack.kubectl(
        "-n", SYSTEM, "get", "setting", "no-such-setting", check=False
    )
    assert code == 1
    assert 'settings.gpustack.ai "no-such-setting" not found' in err
    code, _, err = await stack.kubectl(
        "-n", "default", "patch", "setting", "instance-privileged-allowed",
        "--type", "merge", "-p", '{"spec":{"value":"true"}}', check=False,
    )  # fmt: skip
    assert code == 1
    assert 'settings.gpustack.ai "instance-privileged-allowed" not found' in err
    code, _, err = await stack.kubectl(
        "-n", SYSTEM, "delete", "setting", "instance-privileged-allowed", check=False
    )
    assert code == 1
    assert "MethodNotAllowed" in err or "not allow" in err
    _, out, _ = await stack.kubectl("-n", "default", "get", "settings", "-o", "json")
    assert json.loads(out)["items"] == []
    assert await stack.secret() == before


async def test_rbac_decides_who_reads_and_patches(stack: Stack) -> None:
    # A user with no grant on settings.gpustack.ai: forbidden, in the API server's words.
    code, _, err = await stack.kubectl(
        "-n", SYSTEM, "get", "settings", user="no-metrics", check=False
    )
    assert code == 1
    assert (
        'settings.gpustack.ai is forbidden: User "no-metrics" cannot list resource "settings" '
        'in API group "gpustack.ai" in the namespace "gpustack-system"'
    ) in err
    code, _, err = await stack.kubectl(
        "-n", SYSTEM, "patch", "setting", "workload-fit-affinity", "--type", "merge",
        "-p", '{"spec":{"value":"false"}}', user="team-a-viewer", check=False,
    )  # fmt: skip
    assert code == 1
    assert "forbidden" in err
    # The Role in the release namespace grants exactly that namespace.
    _, out, _ = await stack.kubectl("-n", SYSTEM, "get", "settings", "-o", "name", user=EDITOR)
    assert len(out.split()) == len(KEYS)
    await stack.kubectl(
        "-n", SYSTEM, "patch", "setting", "workload-fit-affinity", "--type", "merge",
        "-p", '{"spec":{"value":"false"}}', user=EDITOR,
    )  # fmt: skip
    assert (await stack.secret())["workload-fit-affinity"] == "false"
    code, _, err = await stack.kubectl("get", "settings", "-A", user=EDITOR, check=False)
    assert code == 1
    assert "at the cluster scope" in err


async def test_get_watch_prints_a_patched_value(stack: Stack, tmp_path: Path) -> None:
    assert KUBECTL is not None
    out = tmp_path / "watch.out"
    with out.open("wb") as sink:
        watcher = await trio.lowlevel.open_process(
            [KUBECTL, "--kubeconfig", str(stack.cluster.kubeconfig), "-n", SYSTEM,
             "get", "settings", "-w"],
            stdout=sink, stderr=sink,
        )  # fmt: skip
        try:
            await eventually(
                lambda: _true("workload-fit-affinity" in out.read_text()), "the initial list"
            )
            await stack.kubectl(
                "-n", SYSTEM, "patch", "setting", "instance-type-mixed-on-node",
                "--type", "merge", "-p", '{"spec":{"value":"false"}}',
            )  # fmt: skip

            async def moved() -> bool:
                lines = out.read_text().splitlines()
                return any(
                    line.split()[:2] == ["instance-type-mixed-on-node", "false"] for line in lines
                )

            await eventually(moved, "the watch printing the new value")
        finally:
            watcher.kill()
            await watcher.wait()


async def test_replace_is_an_update_conditional_on_the_secrets_version(
    stack: Stack, tmp_path: Path
) -> None:
    _, out, _ = await stack.kubectl(
        "-n", SYSTEM, "get", "setting", "instance-memory-overcommit", "-o", "json"
    )
    obj = json.loads(out)
    obj["spec"]["value"] = "1.5"
    manifest = tmp_path / "setting.json"
    manifest.write_text(json.dumps(obj))
    # The stand-in publishes no OpenAPI for kubectl to validate against (docs/scenarios.md).
    await stack.kubectl("replace", "--validate=false", "-f", str(manifest))
    assert (await stack.secret())["instance-memory-overcommit"] == "1.5"
    # The same body again carries the version it was read at, which the write above moved.
    obj["spec"]["value"] = "3"
    manifest.write_text(json.dumps(obj))
    code, _, err = await stack.kubectl(
        "replace", "--validate=false", "-f", str(manifest), check=False
    )
    assert code == 1
    assert (
        'Operation cannot be fulfilled on settings.gpustack.ai "instance-memory-overcommit": '
        "the object has been modified"
    ) in err
    assert (await stack.secret())["instance-memory-overcommit"] == "1.5"
