"""T-Head PPU backend over our HGML binding (``gpustack_vendors.thead.hgml``, or its replay).

HGML is an NVML clone, so this reads as the NVIDIA backend does, through the same
:mod:`gpustack_vendors.nvml_shaped` code: memory in bytes and power in
mW, converted here once; MIG partitions read on their **own** handles, never by folding the
parent card's figures; ``index`` is the enumeration index (``hgmlDeviceGetMinorNumber`` is not:
on a sampled 16-card host it ran one ahead).

**Per-process compute.** The versioned ``hgmlDeviceGetProcessesUtilizationInfo`` is exported but
is a stub answering ``NOT_SUPPORTED`` on the PPU hosts measured; the plain
``hgmlDeviceGetProcessUtilization`` answers. So the versioned call is asked first and, only when
the entry point itself refuses (``NOT_SUPPORTED``, or the symbol is missing), the plain one is —
a driver that implements the versioned call is read through it unchanged. Either one answering
``NOT_FOUND`` means no sample since ``lastSeenTimeStamp``: every listed process is idle, a
measured 0 %, not an absence.

**Partitions** report memory only: no HGML call measures a MIG instance's compute (spec,
"Manufacturer capabilities": T-Head "— MIG partition").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpustack_vendors.nvml_shaped import (
    MigDialect,
    NvmlMigBackend,
    NvmlShapedCallError,
    sized_or_none,
)
from gpustack_vendors.thead import hgml as h
from gpustack_vendors.thead.hgml import HGMLError
from gpustack_vendors.thead.surface import HgmlSurface

MANUFACTURER = "thead"

_VERSIONED_REFUSED = frozenset({h.HGML_ERROR_NOT_SUPPORTED, h.HGML_ERROR_FUNCTION_NOT_FOUND})
"""Answers of the versioned process-utilization call that mean "ask the plain one"."""

HGML = MigDialect(
    prefix="hgml",
    temperature_gpu=h.HGML_TEMPERATURE_GPU,
    not_found=h.HGML_ERROR_NOT_FOUND,
    mig_enabled=h.HGML_DEVICE_MIG_ENABLE,
    runtime_version_fn="hgmlSystemGetHggcDriverVersion",  # HGGC's, encoded as CUDA's
    bus_id=h.bus_id,
    process_memory=lambda proc: sized_or_none(
        proc.usedGpuMemory, h.HGML_VALUE_NOT_AVAILABLE_ULONGLONG
    ),
)
"""How HGML spells NVML: its own prefix and constants, HGGC's version where NVML has CUDA's."""


class HgmlCallError(NvmlShapedCallError):
    """A call failed; HGML's return codes are NVML's numbers, so NVML's table maps them."""

    library = "HGML"

    @staticmethod
    def detail(code: int) -> str:
        """The binding's name for the code."""
        return f" ({h.status_name(code)})"


class TheadBackend(NvmlMigBackend[HgmlSurface]):
    """Answers the Device Manager's questions through an HGML binding it is handed."""

    manufacturer = MANUFACTURER
    call_error = HgmlCallError
    binding_error = HGMLError

    def __init__(self, hgml: HgmlSurface) -> None:
        super().__init__(hgml, HGML)
        self._call("hgmlInit")

    def _mig_identity(self, mig: Any) -> tuple[str, str]:
        """A partition's UUID and name, read on its own handle (the UUID first)."""
        uuid = str(self._call("hgmlDeviceGetUUID", mig))
        return uuid, str(self._call("hgmlDeviceGetName", mig))

    def _utilization(self, handle: Any) -> Sequence[Any]:
        """The versioned call, or the plain one when the versioned entry point refuses."""
        try:
            return list(self._call("hgmlDeviceGetProcessesUtilizationInfo", handle, 0))
        except HgmlCallError as failure:
            if failure.code not in _VERSIONED_REFUSED:
                raise
        return list(self._call("hgmlDeviceGetProcessUtilization", handle, 0))
