"""A held Pod or Node (``gpustack_worker.held``) decides exactly what the whole object does.

The controller, the NodeFeature loop and the capacity loop read the held forms only. Every
decision they take from a Pod or a Node — the derived status, whether a Pod is this
incarnation's, whether it is going away, its rendering digest, its node; a node's labels, CPU
cores, companion-capacity patch and addresses — is computed here from generated whole objects
(with fields nobody reads mixed in) and from the held forms, and must agree.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_core import contract
from gpustack_core.instance import Instance, instance_from_object
from gpustack_worker.held import TEMPLATE_HASH, held_node, held_pod
from gpustack_worker.instances.render import HOSTNAME_LABEL, belongs_to
from gpustack_worker.instances.status import derive_status
from gpustack_worker.nodecapacity import status_patch
from gpustack_worker.nodefeatures import CPU_NAME_ANNOTATION, cpu_cores, node_labels

UID = "5f0c3a7e-1d2b-4c3d-9e8f-a1b2c3d4e5f6"
GRANT = (
    '{"main":{"devices":{"groups":[{"id":"a10g","manufacturer":"nvidia","accelerators":['
    '{"id":"GPU-1","index":0,"mode":3,"allocated":320000}]}]},"deviceIDs":["a10g:GPU-1:0003"]}}'
)
JUNK = st.dictionaries(
    st.sampled_from(["managedFields", "x-extra", "images", "nodeInfo", "volumes", "qosClass"]),
    st.one_of(st.text(max_size=5), st.lists(st.integers(), max_size=3)),
    max_size=3,
)


def _instance(stop: bool, deleting: bool, ports: bool) -> Instance:
    metadata: dict[str, Any] = {"name": "ws", "namespace": "team-a", "uid": UID, "generation": 3}
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    spec: dict[str, Any] = {"image": "ubuntu:24.04", "stop": stop}
    if ports:
        spec["ports"] = [{"port": 22}]
    return instance_from_object({"metadata": metadata, "spec": spec})


def _optional(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


WAITING = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["main", "sshd"]),
        "state": st.one_of(
            st.fixed_dictionaries(
                {
                    "waiting": st.fixed_dictionaries(
                        {"reason": st.sampled_from(["", "ImagePullBackOff", "ErrImagePull"])},
                        optional={"message": st.text(max_size=4)},
                    )
                }
            ),
            st.just({"running": {"startedAt": "2026-12-01T00:00:00Z"}}),
            st.just({}),
        ),
    },
    optional={"ready": st.booleans(), "image": st.text(max_size=4)},
)
POD = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {
                "name": st.just("ws"),
                "namespace": st.just("team-a"),
                "uid": st.sampled_from(["pod-1", "pod-2"]),
                # mostly this incarnation's, so the paths past ownership are taken often
                "labels": st.fixed_dictionaries(
                    {contract.PART_OF_LABEL: st.sampled_from([UID, UID, UID, "other-uid"])},
                    optional={"tier": st.just("gold")},
                ),
                "annotations": st.dictionaries(
                    st.sampled_from(
                        [contract.ALLOCATION_ANNOTATION, TEMPLATE_HASH, "kubectl.kubernetes.io/x"]
                    ),
                    st.sampled_from([GRANT, "not json", "abc123", ""]),
                ),
            },
            optional={
                "resourceVersion": st.text(max_size=3),
                "managedFields": st.just([{"manager": "kubectl"}]),
            },
        ),
        "spec": st.fixed_dictionaries(
            {"nodeName": st.sampled_from(["node-a", "node-a", ""])},
            optional={"containers": st.just([{"name": "main", "image": "ubuntu"}])},
        ),
        "status": st.fixed_dictionaries(
            {
                "phase": st.sampled_from(["Pending", "Running", "Failed"]),
                "conditions": st.lists(
                    st.fixed_dictionaries(
                        {
                            "type": st.sampled_from(["Ready", "PodScheduled"]),
                            "status": st.sampled_from(["True", "False", "False"]),
                        }
                    ),
                    max_size=2,
                ),
                "containerStatuses": st.lists(WAITING, max_size=3),
                "podIPs": st.lists(
                    st.fixed_dictionaries({"ip": st.sampled_from(["10.0.0.1", ""])}), max_size=2
                ),
            },
            optional={
                "reason": st.text(max_size=4),
                "message": st.text(max_size=4),
                "hostIP": st.just("10.0.0.9"),
                "qosClass": st.just("Guaranteed"),
            },
        ),
    },
)
NODE_ADDRESSES = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["InternalIP", "ExternalIP", "Hostname"]),
            "address": st.sampled_from(["10.0.0.7", "54.1.2.3", "node-a", ""]),
        }
    ),
    max_size=4,
)
RESOURCES = st.dictionaries(
    st.sampled_from(["cpu", "nvidia.com/gpu", "nvidia.com/gpu.shared", "memory"]),
    st.sampled_from(["8", "1", "2", "bogus", "16Gi"]),
)
NODE = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"name": st.just("node-a"), "uid": st.just("n-1")},
            optional={
                "labels": st.dictionaries(
                    st.sampled_from(
                        [HOSTNAME_LABEL, "feature.node.kubernetes.io/cpu-model.vendor_id"]
                    ),
                    st.sampled_from(["node-a", "Intel", "AMD"]),
                ),
                "annotations": st.dictionaries(
                    st.sampled_from([CPU_NAME_ANNOTATION, "other"]),
                    st.sampled_from(["Intel Xeon", "@template", ""]),
                ),
                "managedFields": st.just([{"manager": "kubelet"}]),
            },
        )
    },
    optional={
        "spec": _optional(podCIDR=st.just("10.244.0.0/24")),
        "status": _optional(
            capacity=RESOURCES,
            allocatable=RESOURCES,
            addresses=NODE_ADDRESSES,
            images=st.just([{"names": ["ubuntu"], "sizeBytes": 1}]),
            conditions=st.just([{"type": "Ready", "status": "True"}]),
        ),
    },
)


@settings(max_examples=500)
@given(
    pod=POD,
    junk=JUNK,
    node=NODE,
    stop=st.sampled_from([False, False, False, True]),
    deleting=st.sampled_from([False, False, False, True]),
    pod_deleting=st.sampled_from([False, False, False, True]),
    ports=st.booleans(),
)
def test_a_held_pod_and_node_derive_the_status_the_whole_ones_do(
    pod: dict[str, Any],
    junk: dict[str, Any],
    node: dict[str, Any],
    stop: bool,
    deleting: bool,
    pod_deleting: bool,
    ports: bool,
) -> None:
    pod = {**pod, **junk}
    if pod_deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    instance = _instance(stop, deleting, ports)
    service = {"spec": {"ports": [{"port": 22, "protocol": "TCP", "nodePort": 30022}]}}
    held, node_held = held_pod(pod), held_node(node)
    assert derive_status(instance, held, service, node_held) == derive_status(
        instance, pod, service, node
    )
    assert belongs_to(instance, held) == belongs_to(instance, pod)
    for field in ("name", "namespace", "uid", "deletionTimestamp", "resourceVersion"):
        assert held["metadata"].get(field) == pod["metadata"].get(field)
    annotations = pod["metadata"].get("annotations") or {}
    assert (held["metadata"].get("annotations") or {}).get(TEMPLATE_HASH) == annotations.get(
        TEMPLATE_HASH
    )
    assert held.get("spec", {}).get("nodeName") == pod.get("spec", {}).get("nodeName")
    assert "managedFields" not in held["metadata"]


@settings(max_examples=300)
@given(node=NODE, offered=RESOURCES)
def test_a_held_node_decides_what_the_whole_node_does(
    node: dict[str, Any], offered: dict[str, str]
) -> None:
    held = held_node(node)
    assert node_labels(held) == node_labels(node)
    assert cpu_cores(held) == cpu_cores(node)
    bases = {"nvidia": "nvidia.com/gpu"}
    assert status_patch(held, offered, bases) == status_patch(node, offered, bases)
    assert held["metadata"].get("labels") == node["metadata"].get("labels")
    assert held["metadata"]["uid"] == node["metadata"]["uid"]
    assert "managedFields" not in held["metadata"]
    assert "images" not in held.get("status", {})


def test_what_is_dropped_is_what_nobody_reads() -> None:
    """The figures the decoder exists for: a whole Pod's spec and status shrink to a node name
    and the fields shown."""
    pod = {
        "metadata": {
            "name": "ws",
            "namespace": "team-a",
            "uid": "u",
            "managedFields": [{"manager": "kube-scheduler"}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
        },
        "spec": {"nodeName": "node-a", "containers": [{"name": "main", "image": "ubuntu"}]},
        "status": {
            "phase": "Running",
            "qosClass": "Guaranteed",
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "t"}],
            "containerStatuses": [
                {"name": "main", "imageID": "sha256:…", "state": {"running": {}}}
            ],
        },
    }
    assert held_pod(pod) == {
        "metadata": {"name": "ws", "namespace": "team-a", "uid": "u", "annotations": {}},
        "spec": {"nodeName": "node-a"},
        "status": {"phase": "Running", "conditions": [], "containerStatuses": []},
    }
