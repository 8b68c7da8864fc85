"""The seam between the Device Manager and a vendor library.

A backend is *handed* its binding module (the real one, or the simulator's replay stand-in with
the same interface) and never imports it itself; that is what makes a replayed CI run exercise
the same code a GPU node runs. Every method is blocking — callers run it in a worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gpustack_vendors.model import CardSample, Detection, DeviceProcesses, PartitionSample


class Backend(Protocol):
    """One manufacturer's library, behind the calls the Device Manager makes."""

    manufacturer: str

    def detect(self) -> Detection:
        """Enumerate the devices with identity, capacity, versions, health and partitions."""
        ...

    def sample(self) -> list[CardSample]:
        """Read every card's whole-device figures once."""
        ...

    def processes(self, device_ids: Sequence[str]) -> dict[str, DeviceProcesses]:
        """Per-process rows for the requested devices only, one entry per requested device.

        A device that cannot be read gets an entry with reasons, never a missing key.
        """
        ...

    def partitions(self, partition_ids: Sequence[str]) -> dict[str, PartitionSample]:
        """Figures of the requested partitions, each read on the partition's own handle."""
        ...

    def close(self) -> None:
        """Release the library (shutdown); the backend is unusable afterwards."""
        ...
