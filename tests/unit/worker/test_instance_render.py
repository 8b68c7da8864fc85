"""Rendering an Instance's Pod, Service and isolation policy, and deriving its status.

Expected shapes come from the reference (``operator.md`` §7, ``operator-half.md`` "Instance")
and ``gpu-instances.md``; every rendered object is also validated against Kubernetes' own
schemas (kubernetes-validate, strict), so a misspelt field fails here.
"""

from __future__ import annotations

import copy
import ipaddress
import warnings
from fractions import Fraction
from typing import Any

import pytest

from gpustack_core.allocation import ANNOTATION
from gpustack_core.instance import Instance, instance_from_object
from gpustack_worker.instances.render import (
    Overcommit,
    PodInputs,
    RenderError,
    parse_cidrs,
    render_isolation_policy,
    render_pod,
    render_service,
)
from gpustack_worker.instances.status import derive_status, phase_of

UID = "5f0c3a7e-1d2b-4c3d-9e8f-a1b2c3d4e5f6"


def instance(**spec: Any) -> Instance:
    obj: dict[str, Any] = {
        "metadata": {"name": "ws", "namespace": "team-a", "uid": UID, "generation": 2},
        "spec": {"image": "ubuntu:24.04", **spec},
    }
    return instance_from_object(obj)


def valid(obj: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        validate = pytest.importorskip("kubernetes_validate").validate
    validate(obj, "1.31", strict=True)


def main_of(pod: dict[str, Any]) -> dict[str, Any]:
    (main,) = [c for c in pod["spec"]["containers"] if c["name"] == "main"]
    return main


NVIDIA = PodInputs(manufacturer="nvidia", sshd_image="registry.example/sshd:1")


def test_the_pod_is_the_instances_own() -> None:
    pod = render_pod(
        instance(command=["sleep", "inf"], ports=[{"port": 8080}, {"port": 53, "protocol": "UDP"}]),
        PodInputs(queue="gpustack-fnv64-c4680bb149644f1c", runtime_class="nvidia"),
    )
    valid(pod)
    meta = pod["metadata"]
    assert (meta["name"], meta["namespace"]) == ("ws", "team-a")
    assert meta["labels"] == {
        "app.kubernetes.io/part-of": UID,
        "resource.gpustack.ai/type": "instances",
        "kueue.x-k8s.io/queue-name": "gpustack-fnv64-c4680bb149644f1c",
    }
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "worker.gpustack.ai/v1alpha1",
            "kind": "Instance",
            "name": "ws",
            "uid": UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    spec = pod["spec"]
    assert spec["hostIPC"] is True
    assert spec["shareProcessNamespace"] is True
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["runtimeClassName"] == "nvidia"
    main = main_of(pod)
    assert main["securityContext"] == {"runAsUser": 0}
    assert main["command"] == ["sleep", "inf"]
    assert main["ports"] == [
        {"name": "tcp-8080", "containerPort": 8080, "protocol": "TCP"},
        {"name": "udp-53", "containerPort": 53, "protocol": "UDP"},
    ]
    assert main["volumeMounts"] == [{"name": "workspace", "mountPath": "/workspace"}]
    assert spec["volumes"] == [{"name": "workspace", "emptyDir": {}}]
    assert "nodeSelector" not in spec


def test_limits_are_the_spec_and_requests_follow_the_overcommit() -> None:
    inst = instance(resources={"cpu": "2", "ram": "8Gi", "localStorage": "20Gi"})
    pod = render_pod(inst, PodInputs(overcommit=Overcommit(cpu=Fraction(4), memory=Fraction(2))))
    valid(pod)
    resources = main_of(pod)["resources"]
    assert resources["limits"] == {"cpu": "2", "memory": "8Gi", "ephemeral-storage": "20Gi"}
    # 2 cores / 4 = 500m; 8 GiB / 2 = 4 GiB in bytes; storage is never overcommitted.
    assert resources["requests"] == {
        "cpu": "500m",
        "memory": str(4 * 1024**3),
        "ephemeral-storage": "20Gi",
    }
    same = render_pod(inst, PodInputs())["spec"]["containers"][0]["resources"]
    assert same["requests"] == {"cpu": "2000m", "memory": str(8 * 1024**3),
                                "ephemeral-storage": "20Gi"}  # fmt: skip


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ({"accelerator": 2}, {"nvidia.com/gpu": "2"}),
        (
            {"accelerator": "1", "acceleratorSlicedMemoryPercentage": 20},
            {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "20"},
        ),
        (
            {"accelerator": 1, "acceleratorSlicedMemoryPercentage": 25,
             "acceleratorSlicedCoresPercentage": 50},
            {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "25",
             "nvidia.com/gpu.sliced.cores-percentage": "50"},
        ),
        (
            {"accelerator": 1, "acceleratorPartitionedProfile": "1g.10gb"},
            {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-1g.10gb": "1"},
        ),
    ],
)  # fmt: skip
def test_each_mode_is_requested_as_the_device_plugin_advertises_it(
    resources: dict[str, Any], expected: dict[str, str]
) -> None:
    pod = render_pod(instance(resources=resources), NVIDIA)
    valid(pod)
    main = main_of(pod)["resources"]
    assert main["limits"] == expected
    assert main["requests"] == expected  # extended resources: requests equal limits


