"""The Instance admission rules (gpustack_core.instance_rules), one behaviour per test.

Expected messages are kube-apiserver's field-error wording (apimachinery ``field.Error``) and the
cases the walkthrough (§6) and issue #28 name; none is read back from the code under test.
"""

from __future__ import annotations

import posixpath
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpustack_core.fielderrors import FieldError, aggregate, duplicate, invalid
from gpustack_core.instance import InstanceSpec, Resources, instance_from_object
from gpustack_core.instance_rules import (
    Gates,
    canonical_path_problem,
    capacity_errors,
    changed_fields,
    default_resources,
    gate_errors,
    immutable_errors,
    name_errors,
    node_errors,
    spec_errors,
    sub_path_problem,
    typeless_errors,
)
from gpustack_core.instancetype import UnitResources


def spec(**fields: Any) -> InstanceSpec:
    body = {"image": "ubuntu:24.04", **fields}
    return instance_from_object({"metadata": {"name": "x"}, "spec": body}).spec


def texts(errors: list[FieldError]) -> list[str]:
    return [str(e) for e in errors]


# -- field errors --------------------------------------------------------------------------


def test_field_errors_read_as_kube_apiserver_writes_them() -> None:
    assert str(invalid("spec.a", "/mnt//x", "must be an absolute, canonical path")) == (
        'spec.a: Invalid value: "/mnt//x": must be an absolute, canonical path'
    )
    assert str(invalid("spec.n", 3, "too big")) == "spec.n: Invalid value: 3: too big"
    assert str(duplicate("spec.ports[1]", "22/TCP")) == 'spec.ports[1]: Duplicate value: "22/TCP"'
    one, two = invalid("a", "x", "d"), invalid("b", "y", "e")
    assert aggregate([one]) == 'a: Invalid value: "x": d'
    assert aggregate([one, two, one]) == '[a: Invalid value: "x": d, b: Invalid value: "y": e]'
    assert one.cause() == {"reason": "FieldValueInvalid", "message": 'Invalid value: "x": d',
                           "field": "a"}  # fmt: skip


# -- mount paths ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/mnt//x", "/mnt/x/", "/mnt/./x", "/mnt/../etc", "/", "mnt/x",
                                  "", "/mnt/x\n"])  # fmt: skip
def test_a_mount_path_must_be_absolute_and_canonical(path: str) -> None:
    assert canonical_path_problem(path) is not None


@pytest.mark.parametrize("path", ["/mnt/x", "/etc/model/config.json", "/a", "/a b/..c"])
def test_canonical_absolute_paths_pass(path: str) -> None:
    assert canonical_path_problem(path) is None


@given(st.lists(st.sampled_from(["a", "b", ".", "..", "", "c.d"]), min_size=1, max_size=6))
def test_canonical_means_what_posix_normpath_leaves_alone(segments: list[str]) -> None:
    """An independent definition: normpath leaves a canonical path unchanged."""
    path = "/" + "/".join(segments)
    canonical = posixpath.normpath(path) == path and path != "/" and not path.startswith("//")
    assert (canonical_path_problem(path) is None) == canonical


@pytest.mark.parametrize(
    ("sub", "ok"),
    [("config.json", True), ("a/b", True), ("/etc", False), ("../x", False), ("a/../../x", False)],
)
def test_sub_paths_stay_inside_their_volume(sub: str, ok: bool) -> None:
    assert (sub_path_problem(sub) is None) == ok


# -- the spec's shape ----------------------------------------------------------------------


def test_the_walkthrough_instance_is_valid() -> None:
    walkthrough = spec(
        type="gpustack--nvidia-tesla-t4-linux-amd64",
        nodeName="node-t4-b",
        command=["sleep", "86400"],
        resources={"accelerator": "1"},
        volume={"ephemeral": {"capacity": "1Gi"}},
        volumeMount="/workspace",
        additionalVolumes=[
            {"mountPath": "/mnt/datasets", "persistent": {"name": "datasets"}},
            {"mountPath": "/etc/model/config.json", "subPath": "config.json", "readOnly": True,
             "configMap": {"name": "model-config"}},
            {"mountPath": "/mnt/host-cache", "readOnly": True,
             "hostPath": {"path": "/var/lib/gpustack-cache", "type": "DirectoryOrCreate"}},
        ],
    )  # fmt: skip
    assert spec_errors(walkthrough) == []


