"""What each Device Manager's recording holds: the cards a grant can name.

Expansion checks grants, devices and PIDs against this inventory, so a scenario that names a
card its recording does not have fails at expansion, not as a wrong figure later.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpustack_core.decoding import ContractError
from gpustack_simulator.recording import Recording, load_recording
from gpustack_simulator.replay.backends import UnsupportedRecording, replay_backend
from gpustack_simulator.scenario.schema import DeviceManagerDoc
from gpustack_simulator.synth.timeline import VirtualClock
from gpustack_vendors.model import PartitionInfo


@dataclass(frozen=True)
class _Card:
    id: str
    index: int
    name: str
    manufacturer: str
    group: str
    memory_mib: int
    partitions: tuple[PartitionInfo, ...]


@dataclass
class _Inventory:
    """One Device Manager's recording, read the way the Device Manager reads it."""

    path: str
    manufacturer: str
    file: Path
    recording: Recording
    cards: dict[str, _Card]
    partitions: dict[str, tuple[_Card, PartitionInfo]]
    pid_devices: Mapping[int, frozenset[str]]


def _group_id(manufacturer: str, product: str) -> str:
    """A device group's id, ``<manufacturer>-<product>`` as the Devices object keys groups."""
    slug = re.sub(r"[^a-z0-9]+", "-", product.lower()).strip("-")
    slug = slug.removeprefix(f"{manufacturer}-")
    return f"{manufacturer}-{slug or 'device'}"


def _inventory(
    path: str, dm: DeviceManagerDoc, base: Path, problems: list[str]
) -> _Inventory | None:
    """One Device Manager's recording, or ``None`` with the reason added to ``problems``."""
    file = Path(dm.recording) if Path(dm.recording).is_absolute() else base / dm.recording
    if not file.is_file():
        problems.append(f"{path}.recording: unknown recording {dm.recording!r} (no {file})")
        return None
    try:
        recording, cards, pid_devices = _detected(str(file.resolve()), file.stat().st_mtime_ns)
    except (ContractError, UnsupportedRecording) as exc:
        problems.append(f"{path}.recording: {exc}")
        return None
    if recording.vendor != dm.manufacturer:
        problems.append(
            f"{path}.recording: {dm.recording} is a {recording.vendor} recording, "
            f"not {dm.manufacturer}"
        )
        return None
    partitions = {p.id: (card, p) for card in cards.values() for p in card.partitions}
    return _Inventory(path, dm.manufacturer, file, recording, cards, partitions, pid_devices)


@functools.lru_cache(maxsize=32)
def _detected(
    file: str, mtime_ns: int
) -> tuple[Recording, dict[str, _Card], dict[int, frozenset[str]]]:
    """Detect the recording's cards through the unchanged backend, then list who runs where.

    Going through the backend (not the YAML) means a scenario can only name devices the
    Device Manager will actually report, by the ids it will report them under. Cached per
    file version (``mtime_ns`` is part of the key): a stand-in and a test suite expand the
    same few recordings many times, and the answers are the caller's to read, never to change.
    """
    recording = load_recording(Path(file))
    clock = VirtualClock()
    backend = replay_backend(recording, clock=clock)
    try:
        cards = {
            d.id: _Card(
                d.id,
                d.index,
                d.name,
                recording.vendor,
                _group_id(recording.vendor, d.name),
                d.memory_mib,
                d.partitions,
            )
            for d in backend.detect().devices
        }
        pid_devices: dict[int, set[str]] = {}
        # One pass per monitor period over the recording's loop: a PID seen on a card at any
        # time counts, so a process that starts mid-recording is still found.
        period = 15.0
        for _ in range(max(1, math.ceil((recording.loop_seconds or period) / period))):
            for device_id, listed in backend.processes(list(cards)).items():
                for row in listed.rows:
                    pid_devices.setdefault(row.pid, set()).add(device_id)
            clock.sleep(period)
    finally:
        backend.close()
    return recording, cards, {pid: frozenset(ids) for pid, ids in pid_devices.items()}
