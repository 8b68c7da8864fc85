"""Fleet mode: a generated scenario that the unchanged checks accept, and many Device Managers
in one process, each serving its own node over HTTPS.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import trio
from typer.testing import CliRunner

from gpustack_cli.fleet_host import options_for, serve_fleet
from gpustack_cli.main import app
from gpustack_core.snapshot import parse_snapshot
from gpustack_kube.config import load_config
from gpustack_simulator.fleet import FleetError, Mix, cards_of, generate, to_yaml
from gpustack_simulator.fleet_host import FleetSpec, Member
from gpustack_simulator.procfs import write_procfs
from gpustack_simulator.scenario import RECORDINGS_DIR, expand, parse_scenario
from gpustack_simulator.testing import cluster_standin
from gpustack_simulator.up import FLEET_PLUGIN_LIMIT, free_port, loopback_address, serves_plugins
from patience import HANG

H100 = "nvidia/h100-8x.yaml"


def test_the_generated_fleet_validates_and_expands() -> None:
    text = to_yaml(generate(nodes=4, instances=50, mix="exclusive=1,shared=3,none=1"))
    scenario = parse_scenario(text, source="generated")
    expanded = expand(scenario, base=RECORDINGS_DIR)
    assert [dm.node for dm in expanded.device_managers] == [f"fleet-node-000{i}" for i in range(4)]
    instances = scenario.document.instances
    assert len(instances) == 50
    assert {i.node for i in instances} == {f"fleet-node-000{i}" for i in range(4)}
    grants = [
        g.mode
        for i in instances
        if i.pod is not None
        for c in i.pod.containers
        for g in c.accelerators
    ]
    # 10 in 50 asked for a whole card, 30 for a share; 8 cards per node hold all of them.
    assert grants.count("Exclusive") == 10
    assert grants.count("Shared") == 30
    assert text == to_yaml(generate(nodes=4, instances=50, mix="exclusive=1,shared=3,none=1"))


def test_a_node_grants_only_what_its_cards_hold() -> None:
    # 8 cards and 100 Exclusive Instances on one node: 7 whole cards, the 8th in 10 shares,
    # the other 83 without an accelerator. The scenario checks accept the result.
    document = generate(nodes=1, instances=100, mix="exclusive=1")
    scenario = parse_scenario(to_yaml(document), source="generated")
    expand(scenario, base=RECORDINGS_DIR)
    modes = [
        c.accelerators[0].mode if c.accelerators else None
        for i in scenario.document.instances
        if i.pod is not None
        for c in i.pod.containers
    ]
    assert (modes.count("Exclusive"), modes.count("Shared"), modes.count(None)) == (7, 10, 83)
    assert len(cards_of(H100)) == 8


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("exclusive=1,bogus=2", "not one of"),
        ("exclusive", "MODE=WEIGHT"),
        ("none=0", "every weight is zero"),
    ],
)
def test_a_bad_mix_says_why(text: str, why: str) -> None:
    with pytest.raises(FleetError, match=why):
        Mix.parse(text)


def test_the_mix_interleaves() -> None:
    assert Mix.parse("exclusive=1,shared=2").deal(6) == [
        "shared",
        "exclusive",
        "shared",
        "shared",
        "exclusive",
        "shared",
    ]


async def test_members_in_one_process_each_serve_their_own_node(tmp_path: Path) -> None:
    text = to_yaml(generate(nodes=3, instances=12, mix="exclusive=1,shared=1"))
    scenario_file = tmp_path / "fleet.yaml"
    scenario_file.write_text(text)
    scenario = parse_scenario(text, source=str(scenario_file))
    async with cluster_standin(scenario_file, tmp_path / "cluster") as cluster:
        expanded = cluster.state.expanded
        addresses = [f"127.0.0.{i + 2}" for i in range(3)]
        port = free_port(addresses)
        members = []
        for dm, address in zip(expanded.device_managers, addresses, strict=True):
            proc_root = tmp_path / "proc" / dm.node
            write_procfs(proc_root, dict(expanded.procs(dm.node)))
            cluster.state.bind_pod_address(dm.namespace, dm.name, address, port)
            members.append(
                Member(dm.node, dm.manufacturer, str(dm.recording), str(proc_root), address, port)
            )
        on: dict[str, set[str]] = {}
        for instance in scenario.document.instances:
            on.setdefault(instance.node, set()).add(instance.name)
        spec = FleetSpec(tuple(members), monitor_period=1.0)
        async with trio.open_nursery() as nursery:
            fleet = await nursery.start(
                lambda task_status: serve_fleet(
                    spec,
                    kube=load_config(cluster.kubeconfig, context="device-manager"),
                    task_status=task_status,
                )
            )
            assert fleet.recordings_parsed == 1  # three members, one recording, parsed once
            async with httpx.AsyncClient(verify=False, trust_env=False, timeout=10) as client:
                with trio.fail_after(HANG):
                    for member in members:
                        url = f"https://{member.address}:{port}/monitor/snapshot"
                        while True:  # the first sample with the node's Pods known
                            response = await client.get(url)
                            assert response.status_code == 200
                            if "slices" in response.json():
                                break
                            await trio.sleep(0.2)
                        snapshot = parse_snapshot(response.content)
                        [group] = snapshot.groups
                        assert group.manufacturer == "nvidia"
                        assert len(group.accelerators) == 8
                        assert snapshot.slices is not None
                        # Its exporter speaks for its own node and that node's Instances only.
                        metrics = f"https://{member.address}:{port}/metrics"
                        while True:
                            body = (await client.get(metrics)).text
                            if "gpustack_instance_cpu_used_millicores{" in body:
                                break
                            await trio.sleep(0.2)
                        assert set(re.findall(r'node="([^"]+)"', body)) == {member.node}
                        assert set(re.findall(r'instance_name="([^"]+)"', body)) == on[member.node]
            fleet.shutdown.set()


def test_a_member_is_a_device_plugin_only_with_its_nodes_kubelet_sockets() -> None:
    bare = Member("n1", "nvidia", H100, "/tmp/proc", "127.0.0.2", 32443)
    off = options_for(bare, 2.0)
    # Explicitly off: the automatic default would look at this host's own /var/lib/kubelet.
    assert (off.device_plugin, off.confirm_grants) == (False, False)
    assert not off.serves_device_plugin
    assert not off.confirms_grants
    wired = Member(
        "n1", "nvidia", H100, "/tmp/proc", "127.0.0.2", 32443,
        kube_socket="/tmp/k/n1/kubelet.sock", pod_resources_socket="/tmp/k/n1/pr.sock",
    )  # fmt: skip
    on = options_for(wired, 2.0)
    assert on.serves_device_plugin
    assert on.confirms_grants
    assert (str(on.kube_socket), str(on.pod_resources_socket)) == (
        "/tmp/k/n1/kubelet.sock",
        "/tmp/k/n1/pr.sock",
    )
    # The spec file carries the sockets through JSON.
    assert FleetSpec.from_json(FleetSpec((wired,)).to_json()).members == (wired,)


def test_plugins_run_in_one_process_up_to_the_publishing_limit() -> None:
    assert serves_plugins(13, fleet=True)
    assert serves_plugins(FLEET_PLUGIN_LIMIT, fleet=True)
    assert not serves_plugins(FLEET_PLUGIN_LIMIT + 1, fleet=True)
    assert serves_plugins(FLEET_PLUGIN_LIMIT + 1, fleet=False)  # a process each: always


def test_every_member_gets_its_own_loopback_address() -> None:
    addresses = [loopback_address(i) for i in range(5000)]
    assert addresses[:2] == ["127.0.0.2", "127.0.0.3"]  # as before for small scenarios
    assert addresses[252:254] == ["127.0.0.254", "127.0.1.1"]
    assert len(set(addresses)) == len(addresses)
    assert not [a for a in addresses if a.endswith((".0", ".255"))]


def test_the_cli_writes_a_scenario_the_checks_accept(tmp_path: Path) -> None:
    out = tmp_path / "fleet.yaml"
    result = CliRunner().invoke(
        app, ["simulator", "fleet", "--nodes", "2", "--instances", "5", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    scenario = parse_scenario(out.read_text(), source=str(out))
    assert len(scenario.document.nodes) == 2
    assert len(scenario.document.instances) == 5
    refused = CliRunner().invoke(app, ["simulator", "fleet", "--mix", "bogus=1"])
    assert refused.exit_code == 2
    assert "not one of exclusive, shared, none" in refused.output
