"""The exporter publishes an Instance Pod only while it belongs to its Instance's current UID."""

from __future__ import annotations

from typing import Any

from gpustack_core.pods import Pod, pod_from_object
from gpustack_devicemanager.exporter import current_incarnations


def pod(name: str, owner_uid: str, *, instance: str | None = None) -> Pod:
    obj: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": f"pod-{name}-{owner_uid}",
            "creationTimestamp": "2026-12-01T00:00:00Z",
            "labels": {"app.kubernetes.io/part-of": owner_uid},
            "ownerReferences": [
                {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "Instance",
                 "name": instance or name, "uid": owner_uid, "controller": True}
            ],
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "main"}]},
    }  # fmt: skip
    return pod_from_object(obj)


def plain(name: str) -> Pod:
    meta = {"name": name, "namespace": "team-a", "uid": name,
            "creationTimestamp": "2026-12-01T00:00:00Z"}  # fmt: skip
    return pod_from_object({"metadata": meta, "spec": {"containers": [{"name": "c"}]}})


def names(pods: list[Pod]) -> list[str]:
    return [p.metadata.name for p in pods]


def test_a_predecessors_pod_is_left_out() -> None:
    old = pod("ws", "uid-old")
    current = pod("other", "uid-other")
    dm = plain("device-manager")
    kept = current_incarnations([old, current, dm], {("team-a", "ws"): "uid-new",
                                                     ("team-a", "other"): "uid-other"})  # fmt: skip
    assert names(kept) == ["other", "device-manager"]  # non-Instance Pods always pass


def test_a_deleted_instances_pod_is_left_out() -> None:
    assert current_incarnations([pod("ws", "uid-1")], {}) == []


def test_unknown_instances_leave_everything_as_it_was() -> None:
    """Before the Instance informer syncs nothing is known, so nothing is dropped."""
    pods = [pod("ws", "uid-1")]
    assert current_incarnations(pods, None) == pods


def test_the_current_incarnation_is_published() -> None:
    pods = [pod("ws", "uid-1")]
    assert current_incarnations(pods, {("team-a", "ws"): "uid-1"}) == pods