def test_additional_volume_paths_sources_and_duplicates() -> None:
    bad = spec(
        additionalVolumes=[
            {"mountPath": "/mnt//x", "configMap": {"name": "a"}},
            {"mountPath": "/workspace", "secret": {"name": "b"}},
            {"mountPath": "/data", "configMap": {"name": "c"}},
            {"mountPath": "/data", "configMap": {"name": "d"}},
            {"mountPath": "/none"},
            {"mountPath": "/two", "configMap": {"name": "e"}, "secret": {"name": "f"}},
        ]
    )
    assert texts(spec_errors(bad)) == [
        'spec.additionalVolumes[0].mountPath: Invalid value: "/mnt//x": must be an absolute, '
        "canonical path",
        'spec.additionalVolumes[1].mountPath: Invalid value: "/workspace": must be unique: '
        "spec.volumeMount mounts there already",
        'spec.additionalVolumes[3].mountPath: Invalid value: "/data": must be unique: '
        "spec.additionalVolumes[2].mountPath mounts there already",
        'spec.additionalVolumes[4]: Invalid value: "none": must have exactly one source: '
        "persistent, configMap, secret or hostPath",
        'spec.additionalVolumes[5]: Invalid value: "configMap, secret": must have exactly one '
        "source: persistent, configMap, secret or hostPath",
    ]


def test_a_custom_workspace_mount_is_what_duplicates_are_checked_against() -> None:
    moved = spec(
        volumeMount="/home/me",
        additionalVolumes=[
            {"mountPath": "/workspace", "configMap": {"name": "a"}},
            {"mountPath": "/home/me", "configMap": {"name": "b"}},
        ],
    )
    (error,) = spec_errors(moved)
    assert error.field == "spec.additionalVolumes[1].mountPath"
    assert "spec.volumeMount" in str(error)
    assert texts(spec_errors(spec(volumeMount="/home//me"))) == [
        'spec.volumeMount: Invalid value: "/home//me": must be an absolute, canonical path'
    ]


def test_duplicate_ports_and_variables() -> None:
    bad = spec(
        ports=[{"port": 22}, {"port": 22, "protocol": "TCP"}, {"port": 22, "protocol": "UDP"}],
        env=[{"name": "A"}, {"name": "A", "value": "2"}, {"name": "B=C"}],
    )
    assert texts(spec_errors(bad)) == [
        'spec.ports[1]: Duplicate value: "22/TCP"',
        'spec.env[1].name: Duplicate value: "A"',
        "spec.env[2].name: Invalid value: \"B=C\": must not contain '='",
    ]


GE0 = "must be greater than or equal to 0"
NO_NODE = "no node holds more"
ONE_CARD = "a slice or a partition is one accelerator: set accelerator: 1"
CAP = "a compute cap needs acceleratorSlicedMemoryPercentage"
RESOURCES = "spec.resources"


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ({"cpu": "-1"}, f'{RESOURCES}.cpu: Invalid value: "-1": {GE0}'),
        ({"ram": "-1Gi"}, f'{RESOURCES}.ram: Invalid value: "-1Gi": {GE0}'),
        (
            {"cpu": "1e12"},
            f'{RESOURCES}.cpu: Invalid value: "1e12": must be no more than 65536 cores: {NO_NODE}',
        ),
        (
            {"ram": "2Pi"},
            f'{RESOURCES}.ram: Invalid value: "2Pi": must be no more than 1Pi: {NO_NODE}',
        ),
        (
            {"accelerator": "1.5"},
            f'{RESOURCES}.accelerator: Invalid value: "1.5": must be a whole number of '
            "accelerators",
        ),
        (
            {"accelerator": 1000000},
            f"{RESOURCES}.accelerator: Invalid value: 1000000: must be no more than 1024 cards: "
            f"{NO_NODE}",
        ),
        (
            {"accelerator": "2", "acceleratorSlicedMemoryPercentage": 20},
            f'{RESOURCES}.accelerator: Invalid value: "2": {ONE_CARD}',
        ),
        (
            {"acceleratorSlicedCoresPercentage": 50, "accelerator": 1},
            f"{RESOURCES}.acceleratorSlicedCoresPercentage: Invalid value: 50: {CAP}",
        ),
    ],
)
def test_negative_absurd_and_inconsistent_resources(
    resources: dict[str, Any], expected: str
) -> None:
    assert texts(spec_errors(spec(type="t4", resources=resources))) == [expected]


def test_reasonable_resources_pass() -> None:
    fine = spec(type="t4", resources={"cpu": "500m", "ram": "64Gi", "localStorage": "100Gi",
                                      "accelerator": 8})  # fmt: skip
    assert spec_errors(fine) == []


