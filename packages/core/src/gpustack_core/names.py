"""Object names as the API server accepts them: DNS-1123 labels and subdomains, path segments.

A name taken from a request path is checked here *before* it is authorized or used to build an
upstream URL: what is authorized must be exactly what is read. The rules are the apiserver's own
(``k8s.io/apimachinery/pkg/util/validation`` and ``…/api/validation/path``), so a name refused
here is one no object can carry, and answering for it cannot leak whether anything exists.
"""

from __future__ import annotations

import re
from typing import Final

DNS1123_LABEL_MAX: Final = 63
DNS1123_SUBDOMAIN_MAX: Final = 253

QUALIFIED_NAME_MAX: Final = 63
"""The name part of a label key or annotation key (``[prefix/]name``)."""
LABEL_VALUE_MAX: Final = 63
ANNOTATIONS_MAX_BYTES: Final = 256 * 1024
"""All of an object's annotations together, keys and values (``TotalAnnotationSizeLimitB``)."""

_LABEL_FORMAT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_FORMAT: Final = _LABEL_FORMAT + r"(\." + _LABEL_FORMAT + ")*"
_DNS1035_FORMAT: Final = "[a-z]([-a-z0-9]*[a-z0-9])?"
_QUALIFIED_NAME_FORMAT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FORMAT: Final = f"({_QUALIFIED_NAME_FORMAT})?"
_LABEL: Final = re.compile(_LABEL_FORMAT)
_SUBDOMAIN: Final = re.compile(_SUBDOMAIN_FORMAT)
_DNS1035: Final = re.compile(_DNS1035_FORMAT)
_QUALIFIED_NAME: Final = re.compile(_QUALIFIED_NAME_FORMAT)
_LABEL_VALUE: Final = re.compile(_LABEL_VALUE_FORMAT)

_LABEL_MESSAGE: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_SUBDOMAIN_MESSAGE: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character"
)
_DNS1035_MESSAGE: Final = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character"
)
_QUALIFIED_NAME_MESSAGE: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_LABEL_VALUE_MESSAGE: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)


