"""Hygon replay: our real bindings (ROCm SMI fork, ``libhydmi_mig``) over fake C libraries.

A Hygon recording holds two libraries: ``rocm_smi`` (Hygon's fork, replayed by the ROCm SMI
codec with the card-level calls added) and ``hydmi_mig`` (the Multi-Instance library, replayed
by :class:`HyDmiCodec`). Both bindings run their own ctypes code over C-ABI fakes, so replay
exercises the same out-parameter handling, handle passing and struct layouts as a DCU node.

``libhydmi_mig`` handles are ``c_void_p``; a recording names them by the call that produced
them: a card by its PCI address (``0000:07:00.0``), a MIG device ``<card>/mig<global index>``, a
GPU instance ``<card>/gi<id>``. ``nvmlGpuInstanceGetInfo`` carries its parent card's handle
inside the struct; it is recorded as ``{_handle: <card>}``, never as an address, so a recording
stays the same from run to run.
"""

from __future__ import annotations

import ctypes
import types
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Final

from gpustack_simulator.recording import Recording
from gpustack_simulator.replay.binding_standin import (
    BindingCodec,
    ReplayAnswer,
    binding_module,
    replayer_behind,
)
from gpustack_simulator.replay.codec import HandleRef, encode_ctypes, fill_struct
from gpustack_simulator.replay.engine import Clock, Replayer
from gpustack_simulator.replay.hydmi_lib import FakeHyDmiLib
from gpustack_simulator.replay.hygon_rocm_smi_lib import FakeHygonRocmSmiLib
from gpustack_simulator.replay.rocm_smi_standin import RocmSmiCodec
from gpustack_vendors.bindings.rocm_smi import ROCMSMIError
from gpustack_vendors.hygon import hydmi
from gpustack_vendors.hygon import rocm_smi as hygon_rocm_smi
from gpustack_vendors.hygon.hydmi import (
    DMI_ERROR_FUNCTION_NOT_FOUND,
    HyDmiError,
    HyDmiMig,
    dmiGpuInstanceInfo_t,
)
from gpustack_vendors.hygon.rocm_smi import HygonRocmSmi

ROCM_SMI_ID: Final = "rocm_smi"
HYDMI_ID: Final = "hydmi_mig"


class HyDmiCodec(BindingCodec):
    """``libhydmi_mig``'s values: Hygon-layout structs, ``c_void_p`` handles, ``HyDmiError``."""

    library_id = HYDMI_ID
    init_functions: frozenset[str] = frozenset()
    """The library has no init: replay time counts from the stand-in's construction."""
    label = "hydmi"
    structs = hydmi.STRUCTS
    error_type = HyDmiError
    not_found_code = DMI_ERROR_FUNCTION_NOT_FOUND

    def __init__(self) -> None:
        self._keepalive: list[ctypes.Array[ctypes.c_char]] = []
        self.resolve: Callable[[str], object] | None = None
        """The replayer's ``handle``: rebuilds a struct's embedded handle from its ref."""

    def encode(self, value: object, handle_ref: HandleRef) -> Any:
        """Structs with every field; a GI info's parent pointer as the card's ref."""
        if isinstance(value, dmiGpuInstanceInfo_t):
            return {
                "_type": type(value).__name__,
                "device": self.encode(ctypes.c_void_p(value.device), handle_ref),
                "id": value.id,
                "profile_id": value.profile_id,
                "placement": encode_ctypes(value.placement, handle_ref, self),
            }
        return encode_ctypes(value, handle_ref, self)

    def build(self, type_name: str, fields: Mapping[str, Any]) -> object:
        """Rebuild with the binding's own struct class; an embedded handle by its live address."""
        cls = self.structs.get(type_name)
        if cls is None:
            raise KeyError(f"hydmi binding has no struct {type_name!r}")
        struct = cls()
        if cls is dmiGpuInstanceInfo_t:
            body = {k: v for k, v in fields.items() if k != "device"}
            fill_struct(struct, body, self)
            device = fields.get("device")
            if isinstance(device, dict) and "_handle" in device:
                if self.resolve is None:
                    raise TypeError("a GI info's handle needs a replayer to resolve it")
                handle = self.resolve(str(device["_handle"]))
                struct.device = getattr(handle, "value", None)
            return struct
        fill_struct(struct, fields, self)
        return struct

    def is_handle(self, value: object) -> bool:
        """Card, MIG device and GPU instance handles are all ``c_void_p``."""
        return isinstance(value, ctypes.c_void_p)

    def handle_key(self, handle: object) -> Hashable:
        """The address a handle points at."""
        return getattr(handle, "value", None)

    def make_handle(self, ref: str) -> object:
        """A distinct live address per ref, kept alive as long as the codec."""
        target = ctypes.create_string_buffer(1)
        self._keepalive.append(target)
        return ctypes.c_void_p(ctypes.addressof(target))

    def name_handle(self, fn: str, args: Sequence[Any], position: int | None) -> str:
        """A card by its PCI address; ``<card>/mig<index>``, ``<card>/gi<id>`` below it."""
        parent = args[0]["_handle"] if args and isinstance(args[0], dict) else None
        if fn == "nvmlDeviceGetHandleByPciBusId" and args:
            return str(args[0])
        if fn == "nvmlDeviceGetMigDeviceHandleByIndex" and parent is not None:
            return f"{parent}/mig{args[1]}"
        if fn == "nvmlDeviceGetGpuInstanceById" and parent is not None:
            return f"{parent}/gi{args[1]}"
        return f"{fn}({','.join(map(str, args))})"


