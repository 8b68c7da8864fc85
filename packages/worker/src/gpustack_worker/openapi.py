"""OpenAPI v2 and v3 for ``worker.gpustack.ai/v1``, derived from the types they describe.

The aggregator downloads ``/openapi/v2`` from every APIService and retries forever on a 404,
and proxies ``/openapi/v3`` (reference §4); kubectl reads them for ``explain`` and field
validation. A hand-written document would drift from the wire, so every schema here is
generated:

* ``InstanceMetrics`` and its parts come from the msgspec structs in
  ``gpustack_core.instance_metrics``; a field added there appears here with its wire name.
* ``Instance`` comes from :func:`instance_crd_schema`, generated from the structs in
  ``gpustack_core.instance`` (which the controller decodes into), and is also the committed
  CRD's ``openAPIV3Schema`` (a test holds the two equal), so the proxied v1 view, the stored
  v1alpha1 object and the controller read one description.

The documents are static, so each is rendered once to canonical bytes (sorted keys, no
whitespace): the v3 index's ``hash`` and every ``ETag`` are digests of exactly what is served.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator
from typing import Any, Final

import msgspec

from gpustack_core.crdschema import structural_schema
from gpustack_core.instance import InstanceSpec, InstanceStatus
from gpustack_core.instance_metrics import InstanceMetrics
from gpustack_core.instancetype import InstanceTypeSpec, InstanceTypeStatus
from gpustack_core.instancetypeflavor import InstanceTypeFlavorSpec
from gpustack_worker.discovery import (
    GROUP,
    INSTANCE_KIND,
    INSTANCES,
    METRICS,
    METRICS_KIND,
    VERSION,
)

DEFINITION_PREFIX: Final = "ai.gpustack.worker.v1."
"""Kubernetes names definitions by reversed group, then version: ``io.k8s.api.core.v1.Pod``."""
OBJECT_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
LIST_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"
INSTANCE: Final = f"{DEFINITION_PREFIX}{INSTANCE_KIND}"
INSTANCE_LIST: Final = f"{DEFINITION_PREFIX}{INSTANCE_KIND}List"
INSTANCE_METRICS: Final = f"{DEFINITION_PREFIX}{METRICS_KIND}"

V3_GROUP_PATH: Final = f"apis/{GROUP}/{VERSION}"
"""The index key Kubernetes uses: the group version's path without its leading slash."""
CONTENT_TYPE: Final = "application/json"

_ROOT: Final = f"/apis/{GROUP}/{VERSION}"
_NAMESPACED: Final = f"{_ROOT}/namespaces/{{namespace}}/{INSTANCES}"
_TAG: Final = "workerGpustackAi_v1"
_OP: Final = "WorkerGpustackAiV1"

# --------------------------------------------------------------------------------------------
# Instance: the CRD's schema (OpenAPI v3, structural)
# --------------------------------------------------------------------------------------------


def _string(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def instancetype_crd_schema() -> dict[str, Any]:
    """The InstanceType CRD's ``openAPIV3Schema``, from ``gpustack_core.instancetype``."""
    return {
        "type": "object",
        "description": "What an Instance's spec.type names: its pool and accelerator.",
        "properties": {
            "apiVersion": _string("The versioned schema of this representation of an object."),
            "kind": _string("The REST resource this object represents, in CamelCase."),
            "metadata": {"type": "object"},
            "spec": structural_schema(InstanceTypeSpec),
            "status": structural_schema(InstanceTypeStatus),
        },
    }


def instancetypeflavor_crd_schema() -> dict[str, Any]:
    """The InstanceTypeFlavor CRD's schema, from ``gpustack_core.instancetypeflavor``."""
    return {
        "type": "object",
        "description": "A catalog entry: one pool the nodes form, without its platform.",
        "properties": {
            "apiVersion": _string("The versioned schema of this representation of an object."),
            "kind": _string("The REST resource this object represents, in CamelCase."),
            "metadata": {"type": "object"},
            "spec": structural_schema(InstanceTypeFlavorSpec),
        },
    }


def instance_crd_schema() -> dict[str, Any]:
    """The CRD's ``openAPIV3Schema``; the committed YAML must equal it (a test checks)."""
    return {
        "type": "object",
        "description": "A container workspace backed by a Pod.",
        "required": ["spec"],
        "properties": {
            "apiVersion": _string("The versioned schema of this representation of an object."),
            "kind": _string("The REST resource this object represents, in CamelCase."),
            "metadata": {"type": "object"},
            "spec": structural_schema(InstanceSpec),
            "status": structural_schema(InstanceStatus),
        },
    }


# --------------------------------------------------------------------------------------------
# Definitions
# --------------------------------------------------------------------------------------------


def _gvk(kind: str) -> dict[str, str]:
    return {"group": GROUP, "kind": kind, "version": VERSION}


def _object_meta() -> dict[str, Any]:
    """The part of ``ObjectMeta`` these objects carry: enough that no ``$ref`` dangles."""
    string_map = {"type": "object", "additionalProperties": {"type": "string"}}
    timestamp = {"type": "string", "format": "date-time"}
    return {
        "description": "Standard object metadata.",
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "namespace": {"type": "string"},
            "uid": {"type": "string"},
            "resourceVersion": {"type": "string"},
            "generation": {"type": "integer", "format": "int64"},
            "creationTimestamp": timestamp,
            "deletionTimestamp": timestamp,
            "labels": string_map,
            "annotations": string_map,
            "finalizers": {"type": "array", "items": {"type": "string"}},
        },
    }


