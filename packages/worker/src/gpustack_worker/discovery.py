"""Discovery documents for the worker's group versions, spelled as the kube-aggregator reads them.

The worker serves two group versions behind two APIServices pointing at its one Service: the
Instances (``worker.gpustack.ai/v1``) and the operator Settings (``gpustack.ai/v1``, the
reference's ``Setting``; :mod:`gpustack_worker.settings_v1`). Every document names both where it
lists groups; the aggregator fetches one discovery per Service and takes from it the group
version each APIService names, so one answer serves both.

The aggregator marks the APIService unavailable when ``GET /apis/<group>/<version>`` fails,
and a group it cannot discover turns namespace deletion into a hang (reference §4). So the
legacy ``APIResourceList`` is the one document that must always be right; ``/apis`` and
``/apis/<group>`` are served for clients that walk the tree.

Since 1.30 the aggregator first asks ``/apis`` for an ``APIGroupDiscoveryList`` and falls back
to the legacy documents on any other answer. v2beta1 (1.27–1.29) can be answered too: the two
versions carry identical fields, so it costs one string. ``aggregated_discovery_version`` says
which one a client takes; ``wants_aggregated_discovery`` is the v2-only shortcut, under which
serving v2 is never wrong and a v2beta1-only client gets the legacy list it falls back to.

Every function builds a fresh dict, so a caller that decorates one (a ``resourceVersion``, a
test) cannot corrupt the next reply.
"""

from __future__ import annotations

import re
from typing import Any, Final

from gpustack_core import contract

GROUP: Final = contract.API_GROUP
VERSION: Final = contract.API_VERSION
GROUP_VERSION: Final = f"{GROUP}/{VERSION}"
STORAGE_VERSION: Final = contract.CRD_VERSION
"""The CRD version the ``instances`` resource is proxied to; never advertised here."""

INSTANCES: Final = "instances"
METRICS: Final = "metrics"
INSTANCE_KIND: Final = "Instance"
METRICS_KIND: Final = "InstanceMetrics"
SHORT_NAMES: Final = ("inst",)
INSTANCE_VERBS: Final = ("create", "delete", "get", "list", "patch", "update", "watch")
"""Every verb of an Instance at ``v1``: reads, watches and writes proxied to the CRD."""
METRICS_VERBS: Final = ("get",)

SETTINGS_GROUP: Final = contract.SETTINGS_API_GROUP
SETTINGS_VERSION: Final = contract.SETTINGS_API_VERSION
SETTINGS: Final = "settings"
SETTING_KIND: Final = "Setting"
SETTING_SHORT_NAMES: Final = ("set",)
SETTING_CATEGORIES: Final = ("gpustack",)
"""``kubectl get gpustack`` lists them, as the reference's category does."""
SETTING_VERBS: Final = ("get", "list", "patch", "update", "watch")
"""A fixed catalog: a Setting's value changes, its existence does not (no create, delete)."""
GROUPS: Final = (GROUP, SETTINGS_GROUP)

DISCOVERY_GROUP: Final = "apidiscovery.k8s.io"
DISCOVERY_KIND: Final = "APIGroupDiscoveryList"
DISCOVERY_VERSIONS: Final = ("v2", "v2beta1")
"""Aggregated discovery versions answered, in the server's order of preference."""


def _version_entry(group: str = GROUP) -> dict[str, str]:
    return {"groupVersion": f"{group}/{VERSION}", "version": VERSION}


def _group(group: str = GROUP) -> dict[str, Any]:
    return {
        "name": group,
        "versions": [_version_entry(group)],
        "preferredVersion": _version_entry(group),
    }


def api_group_list() -> dict[str, Any]:
    """``GET /apis``: only this server's groups and versions; the aggregator merges the rest."""
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(g) for g in GROUPS]}


def api_group(group: str = GROUP) -> dict[str, Any]:
    """``GET /apis/worker.gpustack.ai`` (or ``/apis/gpustack.ai``)."""
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(group)}


def settings_resource_list() -> dict[str, Any]:
    """``GET /apis/gpustack.ai/v1``: the Settings' APIService's availability check's target."""
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{SETTINGS_GROUP}/{SETTINGS_VERSION}",
        "resources": [
            {
                "name": SETTINGS,
                "singularName": "setting",
                "namespaced": True,
                "kind": SETTING_KIND,
                "verbs": list(SETTING_VERBS),
                "shortNames": list(SETTING_SHORT_NAMES),
                "categories": list(SETTING_CATEGORIES),
            }
        ],
    }


def api_resource_list() -> dict[str, Any]:
    """``GET /apis/worker.gpustack.ai/v1``: the availability check's target.

    A subresource is its own entry named ``<resource>/<sub>`` with an empty ``singularName``,
    as ``pods/log`` is. No ``storageVersionHash``: this server stores nothing, and a hash
    would invite the storage-version migrator to migrate objects it cannot write.
    """
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GROUP_VERSION,
        "resources": [
            {
                "name": INSTANCES,
                "singularName": "instance",
                "namespaced": True,
                "kind": INSTANCE_KIND,
                "verbs": list(INSTANCE_VERBS),
                "shortNames": list(SHORT_NAMES),
            },
            {
                "name": f"{INSTANCES}/{METRICS}",
                "singularName": "",
                "namespaced": True,
                "kind": METRICS_KIND,
                "verbs": list(METRICS_VERBS),
            },
        ],
    }


def _gvk(kind: str, group: str = GROUP) -> dict[str, str]:
    return {"group": group, "version": VERSION, "kind": kind}


