"""The Pod view: decoding, declared totals, the has-started gate and Instance ownership."""

import contextlib
import copy
import json
import math
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpustack_core.decoding import ContractError
from gpustack_core.pods import (
    PART_OF_LABEL,
    Pod,
    container_ids,
    container_request,
    declared_totals,
    has_started,
    is_instance_pod,
    is_ready,
    is_terminating,
    parse_pod,
    pod_from_object,
)
from gpustack_core.usage import DeclaredTotals

INSTANCE_UID = "7c1e2a4b-0f5d-4a59-9d0e-1b2c3d4e5f60"

# Shaped like `kubectl get pod -o json` of a rendered Instance Pod, trimmed but with the
# fields the view ignores (managedFields, volumes, hostIPs…) left in to prove they are ignored.
API_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "llama",
        "namespace": "team-a",
        "uid": "0b9f3c1e-2d4a-4e6b-8c7d-9e0f1a2b3c4d",
        "resourceVersion": "123456",
        "creationTimestamp": "2026-11-29T09:00:00Z",
        "labels": {PART_OF_LABEL: INSTANCE_UID, "kueue.x-k8s.io/queue-name": "gpustack-fnv64-1"},
        "annotations": {"device.gpustack.ai/accelerator.allocated": "{}"},
        "ownerReferences": [
            {
                "apiVersion": "worker.gpustack.ai/v1",
                "kind": "Instance",
                "name": "llama",
                "uid": INSTANCE_UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "managedFields": [{"manager": "worker", "operation": "Update"}],
    },
    "spec": {
        "nodeName": "node-1",
        "hostIPC": True,
        "volumes": [{"name": "workspace", "emptyDir": {"sizeLimit": "10Gi"}}],
        "containers": [
            {
                "name": "main",
                "image": "vllm/vllm-openai:latest",
                "resources": {
                    "limits": {
                        "cpu": "4",
                        "memory": "16Gi",
                        "ephemeral-storage": "20Gi",
                        "nvidia.com/gpu": "1",
                    },
                    "requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"},
                },
            },
            {
                "name": "sshd",
                "resources": {"limits": {"device.gpustack.ai/nvidia.visibility": "1"}},
            },
        ],
        "initContainers": [
            {"name": "fetch", "resources": {"limits": {"cpu": "8", "memory": "32Gi"}}}
        ],
    },
    "status": {
        "phase": "Running",
        "podIP": "10.244.1.7",
        "hostIPs": [{"ip": "172.18.0.2"}],
        "conditions": [
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-29T09:01:00Z"},
        ],
        "initContainerStatuses": [
            {
                "name": "fetch",
                "containerID": "containerd://aaa111",
                "restartCount": 0,
                "ready": True,
                "state": {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": None,
                        "finishedAt": "2026-11-29T09:00:30Z",
                    }
                },
                "lastState": {},
            }
        ],
        "containerStatuses": [
            {
                "name": "main",
                "containerID": "containerd://bbb222",
                "restartCount": 0,
                "started": True,
                "ready": True,
                "state": {"running": {"startedAt": "2026-11-29T09:00:40Z"}},
                "lastState": {},
                "image": "vllm/vllm-openai:latest",
            },
            {
                "name": "sshd",
                "containerID": "containerd://ccc333",
                "restartCount": 0,
                "started": True,
                "ready": True,
                "state": {"running": {"startedAt": "2026-11-29T09:00:41Z"}},
            },
        ],
    },
}


def minimal(**spec: Any) -> dict[str, Any]:
    """A Pod carrying only what the API server always sets, plus ``spec`` overrides."""
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u-1",
            "creationTimestamp": "2026-11-29T09:00:00Z",
        },
        "spec": {"containers": [{"name": "main"}], **spec},
    }


def with_statuses(**status: Any) -> Pod:
    return pod_from_object({**minimal(), "status": status})


def limits(name: str, **values: Any) -> dict[str, Any]:
    return {
        "name": name,
        "resources": {"limits": {k.replace("_", "-"): v for k, v in values.items()}},
    }


# --- decoding -------------------------------------------------------------------------------


