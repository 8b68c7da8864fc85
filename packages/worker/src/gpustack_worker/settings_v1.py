"""``gpustack.ai/v1`` Settings: the operator's Settings as the reference's ``Setting`` resource.

The Settings live in the Secret ``gpustack-settings`` (:mod:`gpustack_core.settings`); this
module shows each key of that one Secret as one namespaced object, as the reference does::

    apiVersion: gpustack.ai/v1
    kind: Setting
    metadata: {name: instance-privileged-allowed, namespace: gpustack-system, ...}
    spec: {value: "false"}

The catalog is fixed (``gpustack_core.settings.KEYS``): every key is a Setting whether or not
the Secret holds it (a key someone deleted from the Secret shows the text the worker applies
instead, :func:`gpustack_core.settings.source_of`), and none can be created or deleted. Each
object's ``resourceVersion`` is the Secret's, so a write conditional on it is conditional on
the whole Secret: the worker patches the Secret's ``data`` carrying that version.

Everything here is pure: rendering objects, lists, Tables and watch events from a Secret,
deciding what a patch or an update asks for, refusing what a key cannot take. The routes
(:mod:`gpustack_worker.settings_api`) do the I/O.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from gpustack_core.settings import (
    BY_NAME,
    KEYS,
    SECRET,
    Key,
    SettingError,
    decode_secret_data,
    encode_secret_data,
)
from gpustack_core.status import StatusError
from gpustack_worker.discovery import SETTING_KIND, SETTINGS, SETTINGS_GROUP, SETTINGS_VERSION
from gpustack_worker.instances_v1 import TABLE_GROUP, human_age

API_VERSION: Final = f"{SETTINGS_GROUP}/{SETTINGS_VERSION}"
LIST_KIND: Final = "SettingList"
QUALIFIED: Final = f"{SETTINGS}.{SETTINGS_GROUP}"
"""``settings.gpustack.ai``, as an API server names the resource in its messages."""

COLUMNS: Final = (
    ("Name", "string", "name", "The Setting's key in the Secret gpustack-settings."),
    ("Value", "string", "", "Its value, as the Secret holds it."),
    ("Description", "string", "", "What it does."),
    ("Age", "string", "", "Time since the Secret was created."),
)
FIELD_LABELS: Final = ("metadata.name", "metadata.namespace")
"""The field selectors a Setting list or watch takes (what every resource supports)."""


@dataclass(frozen=True, slots=True)
class SecretView:
    """What one read of the Secret says: its texts and the metadata every Setting carries."""

    texts: Mapping[str, str] | None
    """Key → text, ``None`` when the Secret does not exist."""
    resource_version: str = ""
    uid: str = ""
    created: str = ""
    problems: tuple[str, ...] = field(default=())
    """Values that are no base64 of UTF-8 text (left out, as the worker leaves them out)."""


def secret_view(secret: Mapping[str, Any] | None) -> SecretView:
    """The Secret ``gpustack-settings`` as read, or ``None`` when it does not exist."""
    if secret is None:
        return SecretView(None)
    meta = secret.get("metadata") or {}
    texts, problems = decode_secret_data(secret.get("data"))
    return SecretView(
        texts,
        str(meta.get("resourceVersion", "")),
        str(meta.get("uid", "")),
        str(meta.get("creationTimestamp", "")),
        tuple(problems),
    )


def known_key(name: str) -> Key:
    """The key a Setting's name names; 404 (``settings.gpustack.ai "x" not found``) otherwise.

    Decided before anything is authorized or read: the catalog is fixed, so the answer tells a
    caller nothing it could not read in the documentation.
    """
    key = BY_NAME.get(name)
    if key is None:
        raise not_found(name)
    return key


def not_found(name: str) -> StatusError:
    """An API server's 404 for a Setting."""
    return StatusError(
        404, f'{QUALIFIED} "{name}" not found', kind=SETTINGS, name=name, group=SETTINGS_GROUP
    )


