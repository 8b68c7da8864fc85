"""The Instance CRD: valid for the API server, structural, and true to every stand-in Instance."""

from __future__ import annotations

import copy
import difflib
import importlib.util
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import pytest
import yaml

from gpustack_core.instancetype import UnitResources
from gpustack_core.typestatus import instancetype_status
from gpustack_core.views import View, Views
from gpustack_simulator.scenario import expand, is_scenario, load_scenario, recordings_for
from gpustack_worker.discovery import GROUP, STORAGE_VERSION
from gpustack_worker.openapi import instance_crd_schema
from walkthrough_expected import (
    CATALOG_HEADER,
    SECTION_1_CATALOG,
    SECTION_1_ROWS,
    TYPES_HEADER,
    catalog_rows,
    current,
)

REPO = Path(__file__).resolve().parents[3]
CRD = REPO / "clusters" / "crds" / "instances.worker.gpustack.ai.yaml"
SCENARIOS = sorted(p for p in (REPO / "recordings" / "scenarios").glob("*.yaml") if is_scenario(p))
KUBERNETES = ["1.30", "1.31", "1.32", "1.33"]
JUNCTORS = ("allOf", "anyOf", "oneOf", "not")


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    document = yaml.safe_load(CRD.read_text())
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def schema(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    found = version["schema"]["openAPIV3Schema"]
    assert isinstance(found, dict)
    return found


@pytest.fixture(scope="module")
def jsonschema() -> ModuleType:
    return pytest.importorskip("jsonschema")


def test_identity(crd: dict[str, Any]) -> None:
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"instances.{GROUP}"
    spec = crd["spec"]
    assert spec["group"] == GROUP
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": "Instance",
        "listKind": "InstanceList",
        "plural": "instances",
        "singular": "instance",
        "shortNames": ["inst"],
    }
    (version,) = spec["versions"]
    assert version["name"] == STORAGE_VERSION
    assert version["served"] is True
    assert version["storage"] is True
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: (c["type"], c["jsonPath"]) for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Phase": ("string", ".status.phase"),
        "Type": ("string", ".spec.type"),
        "Accelerator": ("string", ".spec.resources.accelerator"),
        "Memory%": ("integer", ".spec.resources.acceleratorSlicedMemoryPercentage"),
        "Profile": ("string", ".spec.resources.acceleratorPartitionedProfile"),
        "Node": ("string", ".status.nodeName"),
        "Age": ("date", ".metadata.creationTimestamp"),
    }


def test_the_schema_is_the_one_the_openapi_documents_publish(schema: dict[str, Any]) -> None:
    expected = instance_crd_schema()
    if schema != expected:
        diff = difflib.unified_diff(
            yaml.safe_dump(schema, sort_keys=False).splitlines(),
            yaml.safe_dump(expected, sort_keys=False).splitlines(),
            "committed",
            "instance_crd_schema()",
            lineterm="",
        )
        pytest.fail(f"{CRD.name} drifted from instance_crd_schema():\n" + "\n".join(diff))


@pytest.mark.parametrize("kubernetes", KUBERNETES)
def test_kubernetes_validate_strict(crd: dict[str, Any], kubernetes: str) -> None:
    with warnings.catch_warnings():
        # Older releases import pkg_resources and distutils, which warn on import.
        warnings.simplefilter("ignore", DeprecationWarning)
        validate = pytest.importorskip("kubernetes_validate").validate
    assert validate(crd, kubernetes, strict=True) == kubernetes


# --------------------------------------------------------------------------------------------
# Structural schema rules (what the API server enforces on create)
# --------------------------------------------------------------------------------------------


def _int_or_string_junctor(node: dict[str, Any]) -> bool:
    """The one junctor a structural schema may type: ``anyOf: [integer, string]``."""
    allowed = [{"type": "integer"}, {"type": "string"}]
    return node.get("x-kubernetes-int-or-string") is True and node.get("anyOf") == allowed


def _node_problems(node: dict[str, Any], path: str, *, junctor: bool) -> Iterator[str]:
    opaque = node.get("x-kubernetes-int-or-string") or node.get(
        "x-kubernetes-preserve-unknown-fields"
    )
    if junctor:
        for key in ("type", "description", "default", "additionalProperties", "nullable"):
            if key in node:
                yield f"{path}: {key} inside a junctor"
    elif not opaque and not node.get("type"):
        yield f"{path}: no type"
    if "properties" in node and "additionalProperties" in node:
        yield f"{path}: properties and additionalProperties together"
    if node.get("type") == "array" and "items" not in node:
        yield f"{path}: an array without items"


