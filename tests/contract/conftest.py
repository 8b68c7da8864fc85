"""The target the client contract suite runs against: a KubeClient and a scratch namespace.

By default the cluster stand-in; with ``GPUSTACK_CONTRACT_KUBECONFIG`` set (the kind workflow)
the same tests run against that cluster, and with ``GPUSTACK_E2E_CONTROL_PLANE=real``
(``./dev e2e-real``) against a real control plane this session starts, so the stand-in is held
to what a real API server answers. ``real_server`` is that real server for the differential
suite; without one its tests skip, saying so.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from contract_target import Server, Target

from gpustack_kube.client import KubeClient, NotFound
from gpustack_kube.config import load_config
from gpustack_simulator.testing import cluster_standin

REAL = os.environ.get("GPUSTACK_E2E_CONTROL_PLANE") == "real"


@pytest.fixture(scope="session")
def real_kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path | None]:
    """A real API server's kubeconfig (admin context current), or ``None`` without one."""
    given = os.environ.get("GPUSTACK_CONTRACT_KUBECONFIG")
    if given:
        yield Path(given)
        return
    if not REAL:
        yield None
        return
    state = tmp_path_factory.mktemp("contract-real")
    command = [sys.executable, "-m", "gpustack_cli", "simulator", "up", "--state-dir", str(state),
               "--scenario", "nvidia-mixed", "--control-plane", "real"]  # fmt: skip
    started = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert started.returncode == 0, f"simulator up failed:\n{started.stdout}\n{started.stderr}"
    try:
        yield state / "kubeconfig"
    finally:
        subprocess.run(
            [sys.executable, "-m", "gpustack_cli", "simulator", "down", "--state-dir", str(state)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip


@pytest.fixture
def real_server(real_kubeconfig: Path | None) -> Server:
    """The real API server as the differential suite speaks to it (admin bearer token)."""
    if real_kubeconfig is None:
        pytest.skip("no real API server in this run (./dev e2e-real starts one)")
    document = yaml.safe_load(real_kubeconfig.read_text())
    current = document["current-context"]
    context = next(c["context"] for c in document["contexts"] if c["name"] == current)
    cluster = next(c["cluster"] for c in document["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in document["users"] if u["name"] == context["user"])
    tls = ssl.create_default_context(cafile=cluster["certificate-authority"])
    version = httpx.get(cluster["server"] + "/version", verify=tls, trust_env=False,
                        headers={"Authorization": f"Bearer {user['token']}"}).json()  # fmt: skip
    return Server(cluster["server"], tls, user["token"], str(version["gitVersion"]))


@pytest.fixture
async def target(tmp_path: Path, real_kubeconfig: Path | None) -> AsyncIterator[Target]:
    namespace = f"contract-{uuid.uuid4().hex[:8]}"
    real = str(real_kubeconfig) if real_kubeconfig is not None else None
    if real:
        config = load_config(Path(real), context=None, environ={})
        assert config is not None
        async with KubeClient(config) as client:
            await client.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
            try:
                yield Target(client, namespace, simulated=False)
            finally:
                with contextlib.suppress(NotFound):
                    await client.delete(f"/api/v1/namespaces/{namespace}")
        return
    async with cluster_standin("nvidia-mixed", tmp_path) as cluster:
        config = load_config(cluster.kubeconfig, context="admin", environ={})
        assert config is not None
        async with KubeClient(config) as client:
            yield Target(client, namespace, simulated=True)