def test_parse_api_server_pod() -> None:
    pod = parse_pod(json.dumps(API_POD).encode())
    assert pod.metadata.creation_timestamp == datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
    assert pod.metadata.owner_references[0].controller is True
    assert pod.spec.node_name == "node-1"
    assert [c.name for c in pod.spec.containers] == ["main", "sshd"]
    assert pod.spec.init_containers[0].resources.limits["memory"] == "32Gi"
    assert pod.status.pod_ip == "10.244.1.7"
    assert pod.status.init_container_statuses[0].state.terminated is not None
    assert pod.status.init_container_statuses[0].state.terminated.started_at is None
    assert pod.status.container_statuses[0].state.running is not None
    # The same document as a dict decodes to the same value.
    assert pod_from_object(API_POD) == pod


def test_minimal_pod_defaults_are_empty() -> None:
    pod = parse_pod(json.dumps(minimal()))
    assert pod.metadata.labels == {}
    assert pod.metadata.owner_references == ()
    assert pod.metadata.deletion_timestamp is None
    assert pod.spec.node_name == ""
    assert pod.spec.init_containers == ()
    assert pod.status.phase == ""
    assert pod.status.container_statuses == ()
    assert pod.spec.containers[0].resources.limits == {}


def test_object_from_a_yaml_loader_with_datetimes_and_numbers() -> None:
    # YAML loaders hand back datetime objects and bare numbers; strict conversion accepts both.
    obj = minimal(containers=[limits("main", cpu=2, memory=1.5)])
    obj["metadata"]["creationTimestamp"] = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
    pod = pod_from_object(obj)
    assert pod.metadata.creation_timestamp == datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
    assert declared_totals(pod) == DeclaredTotals(cpu_millicores=2000, memory_mib=1, storage_mib=0)


def test_strict_rejects_a_stringly_typed_count() -> None:
    obj = {**minimal(), "status": {"containerStatuses": [{"name": "main", "restartCount": "3"}]}}
    with pytest.raises(ContractError, match=r"restartCount"):
        pod_from_object(obj)


@pytest.mark.parametrize("field", ["name", "namespace", "uid", "creationTimestamp"])
def test_identity_fields_are_required(field: str) -> None:
    obj = copy.deepcopy(minimal())
    del obj["metadata"][field]
    with pytest.raises(ContractError, match=field):
        parse_pod(json.dumps(obj))


def test_naive_timestamp_is_a_contract_error() -> None:
    obj = copy.deepcopy(minimal())
    obj["metadata"]["creationTimestamp"] = "2026-11-29T09:00:00"
    with pytest.raises(ContractError, match=r"\$\.metadata\.creationTimestamp"):
        parse_pod(json.dumps(obj))


def test_type_error_names_the_path() -> None:
    obj = minimal(containers=[{"name": "main", "resources": {"limits": {"cpu": True}}}])
    with pytest.raises(ContractError, match=r"Pod: .*\$\.spec\.containers\[0\]\.resources\.limits"):
        parse_pod(json.dumps(obj))


def test_not_json_is_a_contract_error() -> None:
    with pytest.raises(ContractError, match="not valid JSON"):
        parse_pod(b"{")


# --- declared totals ------------------------------------------------------------------------


def test_api_pod_totals_exclude_the_init_container() -> None:
    pod = parse_pod(json.dumps(API_POD))
    assert declared_totals(pod) == DeclaredTotals(
        cpu_millicores=4000, memory_mib=16 * 1024, storage_mib=20 * 1024
    )


def test_bytes_are_summed_before_rounding() -> None:
    pod = pod_from_object(
        minimal(
            containers=[limits("a", memory="1.5Mi"), limits("b", memory="1.5Mi")],
            initContainers=[limits("init", memory="100Mi", cpu="8", ephemeral_storage="1Gi")],
        )
    )
    assert declared_totals(pod).memory_mib == 3  # not 2 + 2
    assert declared_totals(pod) == DeclaredTotals(cpu_millicores=0, memory_mib=3, storage_mib=0)


def test_cpu_is_rounded_once_after_summing() -> None:
    pod = pod_from_object(minimal(containers=[limits("a", cpu="0.5m"), limits("b", cpu="0.5m")]))
    assert declared_totals(pod).cpu_millicores == 1  # not 1 + 1