def _list_meta() -> dict[str, Any]:
    return {
        "description": "Standard list metadata.",
        "type": "object",
        "properties": {
            "continue": {"type": "string"},
            "remainingItemCount": {"type": "integer", "format": "int64"},
            "resourceVersion": {"type": "string"},
        },
    }


def _datetime_fields() -> set[tuple[str, str]]:
    """``(struct, wire field)`` of every timestamp: msgspec types them as bare strings."""
    found: set[tuple[str, str]] = set()
    for info in _structs(msgspec.inspect.multi_type_info([InstanceMetrics])):
        for field in info.fields:
            kinds = (
                field.type.types
                if isinstance(field.type, msgspec.inspect.UnionType)
                else (field.type,)
            )
            if any(isinstance(kind, msgspec.inspect.DateTimeType) for kind in kinds):
                found.add((info.cls.__name__, field.encode_name))
    return found


def _structs(types: Any) -> Iterator[msgspec.inspect.StructType]:
    """Every struct reachable from ``types``, once each."""
    seen: set[type] = set()
    stack = list(types)
    while stack:
        node = stack.pop()
        if isinstance(node, msgspec.inspect.StructType):
            if node.cls in seen:
                continue
            seen.add(node.cls)
            yield node
            stack.extend(field.type for field in node.fields)
        elif isinstance(node, msgspec.inspect.UnionType):
            stack.extend(node.types)
        elif isinstance(node, msgspec.inspect.ListType):
            stack.append(node.item_type)


def _from_msgspec(node: Any, names: dict[str, str]) -> Any:
    """The wire's JSON Schema as OpenAPI: no ``null`` branches, formats, refs by definition name.

    ``None`` is never on the wire (``omit_defaults`` turns it into an absent key), so an
    optional field is a plain one left out of ``required``; neither Swagger 2.0 nor OpenAPI
    3.0 can spell a ``null`` type anyway. Defaults are dropped: they would read as server-side
    defaulting, which these response-only types never do.
    """
    if isinstance(node, list):
        return [_from_msgspec(item, names) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in {"title", "default"}:
            continue
        if key == "properties":  # field names, not keywords: none of them is dropped
            out[key] = {name: _from_msgspec(field, names) for name, field in value.items()}
        elif key == "$ref":
            out[key] = "#/definitions/" + names[value.rsplit("/", 1)[-1]]
        elif key == "anyOf":
            branches = [b for b in value if b != {"type": "null"}]
            if len(branches) == 1:
                out.update(_from_msgspec(branches[0], names))
            else:
                out[key] = _from_msgspec(branches, names)
        else:
            out[key] = _from_msgspec(value, names)
    if out.get("type") == "integer":
        out.setdefault("format", "int64")
    elif out.get("type") == "number":
        out.setdefault("format", "double")
    return out


def _wire_definitions() -> dict[str, Any]:
    _, components = msgspec.json.schema_components([InstanceMetrics], ref_template="#/$defs/{name}")
    # The wire's ObjectMeta is a subset of Kubernetes' own, so it is named as that.
    names = {
        name: OBJECT_META if name == "ObjectMeta" else f"{DEFINITION_PREFIX}{name}"
        for name in components
    }
    definitions: dict[str, Any] = {}
    for name, schema in components.items():
        if names[name] == OBJECT_META:
            continue  # Kubernetes' own definition covers it; a test holds it a superset
        definitions[names[name]] = _from_msgspec(schema, names)
    for struct, field in _datetime_fields():
        if names[struct] in definitions:
            definitions[names[struct]]["properties"][field]["format"] = "date-time"
    accelerators = definitions[f"{DEFINITION_PREFIX}Sample"]["properties"]["accelerators"]
    # One entry per grant, keyed by its own id: server-side apply and kubectl diff read these.
    accelerators["x-kubernetes-list-type"] = "map"
    accelerators["x-kubernetes-list-map-keys"] = ["id"]
    definitions[INSTANCE_METRICS]["x-kubernetes-group-version-kind"] = [_gvk(METRICS_KIND)]
    return definitions


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/definitions/{name}"}


def _instance_definition() -> dict[str, Any]:
    schema = instance_crd_schema()
    schema["properties"]["metadata"] = _ref(OBJECT_META)
    schema["x-kubernetes-group-version-kind"] = [_gvk(INSTANCE_KIND)]
    return schema


def _instance_list_definition() -> dict[str, Any]:
    return {
        "description": "A list of Instances.",
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": _string("The versioned schema of this representation of an object."),
            "kind": _string("The REST resource this object represents, in CamelCase."),
            "metadata": _ref(LIST_META),
            "items": {"type": "array", "items": _ref(INSTANCE)},
        },
        "x-kubernetes-group-version-kind": [_gvk(f"{INSTANCE_KIND}List")],
    }


