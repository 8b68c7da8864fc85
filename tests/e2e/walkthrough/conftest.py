"""The InstanceType walkthrough's own cluster: ``simulator up --scenario walkthrough``, once.

The walkthrough (``shared/spec/instancetype-walkthrough.md``) is replayed on its four nodes, not
on the demo's, so it needs a cluster of its own: it is started here for this directory's module
and taken down after it. It must never be up beside the local suite's (``tests/e2e/local``, the
demo scenario): both start Device Managers and, on the real control plane, network namespaces
and a kube-apiserver. ``pyproject.toml`` therefore leaves this directory out of the default
collection and the justfile runs it as a pytest invocation of its own (``just test`` after the
suite, ``just e2e-real`` after the local suite).

Two targets, as the local suite: the cluster stand-in (the default) and, with
``GPUSTACK_E2E_CONTROL_PLANE=real``, the real control plane with real Kueue v0.17 and nfd-master.

``GPUSTACK_E2E_WALKTHROUGH_STATE_DIR``: the state directory of a walkthrough cluster already up
(``simulator up --scenario walkthrough``), used as it is and left up — for iterating on the
replay without paying a real control plane's start each run. Unset: a fresh one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

# The local suite's System and helpers, imported by their own names (e2e_system, e2e_helpers).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "local"))

from e2e_system import CONTROL_PLANE, System, cli

from gpustack_simulator.up import Endpoints

REUSE = os.environ.get("GPUSTACK_E2E_WALKTHROUGH_STATE_DIR", "")


def _system(state_dir: Path) -> System:
    document = yaml.safe_load((state_dir / "kubeconfig").read_text())
    tokens = {u["name"]: u["user"]["token"] for u in document["users"]}
    return System(state_dir, Endpoints.load(state_dir), tokens, real=CONTROL_PLANE == "real")


@pytest.fixture(scope="module")
def walkthrough_system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    if REUSE:
        yield _system(Path(REUSE))
        return
    state_dir = tmp_path_factory.mktemp("walkthrough")
    started = cli(
        "simulator", "up", "--state-dir", str(state_dir), "--scenario", "walkthrough",
        "--control-plane", CONTROL_PLANE, "--monitor-period", "2s", timeout=600,
    )  # fmt: skip
    try:
        # Inside the try: an up that failed half-way still has its processes stopped.
        assert started.returncode == 0, f"simulator up failed:\n{started.stdout}\n{started.stderr}"
        yield _system(state_dir)
    finally:
        stopped = cli("simulator", "down", "--state-dir", str(state_dir))
        assert stopped.returncode == 0, stopped.stderr
