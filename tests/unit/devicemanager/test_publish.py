"""The publisher's pure parts: detection → labels, and merging into shared objects.

Expected figures are read off the committed recordings by hand (bytes ÷ 2**20, CUDA's
version encoding) or are the walkthrough's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpustack_core.features import Card, acceleratable_labels, groups_from_cards
from gpustack_devicemanager.publish import (
    cards_of,
    detected_groups,
    devices_labels,
    merged_groups,
    merged_labels,
    nodefeature_body,
)
from gpustack_simulator.recording import load_recording
from gpustack_simulator.replay.backends import replay_backend

RECORDINGS = Path(__file__).resolve().parents[3] / "recordings"
KEY = "acceleratable.feature.gpustack.ai/nvidia-a10g"


def labels_of(recording: str) -> dict[str, str]:
    backend = replay_backend(load_recording(RECORDINGS / recording))
    try:
        return acceleratable_labels(detected_groups(backend.detect()).groups)
    finally:
        backend.close()


def test_the_committed_a10g_recording_states_no_compute_capability() -> None:
    labels = labels_of("nvidia/a10g.yaml")
    # 24146608128 B = 23028 MiB = 22.49 GiB → 22Gi; 9216 cores; CUDA 11070 → 11.7.
    assert labels[KEY + ".memory"] == "22Gi"
    assert labels[KEY + ".cores"] == "9216"
    assert labels["acceleratable.feature.gpustack.ai/nvidia.driver-version"] == "515.105.01"
    assert labels["acceleratable.feature.gpustack.ai/nvidia.runtime-version"] == "11.7"
    # The recording answers FUNCTION_NOT_FOUND for the compute capability: no label, no family.
    assert KEY + ".comcap" not in labels
    assert KEY + ".family" not in labels


def test_the_walkthrough_recording_gives_the_walkthrough_labels() -> None:
    labels = labels_of("nvidia/a10g-walkthrough.yaml")
    assert labels[KEY + ".comcap"] == "8.6"
    assert labels[KEY + ".family"] == "Ampere"
    assert labels[KEY + ".memory"] == "24Gi"
    assert labels[KEY + ".cores"] == "10240"


def test_mig_partitions_reach_the_spec() -> None:
    backend = replay_backend(load_recording(RECORDINGS / "nvidia/h100-mig.yaml"))
    try:
        cards = cards_of(backend.detect())
    finally:
        backend.close()
    (group,) = groups_from_cards("nvidia", cards).groups
    physical = group.accelerators[0].status.physical_sliced
    assert physical is not None
    # The recording: a 3g.40gb in slot 0 and 1g.10gb in slots 1 and 2.
    assert physical.count == 3
    assert {(p.name, p.count) for p in physical.profiles} == {("3g.40gb", 1), ("1g.10gb", 2)}


def test_merged_groups_replace_only_this_manufacturers() -> None:
    amd = {"id": "mi300x", "manufacturer": "amd", "accelerators": [{"id": "a"}]}
    old_nvidia = {"id": "a10g", "manufacturer": "nvidia", "accelerators": []}
    new_nvidia = {"id": "tesla-t4", "manufacturer": "nvidia", "accelerators": [{"id": "t"}]}
    assert merged_groups([old_nvidia, amd], "nvidia", [new_nvidia]) == [amd, new_nvidia]
    assert merged_groups([amd], "nvidia", []) == [amd]


def test_merged_labels_keep_another_managers_keys() -> None:
    amd = {
        "feature.gpustack.ai/acceleratable": "true",
        "acceleratable.feature.gpustack.ai/amd": "true",
        "acceleratable.feature.gpustack.ai/amd-mi300x.count": "8",
    }
    stale = {"acceleratable.feature.gpustack.ai/nvidia-a10g.count": "1"}
    mine = {"acceleratable.feature.gpustack.ai/nvidia": "true"}
    merged = merged_labels({**amd, **stale}, "nvidia", mine)
    assert merged == {**amd, **mine}
    # The last manufacturer leaving takes the umbrella label with it.
    assert merged_labels(mine, "nvidia", {}) == {}


def node(labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "n", "uid": "u", "labels": labels, "annotations": annotations}}


def test_devices_labels_copy_the_nodes_pool_keys() -> None:
    (group,) = groups_from_cards(
        "nvidia", [Card("g", 0, "NVIDIA A10G", 24576, 10240, "d", "r")]
    ).groups
    the_node = node(
        {
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "gpustack.ai/managed": "true",
            "general.feature.gpustack.ai/amd": "true",
            "general.feature.gpustack.ai/amd-epyc-7r32": "true",
            "general.feature.gpustack.ai/amd-epyc-7r32.count": "4",
            "feature.node.kubernetes.io/cpu-model.vendor_id": "AMD",
        },
        {"feature.gpustack.ai/cpu-name": "AMD EPYC 7R32"},
    )
    stale = {"general.feature.gpustack.ai/old-cpu": "true", "team": "kept"}
    assert devices_labels(stale, "nvidia", [group], the_node) == {
        "team": "kept",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "gpustack.ai/managed": "true",
        "general.feature.gpustack.ai/amd-epyc-7r32": "true",
        KEY: "true",
    }
    # A node taken out of management: managed goes from the Devices labels too.
    unmanaged = node({"kubernetes.io/os": "linux"}, {})
    assert "gpustack.ai/managed" not in devices_labels(
        {"gpustack.ai/managed": "true"}, "nvidia", [group], unmanaged
    )


def test_nodefeature_body_is_what_nfd_master_needs() -> None:
    made = nodefeature_body("node-a10g", "gpustack-system", {"a": "b"}, {"kind": "Node"})
    assert made["apiVersion"] == "nfd.k8s-sigs.io/v1alpha1"
    assert made["metadata"]["name"] == "node-a10g-gpustack-device-manager"
    assert made["metadata"]["labels"] == {"nfd.node.kubernetes.io/node-name": "node-a10g"}
    assert made["spec"] == {"labels": {"a": "b"}}
