"""Iluvatar backend over IXML (our binding ``gpustack_vendors.bindings.ixml``, or its replay).

IXML is an NVML copy, so this backend reads like the NVIDIA one with IXML's own choices:

- **Identity** is ``nvmlDeviceGetUUID``; ``index`` the enumeration index.
- **Memory** from ``nvmlDeviceGetMemoryInfo_v2`` with the v1 layout as fallback where the library
  lacks or refuses v2 (gpustack-runtime's order); bytes → MiB rounded up. A card answering v2
  with an "unsupported" code is remembered and read through v1 from then on.
- **Power** mW → W; temperature °C; utilization ``gpu`` %.
- **Health** is ``ixmlDeviceGetHealth``: any bit set is unhealthy, as is a fatal NVML code.
- **Per-process memory** is ``nvmlDeviceGetComputeRunningProcesses`` (bytes, kept as bytes;
  ``NVML_VALUE_NOT_AVAILABLE`` is absent). ``NOT_FOUND`` on that call is an idle card: no rows,
  no reason (the operator reads it so).
- **Per-process compute**: IXML's process-utilization functions exist only because pynvml was
  copied; no recording shows them answering, so none is called and compute is ``unsupported`` on
  every device: a capability, not a fault.
- No partitions: every id asked about is ``unsupported``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from typing import Any

from gpustack_core.reasons import QueryReason
from gpustack_core.units import bytes_to_mib
from gpustack_vendors import errors
from gpustack_vendors.bindings.ixml import (
    IXML_HEALTH_OK,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_TEMPERATURE_GPU,
    NVML_VALUE_NOT_AVAILABLE_ULL,
    IXMLError,
    load_library,
)
from gpustack_vendors.calling import BindingBackend, CallError
from gpustack_vendors.model import (
    CardSample,
    Detection,
    DeviceInfo,
    DeviceProcesses,
    PartitionSample,
    ProcessRow,
)
from gpustack_vendors.pci import normalize_bus_id

MANUFACTURER = "iluvatar"

_V1_FALLBACK = frozenset(
    {NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_ARGUMENT_VERSION_MISMATCH}
)
"""v2 answers that mean "this library has no v2": read the v1 layout instead."""


class IxmlCallError(CallError):
    """An IXML call failed; carries the numeric code and the reason it maps to (NVML's table)."""

    library = "IXML"
    reasons = errors.NVML
    fatal_codes = errors.NVML_FATAL


class IluvatarBackend(BindingBackend):
    """Answers the Device Manager's questions through an IXML binding it is handed."""

    manufacturer = MANUFACTURER
    call_error = IxmlCallError
    binding_error = IXMLError

    def __init__(self, ixml: Any) -> None:
        self._ixml = ixml
        self._lock = threading.Lock()
        self._cards: dict[str, Any] = {}
        self._v1_only: set[str] = set()
        self._call("nvmlInit_v2")

    # -- plumbing -----------------------------------------------------------------------------

    def _binding(self) -> Any:
        return self._ixml

    def _memory(self, uuid: str, handle: Any) -> Any:
        """The v2 answer, or v1's where this library has no v2 (remembered per card)."""
        if uuid not in self._v1_only:
            try:
                return self._call("nvmlDeviceGetMemoryInfo_v2", handle)
            except IxmlCallError as failure:
                if failure.code not in _V1_FALLBACK:
                    raise
                self._v1_only.add(uuid)
        return self._call("nvmlDeviceGetMemoryInfo", handle)

    # -- detection ---------------------------------------------------------------------------

    def detect(self) -> Detection:
        """Enumerate cards; a card whose handle or UUID fails is skipped, noted."""
        driver = self._maybe("nvmlSystemGetDriverVersion", convert=str) or ""
        cuda = self._maybe("nvmlSystemGetCudaDriverVersion", convert=_cuda_version) or ""
        notes: list[str] = []
        devices: list[DeviceInfo] = []
        cards: dict[str, Any] = {}
        for index in range(int(self._call("nvmlDeviceGetCount_v2"))):
            try:
                handle = self._call("nvmlDeviceGetHandleByIndex_v2", index)
                uuid = str(self._call("nvmlDeviceGetUUID", handle))
            except IxmlCallError as failure:
                notes.append(f"GPU {index}: no identity, skipped ({failure})")
                continue
            unhealthy = False
            memory_mib = 0
            try:
                memory_mib = bytes_to_mib(int(self._memory(uuid, handle).total))
            except IxmlCallError as failure:
                unhealthy = failure.fatal
                notes.append(f"{uuid}: memory unreadable ({failure})")
            cards[uuid] = handle
            devices.append(
                DeviceInfo(
                    id=uuid,
                    index=index,
                    name=self._maybe("nvmlDeviceGetName", handle, convert=str) or "Iluvatar GPU",
                    memory_mib=memory_mib,
                    cores=None,
                    driver_version=driver,
                    runtime_version=cuda,
                    pci_bus_id=self._maybe("nvmlDeviceGetPciInfo_v3", handle, convert=_bus_id)
                    or "",
                    unhealthy=unhealthy or self._health_bits(handle),
                )
            )
        with self._lock:
            self._cards = cards
        return Detection(MANUFACTURER, tuple(devices), tuple(notes))

    def _health_bits(self, handle: Any) -> bool:
        """Any ``IXML_HEALTH_*`` bit set; an unreadable mask marks nothing."""
        mask = self._maybe("ixmlDeviceGetHealth", handle, convert=int)
        return mask is not None and mask != IXML_HEALTH_OK

    def _known_cards(self) -> dict[str, Any]:
        with self._lock:
            if self._cards:
                return self._cards
        self.detect()
        with self._lock:
            return self._cards

    # -- sampling ----------------------------------------------------------------------------

    def sample(self) -> list[CardSample]:
        """Whole-card figures; a refused figure is absent, a lost card unhealthy."""
        samples: list[CardSample] = []
        for uuid, handle in self._known_cards().items():
            unhealthy = False
            total, used = 0, None
            try:
                memory = self._memory(uuid, handle)
                total, used = bytes_to_mib(int(memory.total)), bytes_to_mib(int(memory.used))
            except IxmlCallError as failure:
                unhealthy = failure.fatal
            samples.append(
                CardSample(
                    id=uuid,
                    memory_total_mib=total,
                    memory_used_mib=used,
                    cores_utilization_percent=self._maybe(
                        "nvmlDeviceGetUtilizationRates", handle, convert=lambda u: int(u.gpu)
                    ),
                    temperature_celsius=self._maybe(
                        "nvmlDeviceGetTemperature", handle, NVML_TEMPERATURE_GPU, convert=int
                    ),
                    power_watts=self._maybe(
                        "nvmlDeviceGetPowerUsage", handle, convert=lambda mw: int(mw) / 1000
                    ),
                    unhealthy=unhealthy or self._health_bits(handle),
                )
            )
        return samples

    # -- processes ---------------------------------------------------------------------------

    def processes(self, device_ids: Sequence[str]) -> dict[str, DeviceProcesses]:
        """Compute processes with their memory; compute is always ``unsupported``."""
        cards = self._known_cards()
        result: dict[str, DeviceProcesses] = {}
        for device_id in device_ids:
            handle = cards.get(device_id)
            if handle is None:
                result[device_id] = DeviceProcesses(
                    device_id,
                    memory_reason=QueryReason.TRANSIENT_DRIVER_ERROR,
                    cores_reason=QueryReason.UNSUPPORTED,
                )
                continue
            try:
                listed = self._call("nvmlDeviceGetComputeRunningProcesses", handle)
            except IxmlCallError as failure:
                if failure.code != NVML_ERROR_NOT_FOUND:
                    result[device_id] = DeviceProcesses(
                        device_id,
                        memory_reason=failure.reason,
                        cores_reason=QueryReason.UNSUPPORTED,
                    )
                    continue
                listed = []  # NOT_FOUND: no process holds the card
            rows: dict[int, ProcessRow] = {}
            for proc in listed:
                used = int(proc.usedGpuMemory)
                rows.setdefault(
                    int(proc.pid),
                    ProcessRow(
                        int(proc.pid), None if used == NVML_VALUE_NOT_AVAILABLE_ULL else used, None
                    ),
                )
            result[device_id] = DeviceProcesses(
                device_id, rows=tuple(rows.values()), cores_reason=QueryReason.UNSUPPORTED
            )
        return result

    # -- partitions --------------------------------------------------------------------------

    def partitions(self, partition_ids: Sequence[str]) -> dict[str, PartitionSample]:
        """IXML's MIG functions are treated as absent: every id is unsupported."""
        return {
            partition_id: PartitionSample.unread(
                partition_id, QueryReason.UNSUPPORTED, QueryReason.UNSUPPORTED
            )
            for partition_id in partition_ids
        }

    def close(self) -> None:
        """Shut IXML down; errors here change nothing for the caller."""
        with contextlib.suppress(IxmlCallError):
            self._call("nvmlShutdown")


def _cuda_version(value: Any) -> str:
    """NVML encodes 10.2 as 10020."""
    number = int(value)
    return f"{number // 1000}.{number % 1000 // 10}"


def _bus_id(info: Any) -> str:
    bus_id = info.busId
    text = bus_id.split(b"\0", 1)[0].decode() if isinstance(bus_id, bytes) else str(bus_id)
    return normalize_bus_id(text)


def open_iluvatar_backend(paths: Sequence[str] | None = None) -> IluvatarBackend:
    """Load ``libixml.so`` (``paths``, else the binding's usual search) and initialise it.

    Raises the binding's ``OSError`` naming every path tried when the library is absent, and
    ``RuntimeError`` when it loads but ``nvmlInit_v2`` fails.
    """
    binding = load_library(paths)
    try:
        return IluvatarBackend(binding)
    except IxmlCallError as exc:
        raise RuntimeError(f"IXML did not initialise: {exc}") from exc
