"""``worker.gpustack.ai/v1`` Instances: writes proxied to the CRD, and the Table kubectl prints.

The aggregated API serves Instances at ``v1``; they are stored by the CRD at ``v1alpha1`` with
the same schema, so converting is renaming the ``apiVersion``. A write arrives here after the
worker authorized the caller (SubjectAccessReview); it is then made with the worker's own
credentials, so the CRD's schema, its admission and its conflicts answer it, and whatever the
store answers (422 naming the field, 409 on a stale ``resourceVersion``) passes through as the
``Status`` it is.

Everything here is pure: checking a body against its path, converting, negotiating ``Accept``,
rendering rows. The routes (:mod:`gpustack_worker.api`) do the I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from gpustack_core import contract
from gpustack_core.status import StatusError
from gpustack_worker.discovery import GROUP

V1: Final = f"{GROUP}/v1"
STORED: Final = f"{GROUP}/{contract.CRD_VERSION}"
KIND: Final = "Instance"
TABLE_GROUP: Final = "meta.k8s.io"
NONE: Final = "<none>"
"""What kubectl prints for an empty column."""

COLUMNS: Final = (
    ("Name", "string", "name", "The Instance's name."),
    ("Phase", "string", "", "Starting, Ready, Stopping, Stopped or Deleting."),
    ("Type", "string", "", "The InstanceType it names."),
    ("Accelerator", "string", "", "What it holds: a count, a slice's share or a partition."),
    ("Node", "string", "", "The node it runs on."),
    ("Age", "string", "", "Time since creation."),
)


def storage_body(body: object, namespace: str, name: str | None) -> dict[str, Any]:
    """A v1 Instance body as the CRD stores it; ``StatusError`` 400 naming what is wrong.

    The kind must be Instance, the ``apiVersion`` v1 (or the stored version, which a client
    that read the CRD directly may send), and the name and namespace, where given, those of
    the path (an API server refuses a body that names another object the same way).
    """
    if not isinstance(body, dict):
        raise StatusError(400, "the request body is not a JSON object")
    if body.get("kind") not in (None, KIND):
        raise StatusError(400, f"the body's kind is {body.get('kind')!r}, not {KIND!r}")
    if body.get("apiVersion") not in (None, V1, STORED):
        raise StatusError(400, f"the body's apiVersion is {body.get('apiVersion')!r}, not {V1!r}")
    meta = body.get("metadata")
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise StatusError(400, "metadata is not an object")
    if meta.get("namespace") not in (None, "", namespace):
        raise StatusError(
            400,
            f"the namespace of the provided object ({meta['namespace']}) does not match "
            f"the namespace sent on the request ({namespace})",
        )
    if name is not None and meta.get("name") not in (None, name):
        raise StatusError(
            400,
            f"the name of the object ({meta.get('name')}) does not match the name on the "
            f"URL ({name})",
        )
    stored = dict(body)
    stored["apiVersion"] = STORED
    stored["kind"] = KIND
    stored["metadata"] = {**meta, "namespace": namespace, **({"name": name} if name else {})}
    return stored


def as_v1(stored: Mapping[str, Any]) -> dict[str, Any]:
    """The CRD's object, list or watch event object as ``worker.gpustack.ai/v1``."""
    converted = dict(stored)
    if converted.get("apiVersion") == STORED:
        converted["apiVersion"] = V1
    if isinstance(converted.get("items"), list):
        converted["kind"] = "InstanceList"
        converted["apiVersion"] = V1
        converted["items"] = [
            {**item, "apiVersion": V1, "kind": KIND} if isinstance(item, dict) else item
            for item in converted["items"]
        ]
    return converted


def _parameters(media_range: str) -> tuple[str, dict[str, str]]:
    kind, *rest = (part.strip() for part in media_range.split(";"))
    params = {}
    for item in rest:
        key, sep, value = item.partition("=")
        if sep:
            params[key.strip().lower()] = value.strip().strip('"')
    return kind.lower(), params


def table_version(accept: str) -> str | None:
    """The ``meta.k8s.io`` version of Table ``accept`` asks for first, or ``None`` (plain JSON).

    kubectl asks ``application/json;as=Table;v=v1;g=meta.k8s.io,…,application/json``; a range
    with ``q=0`` is refused, not asked for.
    """
    for media_range in accept.split(","):
        kind, params = _parameters(media_range)
        if params.get("q") in {"0", "0.0", "0.00", "0.000"}:
            continue
        if kind not in {"application/json", "*/*"}:
            continue
        if params.get("as") == "Table" and params.get("g") == TABLE_GROUP:
            version = params.get("v", "")
            if version in {"v1", "v1beta1"}:
                return version
        if "as" not in params:
            return None
    return None


def human_age(created: str, now: datetime) -> str:
    """Kubernetes' short duration since ``created``: ``45s``, ``5m12s``, ``3h``, ``2d4h``."""
    try:
        then = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return NONE
    seconds = max(int((now - then).total_seconds()), 0)
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if hours < 3:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    years = days // 365
    if years < 8:
        return f"{years}y{days % 365}d" if days % 365 else f"{years}y"
    return f"{years}y"


def accelerator_cell(spec: Mapping[str, Any]) -> str:
    """What an Instance holds, as a user says it: ``1``, ``2``, ``25%``, ``1g.10gb``."""
    resources = spec.get("resources") or {}
    if not isinstance(resources, Mapping):
        return NONE
    profile = resources.get("acceleratorPartitionedProfile")
    if profile:
        return str(profile)
    memory = resources.get("acceleratorSlicedMemoryPercentage")
    if memory is not None:
        cores = resources.get("acceleratorSlicedCoresPercentage")
        return f"{memory}%" + (f" cores {cores}%" if cores is not None else "")
    count = resources.get("accelerator")
    return str(count) if count not in (None, 0, "0") else NONE


def _row(item: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    meta = item.get("metadata") or {}
    spec = item.get("spec") or {}
    status = item.get("status") or {}
    node = status.get("nodeName") or spec.get("nodeName") or NONE
    return {
        "cells": [
            meta.get("name", ""),
            status.get("phase") or NONE,
            spec.get("type") or NONE,
            accelerator_cell(spec),
            node,
            human_age(str(meta.get("creationTimestamp", "")), now),
        ],
        "object": {
            "kind": "PartialObjectMetadata",
            "apiVersion": f"{TABLE_GROUP}/v1",
            "metadata": meta,
        },
    }


def table(stored: Mapping[str, Any], version: str, now: datetime | None = None) -> dict[str, Any]:
    """A ``meta.k8s.io`` Table of one Instance or a list, with :data:`COLUMNS`."""
    now = now or datetime.now(UTC)
    items: Sequence[Any] = stored["items"] if isinstance(stored.get("items"), list) else [stored]
    list_meta = (stored.get("metadata") or {}) if "items" in stored else {}
    return {
        "kind": "Table",
        "apiVersion": f"{TABLE_GROUP}/{version}",
        "metadata": {k: v for k, v in list_meta.items() if k in {"resourceVersion", "continue"}},
        "columnDefinitions": [
            {"name": n, "type": t, "format": f, "description": d, "priority": 0}
            for n, t, f, d in COLUMNS
        ],
        "rows": [_row(item, now) for item in items if isinstance(item, Mapping)],
    }