class RecordedRegistry:
    """The instance registry as the recording saw it (``dmi_mig_registry``)."""

    def __init__(self, answer: Callable[[str, tuple[object, ...]], object]) -> None:
        self.answer = answer

    def read(self) -> dict[str, str]:
        """Conf file name → UUID, replayed."""
        files = self.answer("dmi_mig_registry", ())
        if not isinstance(files, dict):
            raise TypeError(f"dmi_mig_registry: answer must be a mapping, got {files!r}")
        return {str(k): str(v) for k, v in files.items()}


def build_rocm_smi(recording: Recording, *, clock: Clock | None = None) -> HygonRocmSmi:
    """Our Hygon ROCm SMI binding over a fake library answering from ``recording``."""
    replayer = Replayer(recording, RocmSmiCodec(), clock=clock)
    return HygonRocmSmi(FakeHygonRocmSmiLib(ReplayAnswer(replayer)))


def build_hydmi(recording: Recording, *, clock: Clock | None = None) -> HyDmiMig:
    """Our ``libhydmi_mig`` binding over a fake library answering from ``recording``."""
    codec = HyDmiCodec()
    replayer = Replayer(recording, codec, clock=clock)
    codec.resolve = replayer.handle
    answer = ReplayAnswer(replayer)
    return HyDmiMig(FakeHyDmiLib(answer), registry=RecordedRegistry(answer))


def replayer_of(binding: HygonRocmSmi | HyDmiMig) -> Replayer:
    """The replayer behind a binding made here."""
    return replayer_behind(binding.lib, object, "Hygon")


def rocm_smi_module(binding: HygonRocmSmi) -> types.ModuleType:
    """The ROCm SMI binding's methods as a module, the shape the recorder's proxy wraps."""
    return binding_module(
        binding,
        "rocm_smi",
        "Hygon ROCm SMI binding methods",
        hygon_rocm_smi.FUNCTIONS,
        ROCMSMIError,
    )


def hydmi_module(binding: HyDmiMig) -> types.ModuleType:
    """The ``libhydmi_mig`` binding's methods as a module, for the recorder's proxy."""
    return binding_module(
        binding, "hydmi", "libhydmi_mig binding methods", hydmi.FUNCTIONS, HyDmiError
    )


def dmi_missing(recording: Recording) -> str:
    """Why a recording has no usable ``libhydmi_mig`` (empty when it has one)."""
    library = next((lib for lib in recording.libraries if lib.id == HYDMI_ID), None)
    if library is None:
        return f"the recording holds no {HYDMI_ID}"
    if not library.load.ok:
        raises = library.load.raises
        detail = f"{raises.type}, code {raises.code}" if raises is not None else "not loaded"
        return f"{hydmi.LIBRARY_NAME} did not load when recorded ({detail})"
    return ""
