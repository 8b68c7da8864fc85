"""AMD backend: card figures from AMD SMI (``amdsmi``), per-process rows from ROCm SMI.

Two libraries, because neither answers everything. AMD SMI's per-device process list ignores
its handle (every compute process comes back for every card), so processes are read through
ROCm SMI, which attributes each process to the devices it uses. ROCm SMI is initialised first:
loading AMD SMI before it has been measured to abort with SIGBUS.

**Identity.** A card's id is its PCI bus id, not AMD SMI's UUID. ROCm SMI names devices by index
and packed BDFID and has no UUID call, so the bus id is the one key both libraries report, and
the process join needs no second lookup. AMD SMI can also resolve it back
(``amdsmi_get_processor_handle_from_bdf``), and in a DPX-CPX partition mode every partition is
its own processor handle at its own address. ``index`` is the position in
``amdsmi_get_processor_handles()``, the ordinal ``rocm-smi -d`` uses.

**Units**, converted here once:

- ``amdsmi_get_gpu_vram_usage`` is labelled "MB" in ``amdsmi.h`` but computed as
  ``bytes / (1024 * 1024)`` in ``amd_smi.cc``, so it is MiB (floored by the library) and is
  taken as is.
- ``amdsmi_get_temp_metric`` is °C, and ``socket_power`` and its siblings are W.
- ROCm SMI's ``vram_usage`` is bytes and stays bytes (see ``model.py``).
- ``cu_occupancy`` is whole percent. The kernel's ``stats_<gpu>/cu_occupancy`` counts CUs with
  waves in flight (kfd_priv.h), and ROCm SMI's ``GetProcessInfoForPID`` (rocm_smi_kfd.cc)
  turns that into ``count * 100 / cu_count`` of the device asked about; ``rocm_smi.h`` documents
  the field as "Compute Unit usage in percent". It is the share of the card's CUs the process
  occupies at that instant, which is the contract's share of the whole card.

AMD SMI turns its sentinels into the string ``"N/A"``; those figures are absent, never zero.
AMD SMI has no status that means "this card is lost", so no card is marked unhealthy from an
error code.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

from gpustack_core.reasons import QueryReason
from gpustack_vendors import errors
from gpustack_vendors.amd.surface import (
    AmdPowerInfo,
    AmdRocmSmiSurface,
    AmdSmiSurface,
    NotAvailable,
)
from gpustack_vendors.answers import unsupported_partitions
from gpustack_vendors.bindings.rocm_smi import (
    pci_address,
)
from gpustack_vendors.detected import Detected
from gpustack_vendors.model import (
    CardSample,
    Detection,
    DeviceInfo,
    DeviceProcesses,
    PartitionSample,
)
from gpustack_vendors.pci import normalize_bus_id
from gpustack_vendors.rocm_common import (
    LibraryCallError,
    Rows,
    call_rocm_smi,
    device_rows,
    process_devices,
    quietly,
)

MANUFACTURER = "amd"

PROCESS_LIST_INTERVAL_S = 1.0
"""AMD's documented minimum between process-list calls; a sooner call reuses the last list."""

NOT_AVAILABLE = "N/A"
"""What amdsmi's Python binding returns in place of a sentinel."""

_POWER_SENTINELS = frozenset({0xFFFF, 0xFFFFFFFF})
"""The binding turns only 0xFFFF into "N/A"; ``amdsmi.h`` also documents UINT32_MAX."""

_POWER_KEYS = ("socket_power", "current_socket_power", "average_socket_power")
"""``socket_power`` is the generic figure; MI300 fills ``current_…`` and Navi ``average_…``."""

Clock = Callable[[], float]

_P = ParamSpec("_P")
_R = TypeVar("_R")


class AmdCallError(LibraryCallError):
    """A call into either library failed; carries the numeric code and its reason."""


@dataclass
class _Card:
    handle: object
    """Opaque: amdsmi's ``c_void_p``, handed back to it."""
    rsmi_index: int | None
    rsmi_reason: QueryReason | None
    """Why the card has no ROCm SMI index (its processes then carry this reason)."""


@dataclass
class _ProcessList:
    """One process-list call: which ROCm SMI devices each PID uses, or why that is unknown."""

    taken: float
    devices_of: dict[int, tuple[int, ...]] = field(default_factory=dict)
    failure: LibraryCallError | None = None
    rows: dict[int, Rows] = field(default_factory=dict)
    """Per ROCm SMI index, read lazily for the devices asked about, reused with the list."""


