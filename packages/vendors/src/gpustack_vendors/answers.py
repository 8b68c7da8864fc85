"""Answers several backends assemble the same way, as pure functions of what their library said.

Each backend reads its own library; once it holds the library's answers, turning them into the
model's types is the same for all: one entry per requested device, the "no such capability"
answers, a C string's text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from gpustack_core.reasons import QueryReason
from gpustack_vendors.model import DeviceProcesses, PartitionSample, ProcessRow

_H = TypeVar("_H")


def unknown_device(device_id: str) -> DeviceProcesses:
    """A device detection did not find (or has not yet): both figures, a transient gap."""
    return DeviceProcesses.unread(device_id, QueryReason.TRANSIENT_DRIVER_ERROR)


def memory_only(
    device_id: str, rows: Iterable[ProcessRow] = (), memory_reason: QueryReason | None = None
) -> DeviceProcesses:
    """A device whose library measures no per-process compute: a capability, not a fault."""
    return DeviceProcesses(
        device_id,
        rows=tuple(rows),
        memory_reason=memory_reason,
        cores_reason=QueryReason.UNSUPPORTED,
    )


def unknown_memory_only(device_id: str) -> DeviceProcesses:
    """:func:`unknown_device` for a library that measures no per-process compute."""
    return memory_only(device_id, memory_reason=QueryReason.TRANSIENT_DRIVER_ERROR)


def per_device(
    device_ids: Sequence[str],
    cards: Mapping[str, _H],
    read: Callable[[str, _H], DeviceProcesses],
    unknown: Callable[[str], DeviceProcesses] = unknown_device,
) -> dict[str, DeviceProcesses]:
    """One entry per requested device: ``read`` on its handle, or ``unknown`` without one."""
    result: dict[str, DeviceProcesses] = {}
    for device_id in device_ids:
        handle = cards.get(device_id)
        result[device_id] = unknown(device_id) if handle is None else read(device_id, handle)
    return result


def unsupported_partitions(partition_ids: Sequence[str]) -> dict[str, PartitionSample]:
    """Every partition asked about answered as unsupported by a backend that reads none."""
    return {
        partition_id: PartitionSample.unread(
            partition_id, QueryReason.UNSUPPORTED, QueryReason.UNSUPPORTED
        )
        for partition_id in partition_ids
    }


def c_text(value: Any) -> str:
    """A ``char[]`` field as a binding or its replay returns it (bytes or str)."""
    if isinstance(value, bytes):
        return value.split(b"\0", 1)[0].decode("utf-8", errors="replace")
    return str(value)
