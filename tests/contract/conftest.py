"""The target the client contract suite runs against: a KubeClient and a scratch namespace.

By default the cluster stand-in; with ``GPUSTACK_CONTRACT_KUBECONFIG`` set (the kind workflow)
the same tests run against that cluster, so the stand-in is held to what a real API server
answers.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from contract_target import Target

from gpustack_kube.client import KubeClient, NotFound
from gpustack_kube.config import load_config
from gpustack_simulator.testing import cluster_standin


@pytest.fixture
async def target(tmp_path: Path) -> AsyncIterator[Target]:
    namespace = f"contract-{uuid.uuid4().hex[:8]}"
    real = os.environ.get("GPUSTACK_CONTRACT_KUBECONFIG")
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