def test_sub_mib_limits_round_up() -> None:
    pod = pod_from_object(minimal(containers=[limits("a", memory="1", ephemeral_storage="1Ki")]))
    assert declared_totals(pod) == DeclaredTotals(cpu_millicores=0, memory_mib=1, storage_mib=1)


def test_container_without_limit_adds_nothing() -> None:
    pod = pod_from_object(
        minimal(
            containers=[
                limits("main", cpu="250m", memory="1Gi", ephemeral_storage="2Gi"),
                {"name": "sidecar", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                {"name": "bare"},
            ]
        )
    )
    assert declared_totals(pod) == DeclaredTotals(
        cpu_millicores=250, memory_mib=1024, storage_mib=2048
    )


def test_ephemeral_container_limits_are_excluded() -> None:
    pod = pod_from_object(
        minimal(
            containers=[limits("main", cpu="1")],
            ephemeralContainers=[limits("debug", cpu="3", memory="1Gi")],
        )
    )
    assert declared_totals(pod) == DeclaredTotals(cpu_millicores=1000, memory_mib=0, storage_mib=0)


def test_malformed_limit_names_pod_container_and_resource() -> None:
    pod = pod_from_object(minimal(containers=[limits("main"), limits("side", memory="12 parsecs")]))
    with pytest.raises(ContractError) as excinfo:
        declared_totals(pod)
    message = str(excinfo.value)
    assert "ns/p" in message
    assert "'side'" in message
    assert "limits.memory" in message


def test_malformed_init_limit_is_never_read() -> None:
    pod = pod_from_object(
        minimal(containers=[limits("main", cpu="1")], initContainers=[limits("i", cpu="lots")])
    )
    assert declared_totals(pod).cpu_millicores == 1000


_SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(1000),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "Ki": Fraction(1024),
    "Mi": Fraction(1024**2),
    "Gi": Fraction(1024**3),
    "e3": Fraction(1000),
    "e-2": Fraction(1, 100),
}


@st.composite
def quantities(draw: st.DrawFn) -> tuple[str | int, Fraction]:
    """A quantity as written and its exact value, computed without the parser under test."""
    whole = draw(st.integers(min_value=0, max_value=10**6))
    if draw(st.booleans()):
        return whole, Fraction(whole)
    thousandths = draw(st.integers(min_value=0, max_value=999))
    suffix = draw(st.sampled_from(sorted(_SUFFIXES)))
    text = f"{whole}.{thousandths:03d}{suffix}"
    return text, (whole + Fraction(thousandths, 1000)) * _SUFFIXES[suffix]


RESOURCES = ("cpu", "memory", "ephemeral-storage")


@given(
    app=st.lists(st.dictionaries(st.sampled_from(RESOURCES), quantities()), min_size=1, max_size=6),
    init=st.lists(st.dictionaries(st.sampled_from(RESOURCES), quantities()), max_size=3),
)
def test_totals_equal_exact_recomputation(
    app: list[dict[str, tuple[str | int, Fraction]]],
    init: list[dict[str, tuple[str | int, Fraction]]],
) -> None:
    def containers(prefix: str, specs: list[dict[str, tuple[str | int, Fraction]]]) -> Any:
        return [
            {"name": f"{prefix}{i}", "resources": {"limits": {k: v[0] for k, v in spec.items()}}}
            for i, spec in enumerate(specs)
        ]

    pod = pod_from_object(
        minimal(containers=containers("c", app), initContainers=containers("i", init))
    )
    exact = {r: sum((spec[r][1] for spec in app if r in spec), Fraction(0)) for r in RESOURCES}
    assert declared_totals(pod) == DeclaredTotals(
        cpu_millicores=math.ceil(exact["cpu"] * 1000),
        memory_mib=math.ceil(exact["memory"] / 2**20),
        storage_mib=math.ceil(exact["ephemeral-storage"] / 2**20),
    )


# --- has started ----------------------------------------------------------------------------

WAITING = {"waiting": {"reason": "ContainerCreating"}}


def test_no_statuses_has_not_started() -> None:
    assert not has_started(pod_from_object(minimal()))


def test_waiting_only_has_not_started() -> None:
    pod = with_statuses(
        initContainerStatuses=[{"name": "i", "state": WAITING, "lastState": {}}],
        containerStatuses=[
            {"name": "main", "restartCount": 0, "started": False, "state": WAITING},
            {"name": "side", "state": {"waiting": {"reason": "PodInitializing"}}},
        ],
    )
    assert not has_started(pod)


