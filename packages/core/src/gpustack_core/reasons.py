"""Every reason token an absent figure can carry.

An absent figure always has a reason, discoverable on the exporter's capability gauge and in the
Device Manager's log. The tokens are contracts: consumers match them letter for letter.
"""

from __future__ import annotations

from enum import StrEnum


class QueryReason(StrEnum):
    """Why the device's own per-process query did not answer."""

    UNSUPPORTED = "unsupported"
    PERMISSION = "permission"
    TRANSIENT_DRIVER_ERROR = "transient_driver_error"
    TRUNCATED = "truncated"


class SectionReason(StrEnum):
    """Why a device's records in the snapshot's ``slices`` section cannot be used."""

    INVALID_DATA = "invalid_data"
    BOUNDED = "bounded"
    VERSION_SKEW = "version_skew"


class AttributionReason(StrEnum):
    """Why a process row could not be placed on a Pod container (costs the whole device)."""

    EXITED = "exited"
    PERMISSION = "permission"
    UNREADABLE = "unreadable"
    ZOMBIE = "zombie"
    UNSTABLE = "unstable"
    PID_NAMESPACE_INVISIBLE = "pid_namespace_invisible"
    MEDIATED = "mediated"
    NO_POD_COMPONENT = "no_pod_component"
    AMBIGUOUS_POD = "ambiguous_pod"
    NO_CONTAINER_COMPONENT = "no_container_component"
    AMBIGUOUS_CONTAINER = "ambiguous_container"
    UNKNOWN_POD = "unknown_pod"
    UNKNOWN_CONTAINER = "unknown_container"


ALL_REASONS: frozenset[str] = frozenset(
    {r.value for r in QueryReason}
    | {r.value for r in SectionReason}
    | {r.value for r in AttributionReason}
)
"""Every token a ``memoryReason``/``coresReason`` or capability gauge ``reason`` may hold."""