def _list_map_problems(node: dict[str, Any], path: str) -> Iterator[str]:
    items = node.get("items", {})
    if node.get("x-kubernetes-list-type") != "map" or items.get("type") != "object":
        yield f"{path}: list-map-keys on something other than a list of objects"
    for key in node["x-kubernetes-list-map-keys"]:
        field = items.get("properties", {}).get(key, {})
        if key not in items.get("required", []) and "default" not in field:
            yield f"{path}: list-map key {key} is neither required nor defaulted"
        if field.get("type") not in {"string", "integer", "boolean"}:
            yield f"{path}: list-map key {key} is not a scalar"


def _junctor_problems(node: dict[str, Any], path: str) -> Iterator[str]:
    for key in JUNCTORS:
        if key == "anyOf" and _int_or_string_junctor(node):
            continue
        branches = node.get(key, [])
        for i, branch in enumerate(branches if isinstance(branches, list) else [branches]):
            for field in branch.get("properties", {}):
                if field not in node.get("properties", {}):
                    yield f"{path}.{key}[{i}]: {field} is not specified outside the junctor"
            yield from _structural_problems(branch, f"{path}.{key}[{i}]", junctor=True)


def _structural_problems(node: dict[str, Any], path: str, *, junctor: bool) -> Iterator[str]:
    """What the API server refuses in a structural schema, from its documented rules."""
    yield from _node_problems(node, path, junctor=junctor)
    if "x-kubernetes-list-map-keys" in node:
        yield from _list_map_problems(node, path)
    for name, child in node.get("properties", {}).items():
        yield from _structural_problems(child, f"{path}.{name}", junctor=junctor)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from _structural_problems(node[key], f"{path}.{key}", junctor=junctor)
    yield from _junctor_problems(node, path)


def test_the_schema_is_structural(schema: dict[str, Any]) -> None:
    assert list(_structural_problems(schema, "$", junctor=False)) == []
    # metadata may only restrict name and generateName; this one restricts nothing.
    assert schema["properties"]["metadata"] == {"type": "object"}


def test_the_structural_check_catches_what_the_api_server_refuses() -> None:
    untyped = {"type": "object", "properties": {"spec": {"properties": {}}}}
    assert list(_structural_problems(untyped, "$", junctor=False)) == ["$.spec: no type"]
    typed_junctor = {"type": "object", "anyOf": [{"type": "string"}]}
    assert list(_structural_problems(typed_junctor, "$", junctor=False)) == [
        "$.anyOf[0]: type inside a junctor"
    ]


def test_preserve_unknown_fields_is_nowhere(schema: dict[str, Any]) -> None:
    """The spec states every field an Instance has; nothing is left open."""
    assert "x-kubernetes-preserve-unknown-fields" not in json.dumps(schema)


def test_defaults_are_valid(schema: dict[str, Any], jsonschema: ModuleType) -> None:
    def defaults(node: Any) -> Iterator[tuple[dict[str, Any], Any]]:
        if isinstance(node, dict):
            if "default" in node:
                yield node, node["default"]
            for value in node.values():
                yield from defaults(value)
        elif isinstance(node, list):
            for value in node:
                yield from defaults(value)

    found = list(defaults(schema))
    assert found
    for node, value in found:
        jsonschema.Draft4Validator(_as_json_schema(node)).validate(value)


# --------------------------------------------------------------------------------------------
# Instances against the schema
# --------------------------------------------------------------------------------------------