def dns1123_label_problem(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 label (namespaces, Service names), or ``None``."""
    if len(value) > DNS1123_LABEL_MAX:
        return f"must be no more than {DNS1123_LABEL_MAX} characters"
    if not _LABEL.fullmatch(value):
        return _LABEL_MESSAGE
    return None


def dns1035_label_problem(value: str) -> str | None:
    """Why ``value`` is not a DNS-1035 label (a Service's name), or ``None``.

    A DNS-1123 label that also starts with a letter: a Service's name becomes a DNS name
    whose first label must not look like a number, so ``1abc`` may name a Pod but no Service.
    """
    if len(value) > DNS1123_LABEL_MAX:
        return f"must be no more than {DNS1123_LABEL_MAX} characters"
    if not _DNS1035.fullmatch(value):
        return _DNS1035_MESSAGE
    return None


def dns1123_subdomain_problem(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 subdomain (Pod, node, custom object names), or ``None``."""
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        return f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
    if not _SUBDOMAIN.fullmatch(value):
        return _SUBDOMAIN_MESSAGE
    return None


def _max_length(limit: int) -> str:
    return f"must be no more than {limit} characters"


def _regex(message: str, fmt: str, *examples: str) -> str:
    """The message, its examples and the regex, as apimachinery's ``RegexError`` words them."""
    shown = "".join(f"{' or ' if i else ''}'{e}', " for i, e in enumerate(examples))
    return f"{message} (e.g. {shown}regex used for validation is '{fmt}')"


def dns1123_label_errors(value: str) -> list[str]:
    """Every reason ``value`` is no DNS-1123 label, worded as ``IsDNS1123Label`` (a Namespace)."""
    errors = [_max_length(DNS1123_LABEL_MAX)] if len(value) > DNS1123_LABEL_MAX else []
    if not _LABEL.fullmatch(value):
        if _SUBDOMAIN.fullmatch(value):
            errors.append("must not contain dots")  # a subdomain of the right length
        else:
            errors.append(_regex(_LABEL_MESSAGE, _LABEL_FORMAT, "my-name", "123-abc"))
    return errors


def dns1123_subdomain_errors(value: str) -> list[str]:
    """Every reason ``value`` is no DNS-1123 subdomain, worded as ``IsDNS1123Subdomain``."""
    errors = [_max_length(DNS1123_SUBDOMAIN_MAX)] if len(value) > DNS1123_SUBDOMAIN_MAX else []
    if not _SUBDOMAIN.fullmatch(value):
        errors.append(_regex(_SUBDOMAIN_MESSAGE, _SUBDOMAIN_FORMAT, "example.com"))
    return errors


def dns1035_label_errors(value: str) -> list[str]:
    """Every reason ``value`` is no DNS-1035 label, worded as ``IsDNS1035Label`` (a Service)."""
    errors = [_max_length(DNS1123_LABEL_MAX)] if len(value) > DNS1123_LABEL_MAX else []
    if not _DNS1035.fullmatch(value):
        errors.append(_regex(_DNS1035_MESSAGE, _DNS1035_FORMAT, "my-name", "abc-123"))
    return errors


def qualified_name_errors(value: str) -> list[str]:
    """Every reason ``value`` is no qualified name (a label or annotation key).

    Worded as ``IsQualifiedName`` words it: an optional DNS-1123 subdomain prefix and ``/``,
    then a name part of at most 63 alphanumerics, ``-``, ``_`` or ``.``, alphanumeric at both
    ends.
    """
    parts = value.split("/")
    if len(parts) > 2:
        return [
            "a qualified name "
            + _regex(
                _QUALIFIED_NAME_MESSAGE, _QUALIFIED_NAME_FORMAT, "MyName", "my.name", "123-abc"
            )
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    errors: list[str] = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors += [f"prefix part {e}" for e in dns1123_subdomain_errors(prefix)]
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX:
        errors.append(f"name part {_max_length(QUALIFIED_NAME_MAX)}")
    if not _QUALIFIED_NAME.fullmatch(name):
        errors.append(
            "name part "
            + _regex(
                _QUALIFIED_NAME_MESSAGE, _QUALIFIED_NAME_FORMAT, "MyName", "my.name", "123-abc"
            )
        )
    return errors


def label_value_errors(value: str) -> list[str]:
    """Every reason ``value`` is no label value, worded as ``IsValidLabelValue`` (empty is one)."""
    errors = [_max_length(LABEL_VALUE_MAX)] if len(value) > LABEL_VALUE_MAX else []
    if not _LABEL_VALUE.fullmatch(value):
        errors.append(
            _regex(_LABEL_VALUE_MESSAGE, _LABEL_VALUE_FORMAT, "MyValue", "my_value", "12345")
        )
    return errors


def path_segment_problem(value: str) -> str | None:
    """Why ``value`` cannot stand as one segment of an API path, or ``None``.

    The apiserver's ``IsValidPathSegmentName``: ``.`` and ``..`` would be resolved by any
    proxy on the way, ``/`` would split the segment and ``%`` would be decoded a second time.
    It answers these with 400 Bad Request rather than 404, and so does the worker. A NUL or
    other control character is refused too: no object name can hold one.
    """
    if value in {".", ".."}:
        return f"may not be {value!r}"
    for banned in ("/", "%"):
        if banned in value:
            return f"may not contain {banned!r}"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return "may not contain control characters"
    if value == "":
        return "may not be empty"
    return None


def is_dns1123_label(value: str) -> bool:
    """True when ``value`` can name a namespace."""
    return dns1123_label_problem(value) is None


def is_dns1123_subdomain(value: str) -> bool:
    """True when ``value`` can name a Pod, a node or a custom object."""
    return dns1123_subdomain_problem(value) is None


__all__ = [
    "ANNOTATIONS_MAX_BYTES",
    "DNS1123_LABEL_MAX",
    "DNS1123_SUBDOMAIN_MAX",
    "LABEL_VALUE_MAX",
    "QUALIFIED_NAME_MAX",
    "dns1035_label_errors",
    "dns1035_label_problem",
    "dns1123_label_errors",
    "dns1123_label_problem",
    "dns1123_subdomain_errors",
    "dns1123_subdomain_problem",
    "is_dns1123_label",
    "is_dns1123_subdomain",
    "label_value_errors",
    "path_segment_problem",
    "qualified_name_errors",
]