def _definitions() -> dict[str, Any]:
    """Every definition, refs spelled ``#/definitions/…`` and schemas in OpenAPI v3 form."""
    return {
        **_wire_definitions(),
        INSTANCE: _instance_definition(),
        INSTANCE_LIST: _instance_list_definition(),
        OBJECT_META: _object_meta(),
        LIST_META: _list_meta(),
    }


def _to_v2(node: Any) -> Any:
    """Swagger 2.0 has no junctors; Kubernetes drops them when it publishes a CRD as v2.

    An int-or-string keeps its extension and pattern and loses its ``anyOf``, which is how a
    CRD's quantities read in the cluster's own ``/openapi/v2``.
    """
    if isinstance(node, list):
        return [_to_v2(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        k: {name: _to_v2(field) for name, field in v.items()} if k == "properties" else _to_v2(v)
        for k, v in node.items()
        if k not in {"anyOf", "oneOf", "allOf", "not"}
    }


def _rewrite_refs(node: Any, prefix: str) -> Any:
    if isinstance(node, list):
        return [_rewrite_refs(item, prefix) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        k: prefix + v.removeprefix("#/definitions/") if k == "$ref" else _rewrite_refs(v, prefix)
        for k, v in node.items()
    }


# --------------------------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------------------------


class _Parameter:
    """One parameter, written once and rendered in either dialect."""

    def __init__(self, name: str, where: str, kind: str, description: str) -> None:
        self.name, self.where, self.kind, self.description = name, where, kind, description

    def v2(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "in": self.where,
            "description": self.description,
            "type": self.kind,
        }
        if self.where == "path":
            out["required"] = True
        return out

    def v3(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "in": self.where,
            "description": self.description,
            "schema": {"type": self.kind},
        }
        if self.where == "path":
            out["required"] = True
        return out


_NAMESPACE = _Parameter("namespace", "path", "string", "object name and auth scope")
_NAME = _Parameter("name", "path", "string", "name of the Instance")
_LIST_QUERY = (
    _Parameter("labelSelector", "query", "string", "only objects whose labels match"),
    _Parameter("fieldSelector", "query", "string", "only objects whose fields match"),
    _Parameter("limit", "query", "integer", "at most this many objects in one response"),
    _Parameter("continue", "query", "string", "the continue token of the previous page"),
    _Parameter("resourceVersion", "query", "string", "the resource version to serve from"),
)


def _path_item(get: dict[str, Any], parameters: list[dict[str, Any]]) -> dict[str, Any]:
    """Empty ``parameters`` lists are left out, as Kubernetes' own documents do."""
    if not get["parameters"]:
        del get["parameters"]
    return {"get": get, "parameters": parameters} if parameters else {"get": get}


class _Operation:
    """One GET: what it returns and how Kubernetes tooling names it."""

    def __init__(
        self,
        path: str,
        operation_id: str,
        action: str,
        kind: str,
        response: str,
        description: str,
        path_parameters: tuple[_Parameter, ...],
        query: tuple[_Parameter, ...] = (),
    ) -> None:
        self.path, self.operation_id, self.action = path, operation_id, action
        self.kind, self.response, self.description = kind, response, description
        self.path_parameters, self.query = path_parameters, query

    def _common(self) -> dict[str, Any]:
        return {
            "description": self.description,
            "operationId": self.operation_id,
            "tags": [_TAG],
            "x-kubernetes-action": self.action,
            "x-kubernetes-group-version-kind": _gvk(self.kind),
        }

    def v2(self) -> dict[str, Any]:
        get = {
            **self._common(),
            "consumes": ["*/*"],
            "produces": [CONTENT_TYPE],
            "schemes": ["https"],
            "parameters": [p.v2() for p in self.query],
            "responses": {
                "200": {"description": "OK", "schema": _ref(self.response)},
                "401": {"description": "Unauthorized"},
            },
        }
        return _path_item(get, [p.v2() for p in self.path_parameters])

    def v3(self) -> dict[str, Any]:
        schema = {"$ref": f"#/components/schemas/{self.response}"}
        get = {
            **self._common(),
            "parameters": [p.v3() for p in self.query],
            "responses": {
                "200": {"description": "OK", "content": {CONTENT_TYPE: {"schema": schema}}},
                "401": {"description": "Unauthorized"},
            },
        }
        return _path_item(get, [p.v3() for p in self.path_parameters])


_OPERATIONS = (
    _Operation(
        f"{_ROOT}/{INSTANCES}",
        f"list{_OP}{INSTANCE_KIND}ForAllNamespaces",
        "list",
        INSTANCE_KIND,
        INSTANCE_LIST,
        "list Instances in every namespace",
        (),
        _LIST_QUERY,
    ),
    _Operation(
        _NAMESPACED,
        f"list{_OP}Namespaced{INSTANCE_KIND}",
        "list",
        INSTANCE_KIND,
        INSTANCE_LIST,
        "list Instances in a namespace",
        (_NAMESPACE,),
        _LIST_QUERY,
    ),
    _Operation(
        f"{_NAMESPACED}/{{name}}",
        f"read{_OP}Namespaced{INSTANCE_KIND}",
        "get",
        INSTANCE_KIND,
        INSTANCE,
        "read the specified Instance",
        (_NAME, _NAMESPACE),
    ),
    _Operation(
        f"{_NAMESPACED}/{{name}}/{METRICS}",
        f"read{_OP}Namespaced{INSTANCE_KIND}Metrics",
        "get",
        METRICS_KIND,
        INSTANCE_METRICS,
        "read the current utilization sample of the specified Instance",
        (_NAME, _NAMESPACE),
    ),
)

_SECURITY_SCHEME: Final = {
    "type": "apiKey",
    "name": "authorization",
    "in": "header",
    "description": "Bearer Token authentication",
}


def _info() -> dict[str, str]:
    return {"title": "gpustack-worker", "version": VERSION}


def openapi_v2() -> dict[str, Any]:
    """``GET /openapi/v2``: a Swagger 2.0 document; a fresh dict on every call."""
    return {
        "swagger": "2.0",
        "info": _info(),
        "consumes": [CONTENT_TYPE],
        "produces": [CONTENT_TYPE],
        "paths": {op.path: op.v2() for op in _OPERATIONS},
        "definitions": _to_v2(_definitions()),
        "securityDefinitions": {"BearerToken": dict(_SECURITY_SCHEME)},
        "security": [{"BearerToken": []}],
    }


def openapi_v3_group() -> dict[str, Any]:
    """``GET /openapi/v3/apis/worker.gpustack.ai/v1``: an OpenAPI 3.0 document."""
    return {
        "openapi": "3.0.0",
        "info": _info(),
        "paths": {op.path: op.v3() for op in _OPERATIONS},
        "components": {
            "schemas": _rewrite_refs(_definitions(), "#/components/schemas/"),
            "securitySchemes": {"BearerToken": dict(_SECURITY_SCHEME)},
        },
        "security": [{"BearerToken": []}],
    }


def openapi_v3_index() -> dict[str, Any]:
    """``GET /openapi/v3``: where the group document is, with its digest to cache it by."""
    url = f"/openapi/v3/{V3_GROUP_PATH}?hash={v3_group_hash()}"
    return {"paths": {V3_GROUP_PATH: {"serverRelativeURL": url}}}


# --------------------------------------------------------------------------------------------
# Rendered bytes
# --------------------------------------------------------------------------------------------


def canonical_json(document: Any) -> bytes:
    """Sorted keys and no whitespace: one document, one byte string, one digest."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def digest(body: bytes) -> str:
    """Upper-case SHA-512 hex, as kube-openapi writes a v3 document's ``hash``."""
    return hashlib.sha512(body).hexdigest().upper()


def etag(body: bytes) -> str:
    """A strong ``ETag`` for ``body``: its quoted digest."""
    return f'"{digest(body)}"'


@functools.cache
def openapi_v2_bytes() -> bytes:
    """The canonical bytes of :func:`openapi_v2`, rendered once."""
    return canonical_json(openapi_v2())


@functools.cache
def openapi_v3_group_bytes() -> bytes:
    """The canonical bytes of :func:`openapi_v3_group`, rendered once."""
    return canonical_json(openapi_v3_group())


@functools.cache
def openapi_v3_index_bytes() -> bytes:
    """The canonical bytes of :func:`openapi_v3_index`, rendered once."""
    return canonical_json(openapi_v3_index())


@functools.cache
def v3_group_hash() -> str:
    """The digest the index advertises and a client may ask for as ``?hash=``."""
    return digest(openapi_v3_group_bytes())
