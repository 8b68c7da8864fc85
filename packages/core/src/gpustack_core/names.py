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

_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1035: Final = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def dns1123_label_problem(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 label (namespaces, Service names), or ``None``."""
    if len(value) > DNS1123_LABEL_MAX:
        return f"must be no more than {DNS1123_LABEL_MAX} characters"
    if not _LABEL.fullmatch(value):
        return (
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
            "or '-', and must start and end with an alphanumeric character"
        )
    return None


def dns1035_label_problem(value: str) -> str | None:
    """Why ``value`` is not a DNS-1035 label (a Service's name), or ``None``.

    A DNS-1123 label that also starts with a letter: a Service's name becomes a DNS name
    whose first label must not look like a number, so ``1abc`` may name a Pod but no Service.
    """
    if len(value) > DNS1123_LABEL_MAX:
        return f"must be no more than {DNS1123_LABEL_MAX} characters"
    if not _DNS1035.fullmatch(value):
        return (
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
            "start with an alphabetic character, and end with an alphanumeric character"
        )
    return None


def dns1123_subdomain_problem(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 subdomain (Pod, node, custom object names), or ``None``."""
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        return f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
    if not _SUBDOMAIN.fullmatch(value):
        return (
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
            "characters, '-' or '.', and must start and end with an alphanumeric character"
        )
    return None


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
    "DNS1123_LABEL_MAX",
    "DNS1123_SUBDOMAIN_MAX",
    "dns1035_label_problem",
    "dns1123_label_problem",
    "dns1123_subdomain_problem",
    "is_dns1123_label",
    "is_dns1123_subdomain",
    "path_segment_problem",
]