def aggregated_discovery(version: str = "v2") -> dict[str, Any]:
    """``GET /apis`` as an ``APIGroupDiscoveryList``; ``version`` is what negotiation chose.

    The subresource rides under its parent here rather than as a sibling entry, which is the
    one shape difference from the legacy list.
    """
    if version not in DISCOVERY_VERSIONS:
        raise ValueError(f"aggregated discovery {version!r} is not served: {DISCOVERY_VERSIONS}")
    resource = {
        "resource": INSTANCES,
        "responseKind": _gvk(INSTANCE_KIND),
        "scope": "Namespaced",
        "singularResource": "instance",
        "verbs": list(INSTANCE_VERBS),
        "shortNames": list(SHORT_NAMES),
        "subresources": [
            {
                "subresource": METRICS,
                "responseKind": _gvk(METRICS_KIND),
                "verbs": list(METRICS_VERBS),
            }
        ],
    }
    setting = {
        "resource": SETTINGS,
        "responseKind": _gvk(SETTING_KIND, SETTINGS_GROUP),
        "scope": "Namespaced",
        "singularResource": "setting",
        "verbs": list(SETTING_VERBS),
        "shortNames": list(SETTING_SHORT_NAMES),
        "categories": list(SETTING_CATEGORIES),
    }
    return {
        "kind": DISCOVERY_KIND,
        "apiVersion": f"{DISCOVERY_GROUP}/{version}",
        "metadata": {},
        "items": [
            {
                "metadata": {"name": group},
                "versions": [{"version": VERSION, "resources": [entry], "freshness": "Current"}],
            }
            for group, entry in ((GROUP, resource), (SETTINGS_GROUP, setting))
        ],
    }


def aggregated_content_type(version: str = "v2") -> str:
    """The reply's ``Content-Type``: the aggregator reads it, not the body, to tell the shapes."""
    return f"application/json;g={DISCOVERY_GROUP};v={version};as={DISCOVERY_KIND}"


AGGREGATED_CONTENT_TYPE: Final = aggregated_content_type("v2")


# --------------------------------------------------------------------------------------------
# Accept negotiation
# --------------------------------------------------------------------------------------------

_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_PARAM = re.compile(
    rf"\s*;\s*({_TOKEN})\s*=\s*({_TOKEN}|\"(?:[^\"\\]|\\.)*\")\s*",
)
_RANGE = re.compile(rf"\s*({_TOKEN})/({_TOKEN})\s*")
_QVALUE = re.compile(r"(?:0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?)")


def _media_ranges(accept: str) -> list[tuple[str, dict[str, str], float]]:
    """``(type/subtype, params, q)`` per well-formed range; malformed ones are skipped.

    Type and parameter names are case-insensitive (RFC 9110 §8.3.1); values are kept as sent,
    as Kubernetes compares them. A range repeating a parameter is ambiguous and skipped.
    """
    ranges: list[tuple[str, dict[str, str], float]] = []
    for part in _split_unquoted(accept):
        head = _RANGE.match(part)
        if head is None:
            continue
        params: dict[str, str] = {}
        position, ok = head.end(), True
        while position < len(part):
            param = _PARAM.match(part, position)
            if param is None or param.group(1).lower() in params:
                ok = False
                break
            value = param.group(2)
            if value.startswith('"'):
                value = re.sub(r"\\(.)", r"\1", value[1:-1])
            params[param.group(1).lower()] = value
            position = param.end()
        q = params.pop("q", "1")
        if not ok or _QVALUE.fullmatch(q) is None:
            continue
        media = f"{head.group(1)}/{head.group(2)}".lower()
        ranges.append((media, params, float(q)))
    return ranges


def _split_unquoted(accept: str) -> list[str]:
    """Split on commas outside quoted strings: a quoted parameter may itself hold one."""
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in accept:
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def aggregated_discovery_version(accept: str) -> str | None:
    """The aggregated discovery version to answer ``accept`` with, or ``None`` for legacy.

    Only ``application/json`` with ``g``, ``v`` and ``as`` naming a served version counts;
    ``q=0`` refuses it. The legacy ``APIGroupList`` wins only when the client rates a plain
    JSON range strictly higher, so kubectl's ``…v=v2…,application/json;q=0.9`` and the
    aggregator's unweighted fallback both get the aggregated form. Among served versions the
    higher ``q`` wins and a tie goes to v2.
    """
    best: tuple[float, int] | None = None
    legacy = 0.0
    for media, params, q in _media_ranges(accept):
        if q <= 0:
            continue
        if not params.keys() & {"g", "v", "as"}:
            if media in {"application/json", "application/*", "*/*"}:
                legacy = max(legacy, q)
            continue
        if (
            media != "application/json"
            or params.get("g") != DISCOVERY_GROUP
            or params.get("as") != DISCOVERY_KIND
            or params.get("v") not in DISCOVERY_VERSIONS
        ):
            continue
        rank = (q, -DISCOVERY_VERSIONS.index(params["v"]))
        if best is None or rank > best:
            best = rank
    if best is None or best[0] < legacy:
        return None
    return DISCOVERY_VERSIONS[-best[1]]


def wants_aggregated_discovery(accept_header: str) -> bool:
    """Whether ``GET /apis`` should answer ``aggregated_discovery()`` as v2.

    False for a client that would only take v2beta1: a caller serving v2 whenever this is true
    is then always right, and one that also wants pre-1.30 aggregators asks
    :func:`aggregated_discovery_version` instead.
    """
    return aggregated_discovery_version(accept_header) == "v2"