def setting(key: Key, view: SecretView, namespace: str, texts: Mapping[str, str]) -> dict[str, Any]:
    """The ``Setting`` for ``key``; ``texts`` is every key's text in force (Secret first)."""
    meta: dict[str, Any] = {"name": key.name, "namespace": namespace}
    if view.resource_version:
        meta["resourceVersion"] = view.resource_version
    if view.uid:
        # Stable per Secret and key: a client that tracks objects by uid sees one object per
        # key, and a new one when the Secret is recreated.
        meta["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{view.uid}/{key.name}"))
    if view.created:
        meta["creationTimestamp"] = view.created
    return {
        "apiVersion": API_VERSION,
        "kind": SETTING_KIND,
        "metadata": meta,
        "spec": {"value": texts[key.name]},
    }


def setting_list(
    view: SecretView,
    namespace: str,
    texts: Mapping[str, str],
    list_version: str,
    keep: Callable[[str, str], bool] = lambda _name, _namespace: True,
) -> dict[str, Any]:
    """A ``SettingList`` of every key ``keep(name, namespace)`` keeps, in the catalog's order."""
    return {
        "apiVersion": API_VERSION,
        "kind": LIST_KIND,
        "metadata": {"resourceVersion": list_version} if list_version else {},
        "items": [setting(k, view, namespace, texts) for k in KEYS if keep(k.name, namespace)],
    }


# -- Table ------------------------------------------------------------------------------------


