"""MXSML replay: our real binding, over a fake C library that answers from a recording.

The MXSML binding is ours, and its riskiest code (the per-call size conventions, the full-buffer
retry of the process list) sits below its Python surface. So :func:`build_binding` hands back a
real :class:`~gpustack_vendors.metax.mxsml.Mxsml` whose library is a
:class:`~gpustack_simulator.replay.mxsml_lib.FakeMxsmlLib` asking the replayer. Recordings hold
what the binding's methods returned, recorded through :func:`as_module`; devices are indices.

Fixed-size arrays inside a struct (a process's ``processGpuInfo[64]``) are recorded up to
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
from gpustack_simulator.replay.engine import Clock, Replayer
from gpustack_simulator.replay.mxsml_lib import FakeMxsmlLib, Truncation
from gpustack_vendors.metax import mxsml
from gpustack_vendors.metax.mxsml import MXSML_ERROR_FUNCTION_NOT_FOUND, Mxsml, MXSMLError

LIBRARY_ID = "mxsml"

FUNCTIONS: Final = (
    "mxSmlInit",
    "mxSmlGetDeviceCount",
    "mxSmlGetMacaVersion",
    "mxSmlGetDeviceVersion",
    "mxSmlGetDeviceInfo",
    "mxSmlGetMemoryInfo",
    "mxSmlGetDeviceIpUsage",
    "mxSmlGetTemperatureInfo",
    "mxSmlGetBoardPowerInfo",
    "mxSmlGetSingleGpuProcess_v3",
)
"""The binding's methods, which are also the C symbols the fake library answers."""


class MxsmlCodec(BindingCodec):
    """MXSML's values: structs, ints and strings; devices are plain indices."""

    library_id = LIBRARY_ID
    init_functions = frozenset({"mxSmlInit"})
    label = "MXSML"
    structs = struct_table(
        mxsml.mxSmlDeviceInfo_t,
        mxsml.mxSmlMemoryInfo_t,
        mxsml.mxSmlBoardWayElectricInfo_t,
        mxsml.mxSmlProcessGpuInfo_v3_t,
        mxsml.mxSmlProcessInfo_v3_t,
    )
    error_type = MXSMLError
    not_found_code = MXSML_ERROR_FUNCTION_NOT_FOUND
    trim_tails = True
    no_handles = "MXSML has no handles"


def build_binding(
    recording: Recording, *, clock: Clock | None = None, truncation: Truncation = "silent"
) -> Mxsml:
    """Our real MXSML binding over a fake library whose answers come from ``recording``."""
    replayer = Replayer(recording, MxsmlCodec(), clock=clock)
    return Mxsml(FakeMxsmlLib(ReplayAnswer(replayer), truncation=truncation))


def replayer_of(binding: Mxsml) -> Replayer:
    """The replayer behind a binding made by :func:`build_binding`."""
    return replayer_behind(binding.lib, FakeMxsmlLib, "MXSML")


def as_module(binding: Mxsml) -> types.ModuleType:
    """The binding's methods as a module, the shape the recorder's proxy wraps."""
    return binding_module(binding, "mxsml", "MXSML binding methods", FUNCTIONS, MXSMLError)
