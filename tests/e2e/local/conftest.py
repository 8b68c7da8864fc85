"""The running system for the local end-to-end suite: ``simulator up`` once, ``down`` at the end.

The suite drives the product the way a user does — the console script in its own processes,
kubectl against the cluster, Prometheus discovering the Device Managers — so the fixture uses
the same two commands a person would type, and reads ``endpoints.json`` for everything else.

Two targets, one suite: the cluster stand-in (the default) and, with
``GPUSTACK_E2E_CONTROL_PLANE=real``, a real kube-apiserver, controller-manager and scheduler
built from their Go modules (``./dev e2e-real``). A test that needs what only the stand-in has
(its ``/simulator/v1`` control endpoint that moves scenario time or injects faults) skips on
the real one, saying so.

``server`` is etcd and kube-apiserver alone (:mod:`apiserver_fixture`), for the tests of what
only the real server decides (admission CEL, bound tokens, reviews); one per test module.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml
from apiserver_fixture import Server, running_apiserver
from e2e_system import CONTROL_PLANE, System, cli

from gpustack_simulator.up import Endpoints


@pytest.fixture(scope="session")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    state_dir = tmp_path_factory.mktemp("system")
    started = cli(
        "simulator", "up", "--state-dir", str(state_dir), "--monitor-period", "2s",
        "--control-plane", CONTROL_PLANE, timeout=600,
    )  # fmt: skip
    try:
        # Inside the try: an up that failed half-way still has its processes stopped.
        assert started.returncode == 0, f"simulator up failed:\n{started.stdout}\n{started.stderr}"
        document = yaml.safe_load((state_dir / "kubeconfig").read_text())
        tokens = {u["name"]: u["user"]["token"] for u in document["users"]}
        yield System(state_dir, Endpoints.load(state_dir), tokens, real=CONTROL_PLANE == "real")
    finally:
        stopped = cli("simulator", "down", "--state-dir", str(state_dir))
        assert stopped.returncode == 0, stopped.stderr


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """etcd and kube-apiserver with the control plane's usual flags, for one test module."""
    with running_apiserver(tmp_path_factory.mktemp("apiserver")) as ready:
        yield ready
