"""What every backend answers, in the contract's units (MiB, %, °C, W; process memory in bytes).

A backend converts its library's native units exactly once, into these types. Process memory
stays in bytes because the Device Manager sums a container's processes first and rounds the sum
up to MiB once; rounding each row first would inflate every multi-process container.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpustack_core.reasons import QueryReason


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """A hardware partition (a MIG instance): its **own** identity and capacity.

    Read on the partition's own handle, so an H100 ``1g.10gb`` states 9856 MiB, what the driver
    says, rather than the profile name's 10240 or an eighth of the card.
    """

    id: str
    parent_id: str
    slot: int
    profile: str
    memory_mib: int
    cores: int | None = None


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One accelerator as detection reports it."""

    id: str
    """The vendor's stable identifier: ``GPU-…`` UUID on NVIDIA, the PCI bus id on AMD."""
    index: int
    """The ordinal the vendor's tools name the device by (``nvidia-smi -i``, ``rocm-smi -d``)."""
    name: str
    memory_mib: int
    cores: int | None
    """CUDA cores / compute units, where the library states them."""
    driver_version: str
    runtime_version: str
    pci_bus_id: str
    unhealthy: bool
    partitions: tuple[PartitionInfo, ...] = ()
    compute_capability: str | None = None
    """``major.minor`` where the library states one (NVML's CUDA compute capability); ``None``
    when it does not, so the ``.comcap`` label and the family it implies stay absent."""


@dataclass(frozen=True, slots=True)
class CardSample:
    """One card's whole-device figures for one monitor tick; ``None`` is unmeasured."""

    id: str
    memory_total_mib: int
    memory_used_mib: int | None
    cores_utilization_percent: int | None
    temperature_celsius: int | None
    power_watts: float | None
    unhealthy: bool


@dataclass(frozen=True, slots=True)
class ProcessRow:
    """One host process on a device. Either figure may be unmeasured (``None``)."""

    pid: int
    memory_bytes: int | None
    cores_percent: int | None
    """Share of the **whole card**, as the vendor measures it (whole percent)."""


@dataclass(frozen=True, slots=True)
class DeviceProcesses:
    """A device's process rows and, per figure, why it is unmeasured (empty when answered).

    A reason on a figure means no row carries that figure, so the Device Manager reports the
    figure absent for the whole device rather than summing a partial list.
    """

    device_id: str
    rows: tuple[ProcessRow, ...] = ()
    memory_reason: QueryReason | None = None
    cores_reason: QueryReason | None = None

    @classmethod
    def unread(cls, device_id: str, reason: QueryReason) -> DeviceProcesses:
        """A device whose process list could not be read at all: both figures, one reason."""
        return cls(device_id, memory_reason=reason, cores_reason=reason)


@dataclass(frozen=True, slots=True)
class PartitionSample:
    """A partition's figures read on its own handle."""

    id: str
    parent_id: str
    memory_total_mib: int | None
    memory_used_mib: int | None
    cores_utilization_percent: int | None = None
    memory_reason: QueryReason | None = None
    cores_reason: QueryReason | None = None

    @classmethod
    def unread(
        cls,
        partition_id: str,
        memory_reason: QueryReason,
        cores_reason: QueryReason,
        parent_id: str = "",
    ) -> PartitionSample:
        """A partition none of whose figures could be read, each with its reason."""
        return cls(partition_id, parent_id, None, None, None, memory_reason, cores_reason)


@dataclass(frozen=True, slots=True)
class Detection:
    """Everything detection found, plus per-device notes on what it could not read."""

    manufacturer: str
    devices: tuple[DeviceInfo, ...]
    notes: tuple[str, ...] = field(default=())
