"""The Instance structs and the structural schema generated from them."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gpustack_core.crdschema import structural_schema
from gpustack_core.decoding import ContractError
from gpustack_core.instance import (
    Instance,
    InstanceSpec,
    InstanceStatus,
    Resources,
    instance_from_object,
    resources_from_limits,
    resources_of,
)
from gpustack_core.wire import Wire


def test_a_stored_instance_decodes_with_every_wire_name() -> None:
    obj: dict[str, Any] = {
        "metadata": {"name": "demo", "namespace": "team-a", "uid": "u-1", "generation": 3},
        "spec": {
            "image": "ubuntu:24.04",
            "resources": {
                "cpu": 4,
                "ram": "16Gi",
                "localStorage": "100Gi",
                "accelerator": "1",
                "acceleratorSlicedMemoryPercentage": 20,
            },
            "ports": [{"port": 22}, {"port": 8080, "protocol": "UDP", "name": "web"}],
            "sshPublicKey": {"name": "keys"},
            "additionalVolumes": [{"mountPath": "/data", "configMap": {"name": "cfg"}}],
        },
        "status": {"phase": "Ready", "hostIPs": [{"ip": "10.0.0.1"}], "podIPs": [{"ip": "p"}]},
    }
    inst = instance_from_object(obj)
    assert inst.spec.resources.accelerator_sliced_memory_percentage == 20
    assert inst.spec.resources.cpu == 4
    assert [p.protocol for p in inst.spec.ports] == ["TCP", "UDP"]
    assert inst.spec.ssh_public_key is not None
    assert inst.spec.ssh_public_key.name == "keys"
    assert inst.spec.additional_volumes[0].config_map is not None
    assert [a.ip for a in inst.status.host_ips] == ["10.0.0.1"]
    assert msgspec.json.decode(msgspec.json.encode(inst))["status"]["podIPs"] == [{"ip": "p"}]


def test_a_malformed_instance_names_itself_and_the_field() -> None:
    bad = {"metadata": {"name": "x", "namespace": "n"}, "spec": {"image": "i", "stop": "yes"}}
    with pytest.raises(ContractError, match=r"Instance n/x: .*\$\.spec\.stop"):
        instance_from_object(bad)


def test_resources_translate_to_container_limits_and_back() -> None:
    resources = Resources(cpu="500m", ram="8Gi", local_storage=1 << 30)
    limits = resources.limits()
    assert limits == {"cpu": "500m", "memory": "8Gi", "ephemeral-storage": 1 << 30}
    assert resources_from_limits(limits) == resources
    assert Resources().limits() == {}  # absent is absent, not zero


def test_resources_of_an_object_without_any() -> None:
    assert resources_of({"spec": {}}, what="Instance a/b") == Resources()
    with pytest.raises(ContractError, match=r"Instance a/b: spec.resources"):
        resources_of({"spec": {"resources": {"cpu": [1]}}}, what="Instance a/b")


def test_the_schema_is_structural_and_carries_the_struct_facts() -> None:
    spec = structural_schema(InstanceSpec)
    assert spec["type"] == "object"
    assert spec["required"] == ["image"]
    assert "$ref" not in repr(spec)
    assert "null" not in repr(spec)
    ports = spec["properties"]["ports"]
    assert ports["x-kubernetes-list-map-keys"] == ["port", "protocol"]
    assert ports["items"]["properties"]["protocol"]["default"] == "TCP"  # x-default published
    assert "default" not in spec["properties"]["displayName"]  # a struct default is "absent"
    assert spec["properties"]["stop"]["default"] is False
    volume = spec["properties"]["volume"]
    assert volume["oneOf"] == [{"required": ["ephemeral"]}, {"required": ["persistent"]}]
    status = structural_schema(InstanceStatus)
    assert status["properties"]["phase"]["enum"] == sorted(
        ["Starting", "Ready", "Stopping", "Stopped", "Deleting"]
    )
    assert set(status["properties"]) >= {"hostIPs", "podIPs", "accessAddresses", "allocations"}


def test_every_spec_field_is_in_the_schema() -> None:
    """The generator loses no field: the wire names of the struct are the schema's properties."""
    names = {f.encode_name for f in msgspec.structs.fields(InstanceSpec)}
    assert set(structural_schema(InstanceSpec)["properties"]) == names
    assert set(structural_schema(Instance)["properties"]) == {"metadata", "spec", "status"}


class _Loop(Wire, frozen=True, kw_only=True):
    child: _Loop | None = None


def test_a_recursive_type_is_refused_with_its_path() -> None:
    with pytest.raises(ValueError, match="_Loop -> _Loop"):
        structural_schema(_Loop)
