"""Another device plugin already serving one of our resource names on this kubelet.

The kubelet keeps one endpoint per resource name: a second plugin registering
``nvidia.com/gpu`` replaces the first, whose restart takes it back, and every Pod admitted in
between was granted cards by whichever held the name then. With the NVIDIA GPU Operator's
plugin on the node, ours would hand out whole cards that plugin also hands out, and slices of
them. So before registering, the Device Manager looks at what the kubelet itself recorded:

- ``kubelet_internal_checkpoint`` (beside ``kubelet.sock``): the kubelet's device-manager
  checkpoint, JSON ``{"Data": {"RegisteredDevices": {"<resource>": ["<id>", …]}, …}}``. Our IDs
  are always ``<group>:<accelerator>:<NNNN>`` (``gpustack_core.tokens``); a resource there
  with an ID of another shape (``GPU-8f2c…`` from NVIDIA's plugin) was registered by another
  plugin.
- the directory's other ``*.sock`` files: a plugin serves from a socket there
  (``nvidia-gpu.sock`` for NVIDIA's). The kubelet wipes the directory when it restarts and a
  plugin removes its socket when it stops, so a checkpoint entry with no foreign socket left is
  stale (the other plugin is gone) and does not block.

Both together are a conflict: the Device Manager does not register (not even the other
modes: a slice of a card the other plugin granted whole is the same double grant), logs one
line naming the other endpoint(s), and looks again until they are gone. It looks before every
registration: at start, and after each kubelet restart, when both plugins register again and
the last would take the name (the kubelet keeps its checkpoint across a restart).
``--force-device-plugin`` registers anyway (the kubelet then routes the name to us; the other
plugin is expected to be off). The documented ways out are in docs/deploy.md, "Beside the
NVIDIA GPU Operator".
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gpustack_core.tokens import parse_token_id, shown

CHECKPOINT: Final = "kubelet_internal_checkpoint"
KUBELET_SOCKET_NAME: Final = "kubelet.sock"
OUR_SOCKET_PREFIX: Final = "gpustack-"
"""Our sockets are ``gpustack-<manufacturer>-<mode>.sock`` (``manager.socket_name``)."""


@dataclass(frozen=True, slots=True)
class Conflict:
    """Resource names another plugin holds, and the sockets that plugin may serve from."""

    resources: tuple[str, ...]
    endpoints: tuple[str, ...]

    def line(self) -> str:
        """The one log line an operator reads to see why nothing is registered."""
        return (
            f"{', '.join(self.resources)} already registered with the kubelet by another device"
            f" plugin (endpoint {', '.join(self.endpoints)}): not registering, so no card is"
            " granted twice; turn that plugin off, or move ours to other names"
            " (resourceNames in the chart, GPUSTACK_<MANUFACTURER>_ACCELERATABLE_RESOURCE_NAME),"
            " or pass --force-device-plugin (docs/deploy.md, 'Beside the NVIDIA GPU Operator')"
        )


def _ours(device_id: object) -> bool:
    if not isinstance(device_id, str):
        return False
    try:
        parse_token_id(device_id)
    except ValueError:
        return False
    return True


def registered_by_others(directory: Path) -> set[str]:
    """Resource names the checkpoint records with a device ID that is not one of ours.

    An absent, unreadable or malformed checkpoint records nothing: the kubelet writes it once
    a plugin registered, and a guess must never block our own registration.
    """
    try:
        text = (directory / CHECKPOINT).read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError):
        return set()
    inner = data.get("Data") if isinstance(data, dict) else None
    registered = inner.get("RegisteredDevices") if isinstance(inner, dict) else None
    if not isinstance(registered, dict):
        return set()
    return {
        str(resource)
        for resource, ids in registered.items()
        if isinstance(ids, list) and any(not _ours(i) for i in ids)
    }


def foreign_sockets(directory: Path) -> list[str]:
    """Socket names in the plugin directory that are neither the kubelet's nor ours."""
    try:
        entries = sorted(p.name for p in directory.iterdir() if p.is_socket())
    except OSError:
        return []
    return [
        name
        for name in entries
        if name != KUBELET_SOCKET_NAME and not name.startswith(OUR_SOCKET_PREFIX)
    ]


def conflict(directory: Path, resources: Iterable[str]) -> Conflict | None:
    """The conflict registering ``resources`` in ``directory`` would start, if any."""
    held = sorted(set(resources) & registered_by_others(directory))
    if not held:
        return None
    endpoints = foreign_sockets(directory)
    if not endpoints:
        return None  # a stale checkpoint entry: the other plugin's socket is gone
    return Conflict(tuple(held), tuple(shown(e) for e in endpoints))


__all__ = ["CHECKPOINT", "Conflict", "conflict", "foreign_sockets", "registered_by_others"]
