"""The OpenAPI documents describe the wire exactly, resolve every reference, and never change."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from gpustack_core.instance_metrics import (
    AcceleratorMetrics,
    InstanceMetrics,
    ObjectMeta,
    Sample,
)
from gpustack_worker import openapi
from gpustack_worker.openapi import (
    INSTANCE,
    INSTANCE_LIST,
    INSTANCE_METRICS,
    LIST_META,
    OBJECT_META,
    canonical_json,
    instance_crd_schema,
    openapi_v2,
    openapi_v2_bytes,
    openapi_v3_group,
    openapi_v3_group_bytes,
    openapi_v3_index,
    openapi_v3_index_bytes,
)

PREFIX = "ai.gpustack.worker.v1."
WIRE = {
    f"{PREFIX}InstanceMetrics": InstanceMetrics,
    f"{PREFIX}Sample": Sample,
    f"{PREFIX}AcceleratorMetrics": AcceleratorMetrics,
    OBJECT_META: ObjectMeta,
}
NS = "/apis/worker.gpustack.ai/v1/namespaces/{namespace}/instances"


def walk(node: Any, path: str = "$") -> Iterator[tuple[str, Any, Any]]:
    """Every ``(path, key, value)`` of a JSON document."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield path, key, value
            yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, f"{path}[{i}]")


def refs(document: Any) -> list[str]:
    return [value for _, key, value in walk(document) if key == "$ref"]


def _json_type(info: msgspec.inspect.Type) -> dict[str, Any]:
    """What a wire field's schema must say, from msgspec's own view of its type."""
    if isinstance(info, msgspec.inspect.UnionType):
        (info,) = (t for t in info.types if not isinstance(t, msgspec.inspect.NoneType))
    if isinstance(info, msgspec.inspect.StrType):
        return {"type": "string"}
    if isinstance(info, msgspec.inspect.BoolType):
        return {"type": "boolean"}
    if isinstance(info, msgspec.inspect.IntType):
        return {"type": "integer"}
    if isinstance(info, msgspec.inspect.FloatType):
        return {"type": "number"}
    if isinstance(info, msgspec.inspect.DateTimeType):
        return {"type": "string", "format": "date-time"}
    if isinstance(info, msgspec.inspect.ListType):
        return {"type": "array", "items": _json_type(info.item_type)}
    assert isinstance(info, msgspec.inspect.StructType)
    name = OBJECT_META if info.cls is ObjectMeta else PREFIX + info.cls.__name__
    return {"$ref": f"#/definitions/{name}"}


def _matches(schema: dict[str, Any], expected: dict[str, Any]) -> bool:
    return all(
        _matches(schema[k], v) if isinstance(v, dict) else schema.get(k) == v
        for k, v in expected.items()
    )


# --------------------------------------------------------------------------------------------
# The wire, field by field
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("definition", list(WIRE))
def test_every_wire_field_is_described_by_its_json_name(definition: str) -> None:
    schema = openapi_v2()["definitions"][definition]
    info = msgspec.inspect.type_info(WIRE[definition])
    assert isinstance(info, msgspec.inspect.StructType)
    for field in info.fields:
        assert field.encode_name in schema["properties"], (definition, field.encode_name)
        described = schema["properties"][field.encode_name]
        expected = _json_type(field.type)
        assert _matches(described, expected), (definition, field.encode_name, described)


@pytest.mark.parametrize("definition", [d for d in WIRE if d != OBJECT_META])
def test_required_is_exactly_the_fields_always_written(definition: str) -> None:
    info = msgspec.inspect.type_info(WIRE[definition])
    assert isinstance(info, msgspec.inspect.StructType)
    schema = openapi_v2()["definitions"][definition]
    assert set(schema.get("required", [])) == {f.encode_name for f in info.fields if f.required}
    # And nothing is described that the wire does not carry.
    assert set(schema["properties"]) == {f.encode_name for f in info.fields}


def test_the_specs_field_names_are_spelled_as_the_reference_spells_them() -> None:
    definitions = openapi_v2()["definitions"]
    sample = definitions[f"{PREFIX}Sample"]["properties"]
    accelerator = definitions[f"{PREFIX}AcceleratorMetrics"]["properties"]
    assert set(sample) == {
        "timestamp",
        "cpuTotalMilliCores",
        "cpuUsedMilliCores",
        "memoryTotalMiB",
        "memoryUsedMiB",
        "storageTotalMiB",
        "storageUsedMiB",
        "accelerators",
    }
    assert set(accelerator) == {
        "id",
        "mode",
        "memoryTotalMiB",
        "memoryUsedMiB",
        "memoryUtilizationPercent",
        "coresUtilizationPercent",
        "temperatureCelsius",
        "powerUsageWatts",
        "unhealthy",
    }