@pytest.mark.parametrize(
    ("resources", "inputs", "message"),
    [
        ({"acceleratorSlicedMemoryPercentage": 20}, NVIDIA, "needs accelerator: 1"),
        ({"accelerator": 2, "acceleratorSlicedMemoryPercentage": 20}, NVIDIA, "1 card, not 2"),
        (
            {"accelerator": 1, "acceleratorSlicedMemoryPercentage": 20,
             "acceleratorPartitionedProfile": "1g.10gb"},
            NVIDIA,
            "exclude each other",
        ),
        ({"accelerator": 1, "acceleratorPartitionedProfile": "x"},
         PodInputs(manufacturer="amd"), "amd accelerators have no hardware partitions"),
        ({"accelerator": 1, "acceleratorSlicedCoresPercentage": 50}, NVIDIA, "memory share"),
        ({"accelerator": "1.5"}, NVIDIA, "not a whole card count"),
        ({"accelerator": 1}, PodInputs(), "names no manufacturer"),
    ],
)  # fmt: skip
def test_requests_no_pod_can_express_are_refused_by_field(
    resources: dict[str, Any], inputs: PodInputs, message: str
) -> None:
    with pytest.raises(RenderError, match=message):
        render_pod(instance(resources=resources), inputs)


def test_the_ssh_sidecar_sees_mains_cards_without_a_grant_of_its_own() -> None:
    inst = instance(resources={"accelerator": 4}, sshPublicKey={"name": "ws-keys"},
                    volumeMount="/home/me")  # fmt: skip
    pod = render_pod(inst, NVIDIA)
    valid(pod)
    (sshd,) = [c for c in pod["spec"]["containers"] if c["name"] == "sshd"]
    assert sshd["image"] == "registry.example/sshd:1"
    assert (sshd["stdin"], sshd["tty"]) == (True, True)
    assert sshd["securityContext"] == {"capabilities": {"add": ["SYS_ADMIN", "SYS_PTRACE"]}}
    assert sshd["resources"]["limits"] == {"device.gpustack.ai/nvidia.visibility": "4"}
    assert sshd["env"] == [{"name": "VOLUME_MOUNT_PATH", "value": "/home/me"}]
    assert sshd["volumeMounts"] == [
        {"name": "sshd-authorized-keys", "mountPath": "/var/run/sshd-authorized-keys",
         "readOnly": True}
    ]  # fmt: skip
    keys = next(v for v in pod["spec"]["volumes"] if v["name"] == "sshd-authorized-keys")
    assert keys == {"name": "sshd-authorized-keys",
                    "secret": {"secretName": "ws-keys", "defaultMode": 0o600}}  # fmt: skip
    sliced = render_pod(
        instance(resources={"accelerator": 1, "acceleratorSlicedMemoryPercentage": 10},
                 sshPublicKey={"name": "k"}),
        NVIDIA,
    )  # fmt: skip
    (sshd,) = [c for c in sliced["spec"]["containers"] if c["name"] == "sshd"]
    assert sshd["resources"]["limits"] == {"device.gpustack.ai/nvidia.visibility": "1"}
    with pytest.raises(RenderError, match="no SSH sidecar image"):
        render_pod(inst, PodInputs(manufacturer="nvidia"))