def _as_json_schema(node: Any) -> Any:
    """The CRD schema as plain JSON Schema, validating as the API server does with Strict.

    An int-or-string becomes its ``anyOf``; an object with ``properties`` admits nothing else
    (the API server would prune or, under strict field validation, refuse an unknown field).
    """
    if isinstance(node, list):
        return [_as_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _as_json_schema(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def validator(schema: dict[str, Any], jsonschema: ModuleType) -> Any:
    converted = _as_json_schema(schema)
    jsonschema.Draft4Validator.check_schema(converted)
    return jsonschema.Draft4Validator(converted)


def _standin_instances() -> Iterator[Any]:
    for path in SCENARIOS:
        expanded = expand(load_scenario(path), base=recordings_for(path))
        for instance in expanded.instances:
            name = f"{path.stem}/{instance['metadata']['namespace']}/{instance['metadata']['name']}"
            yield pytest.param(instance, id=name)


def test_there_are_scenarios() -> None:
    assert SCENARIOS, "no scenarios found; the next test would prove nothing"


@pytest.mark.parametrize("instance", list(_standin_instances()))
def test_every_standin_instance_validates(instance: dict[str, Any], validator: Any) -> None:
    assert instance["apiVersion"] == f"{GROUP}/{STORAGE_VERSION}"
    assert instance["kind"] == "Instance"
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(instance)]
    assert errors == []


def _instance() -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{STORAGE_VERSION}",
        "kind": "Instance",
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": {
            "type": "nvidia-a10g",
            "image": "ubuntu:24.04",
            "command": ["sleep", "86400"],
            "resources": {
                "cpu": "500m",
                "ram": "8Gi",
                "localStorage": 1073741824,
                "accelerator": "1",
                "acceleratorSlicedMemoryPercentage": 20,
                "acceleratorSlicedCoresPercentage": 50,
            },
            "displayName": "Demo workspace",
            "description": "A sliced A10G for notebooks.",
            "imagePullPolicy": "IfNotPresent",
            "imagePullSecret": "registry-creds",
            "env": [{"name": "HF_HOME", "value": "/workspace/.hf"}],
            "sshPublicKey": {"name": "demo-ssh"},
            "nodeName": "node-t4-b",
            "volume": {"ephemeral": {"capacity": "1Gi"}},
            "volumeMount": "/workspace",
            "additionalVolumes": [
                {"mountPath": "/mnt/datasets", "persistent": {"name": "datasets"}},
                {
                    "mountPath": "/etc/model/config.json",
                    "subPath": "config.json",
                    "readOnly": True,
                    "configMap": {"name": "model-config"},
                },
                {
                    "mountPath": "/mnt/host-cache",
                    "readOnly": True,
                    "hostPath": {"path": "/var/lib/gpustack-cache", "type": "DirectoryOrCreate"},
                },
            ],
            "ports": [{"name": "ssh", "port": 22}, {"port": 8080, "protocol": "TCP"}],
            "privileged": False,
            "stop": False,
        },
        "status": {
            "phase": "Ready",
            "nodeName": "node-t4-b",
            "podName": "demo",
            "hostIPs": [{"ip": "10.0.0.11"}],
            "ports": [{"port": 22, "protocol": "TCP", "nodePort": 30022}],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "PodReady",
                    "message": "",
                    "lastTransitionTime": "2026-11-29T08:00:00Z",
                }
            ],
        },
    }


def test_a_full_instance_validates(validator: Any) -> None:
    assert list(validator.iter_errors(_instance())) == []


def _set(document: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    *parents, last = path.split(".")
    node: Any = changed
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return changed


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("spec.resources.cpu", {"cores": 4}),
        ("spec.resources.ram", "lots"),
        ("spec.resources.ram", 1.5),
        ("spec.stop", "false"),
        ("spec.image", ""),
        ("spec.image", _DELETE),
        ("spec.imagePullPolicy", "Sometimes"),
        ("spec.resources.acceleratorSlicedMemoryPercentage", 0),
        ("spec.resources.acceleratorSlicedMemoryPercentage", 101),
        ("spec.resources.memory", "8Gi"),
        ("spec.env", [{"value": "no name"}]),
        ("spec.volume", {}),
        ("spec.volume", {"ephemeral": {"capacity": "1Gi"}, "persistent": {"name": "ws"}}),
        ("spec.volumeMount", "workspace"),
        ("spec.additionalVolumes.0.configMap", {"name": "two-sources"}),
        ("spec.additionalVolumes.1.configMap", _DELETE),
        ("spec.additionalVolumes.2.hostPath.type", "Anything"),
        ("spec.ports.0.port", 70000),
        ("spec.ports.0.protocol", "HTTP"),
        ("status.conditions.0.status", "Maybe"),
        ("status.hostIPs", ["10.0.0.11"]),
        ("status.nodeName", 7),
        ("spec", _DELETE),
    ],
)
def test_a_broken_instance_is_rejected(path: str, value: Any, validator: Any) -> None:
    assert not validator.is_valid(_set(_instance(), path, value))


