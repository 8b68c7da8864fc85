"""The AMD backend's surfaces: the ``amdsmi`` calls it makes, and ROCm SMI's.

amdsmi ships no type information: its answers are dicts whose sentinels are already the string
``"N/A"``, stated here as TypedDicts of the keys the backend reads (every value may be ``"N/A"``).
Processor handles (``c_void_p``) are opaque; the enums are read by member name. Parameter names
are amdsmi's own.
"""

from __future__ import annotations

from typing import Protocol, TypedDict

from gpustack_vendors.surfaces.rocm_smi import RocmSmiSurface

NotAvailable = str
"""amdsmi's ``"N/A"``, in place of any figure."""


class AmdDriverInfo(TypedDict, total=False):
    """``amdsmi_get_gpu_driver_info``: what the backend reads of it."""

    driver_version: str


class AmdAsicInfo(TypedDict, total=False):
    """``amdsmi_get_gpu_asic_info``: what the backend reads of it."""

    market_name: str
    num_compute_units: int | NotAvailable


class AmdVramUsage(TypedDict, total=False):
    """MiB (labelled MB in ``amdsmi.h``)."""

    vram_total: int | NotAvailable
    vram_used: int | NotAvailable


class AmdActivity(TypedDict, total=False):
    """``amdsmi_get_gpu_activity``: percent."""

    gfx_activity: int | NotAvailable


class AmdPowerInfo(TypedDict, total=False):
    """W; a card fills in one of them."""

    socket_power: int | NotAvailable
    current_socket_power: int | NotAvailable
    average_socket_power: int | NotAvailable


class AmdInitFlags(Protocol):
    """``AmdSmiInitFlags``: the member the backend passes to ``amdsmi_init``."""

    @property
    def INIT_AMD_GPUS(self) -> int: ...


class AmdTemperatureType(Protocol):
    """``AmdSmiTemperatureType``."""

    @property
    def HOTSPOT(self) -> int: ...


class AmdTemperatureMetric(Protocol):
    """``AmdSmiTemperatureMetric``."""

    @property
    def CURRENT(self) -> int: ...


class AmdSmiSurface(Protocol):
    """What :class:`~gpustack_vendors.amd.AmdBackend` calls on ``amdsmi``."""

    @property
    def AmdSmiInitFlags(self) -> AmdInitFlags: ...
    @property
    def AmdSmiTemperatureType(self) -> AmdTemperatureType: ...
    @property
    def AmdSmiTemperatureMetric(self) -> AmdTemperatureMetric: ...
    @property
    def AmdSmiLibraryException(self) -> type[Exception]:
        """The class a failing call raises; its ``err_code`` is the status."""
        ...

    def amdsmi_init(self, flag: int = ...) -> None: ...
    def amdsmi_shut_down(self) -> None: ...
    def amdsmi_get_processor_handles(self) -> list[object]: ...
    def amdsmi_get_rocm_version(self) -> tuple[bool, str]: ...
    def amdsmi_get_gpu_driver_info(self, processor_handle: object) -> AmdDriverInfo: ...
    def amdsmi_get_gpu_device_bdf(self, processor_handle: object) -> str: ...
    def amdsmi_get_gpu_asic_info(self, processor_handle: object) -> AmdAsicInfo: ...
    def amdsmi_get_gpu_vram_usage(self, processor_handle: object) -> AmdVramUsage: ...
    def amdsmi_get_gpu_activity(self, processor_handle: object) -> AmdActivity: ...
    def amdsmi_get_temp_metric(
        self, processor_handle: object, sensor_type: int, metric: int
    ) -> int | NotAvailable: ...
    def amdsmi_get_power_info(self, processor_handle: object) -> AmdPowerInfo: ...


class AmdRocmSmiSurface(RocmSmiSurface, Protocol):
    """What the AMD backend calls on ROCm SMI: only the common part (enumeration, processes)."""
