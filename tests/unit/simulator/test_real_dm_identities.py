"""On the real control plane each Device Manager runs as its own Pod would (issue #31, item 5).

The chart's own-node policy lets the Device Manager's account patch only Pods on the node its
token names, which kube-apiserver takes from the Pod the token is bound to. So ``simulator up
--control-plane real`` gives each Device Manager a token bound to its own Pod (a kubeconfig
context each), the fleet host runs each member on its own context, and the bootstrap applies
the policy. (That the real server then refuses a cross-node patch is
``tests/e2e/local/test_real_control_plane.py::test_a_device_manager_patches_only_its_own_nodes_pods``.)
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from gpustack_cli import fleet_host as cli_fleet
from gpustack_simulator.controlplane import bootstrap
from gpustack_simulator.controlplane import start as real_start
from gpustack_simulator.fleet_host import FleetSpec, Member
from gpustack_simulator.scenario import expand, find_scenario, load_scenario
from gpustack_simulator.up import RECORDINGS_DIR

RECORDING = str(RECORDINGS_DIR / "amd" / "rx7800xt.yaml")


def test_the_bootstrap_applies_the_own_node_policy() -> None:
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= (
        bootstrap.APPLIED_KINDS
    )


def test_a_pod_bound_token_names_the_pod_and_its_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, ...]] = []

    def run(self: bootstrap.Kubectl, *args: str, **_: Any) -> str:
        asked.append(args)
        return "3f1c-uid\n" if args[0] == "get" else "a-token\n"

    monkeypatch.setattr(bootstrap.Kubectl, "__call__", run)
    kubectl = bootstrap.Kubectl(Path("kubectl"), Path("kubeconfig"))
    assert kubectl.create_token("gpustack-system", "dm", pod="dm-pod-1") == "a-token"
    assert asked == [
        ("get", "pod", "dm-pod-1", "-n", "gpustack-system", "-o", "jsonpath={.metadata.uid}"),
        (
            "create", "token", "dm", "-n", "gpustack-system", "--duration=24h",
            "--bound-object-kind=Pod", "--bound-object-name=dm-pod-1",
            "--bound-object-uid=3f1c-uid",
        ),
    ]  # fmt: skip
    asked.clear()
    assert kubectl.create_token("gpustack-system", "dm") == "a-token"  # unbound: as before
    assert asked == [("create", "token", "dm", "-n", "gpustack-system", "--duration=24h")]


def test_each_fleet_member_gets_its_own_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        real_start, "_spawn_in", lambda *_, **__: SimpleNamespace(log=tmp_path / "fleet.log")
    )
    expanded = expand(load_scenario(find_scenario("demo")), base=RECORDINGS_DIR)
    addresses = {f"{dm.namespace}/{dm.name}": "10.0.0.2" for dm in expanded.device_managers}
    first, *rest = expanded.device_managers
    contexts = {(first.namespace, first.name): "device-manager-first"}
    (tmp_path / "logs").mkdir()
    real_start._start_device_managers(
        expanded, tmp_path, tmp_path / "kubeconfig", "2s", addresses, tmp_path, object(), [],
        "info", contexts=contexts,
    )  # fmt: skip
    spec = FleetSpec.from_json(json.loads((tmp_path / "fleet.json").read_text()))
    by_node = {m.node: m.context for m in spec.members}
    assert by_node[first.node] == "device-manager-first"
    assert all(by_node[dm.node] is None for dm in rest if dm.node != first.node)
    assert spec.context == "device-manager"  # the shared one, for members without their own


async def test_the_fleet_host_serves_each_member_on_its_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loaded: list[str | None] = []
    served: dict[str, Any] = {}

    def load(path: Path, *, context: str | None = None) -> str:
        loaded.append(context)
        return f"config:{context}"

    async def serve(options: Any, backend: Any, *, kube: Any, task_status: Any) -> None:
        served[options.node_name] = kube
        task_status.started(None)

    monkeypatch.setattr(cli_fleet, "load_config", load)
    monkeypatch.setattr(cli_fleet, "serve", serve)
    members = (
        Member("n1", "amd", RECORDING, "/tmp/proc", "127.0.0.2", 32443, context="dm-n1"),
        Member("n2", "amd", RECORDING, "/tmp/proc", "127.0.0.3", 32443),
    )
    spec = FleetSpec(members, kubeconfig="/tmp/kubeconfig", context="device-manager")
    async with trio.open_nursery() as nursery:
        fleet = await nursery.start(lambda task_status: cli_fleet.serve_fleet(spec,
                                    task_status=task_status))  # fmt: skip
        fleet.shutdown.set()
    assert served == {"n1": "config:dm-n1", "n2": "config:device-manager"}
    assert sorted(loaded, key=str) == ["device-manager", "dm-n1"]
