"""NVML's calls as the shared NVML-shaped reading makes them, under one library's names.

:mod:`gpustack_vendors.nvml_shaped` reads NVML and its clones (T-Head's HGML, Iluvatar's IXML)
with one code; each library spells the calls its own way (``nvmlDeviceGetMemoryInfo``,
``hgmlDeviceGetMemoryInfo``). So the shared code is handed a table of the library's bound
functions, which each vendor's backend writes over its own surface, one property per call
(``return self._lib.hgmlDeviceGetMemoryInfo``):

- the function is looked up on the binding when it is called, as a call by name was;
- its ``__name__`` is the library's own, so an error names the function as before;
- mypy checks each vendor's function against the NVML call made here: its arguments, and that
  its answer has the attributes the shared code reads (NVML's answers are stated in
  :mod:`gpustack_vendors.nvidia.surface`; the clones' structs must carry the same fields).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from gpustack_vendors.nvidia.surface import (
    NvmlMemory,
    NvmlPciInfo,
    NvmlProcessInfo,
    NvmlProcessUtilizationSample,
    NvmlUtilization,
)

_H = TypeVar("_H")
"""The library's device handle: opaque (``object``) for NVML and HGML, IXML's ``ixmlDevice_t``."""
_H_contra = TypeVar("_H_contra", contravariant=True)


class NvmlCards(Protocol[_H_contra]):
    """NVML's whole-card calls as one library spells them: each property is its bound function."""

    @property
    def device_get_memory_info(self) -> Callable[[_H_contra], NvmlMemory]: ...
    @property
    def device_get_utilization_rates(self) -> Callable[[_H_contra], NvmlUtilization]: ...
    @property
    def device_get_temperature(self) -> Callable[[_H_contra, int], int]: ...
    @property
    def device_get_power_usage(self) -> Callable[[_H_contra], int]:
        """Milliwatts."""
        ...

    @property
    def shutdown(self) -> Callable[[], None]: ...


class NvmlMig(NvmlCards[_H], Protocol[_H]):
    """NVML's enumeration, MIG and per-process calls as one library spells them."""

    @property
    def system_get_driver_version(self) -> Callable[[], str]: ...
    @property
    def system_get_runtime_version(self) -> Callable[[], int]:
        """The runtime's version encoded as CUDA's (12.4 is 12040): NVML's CUDA driver version."""
        ...

    @property
    def device_get_count(self) -> Callable[[], int]: ...
    @property
    def device_get_handle_by_index(self) -> Callable[[int], _H]: ...
    @property
    def device_get_uuid(self) -> Callable[[_H], str]: ...
    @property
    def device_get_name(self) -> Callable[[_H], str]: ...
    @property
    def device_get_num_gpu_cores(self) -> Callable[[_H], int]: ...
    @property
    def device_get_pci_info(self) -> Callable[[_H], NvmlPciInfo]: ...
    @property
    def device_get_compute_capability(self) -> Callable[[_H], tuple[int, int]] | None:
        """NVML's CUDA ``(major, minor)``; ``None`` for a library without that figure."""
        ...

    @property
    def device_get_mig_mode(self) -> Callable[[_H], Sequence[int]]:
        """``[current, pending]``."""
        ...

    @property
    def device_get_max_mig_device_count(self) -> Callable[[_H], int]: ...
    @property
    def device_get_mig_device_handle_by_index(self) -> Callable[[_H, int], _H]: ...
    @property
    def device_get_compute_running_processes(self) -> Callable[[_H], Sequence[NvmlProcessInfo]]: ...
    @property
    def device_get_process_utilization(
        self,
    ) -> Callable[[_H, int], Sequence[NvmlProcessUtilizationSample]]:
        """Samples newer than the second argument (``lastSeenTimeStamp``)."""
        ...