def test_volumes_node_pinning_and_pull_settings() -> None:
    inst = instance(
        volume={"persistent": {"name": "ws-data"}},
        additionalVolumes=[
            {"mountPath": "/data", "readOnly": True, "persistent": {"name": "datasets"}},
            {"mountPath": "/etc/cfg.json", "subPath": "cfg.json", "configMap": {"name": "cfg"}},
            {"mountPath": "/s", "secret": {"name": "tok"}},
            {"mountPath": "/cache", "hostPath": {"path": "/var/cache/x", "type": "Directory"}},
        ],
        nodeName="node-a10g",
        imagePullPolicy="Always",
        imagePullSecret="regcred",
        env=[{"name": "A", "value": "1"}],
        privileged=True,
    )
    pod = render_pod(inst, PodInputs(hostname="ip-10-0-0-7"))
    valid(pod)
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": "ip-10-0-0-7"}
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["volumes"] == [
        {"name": "workspace", "persistentVolumeClaim": {"claimName": "ws-data"}},
        {"name": "additional-0", "persistentVolumeClaim": {"claimName": "datasets"}},
        {"name": "additional-1", "configMap": {"name": "cfg"}},
        {"name": "additional-2", "secret": {"secretName": "tok"}},
        {"name": "additional-3", "hostPath": {"path": "/var/cache/x", "type": "Directory"}},
    ]
    main = main_of(pod)
    assert main["volumeMounts"][1:] == [
        {"name": "additional-0", "mountPath": "/data", "readOnly": True},
        {"name": "additional-1", "mountPath": "/etc/cfg.json", "subPath": "cfg.json"},
        {"name": "additional-2", "mountPath": "/s"},
        {"name": "additional-3", "mountPath": "/cache"},
    ]
    assert main["imagePullPolicy"] == "Always"
    assert main["env"] == [{"name": "A", "value": "1"}]
    assert main["securityContext"] == {"runAsUser": 0, "privileged": True}
    emptied = render_pod(instance(volume={"ephemeral": {"capacity": "1Gi"}}), PodInputs())
    assert emptied["spec"]["volumes"] == [{"name": "workspace", "emptyDir": {"sizeLimit": "1Gi"}}]
    unknown_host = render_pod(instance(nodeName="n1"), PodInputs())
    assert unknown_host["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "n1"}
    flavor = {"gpustack.ai/managed": "true", "acceleratable.feature.gpustack.ai/x.count": "4"}
    steered = render_pod(instance(nodeName="n1"), PodInputs(hostname="h1", flavors=(flavor,)))
    # The pin stays one selector entry (walkthrough §6); the flavor is said as Kueue reads it.
    assert steered["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "h1"}
    (term,) = steered["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert sorted(term["matchExpressions"], key=lambda e: e["key"]) == [
        {"key": "acceleratable.feature.gpustack.ai/x.count", "operator": "In", "values": ["4"]},
        {"key": "gpustack.ai/managed", "operator": "In", "values": ["true"]},
    ]
    valid(steered)


def test_rendering_is_deterministic() -> None:
    inst = instance(resources={"accelerator": 1}, ports=[{"port": 22}], sshPublicKey={"name": "k"})
    assert render_pod(inst, NVIDIA) == render_pod(copy.deepcopy(inst), NVIDIA)


# -- the Service ------------------------------------------------------------------------------


def test_the_service_belongs_to_the_instance_and_keeps_node_ports() -> None:
    inst = instance(ports=[{"port": 22}, {"port": 8080}, {"port": 53, "protocol": "UDP"}])
    service = render_service(inst, {(22, "TCP"): 30022, (9999, "TCP"): 31999})
    assert service is not None
    valid(service)
    assert service["metadata"]["name"] == "ws"
    assert service["metadata"]["ownerReferences"][0]["kind"] == "Instance"  # not the Pod
    assert service["spec"]["type"] == "NodePort"
    assert service["spec"]["selector"] == {"app.kubernetes.io/part-of": UID}
    assert service["spec"]["ports"] == [
        {"name": "tcp-22", "port": 22, "targetPort": 22, "protocol": "TCP", "nodePort": 30022},
        {"name": "tcp-8080", "port": 8080, "targetPort": 8080, "protocol": "TCP"},  # new: none
        {"name": "udp-53", "port": 53, "targetPort": 53, "protocol": "UDP"},
    ]  # the removed 9999 is dropped with its node port
    assert render_service(instance()) is None  # no ports: no Service


# -- the isolation policy ---------------------------------------------------------------------


def test_the_isolation_policy_rule_by_rule() -> None:
    cidrs = parse_cidrs("10.244.0.0/16, 192.168.0.0/20 fd00:10:244::/56")
    policy = render_isolation_policy("team-a", cidrs)
    assert policy is not None
    valid(policy)
    assert policy["metadata"] == {
        "name": "gpustack-instance-isolation",
        "namespace": "team-a",
        "labels": {"app.kubernetes.io/managed-by": "gpustack-operator"},
    }
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": {"resource.gpustack.ai/type": "instances"}}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    peers = [
        {"podSelector": {}},
        {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.244.0.0/16", "192.168.0.0/20"]}},
        {"ipBlock": {"cidr": "::/0", "except": ["fd00:10:244::/56"]}},
    ]
    assert spec["ingress"] == [{"from": peers}]
    assert spec["egress"] == [
        {"to": peers},
        {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
    ]
    assert render_isolation_policy("team-a", parse_cidrs("  ")) is None  # blank: nothing


def test_a_bad_cidr_setting_names_the_entry() -> None:
    with pytest.raises(ValueError, match=r"'10\.0\.0\.1/8'.*host bits"):
        parse_cidrs("10.244.0.0/16,10.0.0.1/8")
    assert parse_cidrs("10.0.0.0/8") == [ipaddress.ip_network("10.0.0.0/8")]


# -- status -----------------------------------------------------------------------------------


def pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "ws", "labels": {"app.kubernetes.io/part-of": UID}},
        "spec": {"nodeName": "node-a10g"},
        "status": status,
    }


READY = [{"type": "Ready", "status": "True"}]


@pytest.mark.parametrize(
    ("spec", "the_pod", "deleting", "phase"),
    [
        ({}, None, False, "Starting"),
        ({}, pod(phase="Pending"), False, "Starting"),
        ({}, pod(phase="Running", conditions=READY), False, "Ready"),
        ({"stop": True}, pod(phase="Running", conditions=READY), False, "Stopping"),
        ({"stop": True}, None, False, "Stopped"),
        ({}, pod(phase="Running", conditions=READY), True, "Deleting"),
        ({}, {**pod(phase="Running", conditions=READY),
              "metadata": {"labels": {"app.kubernetes.io/part-of": "old"}}}, False, "Starting"),
    ],
)  # fmt: skip
def test_the_five_phases(
    spec: dict[str, Any], the_pod: dict[str, Any] | None, deleting: bool, phase: str
) -> None:
    obj: dict[str, Any] = {
        "metadata": {"name": "ws", "namespace": "team-a", "uid": UID},
        "spec": {"image": "i", **spec},
    }
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    assert phase_of(instance_from_object(obj), the_pod)[0] == phase


def test_a_waiting_reason_is_the_phase_message() -> None:
    waiting = pod(phase="Pending", containerStatuses=[
        {"name": "main", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no"}}}
    ])  # fmt: skip
    assert phase_of(instance(), waiting) == ("Starting", "main: ImagePullBackOff: no")


def test_the_status_of_a_ready_instance() -> None:
    inst = instance(ports=[{"port": 22}, {"port": 8080}])
    annotation = (
        '{"main":{"devices":{"groups":[{"id":"a10g","manufacturer":"nvidia","accelerators":['
        '{"id":"GPU-1","index":0,"mode":3,"allocated":320000}]}]},"deviceIDs":["a10g:GPU-1:0003"]},'
        '"sshd":{"devices":{"groups":[{"id":"a10g","manufacturer":"nvidia","accelerators":['
        '{"id":"GPU-1","index":0,"mode":5}]}]},"deviceIDs":["a10g:GPU-1:0000"]}}'
    )
    the_pod = pod(phase="Running", conditions=READY, podIPs=[{"ip": "10.244.1.7"}])
    the_pod["metadata"]["annotations"] = {ANNOTATION: annotation}
    node = {"status": {"addresses": [
        {"type": "InternalIP", "address": "10.0.0.7"},
        {"type": "Hostname", "address": "node-a10g"},
        {"type": "ExternalIP", "address": "54.1.2.3"},
    ]}}  # fmt: skip
    half = {"spec": {"ports": [{"port": 22, "protocol": "TCP", "nodePort": 30022},
                               {"port": 8080, "protocol": "TCP"}]}}  # fmt: skip
    status = derive_status(inst, the_pod, half, node)
    assert status.phase == "Ready"
    assert status.observed_generation == 2
    assert status.node_name == "node-a10g"
    assert [a.ip for a in status.host_ips] == ["54.1.2.3", "10.0.0.7"]  # external first
    assert [a.ip for a in status.pod_ips] == ["10.244.1.7"]
    assert status.ports == ()  # not every port has its node port yet
    assert status.access_addresses == ()
    assert [(a.id, a.mode, a.allocated) for a in status.allocations] == [
        ("GPU-1", "Sliced", 320000)
    ]  # the sidecar's Visibility entry is not a holding
    full = {"spec": {"ports": [{"port": 22, "protocol": "TCP", "nodePort": 30022},
                               {"port": 8080, "protocol": "TCP", "nodePort": 30080}]}}  # fmt: skip
    status = derive_status(inst, the_pod, full, node)
    assert [(p.port, p.node_port) for p in status.ports] == [(22, 30022), (8080, 30080)]
    assert status.access_addresses == ("54.1.2.3:30022", "54.1.2.3:30080")


def test_a_stopped_instance_keeps_its_ports_in_status() -> None:
    inst = instance(stop=True, ports=[{"port": 22}])
    service = {"spec": {"ports": [{"port": 22, "protocol": "TCP", "nodePort": 30022}]}}
    status = derive_status(inst, None, service, None)
    assert (status.phase, status.node_name, status.pod_name) == ("Stopped", "", "")
    assert [(p.port, p.node_port) for p in status.ports] == [(22, 30022)]
    assert status.allocations == ()


@pytest.mark.parametrize(
    "value",
    ["{oops", "", 7, None, '{"main": {"devices": {"groups": "nope"}}}'],
)
def test_an_unreadable_allocation_shows_no_allocations(value: object) -> None:
    the_pod = pod(phase="Running", conditions=READY)
    the_pod["metadata"]["annotations"] = {ANNOTATION: value}
    status = derive_status(instance(), the_pod, None, None)
    assert status.phase == "Ready"  # the rest of the status stands
    assert status.allocations == ()
