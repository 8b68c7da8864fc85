"""DCMI replay: our real binding, over a fake C library that answers from a recording.

Like ROCm SMI's, the DCMI binding is ours and its riskiest code is at the C level (the process
list's output-only count and the binding's guard tail), so :func:`build_binding` hands back a
real :class:`~gpustack_vendors.ascend.dcmi.Dcmi` whose library is a
:class:`~gpustack_simulator.replay.dcmi_lib.FakeDcmiLib` asking the replayer. Recordings hold
what the binding's methods returned (structs with every field, ``(card, device)`` ints as
arguments — DCMI has no handles), recorded through :func:`as_module`.
"""

from __future__ import annotations

import types
from typing import Final

from gpustack_simulator.recording import Recording
from gpustack_simulator.replay.binding_standin import (
    BindingCodec,
    ReplayAnswer,
    binding_module,
    replayer_behind,
    struct_table,
)
from gpustack_simulator.replay.dcmi_lib import FakeDcmiLib
from gpustack_simulator.replay.engine import Clock, Replayer
from gpustack_vendors.ascend import dcmi
from gpustack_vendors.ascend.dcmi import Dcmi, DCMIError

LIBRARY_ID = "dcmi"

FUNCTIONS: Final = (
    "dcmi_init",
    "dcmi_get_driver_version",
    "dcmi_get_card_list",
    "dcmi_get_device_num_in_card",
    "dcmi_get_device_type",
    "dcmi_get_device_logic_id",
    "dcmi_get_device_die_v2",
    "dcmi_get_device_die",
    "dcmi_get_device_chip_info_v2",
    "dcmi_get_device_pcie_info_v2",
    "dcmi_get_device_health",
    "dcmi_get_device_hbm_info",
    "dcmi_get_device_memory_info_v3",
    "dcmi_get_device_utilization_rate",
    "dcmi_get_device_temperature",
    "dcmi_get_device_power_info",
    "dcmi_get_device_resource_info",
    "dcmi_get_vdev_total_resource",
    "dcmi_get_vdev_resource",
)
"""The binding's methods; the fake library answers each from the C symbol behind it."""


class DcmiCodec(BindingCodec):
    """DCMI's values: ctypes structs (nested for vNPUs), ints and strings; no handles."""

    library_id = LIBRARY_ID
    init_functions = frozenset({"dcmi_init"})
    label = "DCMI"
    structs = struct_table(
        dcmi.dcmi_chip_info_v2,
        dcmi.dcmi_pcie_info_all,
        dcmi.dcmi_die_id,
        dcmi.dcmi_hbm_info,
        dcmi.dcmi_get_memory_info_stru,
        dcmi.dcmi_proc_mem_info,
        dcmi.dcmi_base_resource,
        dcmi.dcmi_computing_resource,
        dcmi.dcmi_media_resource,
        dcmi.dcmi_vdev_query_info,
        dcmi.dcmi_vdev_query_stru,
        dcmi.dcmi_soc_total_resource,
    )
    error_type = DCMIError
    not_found_code = dcmi.DCMI_ERROR_FUNCTION_NOT_FOUND
    no_handles = "DCMI has no handles"


def build_binding(recording: Recording, *, clock: Clock | None = None) -> Dcmi:
    """Our real DCMI binding over a fake library whose answers come from ``recording``."""
    replayer = Replayer(recording, DcmiCodec(), clock=clock)
    return Dcmi(FakeDcmiLib(ReplayAnswer(replayer)))


def replayer_of(binding: Dcmi) -> Replayer:
    """The replayer behind a binding made by :func:`build_binding`."""
    return replayer_behind(binding.lib, FakeDcmiLib, "DCMI")


def as_module(binding: Dcmi) -> types.ModuleType:
    """The binding's methods as a module, the shape the recorder's proxy wraps."""
    return binding_module(binding, "dcmi", "DCMI binding methods", FUNCTIONS, DCMIError)