def test_kubernetes_validate_would_catch_a_broken_crd(crd: dict[str, Any]) -> None:
    """The strict check above is not vacuous: an unknown schema keyword fails it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        kubernetes_validate = pytest.importorskip("kubernetes_validate")
    broken = copy.deepcopy(crd)
    broken["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["bogus"] = 1
    with pytest.raises(kubernetes_validate.ValidationError, match="bogus"):
        kubernetes_validate.validate(broken, KUBERNETES[-1], strict=True)


# --------------------------------------------------------------------------------------------
# The InstanceType CRD: generated by the same means, held to the same rules
# --------------------------------------------------------------------------------------------

TYPE_CRD = REPO / "clusters" / "crds" / "instancetypes.worker.gpustack.ai.yaml"


def test_every_generated_crd_is_committed_as_generated() -> None:
    spec = importlib.util.spec_from_file_location(
        "instance_crd", REPO / "clusters" / "instance_crd.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main([]) == 0, "run `just instance-crd`"


@pytest.mark.parametrize("kubernetes", KUBERNETES)
def test_the_instancetype_crd_validates_strict(kubernetes: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        validate = pytest.importorskip("kubernetes_validate").validate
    assert validate(yaml.safe_load(TYPE_CRD.read_text()), kubernetes, strict=True) == kubernetes


def test_the_instancetype_schema_is_structural_and_takes_the_walkthroughs_type(
    jsonschema: ModuleType,
) -> None:
    crd = yaml.safe_load(TYPE_CRD.read_text())
    assert crd["spec"]["scope"] == "Cluster"
    (version,) = crd["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    assert list(_structural_problems(schema, "$", junctor=False)) == []
    # The walkthrough's derived A10G type (spec and status), as recorded.
    walkthrough = {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "InstanceType",
        "metadata": {"name": "gpustack--nvidia-a10g-linux-amd64"},
        "spec": {
            "acceleratable": True, "acceleratorGroup": "nvidia-a10g", "generalGroup": "generic",
            "os": "linux", "arch": "amd64", "manufacturer": "nvidia", "product": "NVIDIA-A10G",
            "family": "Ampere", "memory": "24Gi", "cores": "10240",
            "feature": {
                "logicalSliced": {"maxSize": 128, "coresPercentageOvercommit": True,
                                  "memoryPercentageStep": 1},
                "physicalSliced": {"maxSize": 0},
            },
            "unitResources": {"cpu": "8", "ram": "64Gi", "localStorage": "100Gi"},
        },
        "status": {
            "phase": "Active",
            "accelerator": {"capacity": "1", "onceMaxRequest": "1", "remaining": "1"},
            "acceleratorShared": {"capacity": "10", "onceMaxRequest": "10", "remaining": "10"},
            "acceleratorSliced": {"capacity": "100", "onceMaxRequest": "100", "remaining": "100"},
            "acceleratorPartitioned": {"capacity": "0", "onceMaxRequest": "0", "remaining": "0"},
            "entrance": "gpustack-fnv64-c4680bb149644f1c",
        },
    }  # fmt: skip
    strict = _as_json_schema(schema)
    assert list(jsonschema.Draft4Validator(strict).iter_errors(walkthrough)) == []
    walkthrough["spec"]["manufacturer"] = 7
    assert list(jsonschema.Draft4Validator(strict).iter_errors(walkthrough)) != []


# --------------------------------------------------------------------------------------------
# kubectl get instancetypes / instancetypeflavor: the walkthrough's tables from the columns
# --------------------------------------------------------------------------------------------

FLAVOR_CRD = REPO / "clusters" / "crds" / "instancetypeflavors.worker.gpustack.ai.yaml"


def _columns(path: Path, *, wide: bool = False) -> list[dict[str, Any]]:
    (version,) = yaml.safe_load(path.read_text())["spec"]["versions"]
    columns: list[dict[str, Any]] = version["additionalPrinterColumns"]
    return [c for c in columns if wide or c.get("priority", 0) == 0]


def _cell(obj: dict[str, Any], json_path: str) -> str:
    """A printer column's cell: a dotted JSONPath, booleans as kubectl prints them, absent empty."""
    value: Any = obj
    for key in json_path.lstrip(".").split("."):
        value = value.get(key) if isinstance(value, dict) else None
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _row(path: Path, obj: dict[str, Any]) -> str:
    """The row as the walkthrough records it: NAME, then the cells, runs of blanks collapsed."""
    cells = [obj["metadata"]["name"], *(_cell(obj, c["jsonPath"]) for c in _columns(path))]
    return " ".join(" ".join(cells).split())


def test_kubectl_get_instancetypes_prints_the_walkthroughs_header() -> None:
    header = ["NAME", *(c["name"].upper() for c in _columns(TYPE_CRD))]
    assert " ".join(header) == TYPES_HEADER


def test_kubectl_get_instancetypeflavor_prints_the_walkthroughs_header() -> None:
    header = ["NAME", *(c["name"].upper() for c in _columns(FLAVOR_CRD))]
    assert " ".join(header) == CATALOG_HEADER


