"""v1 Instances: bodies checked against their path, the Table kubectl prints, Accept.

Expected cells are written out by hand from the Instance each row is made of; ages follow
Kubernetes' own short-duration rules (apimachinery's ``duration.HumanDuration``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpustack_core.status import StatusError
from gpustack_worker.instances_v1 import (
    as_v1,
    human_age,
    storage_body,
    table,
    table_version,
)

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def stamp(ago: timedelta) -> str:
    return (NOW - ago).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_v1_body_is_stored_at_the_crds_version_in_the_paths_namespace() -> None:
    body = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance",
            "metadata": {"name": "ws"}, "spec": {"image": "ubuntu"}}  # fmt: skip
    stored = storage_body(body, "team-a", None)
    assert stored["apiVersion"] == "worker.gpustack.ai/v1alpha1"
    assert stored["metadata"] == {"name": "ws", "namespace": "team-a"}
    assert stored["spec"] == {"image": "ubuntu"}
    assert body["apiVersion"] == "worker.gpustack.ai/v1", "the caller's body is not changed"
    back = as_v1({**stored, "metadata": {**stored["metadata"], "uid": "u"}})
    assert back["apiVersion"] == "worker.gpustack.ai/v1"


@pytest.mark.parametrize(
    ("body", "name", "message"),
    [
        ([], None, "not a JSON object"),
        ({"kind": "Pod"}, None, "kind is 'Pod'"),
        ({"apiVersion": "v1"}, None, "apiVersion is 'v1'"),
        ({"metadata": {"namespace": "team-b"}}, None, "namespace of the provided object (team-b)"),
        ({"metadata": {"name": "other"}}, "ws", "name of the object (other)"),
        ({"metadata": "x"}, None, "metadata is not an object"),
    ],
)
def test_a_body_that_names_another_object_is_refused(
    body: object, name: str | None, message: str
) -> None:
    with pytest.raises(StatusError) as caught:
        storage_body(body, "team-a", name)
    assert caught.value.code == 400
    assert message in str(caught.value)


def test_kubectls_accept_asks_for_a_v1_table() -> None:
    kubectl = (
        "application/json;as=Table;v=v1;g=meta.k8s.io,"
        "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
    )
    assert table_version(kubectl) == "v1"
    assert table_version("application/json;as=Table;v=v1beta1;g=meta.k8s.io") == "v1beta1"
    assert table_version("application/json") is None
    assert table_version("") is None
    assert table_version("application/json;as=Table;v=v1;g=meta.k8s.io;q=0") is None
    assert table_version("application/json;as=Table;v=v2;g=meta.k8s.io") is None


@pytest.mark.parametrize(
    ("ago", "shown"),
    [
        (timedelta(seconds=45), "45s"),
        (timedelta(minutes=5, seconds=12), "5m12s"),
        (timedelta(minutes=5), "5m"),
        (timedelta(minutes=95), "95m"),
        (timedelta(hours=5, minutes=30), "5h30m"),
        (timedelta(hours=30), "30h"),
        (timedelta(days=2, hours=4), "2d4h"),
        (timedelta(days=90), "90d"),
        (timedelta(days=800), "2y70d"),
    ],
)
def test_ages_read_as_kubectl_prints_them(ago: timedelta, shown: str) -> None:
    assert human_age(stamp(ago), NOW) == shown


def test_the_table_has_the_columns_a_user_wants() -> None:
    listed = {
        "kind": "InstanceList",
        "metadata": {"resourceVersion": "42"},
        "items": [
            {"metadata": {"name": "sliced", "creationTimestamp": stamp(timedelta(minutes=3))},
             "spec": {"type": "h100", "resources": {"accelerator": 1,
                      "acceleratorSlicedMemoryPercentage": 25}},
             "status": {"phase": "Ready", "nodeName": "gpu-node-2"}},
            {"metadata": {"name": "mig", "creationTimestamp": stamp(timedelta(hours=2))},
             "spec": {"type": "h100", "nodeName": "gpu-hybrid-1",
                      "resources": {"accelerator": 1, "acceleratorPartitionedProfile": "1g.10gb"}}},
            {"metadata": {"name": "cpu", "creationTimestamp": stamp(timedelta(days=3))},
             "spec": {"resources": {"cpu": "1"}}, "status": {"phase": "Stopped"}},
        ],
    }  # fmt: skip
    rendered = table(listed, "v1", NOW)
    assert (rendered["kind"], rendered["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert rendered["metadata"] == {"resourceVersion": "42"}
    assert [c["name"] for c in rendered["columnDefinitions"]] == [
        "Name", "Phase", "Type", "Accelerator", "Node", "Age",
    ]  # fmt: skip
    assert [r["cells"] for r in rendered["rows"]] == [
        ["sliced", "Ready", "h100", "25%", "gpu-node-2", "3m"],
        ["mig", "<none>", "h100", "1g.10gb", "gpu-hybrid-1", "120m"],
        ["cpu", "Stopped", "<none>", "<none>", "<none>", "3d"],
    ]
    assert rendered["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    one = table(listed["items"][0], "v1", NOW)
    assert [r["cells"][0] for r in one["rows"]] == ["sliced"]
