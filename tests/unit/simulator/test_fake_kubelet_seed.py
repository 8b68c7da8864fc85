"""The fake kubelets' PodResources, seeded from the scenario's annotations.

A scenario Pod "was admitted before the stand-in started": its kubelet would hold exactly the
device IDs its annotation names, each under the resource of the mode its card was granted in.
"""

from __future__ import annotations

import json
from typing import Any

from gpustack_core import contract
from gpustack_core.allocation import parse_allocation
from gpustack_core.tokens import parse_token_id
from gpustack_simulator.fakekubelet.nodes import seed_assignments
from gpustack_simulator.scenario import RECORDINGS_DIR, expand, find_scenario, load_scenario


def pod(name: str, node: str, allocation: dict[str, Any] | str) -> dict[str, Any]:
    text = allocation if isinstance(allocation, str) else json.dumps(allocation)
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "annotations": {contract.ALLOCATION_ANNOTATION: text},
        },
        "spec": {"nodeName": node},
    }


def entry(mode: int, card: str, ids: list[str]) -> dict[str, Any]:
    return {
        "devices": {
            "groups": [
                {
                    "id": "h100",
                    "manufacturer": "nvidia",
                    "accelerators": [{"id": card, "index": 0, "mode": mode}],
                }
            ]
        },
        "deviceIDs": ids,
    }


def test_each_id_goes_to_its_modes_resource_on_its_node_only() -> None:
    pods = [
        pod(
            "qwen",
            "n1",
            {
                "main": entry(3, "GPU-1", ["h100:GPU-1:0002"]),
                "sshd": entry(5, "GPU-1", ["h100:GPU-1:0007"]),
            },
        ),
        pod("llama", "n1", {"main": entry(1, "GPU-0", ["h100:GPU-0:0000"])}),
        pod("elsewhere", "n2", {"main": entry(1, "GPU-0", ["h100:GPU-0:0000"])}),
    ]
    assert seed_assignments(pods, "n1") == {
        ("team-a", "qwen", "main"): {"nvidia.com/gpu.sliced": ["h100:GPU-1:0002"]},
        ("team-a", "qwen", "sshd"): {"device.gpustack.ai/nvidia.visibility": ["h100:GPU-1:0007"]},
        ("team-a", "llama", "main"): {"nvidia.com/gpu": ["h100:GPU-0:0000"]},
    }


def test_an_unreadable_annotation_assigns_nothing_and_spares_the_others() -> None:
    good = pod("llama", "n1", {"main": entry(1, "GPU-0", ["h100:GPU-0:0000"])})
    not_text = pod("not-text", "n1", {})
    not_text["metadata"]["annotations"][contract.ALLOCATION_ANNOTATION] = 7
    pods = [pod("empty", "n1", ""), not_text, good]
    assert seed_assignments(pods, "n1") == {
        ("team-a", "llama", "main"): {"nvidia.com/gpu": ["h100:GPU-0:0000"]}
    }


def test_what_is_not_a_plugin_grant_assigns_nothing() -> None:
    pods = [
        pod("garbled", "n1", "{not json"),
        pod("short-ids", "n1", {"main": entry(1, "GPU-0", ["h100:GPU-0:0"])}),
        pod("other-card", "n1", {"main": entry(1, "GPU-0", ["h100:GPU-9:0000"])}),
    ]
    assert seed_assignments(pods, "n1") == {}


def test_every_scenario_grant_is_seeded_under_the_plugins_spelling() -> None:
    """The scenarios write the plugin's own IDs, so confirmation believes every scenario Pod."""
    expanded = expand(load_scenario(find_scenario("demo")), base=RECORDINGS_DIR)
    annotated = 0
    for node in {p["spec"].get("nodeName") for p in expanded.pods} - {None, ""}:
        seeded = seed_assignments(expanded.pods, node)
        for p in expanded.pods:
            text = (p["metadata"].get("annotations") or {}).get(contract.ALLOCATION_ANNOTATION)
            if p["spec"].get("nodeName") != node or not text:
                continue
            for container, allocation in parse_allocation(text).items():
                annotated += 1
                for device_id in allocation.device_ids:
                    parse_token_id(device_id)  # four digits, the plugin's spelling
                key = (p["metadata"]["namespace"], p["metadata"]["name"], container)
                held = {i for ids in seeded[key].values() for i in ids}
                assert held == set(allocation.device_ids), key
    assert annotated > 20