def test_kubectl_get_instancetypes_prints_the_walkthroughs_rows(jsonschema: ModuleType) -> None:
    def status(unit: tuple[str, str, str], views: Views, cpu: View, entrance: str) -> Any:
        written = instancetype_status(
            unit=UnitResources(cpu=unit[0], ram=unit[1], local_storage=unit[2]),
            views=views, cpu=cpu, entrance=entrance, phase="Active",
        )  # fmt: skip
        return json.loads(msgspec.json.encode(written))

    # The figures of §1's table (SH once-max in cards: the current shared reading).
    types = {
        "gpustack--generic-linux-amd64": status(
            ("1", "2Gi", "100Gi"), Views(), View(72_000, 48_000, 72_000),
            "gpustack-fnv64-3b93966fd73eb9ec",
        ),
        "gpustack--nvidia-a10g-linux-amd64": status(
            ("8", "64Gi", "100Gi"),
            Views(exclusive=View(1, 1, 1), shared=View(10, 1, 10), sliced=View(100, 100, 100)),
            View(), "gpustack-fnv64-c4680bb149644f1c",
        ),
        "gpustack--nvidia-tesla-t4-linux-amd64": status(
            ("8", "32Gi", "100Gi"),
            Views(exclusive=View(5, 4, 5), shared=View(50, 4, 50), sliced=View(500, 100, 500)),
            View(), "gpustack-fnv64-6b371caa2da0b799",
        ),
    }  # fmt: skip
    rows = [_row(TYPE_CRD, {"metadata": {"name": n}, "status": s}) for n, s in types.items()]
    assert rows == current(SECTION_1_ROWS)  # SH's 10/10, 40/50 read as 1/10, 4/50 (cards)
    schema = yaml.safe_load(TYPE_CRD.read_text())["spec"]["versions"][0]["schema"]
    strict = _as_json_schema(schema["openAPIV3Schema"])
    for name, written in types.items():
        obj = {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "InstanceType",
               "metadata": {"name": name}, "status": written}  # fmt: skip
        assert list(jsonschema.Draft4Validator(strict).iter_errors(obj)) == []


# §1's catalog, as the worker writes it (the A10G entry is the walkthrough's YAML).
CATALOG = [
    {"metadata": {"name": "gpustack--generic"},
     "spec": {"acceleratable": False, "generalGroup": "generic", "manufacturer": "generic"}},
    {"metadata": {"name": "gpustack--nvidia-a10g"},
     "spec": {"acceleratable": True, "acceleratorGroup": "nvidia-a10g", "manufacturer": "nvidia",
              "product": "NVIDIA-A10G", "memory": "24Gi", "cores": "10240", "sliceable": True}},
    {"metadata": {"name": "gpustack--nvidia-tesla-t4"},
     "spec": {"acceleratable": True, "acceleratorGroup": "nvidia-tesla-t4",
              "manufacturer": "nvidia", "product": "Tesla-T4", "memory": "16Gi", "cores": "2560",
              "sliceable": True}},
]  # fmt: skip


def test_kubectl_get_instancetypeflavor_prints_the_walkthroughs_rows() -> None:
    assert [_row(FLAVOR_CRD, entry) for entry in CATALOG] == catalog_rows(SECTION_1_CATALOG)


@pytest.mark.parametrize("kubernetes", KUBERNETES)
def test_the_instancetypeflavor_crd_validates_strict(kubernetes: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        validate = pytest.importorskip("kubernetes_validate").validate
    assert validate(yaml.safe_load(FLAVOR_CRD.read_text()), kubernetes, strict=True) == kubernetes


def test_the_instancetypeflavor_schema_takes_the_catalog(jsonschema: ModuleType) -> None:
    crd = yaml.safe_load(FLAVOR_CRD.read_text())
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["kind"] == "InstanceTypeFlavor"
    (version,) = crd["spec"]["versions"]
    assert "subresources" not in version  # a catalog: no status
    schema = version["schema"]["openAPIV3Schema"]
    assert list(_structural_problems(schema, "$", junctor=False)) == []
    strict = jsonschema.Draft4Validator(_as_json_schema(schema))
    for entry in CATALOG:
        obj = {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "InstanceTypeFlavor", **entry}
        assert list(strict.iter_errors(obj)) == []
    unlabelled = copy.deepcopy(CATALOG[1])
    del unlabelled["spec"]["acceleratable"]
    assert list(strict.iter_errors(unlabelled)) != []
