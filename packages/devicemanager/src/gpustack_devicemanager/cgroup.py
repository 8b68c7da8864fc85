"""Which Pod container a process belongs to, read from the text of ``/proc/<pid>/cgroup``.

The vendor libraries report host PIDs and nothing else; the cgroup path is the only place the
kernel records which Pod and container a process runs in. The kubelet and the container
runtime name those cgroups in a handful of ways (cgroupfs or systemd driver, cgroup v1 or v2,
containerd, CRI-O or Docker), so the parser accepts each of them — and nothing looser: a
mis-read here puts one tenant's accelerator memory on another tenant's Instance, which is
worse than reporting the figure absent. Every doubt therefore becomes a reason, never a guess.

The module is pure (text in, answer out) so the whole corpus of real cgroup files and a fuzzer
can exercise it without a ``/proc``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpustack_core.reasons import AttributionReason

_LINE = re.compile(r"(?P<hierarchy>[0-9]+):(?P<controllers>[^:]*):(?P<path>/.*)")
"""``hierarchy-id:controllers:path``. The path is the rest of the line because a cgroup name may
itself hold colons (containerd's ``<slice>:cri-containerd:<id>`` cgroups do)."""

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_STATIC_POD_HASH = re.compile(r"[0-9a-f]{32}")
"""A static (mirror) Pod's UID is the kubelet's hash of its manifest, not a UUID."""


_RUNTIMES = ("cri-containerd", "containerd", "crio", "docker")
"""Runtime prefixes of a container's own cgroup. ``crio-conmon-<id>`` (CRI-O's monitor process,
a sibling of the container) deliberately does not match: its ID part is not hex."""

_HEX_ID = "[0-9a-f]{8,}"
_CONTAINER = re.compile(
    rf"(?P<bare>{_HEX_ID})"
    rf"|(?:{'|'.join(_RUNTIMES)})-(?P<scope>{_HEX_ID})\.scope"
    rf"|(?:{'|'.join(_RUNTIMES)}):(?P<colon>{_HEX_ID})"
)
_SLICE_WITH_COLON = re.compile(r"(?P<slice>[^:]+\.slice):(?P<rest>.+)")
"""containerd with the systemd driver on cgroup v1 may name the container's cgroup
``<pod slice>:cri-containerd:<id>``: one path segment carrying both the Pod and the container."""


@dataclass(frozen=True)
class CgroupIdentity:
    """The Pod UID (dashed, as the API server writes it) and the bare container ID."""

    pod_uid: str
    container_id: str


def _pod_uid(segment: str) -> str | None:
    """The Pod UID a path segment names, or ``None`` when the segment is not a Pod's cgroup.

    cgroupfs names the Pod's cgroup ``pod<uid>``; systemd names it
    ``kubepods-<qos>-pod<uid>.slice`` with ``_`` for ``-``, because systemd reserves ``-`` as its
    nesting separator. Hex never contains ``pod``, so the last ``pod`` in a slice name is the only
    candidate, which keeps this linear on hostile input (a regex with a leading ``.+-`` would
    backtrack).
    """
    if segment.endswith(".slice"):
        body = segment.removesuffix(".slice")
        at = body.rfind("pod")
        if at < 0 or (at > 0 and body[at - 1] != "-"):
            return None
        uid = body[at + 3 :].replace("_", "-")
    elif segment.startswith("pod"):
        uid = segment[3:]
    else:
        return None
    if _UUID.fullmatch(uid) or _STATIC_POD_HASH.fullmatch(uid):
        return uid
    return None


def _container_id(segment: str) -> str | None:
    match = _CONTAINER.fullmatch(segment)
    if match is None:
        return None
    return match["bare"] or match["scope"] or match["colon"]


def _segments(path: str) -> list[str]:
    """The path's components, with a ``<slice>:<runtime>:<id>`` component split in two."""
    out: list[str] = []
    for segment in path.split("/"):
        combined = _SLICE_WITH_COLON.fullmatch(segment)
        if combined is None:
            out.append(segment)
        else:
            out.extend((combined["slice"], combined["rest"]))
    return out


def _parse_path(path: str) -> tuple[str, str | None] | AttributionReason | None:
    """One line's ``(pod uid, container id or None)``; ``None`` when it names no Pod.

    Two different Pods in one path (a kubelet nested inside a Pod) are ambiguous rather than
    resolved by depth: which of the two the node's Pod index means cannot be told from here.
    Only the segment directly below the Pod's names the container; deeper ones are cgroups the
    container made inside itself and are still that container.
    """
    segments = _segments(path)
    found: list[tuple[int, str]] = []
    for index, segment in enumerate(segments):
        uid = _pod_uid(segment)
        if uid is not None:
            found.append((index, uid))
    if not found:
        return None
    if len({uid for _, uid in found}) > 1:
        return AttributionReason.AMBIGUOUS_POD
    index, uid = found[-1]
    below = segments[index + 1] if index + 1 < len(segments) else ""
    return uid, _container_id(below)


def parse_cgroup(text: str) -> CgroupIdentity | AttributionReason:
    """Read a ``/proc/<pid>/cgroup`` text as the Pod container the process runs in, or why not.

    Every line is read (cgroup v1 lists one per hierarchy, v2 the single ``0::<path>``, hybrid
    hosts both), and every line that names a Pod or a container must name the same one: lines
    that disagree mean the process moved mid-read or the host is arranged in a way this parser
    does not understand, and either way no single answer is safe. Lines naming no Pod (``0::/``
    on a v1 host, an unmounted controller's ``/``) are silent rather than disagreeing.

    Text that is not a cgroup file at all (a malformed line, nothing but blank lines) is
    ``unreadable``: the kernel never writes it, so the read itself cannot be trusted.
    """
    pods: set[str] = set()
    containers: set[str] = set()
    seen_line = False
    for line in text.split("\n"):
        if not line.strip():
            continue
        seen_line = True
        match = _LINE.fullmatch(line)
        if match is None:
            return AttributionReason.UNREADABLE
        parsed = _parse_path(match["path"])
        if isinstance(parsed, AttributionReason):
            return parsed
        if parsed is None:
            continue
        uid, container = parsed
        pods.add(uid)
        if container is not None:
            containers.add(container)
    if not seen_line:
        return AttributionReason.UNREADABLE
    if not pods:
        return AttributionReason.NO_POD_COMPONENT
    if len(pods) > 1:
        return AttributionReason.AMBIGUOUS_POD
    if not containers:
        return AttributionReason.NO_CONTAINER_COMPONENT
    if len(containers) > 1:
        return AttributionReason.AMBIGUOUS_CONTAINER
    return CgroupIdentity(pod_uid=pods.pop(), container_id=containers.pop())