def test_accelerators_are_a_map_keyed_by_a_required_id() -> None:
    definitions = openapi_v2()["definitions"]
    accelerators = definitions[f"{PREFIX}Sample"]["properties"]["accelerators"]
    assert accelerators["x-kubernetes-list-type"] == "map"
    assert accelerators["x-kubernetes-list-map-keys"] == ["id"]
    assert "id" in definitions[f"{PREFIX}AcceleratorMetrics"]["required"]


def _full_metrics() -> InstanceMetrics:
    accelerator = AcceleratorMetrics(
        id="GPU-1",
        mode="Sliced",
        memory_total_mib=40960,
        memory_used_mib=1024,
        memory_utilization_percent=2,
        cores_utilization_percent=50,
        temperature_celsius=41,
        power_usage_watts=123.5,
        unhealthy=False,
    )
    sample = Sample(
        timestamp=datetime(2026, 11, 29, 8, 0, tzinfo=UTC),
        cpu_total_milli_cores=4000,
        cpu_used_milli_cores=250,
        memory_total_mib=32768,
        memory_used_mib=2048,
        storage_total_mib=40960,
        storage_used_mib=512,
        accelerators=[accelerator],
    )
    meta = ObjectMeta(name="qwen-a", namespace="team-a", uid="0b7e2c11")
    return InstanceMetrics.of(meta, sample)


