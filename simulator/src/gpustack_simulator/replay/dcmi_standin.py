"""DCMI replay: our real binding, over a fake C library that answers from a recording.

Like ROCm SMI's, the DCMI binding is ours and its riskiest code is at the C level (the process
list's output-only count and the binding's guard tail), so :func:`build_binding` hands back a
real :class:`~gpustack_vendors.bindings.dcmi.Dcmi` whose library is a
:class:`~gpustack_simulator.replay.dcmi_lib.FakeDcmiLib` asking the replayer. Recordings hold
what the binding's methods returned (structs with every field, ``(card, device)`` ints as
arguments — DCMI has no handles), recorded through :func:`as_module`.
"""

from __future__ import annotations

import ctypes
import types
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Final

from gpustack_simulator.recording import Raises, Recording, RowFilter
from gpustack_simulator.replay.codec import HandleRef, encode_ctypes, fill_struct
from gpustack_simulator.replay.dcmi_lib import FakeDcmiLib
from gpustack_simulator.replay.engine import Clock, Replayer
from gpustack_vendors.ascend import AscendBackend
from gpustack_vendors.bindings import dcmi
from gpustack_vendors.bindings.dcmi import Dcmi, DCMIError

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

_STRUCTS: Final[Mapping[str, type[ctypes.Structure]]] = {
    cls.__name__: cls
    for cls in (
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
}


class DcmiCodec:
    """DCMI's values: ctypes structs (nested for vNPUs), ints and strings; no handles."""

    library_id = LIBRARY_ID
    init_functions = frozenset({"dcmi_init"})
    filters: Mapping[str, RowFilter] = {}

    def encode(self, value: object, handle_ref: HandleRef) -> Any:
        """Structs with every field, recursively; sentinels kept raw."""
        return encode_ctypes(value, handle_ref, self)

    def build(self, type_name: str, fields: Mapping[str, Any]) -> object:
        """Rebuild with the binding's own struct class."""
        cls = _STRUCTS.get(type_name)
        if cls is None:
            raise KeyError(f"DCMI binding has no struct {type_name!r}")
        struct = cls()
        fill_struct(struct, fields, self)
        return struct

    def error(self, raises: Raises) -> BaseException:
        """``DCMIError(code)``: the fake library turns it back into the returned code."""
        return DCMIError(raises.code)

    def describe_error(self, exc: BaseException) -> Raises | None:
        """Only ``DCMIError`` is the binding's; ``.value`` is the code."""
        if isinstance(exc, DCMIError):
            return Raises(type=type(exc).__name__, code=int(exc.value))
        return None

    def missing(self, fn: str) -> BaseException:
        """``FUNCTION_NOT_FOUND``: the binding's own code for a symbol the library lacks."""
        return DCMIError(dcmi.DCMI_ERROR_FUNCTION_NOT_FOUND, fn)

    def is_handle(self, value: object) -> bool:
        """DCMI names devices by ``(card, device)``; nothing it returns is a handle."""
        return False

    def handle_key(self, handle: object) -> Hashable:
        """Never called: DCMI has no handles."""
        raise TypeError("DCMI has no handles")

    def make_handle(self, ref: str) -> object:
        """Never called: DCMI has no handles."""
        raise TypeError(f"DCMI has no handles (asked for {ref!r})")

    def name_handle(self, fn: str, args: Sequence[Any], position: int | None) -> str:
        """Never called: DCMI has no handles."""
        raise TypeError("DCMI has no handles")


def build_binding(recording: Recording, *, clock: Clock | None = None) -> Dcmi:
    """Our real DCMI binding over a fake library whose answers come from ``recording``."""
    replayer = Replayer(recording, DcmiCodec(), clock=clock)
    return Dcmi(FakeDcmiLib(_Answer(replayer)))


class _Answer:
    """``FakeDcmiLib``'s callback: one replayed call per C call."""

    def __init__(self, replayer: Replayer) -> None:
        self.replayer = replayer

    def __call__(self, name: str, args: tuple[object, ...]) -> object:
        return self.replayer.invoke(name, args, {})


def replayer_of(binding: Dcmi) -> Replayer:
    """The replayer behind a binding made by :func:`build_binding`."""
    lib = binding.lib
    if not isinstance(lib, FakeDcmiLib) or not isinstance(lib.answer, _Answer):
        raise TypeError("not a replayed DCMI binding")
    return lib.answer.replayer


def as_module(binding: Dcmi) -> types.ModuleType:
    """The binding's methods as a module, the shape the recorder's proxy wraps."""
    module = types.ModuleType("dcmi", doc="DCMI binding methods")
    for name in FUNCTIONS:
        setattr(module, name, getattr(binding, name))
    module.__dict__.update(DCMIError=DCMIError)
    return module


def replay_backend(recording: Recording, *, clock: Clock | None = None) -> AscendBackend:
    """The unchanged Ascend backend over :func:`build_binding`."""
    return AscendBackend(build_binding(recording, clock=clock))
