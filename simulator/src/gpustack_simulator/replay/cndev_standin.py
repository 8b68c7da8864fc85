"""CNDev replay: our real binding, over a fake C library that answers from a recording.

Like ROCm SMI, the CNDev binding is ours, and its riskiest code (version stamping, the
``INSUFFICIENT_SPACE`` loop of the process lists) sits below its Python surface. So
:func:`build_binding` hands back a real :class:`~gpustack_vendors.cambricon.cndev.Cndev` whose
library is a :class:`~gpustack_simulator.replay.cndev_lib.FakeCndevLib` asking the replayer.
Recordings hold what the binding's methods returned, recorded through :func:`as_module`; every
versioned call carries its struct version as its last argument.

Fixed-size arrays inside a struct (``coreUtilization[80]``, ``reserved[16]``) are recorded up to
their last non-zero element; replay rebuilds the rest as zeros, so nothing is lost and a
recording stays readable.
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
from gpustack_simulator.replay.cndev_lib import FakeCndevLib
from gpustack_simulator.replay.engine import Clock, Replayer
from gpustack_vendors.cambricon import cndev
from gpustack_vendors.cambricon.cndev import CNDEV_ERROR_FUNCTION_NOT_FOUND, Cndev, CNDevError

LIBRARY_ID = "cndev"

FUNCTIONS: Final = (
    "cndevInit",
    "cndevRelease",
    "cndevGetDeviceCount",
    "cndevGetDeviceHandleByIndex",
    "cndevGetUUID",
    "cndevGetCardNameStringByDevId",
    "cndevGetPCIeInfoV2",
    "cndevGetMemoryUsageV2",
    "cndevGetVersionInfo",
    "cndevGetCardHealthState",
    "cndevGetDeviceUtilizationInfo",
    "cndevGetTemperatureInfo",
    "cndevGetDevicePowerInfo",
    "cndevGetProcessInfo",
    "cndevGetProcessUtilization",
)
"""The binding's methods, which are also the C symbols the fake library answers."""


class CndevCodec(BindingCodec):
    """CNDev's values: structs and ints; device handles are plain ``int32`` values."""

    library_id = LIBRARY_ID
    init_functions = frozenset({"cndevInit"})
    label = "CNDev"
    structs = struct_table(
        cndev.cndevCardInfo_t,
        cndev.cndevUUID_t,
        cndev.cndevPCIeInfoV2_t,
        cndev.cndevMemoryInfoV2_t,
        cndev.cndevVersionInfo_t,
        cndev.cndevCardHealthState_t,
        cndev.cndevUtilizationInfo_t,
        cndev.cndevTemperatureInfo_t,
        cndev.cndevDevicePowerInfo_t,
        cndev.cndevProcessInfo_t,
        cndev.cndevProcessUtilization_t,
    )
    error_type = CNDevError
    not_found_code = CNDEV_ERROR_FUNCTION_NOT_FOUND
    trim_tails = True
    no_handles = "CNDev handles are plain ints"


def build_binding(recording: Recording, *, clock: Clock | None = None) -> Cndev:
    """Our real CNDev binding over a fake library whose answers come from ``recording``."""
    replayer = Replayer(recording, CndevCodec(), clock=clock)
    return Cndev(FakeCndevLib(ReplayAnswer(replayer)))


def replayer_of(binding: Cndev) -> Replayer:
    """The replayer behind a binding made by :func:`build_binding`."""
    return replayer_behind(binding.lib, FakeCndevLib, "CNDev")


def as_module(binding: Cndev) -> types.ModuleType:
    """The binding's methods as a module, the shape the recorder's proxy wraps."""
    return binding_module(binding, "cndev", "CNDev binding methods", FUNCTIONS, CNDevError)