class AmdBackend:
    """Answers the Device Manager's questions through AMD SMI and ROCm SMI bindings it is handed."""

    manufacturer = MANUFACTURER

    def __init__(
        self,
        amdsmi: AmdSmiSurface,
        rocm_smi: AmdRocmSmiSurface,
        *,
        clock: Clock = time.monotonic,
    ) -> None:
        self._amdsmi = amdsmi
        self._rocm_smi = rocm_smi
        self._clock = clock
        self._lock = threading.Lock()  # guards the process list
        self._detected: Detected[_Card, object] = Detected(self.detect)
        self._process_list: _ProcessList | None = None
        self._rocm(rocm_smi.rsmi_init, 0)
        try:
            self._amd(amdsmi.amdsmi_init, amdsmi.AmdSmiInitFlags.INIT_AMD_GPUS)
        except AmdCallError:
            quietly(self._rocm, rocm_smi.rsmi_shut_down)
            raise

    # -- plumbing -----------------------------------------------------------------------------

    def _amd(self, fn: Callable[_P, _R], /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """``fn(*args)`` on AMD SMI; its exception becomes :class:`AmdCallError` named ``fn``."""
        try:
            return fn(*args, **kwargs)
        except self._amdsmi.AmdSmiLibraryException as exc:
            code = int(exc.err_code)  # type: ignore[attr-defined]  # amdsmi's, on its exception
            raise AmdCallError("AMD SMI", fn.__name__, code, errors.AMDSMI) from exc

    def _rocm(self, fn: Callable[_P, _R], /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """``fn(*args)`` on ROCm SMI; its failure becomes :class:`AmdCallError`."""
        return call_rocm_smi(AmdCallError, fn, *args, **kwargs)

    # -- detection ---------------------------------------------------------------------------

    def detect(self) -> Detection:
        """Enumerate cards by processor handle and join each to its ROCm SMI index by bus id."""
        notes: list[str] = []
        amdsmi = self._amdsmi
        handles = list(self._amd(amdsmi.amdsmi_get_processor_handles))
        driver = ""
        if handles:
            info = quietly(self._amd, amdsmi.amdsmi_get_gpu_driver_info, handles[0])
            driver = _text(info.get("driver_version")) if isinstance(info, Mapping) else ""
        rocm = self._rocm_version()
        indices, rsmi_reason = self._rsmi_indices(notes)
        devices: list[DeviceInfo] = []
        cards: dict[str, _Card] = {}
        for position, handle in enumerate(handles):
            try:
                bus_id = normalize_bus_id(str(self._amd(amdsmi.amdsmi_get_gpu_device_bdf, handle)))
            except AmdCallError as failure:
                notes.append(f"processor {position}: no PCI bus id, so no id ({failure})")
                continue
            asic = quietly(self._amd, amdsmi.amdsmi_get_gpu_asic_info, handle)
            if not isinstance(asic, Mapping):
                asic = {}
            memory_mib = 0
            try:
                vram = self._amd(amdsmi.amdsmi_get_gpu_vram_usage, handle)
                total = _number(vram.get("vram_total"))
                memory_mib = 0 if total is None else int(total)
            except AmdCallError as failure:
                notes.append(f"{bus_id}: memory unreadable ({failure})")
            found = indices.get(bus_id, [])
            index, reason = None, rsmi_reason
            if len(found) == 1:
                index, reason = found[0], None
            elif found:
                # Partitions whose partition id sits in BDFID bits 31-28 share one address:
                # their processes cannot be told apart, which no later pass will change.
                reason = QueryReason.UNSUPPORTED
                notes.append(f"{bus_id}: ROCm SMI devices {found} share this address")
            elif reason is None:
                reason = QueryReason.TRANSIENT_DRIVER_ERROR
                notes.append(f"{bus_id}: not among ROCm SMI's devices")
            cards[bus_id] = _Card(handle, index, reason)
            devices.append(
                DeviceInfo(
                    id=bus_id,
                    index=position,
                    name=_text(asic.get("market_name")),
                    memory_mib=memory_mib,
                    cores=_whole(asic.get("num_compute_units")),
                    driver_version=driver,
                    runtime_version=rocm,
                    pci_bus_id=bus_id,
                    unhealthy=False,
                )
            )
        self._detected.remember(cards)
        return Detection(MANUFACTURER, tuple(devices), tuple(notes))

    def _rocm_version(self) -> str:
        """``amdsmi_get_rocm_version`` answers ``(ok, text)``, read from librocm-core."""
        try:
            ok, text = self._amd(self._amdsmi.amdsmi_get_rocm_version)
        except (AmdCallError, AttributeError, TypeError, ValueError):
            return ""
        return str(text) if ok else ""

    def _rsmi_indices(self, notes: list[str]) -> tuple[dict[str, list[int]], QueryReason | None]:
        """ROCm SMI's devices by bus id; a failure here leaves every card without processes."""
        indices: dict[str, list[int]] = {}
        try:
            rocm_smi = self._rocm_smi
            for index in range(int(self._rocm(rocm_smi.rsmi_num_monitor_devices))):
                address = pci_address(int(self._rocm(rocm_smi.rsmi_dev_pci_id_get, index)))
                indices.setdefault(normalize_bus_id(address), []).append(index)
        except AmdCallError as failure:
            notes.append(f"ROCm SMI devices unreadable ({failure})")
            return {}, failure.reason
        return indices, None

    # -- sampling ----------------------------------------------------------------------------

    def sample(self) -> list[CardSample]:
        """Whole-card figures from AMD SMI; a figure the card refuses or marks "N/A" is absent."""
        amdsmi = self._amdsmi
        samples: list[CardSample] = []
        for bus_id, card in self._detected.cards().items():
            total, used = 0, None
            vram = quietly(self._amd, amdsmi.amdsmi_get_gpu_vram_usage, card.handle)
            if isinstance(vram, Mapping):
                total = _whole(vram.get("vram_total")) or 0
                used = _whole(vram.get("vram_used"))
            activity = quietly(self._amd, amdsmi.amdsmi_get_gpu_activity, card.handle)
            temperature = quietly(
                self._amd,
                amdsmi.amdsmi_get_temp_metric,
                card.handle,
                amdsmi.AmdSmiTemperatureType.HOTSPOT,
                amdsmi.AmdSmiTemperatureMetric.CURRENT,
            )
            power = quietly(self._amd, amdsmi.amdsmi_get_power_info, card.handle)
            samples.append(
                CardSample(
                    id=bus_id,
                    memory_total_mib=total,
                    memory_used_mib=used,
                    cores_utilization_percent=(
                        _whole(activity.get("gfx_activity"))
                        if isinstance(activity, Mapping)
                        else None
                    ),
                    temperature_celsius=_whole(temperature),
                    power_watts=_power_watts(power),
                    unhealthy=False,
                )
            )
        return samples

    # -- processes ---------------------------------------------------------------------------

    def processes(self, device_ids: Sequence[str]) -> dict[str, DeviceProcesses]:
        """ROCm SMI's rows for the requested cards, from a process list at most 1 s old.

        A card whose GFX revision does not measure ``cu_occupancy`` answers the invalidation
        sentinel for every process: compute is then absent for the whole card, with its reason,
        and memory is unaffected. It is never a zero, which would read as idle, and never a sum
        over the rows that did measure it.
        """
        cards = self._detected.cards()
        result: dict[str, DeviceProcesses] = {}
        with self._lock:
            listed = self._current_list()
            for device_id in device_ids:
                card = cards.get(device_id)
                if card is None or card.rsmi_index is None or listed.failure is not None:
                    reason = _unread_reason(card, listed)
                    result[device_id] = DeviceProcesses.unread(device_id, reason)
                    continue
                rows = listed.rows.get(card.rsmi_index)
                if rows is None:
                    rows = device_rows(
                        self._rocm, self._rocm_smi, listed.devices_of, card.rsmi_index
                    )
                    listed.rows[card.rsmi_index] = rows
                result[device_id] = DeviceProcesses(
                    device_id,
                    rows=rows.rows,
                    memory_reason=rows.memory_reason,
                    cores_reason=rows.cores_reason,
                )
        return result

    def _current_list(self) -> _ProcessList:
        """The last list if it is under 1 s old (AMD's minimum between calls), else a new one.

        Reusing rather than sleeping keeps a Device Manager pass from stalling; a failed call is
        reused too, since it was a call.
        """
        now = self._clock()
        previous = self._process_list
        if previous is not None and 0 <= now - previous.taken < PROCESS_LIST_INTERVAL_S:
            return previous
        listed = _ProcessList(taken=now)
        self._process_list = listed
        found = process_devices(self._rocm, self._rocm_smi)
        if isinstance(found, LibraryCallError):
            listed.failure = found
        else:
            listed.devices_of = found
        return listed

    # -- partitions --------------------------------------------------------------------------

    def partitions(self, partition_ids: Sequence[str]) -> dict[str, PartitionSample]:
        """AMD partitions are ordinary processor handles, detected and sampled as cards.

        So there is no partition sub-handle to read here; every id asked about is answered as
        unsupported rather than left out.
        """
        return unsupported_partitions(partition_ids)

    def close(self) -> None:
        """Shut both libraries down, AMD SMI first (the reverse of init); errors change nothing."""
        quietly(self._amd, self._amdsmi.amdsmi_shut_down)
        quietly(self._rocm, self._rocm_smi.rsmi_shut_down)


def _unread_reason(card: _Card | None, listed: _ProcessList) -> QueryReason:
    """Why a requested device has no rows: unknown here, unjoined, or the list failed."""
    if card is None:
        return QueryReason.TRANSIENT_DRIVER_ERROR
    if card.rsmi_index is None:
        return card.rsmi_reason or QueryReason.TRANSIENT_DRIVER_ERROR
    if listed.failure is not None:
        return listed.failure.reason
    return QueryReason.TRANSIENT_DRIVER_ERROR


def _number(value: object) -> int | float | None:
    """A figure as amdsmi returns it: a number, or ``"N/A"`` (absent).

    Checked at run time all the same: amdsmi's dicts are untyped C answers, and a float or a
    ``bool`` (never a figure) is what a binding revision may hand back.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def _whole(value: int | NotAvailable | None) -> int | None:
    number = _number(value)
    return None if number is None else int(number)


def _text(value: str | None) -> str:
    return "" if value is None or value == NOT_AVAILABLE else str(value)


def _power_watts(info: AmdPowerInfo | None) -> float | None:
    """The first power figure the card fills in, in W; sentinels and "N/A" are skipped."""
    if not isinstance(info, Mapping):
        return None
    for key in _POWER_KEYS:
        value = _number(info.get(key))
        if value is not None and value not in _POWER_SENTINELS:
            return float(value)
    return None
