"""The NFD stand-in: NodeFeature labels onto Nodes, and off again, as nfd-master does."""

from __future__ import annotations

from typing import Any

from gpustack_simulator.cluster import nfd
from gpustack_simulator.cluster.store import Store


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def feature(
    name: str, node_name: str, labels: dict[str, str], ns: str = "gpustack-system"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "labels": {nfd.NODE_NAME_LABEL: node_name}},
        "spec": {"labels": labels},
    }


def labels_of(store: Store, name: str) -> dict[str, str]:
    found = store.get("Node", "", name)
    assert found is not None
    return dict(found["metadata"].get("labels") or {})


def test_two_nodefeatures_merge_onto_their_node_only() -> None:
    store = Store()
    store.put("Node", node("n1", **{"kubernetes.io/os": "linux"}))
    store.put("Node", node("n2"))
    store.put("NodeFeature", feature("n1-gpustack-worker", "n1", {"gpustack.ai/managed": "true"}))
    store.put(
        "NodeFeature",
        feature(
            "n1-gpustack-device-manager",
            "n1",
            {"acceleratable.feature.gpustack.ai/nvidia": "true", "cpu-x": "1"},
        ),
    )
    assert nfd.sync(store) == ["n1"]
    assert labels_of(store, "n1") == {
        "kubernetes.io/os": "linux",
        "gpustack.ai/managed": "true",
        "acceleratable.feature.gpustack.ai/nvidia": "true",
        "feature.node.kubernetes.io/cpu-x": "1",
    }
    assert labels_of(store, "n2") == {}
    assert nfd.sync(store) == []  # nothing changed, nothing written


def test_a_deleted_nodefeature_takes_only_its_labels_away() -> None:
    store = Store()
    store.put("Node", node("n1", admin="kept"))
    store.put("NodeFeature", feature("a", "n1", {"gpustack.ai/managed": "true"}))
    store.put(
        "NodeFeature", feature("b", "n1", {"acceleratable.feature.gpustack.ai/nvidia": "true"})
    )
    nfd.sync(store)
    store.delete("NodeFeature", "gpustack-system", "b")
    nfd.sync(store)
    assert labels_of(store, "n1") == {"admin": "kept", "gpustack.ai/managed": "true"}
    store.delete("NodeFeature", "gpustack-system", "a")
    nfd.sync(store)
    found = store.get("Node", "", "n1")
    assert found is not None
    assert found["metadata"]["labels"] == {"admin": "kept"}
    assert "annotations" not in found["metadata"]


def test_a_changed_label_set_drops_the_label_it_no_longer_carries() -> None:
    store = Store()
    store.put("Node", node("n1"))
    store.put(
        "NodeFeature", feature("a", "n1", {"gpustack.ai/managed": "true", "gpustack.ai/x": "1"})
    )
    nfd.sync(store)
    store.put("NodeFeature", feature("a", "n1", {"gpustack.ai/managed": "true"}))
    nfd.sync(store)
    assert labels_of(store, "n1") == {"gpustack.ai/managed": "true"}


def test_namespaces_nfd_master_refuses_are_not_applied() -> None:
    store = Store()
    store.put("Node", node("n1"))
    store.put(
        "NodeFeature",
        feature(
            "a",
            "n1",
            {
                "example.com/x": "1",
                "vendor.feature.node.kubernetes.io/y": "2",
                "kubernetes.io/hostname": "evil",
            },
        ),
    )
    nfd.sync(store)
    assert labels_of(store, "n1") == {"vendor.feature.node.kubernetes.io/y": "2"}


def test_a_nodefeature_without_the_node_name_label_is_ignored() -> None:
    store = Store()
    store.put("Node", node("n1"))
    orphan = feature("a", "n1", {"gpustack.ai/managed": "true"})
    orphan["metadata"]["labels"] = {}
    store.put("NodeFeature", orphan)
    assert nfd.sync(store) == []