def test_cards_come_from_a_type_that_has_them() -> None:
    assert texts(spec_errors(spec(resources={"accelerator": 1}))) == [
        "spec.type: Required value: accelerators come from an InstanceType's pool: name the "
        "type to draw them from"
    ]
    assert spec_errors(spec(resources={"accelerator": 0})) == []  # no card asked, no type needed
    assert texts(typeless_errors(Resources(accelerator=2), "cpu-small", "")) == [
        "spec.resources.accelerator: Invalid value: 2: InstanceType cpu-small names no "
        "accelerator manufacturer, so it has none to give"
    ]
    assert typeless_errors(Resources(accelerator=2), "t4", "nvidia") == []


@pytest.mark.parametrize("name", ["../../etc/shadow", "a;rm -rf /", "Keys", "a/b", ""])
def test_an_ssh_key_name_must_be_an_object_name(name: str) -> None:
    (error,) = spec_errors(spec(sshPublicKey={"name": name}))
    assert error.field == "spec.sshPublicKey.name"
    assert error.type == "Invalid value"


def test_every_local_object_name_is_checked() -> None:
    bad = spec(volume={"persistent": {"name": "../pvc"}}, imagePullSecret="x y",
               additionalVolumes=[{"mountPath": "/a", "secret": {"name": "s/../t"}}])  # fmt: skip
    assert [e.field for e in spec_errors(bad)] == [
        "spec.volume.persistent.name",
        "spec.additionalVolumes[0].secret.name",
        "spec.imagePullSecret",
    ]


@pytest.mark.parametrize(
    ("name", "ok"),
    [("qwen-a", True), ("a" * 63, True), ("a" * 64, False), ("1abc", False), ("a.b", False),
     ("Upper", False), ("ends-", False)],
)  # fmt: skip
def test_the_name_must_name_a_service(name: str, ok: bool) -> None:
    assert (name_errors(name) == []) == ok


def test_a_generate_name_leaves_room_for_the_suffix() -> None:
    assert name_errors("", "a" * 58) == []
    (error,) = name_errors("", "a" * 59)
    assert error.field == "metadata.generateName"
    assert name_errors("", "ws-") == []
    assert name_errors("", "1ws-") != []


# -- the gates -----------------------------------------------------------------------------

HOST = {"mountPath": "/mnt/h", "hostPath": {"path": "/var/lib/cache", "type": "Directory"}}
OTHER = {"mountPath": "/mnt/o", "hostPath": {"path": "/srv", "type": "Directory"}}
CLOSED = Gates()
OPEN = Gates(privileged_allowed=True, host_path_volume_allowed=True)


def test_taking_an_escape_needs_its_setting() -> None:
    wants = spec(privileged=True, additionalVolumes=[HOST])
    assert [e.field for e in gate_errors(wants, None, CLOSED)] == [
        "spec.privileged",
        "spec.additionalVolumes[0].hostPath",
    ]
    assert gate_errors(wants, None, OPEN) == []
    assert [e.field for e in gate_errors(wants, None, Gates(privileged_allowed=True))] == [
        "spec.additionalVolumes[0].hostPath"
    ]
    assert "instance-privileged-allowed is false" in str(gate_errors(wants, None, CLOSED)[0])


def test_a_held_escape_is_kept_reordering_is_no_grant_repointing_is() -> None:
    held = spec(privileged=True, additionalVolumes=[HOST, OTHER])
    assert gate_errors(held, held, CLOSED) == []
    reordered = spec(privileged=True, additionalVolumes=[OTHER, HOST])
    assert gate_errors(reordered, held, CLOSED) == []
    moved = {**HOST, "mountPath": "/mnt/elsewhere"}  # same node path, mounted elsewhere
    assert gate_errors(spec(additionalVolumes=[moved]), held, CLOSED) == []
    repointed = {**HOST, "hostPath": {"path": "/", "type": "Directory"}}
    assert [e.field for e in gate_errors(spec(additionalVolumes=[repointed]), held, CLOSED)] == [
        "spec.additionalVolumes[0].hostPath"
    ]
    retyped = {**HOST, "hostPath": {"path": "/var/lib/cache", "type": "DirectoryOrCreate"}}
    assert gate_errors(spec(additionalVolumes=[retyped]), held, CLOSED) != []
    unprivileged = spec()
    assert [e.field for e in gate_errors(spec(privileged=True), unprivileged, CLOSED)] == [
        "spec.privileged"
    ]


