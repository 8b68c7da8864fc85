"""What the AMD and Hygon backends share: their call error, typed calls, ROCm SMI's process rows.

Both backends hold two libraries (AMD SMI or ``libhydmi_mig`` beside ROCm SMI), each failing
with its own exception, so they cannot share one :class:`~gpustack_vendors.calling.CallError`
table; they share :class:`LibraryCallError`, which names the library in its message. As in
:mod:`gpustack_vendors.calling`, a call is made through the bound surface function itself
(``rocm(binding.rsmi_num_monitor_devices)``), never by a name looked up at run time, so the
surface's argument and return types reach the backend and mypy checks each call; the failure is
named by ``fn.__name__`` (the library's own name on every binding a backend is handed).

A process's memory (``vram_usage``) is bytes and stays bytes; its compute (``cu_occupancy``) is
the share of the card's CUs its waves occupy, which a driver may not measure at all: then every
process on the card answers ``CU_OCCUPANCY_INVALID`` and compute is absent for the whole card
with reason ``unsupported``, memory unaffected (never a zero, which would read as idle).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple, ParamSpec, Protocol, TypeVar

from gpustack_core.reasons import QueryReason
from gpustack_vendors import errors
from gpustack_vendors.bindings.rocm_smi import (
    CU_OCCUPANCY_INVALID,
    RSMI_STATUS_NOT_FOUND,
    ROCMSMIError,
)
from gpustack_vendors.model import ProcessRow
from gpustack_vendors.surfaces.rocm_smi import RocmSmiSurface

_P = ParamSpec("_P")
_R = TypeVar("_R")


class LibraryCallError(Exception):
    """A call into one of a backend's libraries failed; carries the numeric code and its reason."""

    def __init__(self, library: str, fn: str, code: int, table: Mapping[int, QueryReason]) -> None:
        super().__init__(f"{fn}: {library} error {code}")
        self.library = library
        self.fn = fn
        self.code = code
        self.reason = errors.reason(table, code)


class LibraryCall(Protocol):
    """A backend's call into one library: ``fn(*args)``, its failure a :class:`LibraryCallError`.

    Generic over the called function, so ``rocm(binding.rsmi_dev_pci_id_get, index)`` is typed
    as ``rsmi_dev_pci_id_get`` is on the surface.
    """

    def __call__(self, fn: Callable[_P, _R], /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """``fn(*args)``; a failure of the library ``fn`` belongs to is a LibraryCallError."""
        ...


def call_rocm_smi(
    error: type[LibraryCallError], fn: Callable[_P, _R], /, *args: _P.args, **kwargs: _P.kwargs
) -> _R:
    """``fn(*args)``; a ROCm SMI failure becomes ``error``, read by ROCm SMI's table."""
    try:
        return fn(*args, **kwargs)
    except ROCMSMIError as exc:
        raise error("ROCm SMI", fn.__name__, int(exc.value), errors.ROCM_SMI) from exc


def quietly(
    call: LibraryCall, fn: Callable[_P, _R], /, *args: _P.args, **kwargs: _P.kwargs
) -> _R | None:
    """A figure the card may not serve: absent (``None``) rather than fatal to the pass."""
    try:
        return call(fn, *args, **kwargs)
    except LibraryCallError:
        return None


class Rows(NamedTuple):
    """One device's rows and, per figure, why it is unmeasured."""

    rows: tuple[ProcessRow, ...] = ()
    memory_reason: QueryReason | None = None
    cores_reason: QueryReason | None = None


def process_devices(
    rocm: LibraryCall, binding: RocmSmiSurface
) -> dict[int, tuple[int, ...]] | LibraryCallError:
    """Every compute process and the device indices it uses, or why that is unknown."""
    try:
        processes = rocm(binding.rsmi_compute_process_info_get)
    except LibraryCallError as failure:
        return failure
    devices_of: dict[int, tuple[int, ...]] = {}
    for info in processes:
        pid = int(info.process_id)
        try:
            devices_of[pid] = tuple(
                int(i) for i in rocm(binding.rsmi_compute_process_gpus_get, pid)
            )
        except LibraryCallError as failure:
            if failure.code == RSMI_STATUS_NOT_FOUND:
                continue  # exited since the list was read
            # A process whose devices are unknown could be on any card: every card's sum
            # would be short, so none is published.
            return failure
    return devices_of


def device_rows(
    rocm: LibraryCall,
    binding: RocmSmiSurface,
    devices_of: Mapping[int, tuple[int, ...]],
    index: int,
) -> Rows:
    """The rows of the device at ROCm SMI ``index``, each read for that device."""
    read: list[tuple[int, int, int]] = []
    for pid, indices in devices_of.items():
        if index not in indices:
            continue
        try:
            info = rocm(binding.rsmi_compute_process_info_by_device_get, pid, index)
        except LibraryCallError as failure:
            if failure.code == RSMI_STATUS_NOT_FOUND:
                continue  # exited between the list and this read
            # One unreadable row would make the card's sum short: neither figure is sent.
            return Rows(memory_reason=failure.reason, cores_reason=failure.reason)
        read.append((pid, int(info.vram_usage), int(info.cu_occupancy)))
    unmeasured = any(cu == CU_OCCUPANCY_INVALID for _, _, cu in read)
    rows = tuple(
        ProcessRow(pid=pid, memory_bytes=vram, cores_percent=None if unmeasured else cu)
        for pid, vram, cu in read
    )
    return Rows(rows, cores_reason=QueryReason.UNSUPPORTED if unmeasured else None)