def _row(obj: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    meta = obj["metadata"]
    key = BY_NAME[meta["name"]]
    created = str(meta.get("creationTimestamp", ""))
    return {
        "cells": [
            key.name,
            obj["spec"]["value"],
            key.effect,
            human_age(created, now) if created else "<unknown>",
        ],
        "object": {
            "kind": "PartialObjectMetadata",
            "apiVersion": f"{TABLE_GROUP}/v1",
            "metadata": meta,
        },
    }


def table(
    objects: Iterable[Mapping[str, Any]],
    version: str,
    list_meta: Mapping[str, Any] | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """A ``meta.k8s.io`` Table of Settings: ``NAME VALUE DESCRIPTION AGE``."""
    now = now or datetime.now(UTC)
    return {
        "kind": "Table",
        "apiVersion": f"{TABLE_GROUP}/{version}",
        "metadata": dict(list_meta or {}),
        "columnDefinitions": [
            {"name": n, "type": t, "format": f, "description": d, "priority": 0}
            for n, t, f, d in COLUMNS
        ],
        "rows": [_row(obj, now) for obj in objects],
    }


# -- selectors --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fields:
    """A parsed ``fieldSelector``: ``(label, equal, value)`` terms, all of which must hold."""

    terms: tuple[tuple[str, bool, str], ...] = ()

    def keep(self, name: str, namespace: str) -> bool:
        """Whether the Setting ``namespace/name`` is selected."""
        fields = {"metadata.name": name, "metadata.namespace": namespace}
        return all((fields[label] == value) is equal for label, equal, value in self.terms)

    @property
    def name(self) -> str:
        """The one name an equality on ``metadata.name`` selects (``""`` if none).

        What an API server authorizes a list or watch for, so RBAC ``resourceNames`` can grant
        one Setting.
        """
        names = {v for label, equal, v in self.terms if label == "metadata.name" and equal}
        return names.pop() if len(names) == 1 else ""


def _term(term: str) -> tuple[str, bool, str]:
    for operator, equal in (("!=", False), ("==", True), ("=", True)):
        label, found, value = term.partition(operator)
        if found:
            label = label.strip()
            if label not in FIELD_LABELS:
                raise StatusError(400, f'field label not supported: "{label}" (Settings take '
                                  f'{" and ".join(FIELD_LABELS)})')  # fmt: skip
            return label, equal, value.strip()
    raise StatusError(400, f"invalid field selector {term!r}: no =, == or !=")


def field_selector(selector: str) -> Fields:
    """``fieldSelector`` on ``metadata.name`` / ``metadata.namespace``; 400 for other fields.

    ``=``, ``==`` or ``!=``, comma-joined: what kubectl sends (``kubectl get setting <name> -w``
    watches ``metadata.name=<name>``).
    """
    return Fields(tuple(_term(t.strip()) for t in selector.split(",") if t.strip()))


def label_selector(selector: str) -> None:
    """Settings carry no labels; a non-empty ``labelSelector`` is refused, not ignored."""
    if selector.strip():
        raise StatusError(400, "Settings carry no labels: labelSelector is not supported")


# -- writes -----------------------------------------------------------------------------------


def invalid(name: str, path: str, detail: str) -> StatusError:
    """A 422 in an API server's words: ``Setting.gpustack.ai "x" is invalid: <path>: …``.

    The cause carries the field, as an API server's does: kubectl prints ``The Setting "x" is
    invalid: <path>: <detail>`` from it, not the message.
    """
    reason = detail.split(":", 1)[0].replace(" ", "")  # "Invalid value" → "Invalidvalue"
    return StatusError(
        422,
        f'{SETTING_KIND}.{SETTINGS_GROUP} "{name}" is invalid: {path}: {detail}',
        kind=SETTING_KIND,
        name=name,
        group=SETTINGS_GROUP,
        reason="Invalid",
        causes=[
            {"reason": _CAUSES.get(reason, "FieldValueInvalid"), "message": detail, "field": path}
        ],
    )


_CAUSES: Final = {
    "Invalidvalue": "FieldValueInvalid",
    "Requiredvalue": "FieldValueRequired",
    "Forbidden": "FieldValueForbidden",
}
"""apimachinery's ``field.ErrorType`` causes, by the words that open a detail."""


def merge_patch(target: object, patch: object) -> object:
    """RFC 7386: ``null`` removes a member, an object merges, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = merge_patch(merged.get(name), value)
    return merged


def _fixed(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` without what a write may change: ``spec.value``, ``metadata.resourceVersion``."""
    fixed = dict(obj)
    for part, movable in (("metadata", "resourceVersion"), ("spec", "value")):
        inner = fixed.get(part)
        if isinstance(inner, dict):
            fixed[part] = {k: v for k, v in inner.items() if k != movable}
    return fixed


def _difference(before: object, after: object, path: str) -> str | None:
    """The first field path where ``after`` differs from ``before``; ``None`` if none."""
    if isinstance(before, dict) and isinstance(after, dict):
        for name in [*before, *(n for n in after if n not in before)]:
            found = _difference(before.get(name), after.get(name), f"{path}.{name}".lstrip("."))
            if found is not None:
                return found
        return None
    return None if before == after else path


@dataclass(frozen=True, slots=True)
class Wanted:
    """What a write asks for: the key's new text, and the version it was decided on."""

    key: Key
    value: str
    resource_version: str
    """The ``resourceVersion`` the caller sent (a precondition), ``""`` if none."""


def wanted(key: Key, current: Mapping[str, Any], changed: object) -> Wanted:
    """Check the object a write would leave; only ``spec.value`` may differ from ``current``.

    ``metadata.resourceVersion`` may be given (it makes the write conditional on it). Anything
    else changed is 422 naming the field: a Setting has nothing else to store. A value the key
    cannot take is 422 with its parser's message, before anything is written.
    """
    name = key.name
    if not isinstance(changed, dict):
        raise StatusError(400, "the Setting is not a JSON object")
    meta = changed.get("metadata")
    version = meta.get("resourceVersion", "") if isinstance(meta, dict) else ""
    spec = changed.get("spec")
    value = spec.get("value") if isinstance(spec, dict) else None
    moved = _difference(_fixed(current), _fixed(changed), "")
    if moved is not None:
        raise invalid(name, moved, "Forbidden: only spec.value of a Setting can change")
    if value is None:
        raise invalid(name, "spec.value", "Required value")
    if not isinstance(value, str):
        shown = json.dumps(value)
        raise invalid(name, "spec.value", f"Invalid value: {shown}: must be a string "
                      f"(quote it: {json.dumps(shown)})")  # fmt: skip
    if not isinstance(version, str):
        raise invalid(name, "metadata.resourceVersion", "Invalid value: must be a string")
    try:
        key.parse(value)
    except SettingError as exc:
        raise invalid(name, "spec.value", f"Invalid value: {value!r}: {name}: {exc}") from None
    return Wanted(key, value, version)


def updated(key: Key, current: Mapping[str, Any], body: object, namespace: str) -> Wanted:
    """A ``PUT``'s body as :func:`wanted` judges it; 400 where it names another object.

    Fields the server sets (``uid``, ``creationTimestamp``) and ``apiVersion``/``kind`` may be
    left out; left out, they are taken as they are.
    """
    if not isinstance(body, dict):
        raise StatusError(400, "the request body is not a JSON object")
    if body.get("kind") not in (None, SETTING_KIND):
        raise StatusError(400, f"the body's kind is {body.get('kind')!r}, not {SETTING_KIND!r}")
    if body.get("apiVersion") not in (None, API_VERSION):
        raise StatusError(
            400, f"the body's apiVersion is {body.get('apiVersion')!r}, not {API_VERSION!r}"
        )
    meta = body.get("metadata")
    meta = {} if meta is None else meta
    if not isinstance(meta, dict):
        raise StatusError(400, "metadata is not an object")
    if meta.get("namespace") not in (None, "", namespace):
        raise StatusError(
            400,
            f"the namespace of the provided object ({meta['namespace']}) does not match "
            f"the namespace sent on the request ({namespace})",
        )
    if meta.get("name") not in (None, key.name):
        raise StatusError(
            400,
            f"the name of the object ({meta.get('name')}) does not match the name on the "
            f"URL ({key.name})",
        )
    served = current["metadata"]
    filled = {
        **{k: served[k] for k in ("name", "namespace", "uid", "creationTimestamp") if k in served},
        **{k: v for k, v in meta.items() if v not in (None, "")},
    }
    changed = {"apiVersion": API_VERSION, "kind": SETTING_KIND, **body, "metadata": filled}
    return wanted(key, current, changed)


def secret_patch(want: Wanted, secret_version: str) -> dict[str, Any]:
    """The merge patch of the Secret that writes ``want``: its one key, and the version.

    ``secret_version`` is the caller's precondition when it gave one, else the version the
    worker read: the write applies to the Secret it was decided on, or is a 409.
    """
    return {
        "metadata": {"resourceVersion": want.resource_version or secret_version},
        "data": encode_secret_data({want.key.name: want.value}),
    }


def no_secret(namespace: str) -> StatusError:
    """503 while the Secret does not exist: the worker creates it once it starts."""
    return StatusError(
        503,
        f"the Secret {namespace}/{SECRET} does not exist yet (the worker creates it when it "
        "starts): try again",
    )


# -- watch ------------------------------------------------------------------------------------


def watch_events(
    view: SecretView,
    namespace: str,
    texts: Mapping[str, str],
    previous: Mapping[str, str] | None,
    keep: Callable[[str, str], bool],
) -> list[dict[str, Any]]:
    """The ``MODIFIED`` events one Secret event means: a Setting whose text moved.

    ``previous`` is each key's text before, ``None`` when the watch does not know it (a client
    resuming from its own ``resourceVersion``): then every kept Setting is sent once, so a
    change is never missed.
    """
    return [
        {"type": "MODIFIED", "object": setting(key, view, namespace, texts)}
        for key in KEYS
        if keep(key.name, namespace)
        and (previous is None or previous.get(key.name) != texts[key.name])
    ]


def bookmark(resource_version: str) -> dict[str, Any]:
    """A ``BOOKMARK`` event carrying only the version, as an API server sends one."""
    return {
        "type": "BOOKMARK",
        "object": {
            "apiVersion": API_VERSION,
            "kind": SETTING_KIND,
            "metadata": {"resourceVersion": resource_version},
        },
    }


__all__ = [
    "API_VERSION",
    "COLUMNS",
    "LIST_KIND",
    "Fields",
    "SecretView",
    "Wanted",
    "bookmark",
    "field_selector",
    "invalid",
    "known_key",
    "label_selector",
    "merge_patch",
    "no_secret",
    "not_found",
    "secret_patch",
    "secret_view",
    "setting",
    "setting_list",
    "table",
    "updated",
    "wanted",
    "watch_events",
]
