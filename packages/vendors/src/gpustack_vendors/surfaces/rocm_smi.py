"""What every backend over ROCm SMI calls on it: init, device enumeration, the process join.

AMD's and Hygon's surfaces extend :class:`RocmSmiSurface`; the types are our binding's
(:mod:`gpustack_vendors.bindings.rocm_smi`).
"""

from __future__ import annotations

from typing import Protocol

from gpustack_vendors.bindings.rocm_smi import rsmi_process_info_t


class RocmSmiSurface(Protocol):
    """The ROCm SMI calls :mod:`gpustack_vendors.rocm_common` and both backends make."""

    def rsmi_init(self, flags: int = ...) -> None: ...
    def rsmi_shut_down(self) -> None: ...
    def rsmi_num_monitor_devices(self) -> int: ...
    def rsmi_dev_pci_id_get(self, dv_ind: int) -> int:
        """The packed BDFID (:func:`~gpustack_vendors.bindings.rocm_smi.pci_address`)."""
        ...

    def rsmi_compute_process_info_get(self) -> list[rsmi_process_info_t]: ...
    def rsmi_compute_process_gpus_get(self, pid: int) -> list[int]: ...
    def rsmi_compute_process_info_by_device_get(
        self, pid: int, dv_ind: int
    ) -> rsmi_process_info_t: ...
