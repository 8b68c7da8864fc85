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

import ctypes
import types
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Final

from gpustack_simulator.recording import Raises, Recording, RowFilter
from gpustack_simulator.replay.codec import HandleRef, encode_ctypes, fill_struct
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

_STRUCTS: Final[Mapping[str, type[ctypes.Structure]]] = {
    "rsmi_process_info_t": rocm_smi.rsmi_process_info_t,
}


class RocmSmiCodec:
    """ROCm SMI's values: ``rsmi_process_info_t`` structs and ints; devices are plain indices."""

    library_id = LIBRARY_ID
    init_functions = frozenset({"rsmi_init"})
    filters: Mapping[str, RowFilter] = {}

    def encode(self, value: object, handle_ref: HandleRef) -> Any:
        """Structs with every field, sentinels (``cu_occupancy`` 0xFFFFFFFF) kept raw."""
        return encode_ctypes(value, handle_ref, self)

    def build(self, type_name: str, fields: Mapping[str, Any]) -> object:
        """Rebuild with the binding's own struct class."""
        cls = _STRUCTS.get(type_name)
        if cls is None:
            raise KeyError(f"ROCm SMI binding has no struct {type_name!r}")
        struct = cls()
        fill_struct(struct, fields, self)
        return struct

    def error(self, raises: Raises) -> BaseException:
        """``ROCMSMIError(status)``: the fake library turns it back into the returned status."""
        return ROCMSMIError(raises.code)

    def describe_error(self, exc: BaseException) -> Raises | None:
        """Only ``ROCMSMIError`` is the binding's; ``.value`` is the status."""
        if isinstance(exc, ROCMSMIError):
            return Raises(type=type(exc).__name__, code=int(exc.value))
        return None

    def missing(self, fn: str) -> BaseException:
        """``FAIL_LOAD_SYMBOL``: the binding's own code for a symbol the library lacks."""
        return ROCMSMIError(rocm_smi.RSMI_STATUS_FAIL_LOAD_SYMBOL, fn)

    def is_handle(self, value: object) -> bool:
        """ROCm SMI names devices by index; nothing it returns is a handle."""
        return False

    def handle_key(self, handle: object) -> Hashable:
        """Never called: ROCm SMI has no handles."""
        raise TypeError("ROCm SMI has no handles")

    def make_handle(self, ref: str) -> object:
        """Never called: ROCm SMI has no handles."""
        raise TypeError(f"ROCm SMI has no handles (asked for {ref!r})")

    def name_handle(self, fn: str, args: Sequence[Any], position: int | None) -> str:
        """Never called: ROCm SMI has no handles."""
        raise TypeError("ROCm SMI has no handles")


def build_binding(recording: Recording, *, clock: Clock | None = None) -> RocmSmi:
    """Our real ROCm SMI binding over a fake library whose answers come from ``recording``.

    :func:`replayer_of` reaches the replayer; ``binding.lib.calls`` logs every C call, probes
    included, which is how a test counts the calls a backend really made.
    """
    codec = RocmSmiCodec()
    replayer = Replayer(recording, codec, clock=clock)
    return RocmSmi(FakeRocmSmiLib(_Answer(replayer)))


class _Answer:
    """``FakeRocmSmiLib``'s callback: one replayed call per C call."""

    def __init__(self, replayer: Replayer) -> None:
        self.replayer = replayer

    def __call__(self, name: str, args: tuple[object, ...]) -> object:
        return self.replayer.invoke(name, args, {})


def replayer_of(binding: RocmSmi) -> Replayer:
    """The replayer behind a binding made by :func:`build_binding`."""
    lib = binding.lib
    if not isinstance(lib, FakeRocmSmiLib) or not isinstance(lib.answer, _Answer):
        raise TypeError("not a replayed ROCm SMI binding")
    return lib.answer.replayer


def as_module(binding: RocmSmi) -> types.ModuleType:
    """The binding's methods as a module, the shape the recorder's proxy wraps."""
    module = types.ModuleType("rocm_smi", doc="ROCm SMI binding methods")
    for name in FUNCTIONS:
        setattr(module, name, getattr(binding, name))
    module.__dict__.update(ROCMSMIError=ROCMSMIError)
    return module