def test_a_stopped_instance_taking_an_escape_is_refused_too() -> None:
    stopped = spec(stop=True)
    assert gate_errors(spec(stop=True, privileged=True), stopped, CLOSED) != []


# -- immutability --------------------------------------------------------------------------


def test_a_running_spec_may_change_only_in_stop() -> None:
    running = spec(resources={"cpu": "1"}, ports=[{"port": 22}])
    assert immutable_errors(spec(resources={"cpu": "1"}, ports=[{"port": 22}], stop=True),
                            running) == []  # fmt: skip
    edited = spec(image="other:1", resources={"cpu": "2"}, ports=[{"port": 22}])
    (error,) = immutable_errors(edited, running)
    assert error.field == "spec"
    assert error.type == "Forbidden"
    assert str(error).startswith("spec: Forbidden: spec.image, spec.resources may not change")
    assert "stop it first" in str(error)


def test_a_stopped_spec_is_editable_and_defaults_are_no_change() -> None:
    stopped = spec(stop=True, ports=[{"port": 22}])
    assert immutable_errors(spec(stop=False, image="new:2"), stopped) == []
    spelled = spec(ports=[{"port": 22, "protocol": "TCP"}])
    assert changed_fields(spelled, spec(ports=[{"port": 22}])) == []


# -- cluster facts -------------------------------------------------------------------------


def test_a_pin_must_name_a_node() -> None:
    assert node_errors("", exists=False) == []
    assert node_errors("node-t4-b", exists=True) == []
    assert texts(node_errors("node-gone", exists=False)) == [
        'spec.nodeName: Not found: "node-gone": no Node of that name exists'
    ]


def test_no_more_cards_than_the_largest_node_holds() -> None:
    cards = {"node-t4-a": 1, "node-t4-b": 4}
    assert capacity_errors(Resources(accelerator=4), "nvidia", cards) == []
    assert texts(capacity_errors(Resources(accelerator=5), "nvidia", cards)) == [
        "spec.resources.accelerator: Invalid value: 5: no node can hold it: the largest, "
        "node-t4-b, has 4 nvidia accelerators"
    ]
    assert texts(capacity_errors(Resources(accelerator="1"), "amd", {})) == [
        'spec.resources.accelerator: Invalid value: "1": no node in the cluster has any amd '
        "accelerator"
    ]
    assert capacity_errors(Resources(), "nvidia", {}) == []


# -- defaults ------------------------------------------------------------------------------

A10G = UnitResources(cpu="8", ram="64Gi", local_storage="100Gi")  # the walkthrough's preset


def test_the_preset_defaults_by_card_count_and_by_slice() -> None:
    assert default_resources(Resources(accelerator=2), A10G, acceleratable=True) == {
        "cpu": "16", "ram": "128Gi", "localStorage": "100Gi"}  # fmt: skip
    sliced = Resources(accelerator=1, accelerator_sliced_memory_percentage=20)
    # 20 % of 8 CPUs is 1.6 = 1600m; of 64 GiB, 12.8 GiB = 13743895347.2 bytes, rounded up.
    assert default_resources(sliced, A10G, acceleratable=True) == {
        "cpu": "1600m", "ram": "13743895348", "localStorage": "100Gi"}  # fmt: skip
    explicit = Resources(accelerator=1, cpu="2")
    assert default_resources(explicit, A10G, acceleratable=True) == {
        "ram": "64Gi", "localStorage": "100Gi"}  # fmt: skip
    assert default_resources(Resources(), UnitResources(cpu="1", ram="2Gi"),
                             acceleratable=False) == {"cpu": "1", "ram": "2Gi"}  # fmt: skip
    # An accelerated type, no card asked: nothing to scale CPU and RAM by.
    assert default_resources(Resources(), A10G, acceleratable=True) == {"localStorage": "100Gi"}
    partition = Resources(accelerator=1, accelerator_partitioned_profile="1g.10gb")
    assert default_resources(partition, A10G, acceleratable=True) == {"localStorage": "100Gi"}


def test_a_gate_refusal_names_the_settings_where_the_release_keeps_them() -> None:
    """Issue #31: the Settings Secret is in the release namespace, not always gpustack-system."""
    wants = spec(privileged=True, additionalVolumes=[HOST])
    default = [str(e) for e in gate_errors(wants, None, CLOSED)]
    assert all("(gpustack-system/gpustack-settings)" in e for e in default)
    elsewhere = [str(e) for e in gate_errors(wants, None, Gates(namespace="gpu-ops"))]
    assert len(elsewhere) == 2
    assert all("(gpu-ops/gpustack-settings)" in e for e in elsewhere)