@pytest.mark.parametrize("dialect", ["v2", "v3"])
def test_a_real_response_validates_and_a_broken_one_does_not(dialect: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    if dialect == "v2":
        definitions = openapi_v2()["definitions"]
        root = {"$ref": f"#/definitions/{INSTANCE_METRICS}", "definitions": definitions}
    else:
        schemas = openapi_v3_group()["components"]["schemas"]
        root = {
            "$ref": f"#/components/schemas/{INSTANCE_METRICS}",
            "components": {"schemas": schemas},
        }
    validator = jsonschema.Draft4Validator(root)
    body = json.loads(msgspec.json.encode(_full_metrics()))
    validator.validate(body)
    # Every key the wire writes is a described property, all the way down.
    sample = body["sample"]
    assert set(sample) <= set(openapi_v2()["definitions"][f"{PREFIX}Sample"]["properties"]), (
        "undescribed key"
    )
    broken = json.loads(json.dumps(body))
    broken["sample"]["accelerators"][0]["memoryUsedMiB"] = "1 GiB"
    assert not validator.is_valid(broken)
    del body["sample"]["cpuTotalMilliCores"]
    assert not validator.is_valid(body)


# --------------------------------------------------------------------------------------------
# The documents
# --------------------------------------------------------------------------------------------


def test_v2_document_shape() -> None:
    document = openapi_v2()
    assert document["swagger"] == "2.0"
    assert document["info"] == {"title": "gpustack-worker", "version": "v1"}
    assert document["consumes"] == ["application/json"]
    assert document["produces"] == ["application/json"]
    operations = {
        path: (item["get"]["operationId"], item["get"]["x-kubernetes-action"])
        for path, item in document["paths"].items()
    }
    assert operations == {
        "/apis/worker.gpustack.ai/v1/instances": (
            "listWorkerGpustackAiV1InstanceForAllNamespaces",
            "list",
        ),
        NS: ("listWorkerGpustackAiV1NamespacedInstance", "list"),
        f"{NS}/{{name}}": ("readWorkerGpustackAiV1NamespacedInstance", "get"),
        f"{NS}/{{name}}/metrics": ("readWorkerGpustackAiV1NamespacedInstanceMetrics", "get"),
    }
    for item in document["paths"].values():
        assert set(item) <= {"get", "parameters"}, "read-only: GET only"
        assert item["get"]["produces"] == ["application/json"]


def test_every_path_template_is_a_declared_parameter() -> None:
    for document in (openapi_v2(), openapi_v3_group()):
        for path, item in document["paths"].items():
            templated = {part[1:-1] for part in path.split("/") if part.startswith("{")}
            declared = {p["name"] for p in item.get("parameters", []) if p["in"] == "path"}
            assert templated == declared, path
            assert all(p["required"] for p in item.get("parameters", []) if p["in"] == "path")


def test_operations_carry_the_group_version_kind() -> None:
    gvk = {"group": "worker.gpustack.ai", "version": "v1"}
    paths = openapi_v2()["paths"]
    metrics = paths[f"{NS}/{{name}}/metrics"]["get"]
    assert metrics["x-kubernetes-group-version-kind"] == {**gvk, "kind": "InstanceMetrics"}
    assert metrics["responses"]["200"]["schema"] == {"$ref": f"#/definitions/{INSTANCE_METRICS}"}
    read = paths[f"{NS}/{{name}}"]["get"]
    assert read["x-kubernetes-group-version-kind"] == {**gvk, "kind": "Instance"}
    assert read["responses"]["200"]["schema"] == {"$ref": f"#/definitions/{INSTANCE}"}
    listed = paths[NS]["get"]
    assert listed["responses"]["200"]["schema"] == {"$ref": f"#/definitions/{INSTANCE_LIST}"}
    assert {p["name"] for p in listed["parameters"]} >= {"labelSelector", "limit", "continue"}


def test_top_level_kinds_carry_their_group_version_kind() -> None:
    definitions = openapi_v2()["definitions"]
    for name, kind in [
        (INSTANCE, "Instance"),
        (INSTANCE_LIST, "InstanceList"),
        (INSTANCE_METRICS, "InstanceMetrics"),
    ]:
        assert definitions[name]["x-kubernetes-group-version-kind"] == [
            {"group": "worker.gpustack.ai", "kind": kind, "version": "v1"}
        ]
    for name in (f"{PREFIX}Sample", f"{PREFIX}AcceleratorMetrics", OBJECT_META, LIST_META):
        assert "x-kubernetes-group-version-kind" not in definitions[name]


def test_the_instance_is_the_crds_schema() -> None:
    """The v1 view and the stored object cannot drift: one function describes both."""
    crd = instance_crd_schema()
    v3 = openapi_v3_group()["components"]["schemas"][INSTANCE]
    assert v3["properties"]["spec"] == crd["properties"]["spec"]
    assert v3["properties"]["status"] == crd["properties"]["status"]
    assert v3["properties"]["metadata"] == {"$ref": f"#/components/schemas/{OBJECT_META}"}
    v2 = openapi_v2()["definitions"][INSTANCE]
    assert set(v2["properties"]["spec"]["properties"]) == set(
        crd["properties"]["spec"]["properties"]
    )
    cpu = v2["properties"]["spec"]["properties"]["resources"]["properties"]["cpu"]
    assert cpu["x-kubernetes-int-or-string"] is True
    assert "anyOf" not in cpu
    items = openapi_v2()["definitions"][INSTANCE_LIST]["properties"]["items"]
    assert items == {"type": "array", "items": {"$ref": f"#/definitions/{INSTANCE}"}}


def test_v2_uses_nothing_swagger_cannot_spell() -> None:
    for path, key, value in walk(openapi_v2()):
        assert key not in {"anyOf", "oneOf", "allOf", "not", "nullable", "$defs"}, path
        if key == "type":
            assert value != "null", path


@pytest.mark.parametrize(
    ("document", "prefix", "where"),
    [
        (openapi_v2, "#/definitions/", "definitions"),
        (openapi_v3_group, "#/components/schemas/", "components.schemas"),
    ],
)
def test_no_dangling_ref(document: Any, prefix: str, where: str) -> None:
    built = document()
    defined = built["definitions"] if where == "definitions" else built["components"]["schemas"]
    found = refs(built)
    assert found, "expected references"
    for ref in found:
        assert ref.startswith(prefix), ref
        assert ref.removeprefix(prefix) in defined, ref


def test_every_definition_is_used() -> None:
    document = openapi_v2()
    used = {ref.removeprefix("#/definitions/") for ref in refs(document)}
    assert used == set(document["definitions"])


def test_v3_document_shape() -> None:
    document = openapi_v3_group()
    assert document["openapi"].startswith("3.0.")
    assert set(document["paths"]) == set(openapi_v2()["paths"])
    assert set(document["components"]["schemas"]) == set(openapi_v2()["definitions"])
    read = document["paths"][f"{NS}/{{name}}/metrics"]["get"]
    assert read["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": f"#/components/schemas/{INSTANCE_METRICS}"
    }
    for path, key, value in walk(document):
        assert key not in {"definitions", "$defs"}, path
        if key == "type":
            assert value != "null", path


def test_v3_index_hash_is_the_group_documents_digest() -> None:
    body = openapi_v3_group_bytes()
    expected = hashlib.sha512(body).hexdigest().upper()
    assert openapi_v3_index() == {
        "paths": {
            "apis/worker.gpustack.ai/v1": {
                "serverRelativeURL": f"/openapi/v3/apis/worker.gpustack.ai/v1?hash={expected}"
            }
        }
    }
    assert openapi.v3_group_hash() == expected
    assert openapi.etag(body) == f'"{expected}"'


@pytest.mark.parametrize(
    ("build", "render"),
    [
        (openapi_v2, openapi_v2_bytes),
        (openapi_v3_group, openapi_v3_group_bytes),
        (openapi_v3_index, openapi_v3_index_bytes),
    ],
)
def test_rendered_bytes_are_canonical_and_stable(build: Any, render: Any) -> None:
    body = render()
    assert render() is body, "rendered once"
    assert json.loads(body) == build()
    assert canonical_json(build()) == body, "a fresh build renders the same bytes"
    assert (
        body
        == json.dumps(
            json.loads(body), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode()
    )


def test_callers_get_fresh_documents() -> None:
    mutated = openapi_v2()
    mutated["definitions"].clear()
    assert openapi_v2()["definitions"]
    assert json.loads(openapi_v2_bytes())["definitions"]
