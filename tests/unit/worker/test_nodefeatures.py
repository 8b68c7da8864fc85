"""The worker's NodeFeature labels for a Node: the walkthrough's CPU keys from NFD's reports."""

from __future__ import annotations

from typing import Any

from gpustack_worker.nodefeatures import body, cpu_cores, node_labels, nodefeature_name, onboarded


def node(annotations: dict[str, str], labels: dict[str, str], cpu: str | None) -> dict[str, Any]:
    status: dict[str, Any] = {"capacity": {"cpu": cpu}} if cpu is not None else {}
    return {
        "metadata": {
            "name": "node-a10g",
            "uid": "u-1",
            "labels": labels,
            "annotations": annotations,
        },
        "status": status,
    }


A10G = node(
    {"feature.gpustack.ai/cpu-name": "AMD EPYC 7R32"},
    {"feature.node.kubernetes.io/cpu-model.vendor_id": "AMD"},
    "4",
)


def test_walkthrough_node_a10g() -> None:
    # shared/spec/instancetype-walkthrough.md, "1. Initial state", Node.
    assert node_labels(A10G) == {
        "gpustack.ai/managed": "true",
        "general.feature.gpustack.ai/amd": "true",
        "general.feature.gpustack.ai/amd-epyc-7r32": "true",
        "general.feature.gpustack.ai/amd-epyc-7r32.count": "4",
    }


def test_walkthrough_t4_nodes_intel() -> None:
    t4 = node(
        {"feature.gpustack.ai/cpu-name": "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz"},
        {"feature.node.kubernetes.io/cpu-model.vendor_id": "Intel"},
        "48",
    )
    key = "general.feature.gpustack.ai/intel-xeon-platinum-8259cl"
    assert node_labels(t4)[key] == "true"
    assert node_labels(t4)[key + ".count"] == "48"


def test_no_nfd_reports_no_model_no_count() -> None:
    bare = node({}, {}, None)
    assert node_labels(bare) == {
        "gpustack.ai/managed": "true",
        "general.feature.gpustack.ai/generic": "true",
    }
    unresolved = node({"feature.gpustack.ai/cpu-name": "@cpu.model.name"}, {}, "8")
    assert "general.feature.gpustack.ai/generic.count" in node_labels(unresolved)
    assert "general.feature.gpustack.ai/generic" in node_labels(unresolved)


def test_cpu_cores_whole_cores_only_when_stated() -> None:
    assert cpu_cores(node({}, {}, "16")) == 16
    assert cpu_cores(node({}, {}, "3500m")) == 3
    assert cpu_cores(node({}, {}, "lots")) is None
    assert cpu_cores(node({}, {}, "0")) is None


def test_body_names_and_owns() -> None:
    made = body(A10G, "gpustack-system", {"gpustack.ai/managed": "true"})
    assert made["metadata"]["name"] == nodefeature_name("node-a10g") == "node-a10g-gpustack-worker"
    assert made["metadata"]["labels"] == {"nfd.node.kubernetes.io/node-name": "node-a10g"}
    assert made["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "node-a10g", "uid": "u-1"}
    ]


def test_onboarded_keeps_a_stated_managed_value() -> None:
    derived = {"gpustack.ai/managed": "true", "general.feature.gpustack.ai/amd": "true"}
    cpu = {"general.feature.gpustack.ai/amd": "true"}
    assert onboarded(derived, None, manual=False) == derived
    assert onboarded(derived, None, manual=True) == cpu
    flipped = {"gpustack.ai/managed": "false"}
    assert onboarded(derived, flipped, manual=False) == {**cpu, **flipped}
    assert onboarded(derived, flipped, manual=True) == {**cpu, **flipped}
    assert onboarded(derived, {"other": "x"}, manual=False) == derived
