"""The operator Settings against the stand-in: seeded, back-filled, never overwritten, live.

``OperatorSettings`` runs with the stand-in's ``worker`` account, whose rules are the chart's
(the Secret by name for list/watch/patch, create in the system namespace, the deprecated
ConfigMap by name), so a call the chart does not grant fails here as a 403.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import trio

from gpustack_core.settings import KEYS, Settings
from gpustack_kube.client import KubeClient
from gpustack_kube.config import load_config
from gpustack_simulator.testing import cluster_standin
from gpustack_worker.settings import OperatorSettings
from kubewait import eventually

SYSTEM = "gpustack-system"
SECRETS = f"/api/v1/namespaces/{SYSTEM}/secrets"
CONFIGMAPS = f"/api/v1/namespaces/{SYSTEM}/configmaps"
SECRET = f"{SECRETS}/gpustack-settings"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def text_of(secret: dict[str, Any]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


class Clients:
    def __init__(self, admin: KubeClient, worker: KubeClient, nursery: trio.Nursery) -> None:
        self.admin = admin
        self.worker = worker
        self.nursery = nursery

    def start(self, environ: dict[str, str] | None = None) -> OperatorSettings:
        """A worker's Settings, as the daemon starts them (the worker's own account)."""
        settings = OperatorSettings(self.worker, SYSTEM, environ=environ or {}, configmap_wait=1)
        self.nursery.start_soon(settings.run)
        return settings


@pytest.fixture
async def clients(tmp_path: Path) -> AsyncIterator[Clients]:
    async with cluster_standin("nvidia-mixed", tmp_path) as cluster:
        admin_config = load_config(cluster.kubeconfig, context="admin", environ={})
        worker_config = load_config(cluster.kubeconfig, context="worker", environ={})
        assert admin_config is not None
        assert worker_config is not None
        async with (
            KubeClient(admin_config) as admin,
            KubeClient(worker_config) as worker,
            trio.open_nursery() as nursery,
        ):
            yield Clients(admin, worker, nursery)
            nursery.cancel_scope.cancel()


async def test_a_first_start_seeds_every_key_from_the_environment_or_the_default(
    clients: Clients,
) -> None:
    settings = clients.start({"GPUSTACK_INSTANCE_HOST_PATH_VOLUME_ALLOWED": "true",
                              "GPUSTACK_INSTANCE_CPU_OVERCOMMIT": "not a number"})  # fmt: skip
    secret = await eventually(lambda: clients.admin.get(SECRET), "the Secret created")
    assert text_of(secret) == {
        "instance-privileged-allowed": "false",
        "instance-host-path-volume-allowed": "true",
        "instance-isolation-pod-cidrs": "",
        "instance-ssh-server-image": "",
        "instance-cpu-overcommit": "1",  # the variable did not parse: the default is seeded
        "instance-memory-overcommit": "1",
        # The InstanceType chain's, at the reference's defaults (shared/reference/instancetypes.md).
        "instance-type-derived-from-node": "true",
        "instance-type-aware-cpu-manufacturer": "false",
        "instance-type-mixed-on-node": "true",
        "instance-type-drain-when-no-flavors": "true",
        "node-management-manual": "false",  # nodes onboarded (the same reference)
        "workload-fit-affinity": "true",  # the node-devices check's pin (the same reference)
    }
    assert secret["type"] == "Opaque"
    await eventually(lambda: _true(settings.current.instance_host_path_volume_allowed), "read")
    assert settings.current.instance_privileged_allowed is False


async def _true(value: bool) -> bool:
    return value


async def test_a_later_start_back_fills_and_never_overwrites(clients: Clients) -> None:
    await clients.admin.create(SECRETS, {
        "metadata": {"name": "gpustack-settings", "namespace": SYSTEM},
        "data": {"instance-privileged-allowed": b64("true"), "instance-cpu-overcommit": b64("3")},
    })  # fmt: skip
    settings = clients.start({"GPUSTACK_INSTANCE_PRIVILEGED_ALLOWED": "false"})

    async def complete() -> dict[str, str] | None:
        found = text_of(await clients.admin.get(SECRET))
        return found if len(found) == len(KEYS) else None

    found = await eventually(complete, "the missing keys back-filled")
    assert found["instance-privileged-allowed"] == "true"  # held: the variable does not win
    assert found["instance-cpu-overcommit"] == "3"
    assert found["instance-memory-overcommit"] == "1"
    await eventually(lambda: _true(settings.current.instance_privileged_allowed), "read")
    assert settings.current.instance_cpu_overcommit == Fraction(3)


async def test_a_change_applies_live_and_a_bad_value_keeps_the_last_good_one(
    clients: Clients, caplog: pytest.LogCaptureFixture
) -> None:
    settings = clients.start()
    seen: list[Settings] = []
    settings.add_handler(seen.append)
    await eventually(lambda: clients.admin.get(SECRET), "the Secret created")
    await clients.admin.patch(SECRET, {"data": {"instance-privileged-allowed": b64("true")}})
    await eventually(lambda: _true(settings.current.instance_privileged_allowed), "live")
    assert seen[-1].instance_privileged_allowed is True
    caplog.set_level(logging.WARNING, "gpustack.worker.settings")
    bad = {"instance-privileged-allowed": b64("maybe"), "instance-ssh-server-image": b64("sshd:9")}
    await clients.admin.patch(SECRET, {"data": bad})
    await eventually(lambda: _true(settings.current.instance_ssh_server_image == "sshd:9"), "read")
    assert settings.current.instance_privileged_allowed is True  # the last good value
    refusals = [r.getMessage() for r in caplog.records if "Setting refused" in r.getMessage()]
    assert refusals == [
        "Setting refused: gpustack-settings instance-privileged-allowed: 'maybe' is not a "
        "boolean (true or false); keeping the previous value"
    ]


async def test_the_deprecated_configmap_seeds_the_secret_and_is_warned_about_once(
    clients: Clients, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gpustack.worker.settings")
    await clients.admin.create(CONFIGMAPS, {
        "metadata": {"name": "gpustack-operator-settings", "namespace": SYSTEM},
        "data": {"instance-sshd-image": "registry.example/sshd:9.6",
                 "instance-isolation-pod-cidrs": "10.244.0.0/16"},
    })  # fmt: skip
    settings = clients.start()
    secret = await eventually(lambda: clients.admin.get(SECRET), "the Secret created")
    assert text_of(secret)["instance-ssh-server-image"] == "registry.example/sshd:9.6"
    assert text_of(secret)["instance-isolation-pod-cidrs"] == "10.244.0.0/16"
    await eventually(
        lambda: _true(settings.current.instance_ssh_server_image == "registry.example/sshd:9.6"),
        "the migrated value in force",
    )
    await trio.sleep(0.5)  # relists and the Secret's own events re-resolve: still one warning
    warnings = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "move them to the Secret and delete it" in warnings[0]
    # An edit there no longer applies (the Secret holds the key), and the warning says so.
    edited = {"data": {"instance-sshd-image": "registry.example/sshd:10"}}
    await clients.admin.patch(f"{CONFIGMAPS}/gpustack-operator-settings", edited)

    async def shadowed() -> list[str]:
        return [r.getMessage() for r in caplog.records if "is not applied" in r.getMessage()]

    (said,) = await eventually(shadowed, "the shadowing warning")
    assert said == (
        "gpustack-operator-settings instance-sshd-image='registry.example/sshd:10' is not "
        "applied: the Secret gpustack-settings holds "
        "instance-ssh-server-image='registry.example/sshd:9.6'"
    )
    assert settings.current.instance_ssh_server_image == "registry.example/sshd:9.6"
