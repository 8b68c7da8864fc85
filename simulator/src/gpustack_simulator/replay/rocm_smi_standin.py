"""ROCm SMI replay: our real binding, over a fake C library that answers from a recording.

Unlike pynvml and amdsmi, ROCm SMI's binding is ours, and its riskiest code is the C-level size
negotiation (probe with NULL, fill, re-probe when the list grew). Replaying at the binding's
Python surface would skip that code, so :func:`build_binding` hands back a real
:class:`~gpustack_vendors.bindings.rocm_smi.RocmSmi` whose library is a
:class:`~gpustack_simulator.replay.rocm_smi_lib.FakeRocmSmiLib` asking the replayer. Recordings
still hold what the binding's methods returned (``rsmi_process_info_t`` rows with every field,
device index lists, BDFIDs), recorded through :func:`as_module`.
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
from gpustack_simulator.replay.rocm_smi_lib import FakeRocmSmiLib
from gpustack_vendors.bindings import rocm_smi
from gpustack_vendors.bindings.rocm_smi import RocmSmi, ROCMSMIError

LIBRARY_ID = "rocm_smi"

FUNCTIONS: Final = (
    "rsmi_init",
    "rsmi_shut_down",
    "rsmi_num_monitor_devices",
    "rsmi_dev_pci_id_get",
    "rsmi_compute_process_info_get",
    "rsmi_compute_process_gpus_get",
    "rsmi_compute_process_info_by_device_get",
)
"""The binding's methods, which are also the C symbols the fake library answers."""


class RocmSmiCodec(BindingCodec):
    """ROCm SMI's values: ``rsmi_process_info_t`` structs and ints; devices are plain indices.

    Sentinels (``cu_occupancy`` 0xFFFFFFFF) are recorded raw.
    """

    library_id = LIBRARY_ID
    init_functions = frozenset({"rsmi_init"})
    label = "ROCm SMI"
    structs = struct_table(rocm_smi.rsmi_process_info_t)
    error_type = ROCMSMIError
    not_found_code = rocm_smi.RSMI_STATUS_FAIL_LOAD_SYMBOL
    no_handles = "ROCm SMI has no handles"


def build_binding(recording: Recording, *, clock: Clock | None = None) -> RocmSmi:
    """Our real ROCm SMI binding over a fake library whose answers come from ``recording``.

    :func:`replayer_of` reaches the replayer; ``binding.lib.calls`` logs every C call, probes
    included, which is how a test counts the calls a backend really made.
    """
    codec = RocmSmiCodec()
    replayer = Replayer(recording, codec, clock=clock)
    return RocmSmi(FakeRocmSmiLib(ReplayAnswer(replayer)))


def replayer_of(binding: RocmSmi) -> Replayer:
    """The replayer behind a binding made by :func:`build_binding`."""
    return replayer_behind(binding.lib, FakeRocmSmiLib, "ROCm SMI")


def as_module(binding: RocmSmi) -> types.ModuleType:
    """The binding's methods as a module, the shape the recorder's proxy wraps."""
    return binding_module(binding, "rocm_smi", "ROCm SMI binding methods", FUNCTIONS, ROCMSMIError)
