"""Object meta as every kind's strategy checks it (``ValidateObjectMeta``).

The name rule is the kind's: kube-apiserver passes each kind's ``nameFn`` to the one
object-meta check every strategy calls — a DNS-1123 subdomain for most kinds
(:func:`subdomain`), a DNS-1035 label for a Service (its name is a DNS label that must not
look like a number), a DNS-1123 label for a Namespace. Labels and annotations are checked the
same way for every kind: keys are qualified names (``[prefix/]name``; an annotation's
compared in lower case), label values at most 63 characters of ``[-A-Za-z0-9_.]`` with
alphanumeric ends, and all annotations together at most 256 KiB. Each message is
apimachinery's (``gpustack_core.names``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gpustack_core import fielderrors
from gpustack_core.names import (
    ANNOTATIONS_MAX_BYTES,
    dns1035_label_errors,
    dns1123_label_errors,
    dns1123_subdomain_errors,
    label_value_errors,
    qualified_name_errors,
)

Cause = tuple[str, str, str]
"""(field path, message, reason), as ``apiserver.invalid`` lists them."""
NameRule = Callable[[str], list[str]]
"""Every reason a name is refused (each the message after its value); empty: accepted."""

subdomain: NameRule = dns1123_subdomain_errors
"""Most kinds' names: Pods, Nodes, ConfigMaps, custom resources (``NameIsDNSSubdomain``)."""
label: NameRule = dns1123_label_errors
"""A Namespace's name (``NameIsDNSLabel``)."""
dns1035: NameRule = dns1035_label_errors
"""A Service's name (``NameIsDNS1035Label``)."""


def cause(error: fielderrors.FieldError) -> Cause:
    """A field error as a ``details.causes`` entry's three parts."""
    return (error.field, error.body(), error.reason)


def _invalid(field: str, value: str, messages: list[str]) -> list[Cause]:
    return [cause(fielderrors.invalid(field, value, m)) for m in messages]


def _prefix_rule(name_rule: NameRule) -> NameRule:
    """``generateName`` as a name prefix: a trailing ``-`` stands for the suffix to come.

    apimachinery's ``maskTrailingDash``, to the letter (it drops the character before the
    dash too).
    """
    return lambda prefix: name_rule(
        prefix[:-2] + "a" if len(prefix) > 1 and prefix.endswith("-") else prefix
    )


def validate_meta(obj: Mapping[str, Any], name_rule: NameRule) -> list[Cause]:
    """What ``metadata`` may not carry, with ``name_rule`` for the name."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    causes = _invalid("metadata.name", name, name_rule(name))
    generate = meta.get("generateName")
    if isinstance(generate, str) and generate:
        causes += _invalid("metadata.generateName", generate, _prefix_rule(name_rule)(generate))
    return (
        causes + validate_labels(meta.get("labels")) + validate_annotations(meta.get("annotations"))
    )


def validate_labels(labels: Any, field: str = "metadata.labels") -> list[Cause]:
    """``ValidateLabels``: each key a qualified name, each value a label value."""
    if not isinstance(labels, Mapping):
        return []
    causes: list[Cause] = []
    for key, value in labels.items():
        causes += _invalid(field, str(key), qualified_name_errors(str(key)))
        if isinstance(value, str):
            causes += _invalid(field, value, label_value_errors(value))
    return causes


def validate_annotations(annotations: Any, field: str = "metadata.annotations") -> list[Cause]:
    """``ValidateAnnotations``: each key a qualified name in lower case; 256 KiB in all."""
    if not isinstance(annotations, Mapping):
        return []
    causes: list[Cause] = []
    size = 0
    for key, value in annotations.items():
        causes += _invalid(field, str(key), qualified_name_errors(str(key).lower()))
        size += len(str(key).encode()) + len(str(value).encode())
    if size > ANNOTATIONS_MAX_BYTES:
        too_long = fielderrors.FieldError(
            field, "Too long", detail=f"may not be more than {ANNOTATIONS_MAX_BYTES} bytes"
        )
        causes.append(cause(too_long))
    return causes