def test_empty_state_has_not_started() -> None:
    assert not has_started(with_statuses(containerStatuses=[{"name": "main", "state": {}}]))


@pytest.mark.parametrize(
    "status",
    [
        pytest.param(
            {"containerStatuses": [{"name": "main", "state": {"running": {}}}]}, id="running"
        ),
        pytest.param(
            {"containerStatuses": [{"name": "main", "state": {"terminated": {"exitCode": 1}}}]},
            id="terminated",
        ),
        pytest.param(
            {"containerStatuses": [{"name": "main", "restartCount": 1, "state": WAITING}]},
            id="restart",
        ),
        pytest.param(
            {
                "containerStatuses": [
                    {
                        "name": "main",
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                        "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                    }
                ]
            },
            id="previous-termination",
        ),
        pytest.param(
            {
                "containerStatuses": [
                    {"name": "main", "state": WAITING, "lastState": {"running": {}}}
                ]
            },
            id="previous-running",
        ),
        pytest.param(
            {
                "initContainerStatuses": [
                    {"name": "fetch", "state": {"terminated": {"exitCode": 0}}}
                ],
                "containerStatuses": [
                    {"name": "main", "state": {"waiting": {"reason": "PodInitializing"}}}
                ],
            },
            id="init-container-terminated",
        ),
        pytest.param(
            {
                "containerStatuses": [{"name": "main", "state": WAITING}],
                "ephemeralContainerStatuses": [{"name": "debug", "state": {"running": {}}}],
            },
            id="ephemeral-running",
        ),
        pytest.param(
            {"containerStatuses": [{"name": "main", "started": True, "state": {}}]},
            id="started-true",
        ),
    ],
)
def test_every_trace_opens_the_gate(status: dict[str, Any]) -> None:
    assert has_started(with_statuses(**status))


def test_unready_but_running_has_started() -> None:
    pod = with_statuses(
        conditions=[{"type": "Ready", "status": "False"}],
        containerStatuses=[{"name": "main", "ready": False, "state": {"running": {}}}],
    )
    assert has_started(pod)
    assert not is_ready(pod)


# --- ownership, readiness, termination ------------------------------------------------------


def owned(ref: dict[str, Any] | None = None, label: str | None = INSTANCE_UID) -> Pod:
    obj = copy.deepcopy(minimal())
    base = {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "Instance",
        "name": "llama",
        "uid": INSTANCE_UID,
        "controller": True,
    }
    obj["metadata"]["ownerReferences"] = [{**base, **(ref or {})}]
    if label is not None:
        obj["metadata"]["labels"] = {PART_OF_LABEL: label}
    return pod_from_object(obj)


def test_instance_pod_is_recognised() -> None:
    assert is_instance_pod(parse_pod(json.dumps(API_POD)))
    assert is_instance_pod(owned(), INSTANCE_UID)
    assert is_instance_pod(owned({"apiVersion": "worker.gpustack.ai/v1beta2"}))


@pytest.mark.parametrize(
    ("ref", "label", "instance_uid"),
    [
        pytest.param({"controller": False}, INSTANCE_UID, None, id="not-controller"),
        pytest.param({"kind": "Deployment"}, INSTANCE_UID, None, id="other-kind"),
        pytest.param({"apiVersion": "v1"}, INSTANCE_UID, None, id="core-group"),
        pytest.param({"apiVersion": "example.com/v1"}, INSTANCE_UID, None, id="other-group"),
        pytest.param(
            {"apiVersion": "evil.worker.gpustack.ai/v1"}, INSTANCE_UID, None, id="suffix-group"
        ),
        pytest.param({}, None, None, id="no-label"),
        pytest.param({}, "another-uid", None, id="label-mismatch"),
        pytest.param({}, INSTANCE_UID, "previous-incarnation", id="instance-uid-mismatch"),
    ],
)
def test_not_an_instance_pod(
    ref: dict[str, Any], label: str | None, instance_uid: str | None
) -> None:
    assert not is_instance_pod(owned(ref, label), instance_uid)


def test_pod_without_owner_is_not_an_instance_pod() -> None:
    assert not is_instance_pod(pod_from_object(minimal()))


def test_terminating() -> None:
    assert not is_terminating(pod_from_object(minimal()))
    obj = copy.deepcopy(minimal())
    obj["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    assert is_terminating(pod_from_object(obj))


@pytest.mark.parametrize(
    ("conditions", "ready"),
    [
        ([], False),
        ([{"type": "Ready", "status": "False"}], False),
        ([{"type": "Ready", "status": "Unknown"}], False),
        ([{"type": "ContainersReady", "status": "True"}], False),
        ([{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}], True),
    ],
)
def test_ready_condition(conditions: list[dict[str, str]], ready: bool) -> None:
    assert is_ready(with_statuses(conditions=conditions)) is ready


def test_container_ids_strip_the_runtime_scheme() -> None:
    pod = with_statuses(
        initContainerStatuses=[{"name": "init", "containerID": "cri-o://1111"}],
        containerStatuses=[
            {"name": "main", "containerID": "containerd://2222"},
            {"name": "side", "containerID": "docker://3333"},
            {"name": "creating", "containerID": ""},
            {"name": "bare", "containerID": "4444"},
        ],
        ephemeralContainerStatuses=[{"name": "debug", "containerID": "containerd://5555"}],
    )
    assert container_ids(pod) == {
        "1111": "init",
        "2222": "main",
        "3333": "side",
        "4444": "bare",
        "5555": "debug",
    }


# --- container requests ---------------------------------------------------------------------


def test_container_request_prefers_requests_then_limits() -> None:
    pod = parse_pod(json.dumps(API_POD))
    assert container_request(pod, "main", "cpu") == Fraction(2)
    assert container_request(pod, "main", "memory") == Fraction(8 * 2**30)
    assert container_request(pod, "main", "ephemeral-storage") == Fraction(20 * 2**30)
    assert container_request(pod, "sshd", "device.gpustack.ai/nvidia.visibility") == 1
    assert container_request(pod, "fetch", "cpu") == Fraction(8)


def test_container_request_absent() -> None:
    pod = parse_pod(json.dumps(API_POD))
    assert container_request(pod, "main", "amd.com/gpu") is None
    assert container_request(pod, "nobody", "cpu") is None


def test_container_request_malformed_names_the_field() -> None:
    pod = pod_from_object(
        minimal(containers=[{"name": "main", "resources": {"requests": {"x.io/cores": "ten"}}}])
    )
    with pytest.raises(ContractError, match=r"ns/p.*'main'.*requests\.x\.io/cores"):
        container_request(pod, "main", "x.io/cores")


# --- fuzz -----------------------------------------------------------------------------------

_KEYS = st.sampled_from(
    [
        "metadata",
        "spec",
        "status",
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "containers",
        "initContainers",
        "resources",
        "limits",
        "requests",
        "cpu",
        "memory",
        "containerStatuses",
        "state",
        "running",
        "terminated",
        "restartCount",
        "started",
        "ownerReferences",
        "labels",
        "conditions",
    ]
) | st.text(max_size=8)
JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_KEYS, children, max_size=5),
    max_leaves=30,
)


def exercise(pod: Pod) -> None:
    """Run every question; only a ContractError may come out of any of them."""
    declared_totals(pod)
    has_started(pod)
    is_instance_pod(pod, "u")
    is_ready(pod)
    is_terminating(pod)
    container_ids(pod)
    for container in pod.spec.containers:
        container_request(pod, container.name, "cpu")


@given(st.binary(max_size=300) | st.text(max_size=300))
def test_random_input_is_a_contract_error_or_a_pod(data: bytes | str) -> None:
    with contextlib.suppress(ContractError):
        exercise(parse_pod(data))


@given(JSONISH)
def test_random_json_is_a_contract_error_or_a_pod(obj: Any) -> None:
    with contextlib.suppress(ContractError):
        exercise(parse_pod(json.dumps(obj)))


@given(
    st.sampled_from(["cpu", "memory", "ephemeral-storage"]),
    JSONISH,
)
def test_random_limit_values_are_a_contract_error_or_totals(resource: str, value: Any) -> None:
    obj = minimal(containers=[{"name": "main", "resources": {"limits": {resource: value}}}])
    with contextlib.suppress(ContractError):
        exercise(pod_from_object(obj))
