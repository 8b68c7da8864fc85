"""The three patch types the API server accepts: JSON merge, JSON patch and strategic merge.

Merge patch is RFC 7386 (``null`` deletes, lists replace). JSON patch is RFC 6902 (add,
remove, replace, move, copy, test, JSON Pointer paths). Strategic merge is Kubernetes' own: a
list with a patch merge key (containers by ``name``, ports by ``containerPort``, …) is merged
element by element instead of replaced, ``$patch: delete`` removes one element and
``$patch: replace`` replaces a map or list whole; the keys below are the built-in types' own,
for the fields the operator writes.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"


class PatchError(ValueError):
    """A patch that cannot be applied (answered 422, or 400 when it is not a patch at all)."""


MERGE_KEYS: Mapping[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "tolerations": "key",
    "hostAliases": "ip",
    "ownerReferences": "uid",
    "conditions": "type",
    "addresses": "type",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "taints": "key",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
}
"""``patchMergeKey`` of the built-in lists, by field name. A Service's ``ports`` merges on
``port`` instead; :func:`strategic_merge` takes it from the context."""
SET_LISTS = frozenset({"finalizers"})
"""Lists with ``patchStrategy: merge`` of scalars: union, order kept."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: apply ``patch`` to a copy of ``target``."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str], path: str) -> Any:
    for part in parts:
        if isinstance(doc, dict):
            if part not in doc:
                raise PatchError(f"doc is missing path: {path!r}")
            doc = doc[part]
        elif isinstance(doc, list):
            doc = doc[_index(doc, part, path, insert=False)]
        else:
            raise PatchError(f"doc is missing path: {path!r}")
    return doc


def _index(items: list[Any], part: str, path: str, *, insert: bool) -> int:
    if insert and part == "-":
        return len(items)
    if not part.isdigit():
        raise PatchError(f"invalid array index {part!r} in {path!r}")
    index = int(part)
    if index > len(items) or (not insert and index == len(items)):
        raise PatchError(f"array index {index} out of bounds in {path!r}")
    return index


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902: apply a list of operations to a copy of ``target``, all or nothing."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch is a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, Mapping) or "op" not in op or "path" not in op:
            raise PatchError(f"malformed operation {op!r}: needs 'op' and 'path'")
        name, path = op["op"], str(op["path"])
        if name in {"add", "replace", "test"} and "value" not in op:
            raise PatchError(f"{name} operation {path!r} has no value")
        if name == "test":
            if _walk(doc, _pointer(path), path) != op["value"]:
                raise PatchError(f"testing value {path!r} failed")
            continue
        if name in {"move", "copy"}:
            source = str(op.get("from", ""))
            value = copy.deepcopy(_walk(doc, _pointer(source), source))
            if name == "move":
                doc = _remove(doc, source)
            doc = _add(doc, path, value, replace=False)
        elif name == "remove":
            doc = _remove(doc, path)
        elif name in {"add", "replace"}:
            doc = _add(doc, path, copy.deepcopy(op["value"]), replace=name == "replace")
        else:
            raise PatchError(f"unexpected operation {name!r}")
    return doc


def _add(doc: Any, path: str, value: Any, *, replace: bool) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise PatchError(f"replace operation does not apply: doc is missing key: {path}")
        parent[last] = value
    elif isinstance(parent, list):
        index = _index(parent, last, path, insert=not replace)
        if replace:
            parent[index] = value
        else:
            parent.insert(index, value)
    else:
        raise PatchError(f"doc is missing path: {path!r}")
    return doc


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        raise PatchError("cannot remove the whole document")
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"remove operation does not apply: doc is missing path: {path}")
        del parent[last]
    elif isinstance(parent, list):
        del parent[_index(parent, last, path, insert=False)]
    else:
        raise PatchError(f"doc is missing path: {path!r}")
    return doc


def strategic_merge(target: Any, patch: Any, *, kind: str = "", field: str = "") -> Any:
    """Kubernetes' strategic merge of ``patch`` into a copy of ``target``."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = copy.deepcopy(dict(target)) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, kind=kind, field=key)
        else:
            result[key] = strategic_merge(result.get(key), value, kind=kind, field=key)
    return result


def _merge_key(kind: str, field: str, items: list[Any]) -> str | None:
    if field == "ports" and kind == "Service":
        return "port"
    key = MERGE_KEYS.get(field)
    if key is None or not all(isinstance(i, Mapping) for i in items):
        return None
    return key


def _merge_list(current: Any, patch: list[Any], *, kind: str, field: str) -> list[Any]:
    if field in SET_LISTS:
        merged = list(current or [])
        merged += [v for v in patch if v not in merged]
        return merged
    existing = list(current) if isinstance(current, list) else []
    directives = [p for p in patch if isinstance(p, Mapping) and "$patch" in p]
    if any(d.get("$patch") == "replace" for d in directives):
        return [copy.deepcopy(p) for p in patch if p not in directives]
    key = _merge_key(kind, field, [p for p in patch if p not in directives])
    if key is None:
        return copy.deepcopy(patch)
    result = copy.deepcopy(existing)
    for item in patch:
        position = next(
            (
                i
                for i, e in enumerate(result)
                if isinstance(e, Mapping) and e.get(key) == item.get(key)
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if position is not None:
                del result[position]
        elif position is None:
            result.append({k: v for k, v in item.items() if v is not None})
        else:
            result[position] = strategic_merge(result[position], item, kind=kind, field=field)
    return result
