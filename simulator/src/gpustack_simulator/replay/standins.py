"""The simulator's counterpart of each registry library, keyed as ``gpustack_vendors.registry`` is.

For every manufacturer in :data:`gpustack_vendors.registry.VENDORS` and every library it lists,
:data:`STANDINS` says how the simulator stands in for that library:

- ``replay``: the binding answering from a recording (the stand-in for ``pynvml``/``amdsmi``, or
  our real ctypes binding over its C-ABI fake), typed as the library's surface so mypy checks the
  stand-in against the calls the backend declares;
- ``view`` and ``codec``: what the recorder's proxy wraps (a ctypes binding's methods as a module)
  and the codec that turns its answers into a recording — for a real library, a replayed one or
  a synthetic one alike;
- ``functions``: the calls the stand-in answers (what ``simulator validate`` accepts).

The backend itself is always built by the registry's :attr:`~gpustack_vendors.registry.Vendor.
build`, so replay, recording and synthesis hand the backend its bindings the way a Device Manager
does.
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar, cast

import pynvml

from gpustack_simulator.recording import Raises, Recording
from gpustack_simulator.replay import (
    amdsmi_standin,
    cndev_standin,
    dcmi_standin,
    hgml_standin,
    hygon_standin,
    ixml_standin,
    mxsml_standin,
    pynvml_standin,
    rocm_smi_standin,
)
from gpustack_simulator.replay.amdsmi_standin import AmdsmiCodec
from gpustack_simulator.replay.cndev_standin import CndevCodec
from gpustack_simulator.replay.codec import Codec
from gpustack_simulator.replay.dcmi_standin import DcmiCodec
from gpustack_simulator.replay.engine import Clock
from gpustack_simulator.replay.hgml_standin import HgmlCodec
from gpustack_simulator.replay.hygon_standin import HyDmiCodec
from gpustack_simulator.replay.ixml_standin import IxmlCodec
from gpustack_simulator.replay.mxsml_standin import MxsmlCodec
from gpustack_simulator.replay.pynvml_standin import PynvmlCodec
from gpustack_simulator.replay.rocm_smi_standin import RocmSmiCodec
from gpustack_vendors.amd.surface import AmdRocmSmiSurface, AmdSmiSurface
from gpustack_vendors.ascend.surface import DcmiSurface
from gpustack_vendors.cambricon.surface import CndevSurface
from gpustack_vendors.hygon import hydmi
from gpustack_vendors.hygon import rocm_smi as hygon_rocm_smi
from gpustack_vendors.hygon.surface import HyDmiSurface, HygonRocmSmiSurface
from gpustack_vendors.iluvatar.surface import IxmlSurface
from gpustack_vendors.metax.surface import MxsmlSurface
from gpustack_vendors.nvidia.surface import NvmlSurface
from gpustack_vendors.registry import VENDORS, Bindings, Vendor
from gpustack_vendors.thead.surface import HgmlSurface

S = TypeVar("S")


@dataclass(frozen=True)
class Standin(Generic[S]):
    """How the simulator replays, and records through, one library of the registry."""

    replay: Callable[[Recording, Clock | None], S]
    """The library answering from a recording, as the surface the backend is handed."""
    view: Callable[[Any], object]
    """The binding as the module-like object :class:`~gpustack_simulator.recorder.
    RecordingProxy` wraps (``as_module`` for our ctypes bindings; the module itself otherwise)."""
    codec: Callable[[object], Codec]
    """A fresh codec for recording through ``view(binding)`` (given that view)."""
    functions: frozenset[str]
    """Every call the stand-in answers; a recording naming another is refused."""


class RecordedAbsence(OSError):  # noqa: N818 - an absence, replayed; not a failure of ours
    """An optional library a recording says did not load, opened again from that recording.

    Carries the recorded error, so a recording made through the replay records the same one.
    """

    def __init__(self, message: str, raises: Raises | None) -> None:
        super().__init__(message)
        self.raises = raises


def _same(binding: object) -> object:
    return binding


def _fresh(codec: Callable[[], Codec]) -> Callable[[object], Codec]:
    def make(view: object) -> Codec:
        return codec()

    return make


def _pynvml_codec(view: object) -> Codec:
    # The real module, or the stand-in that carries every attribute of it.
    return PynvmlCodec(cast("types.ModuleType", view))


def _pynvml(recording: Recording, clock: Clock | None) -> NvmlSurface:
    return pynvml_standin.build_module(recording, clock=clock)


def _amdsmi(recording: Recording, clock: Clock | None) -> AmdSmiSurface:
    return amdsmi_standin.build_module(recording, clock=clock)


def _amd_rocm_smi(recording: Recording, clock: Clock | None) -> AmdRocmSmiSurface:
    return rocm_smi_standin.build_binding(recording, clock=clock)


def _hygon_rocm_smi(recording: Recording, clock: Clock | None) -> HygonRocmSmiSurface:
    return hygon_standin.build_rocm_smi(recording, clock=clock)


def _hydmi(recording: Recording, clock: Clock | None) -> HyDmiSurface:
    return hygon_standin.build_hydmi(recording, clock=clock)


def _dcmi(recording: Recording, clock: Clock | None) -> DcmiSurface:
    return dcmi_standin.build_binding(recording, clock=clock)


def _hgml(recording: Recording, clock: Clock | None) -> HgmlSurface:
    return hgml_standin.build_binding(recording, clock=clock)


def _cndev(recording: Recording, clock: Clock | None) -> CndevSurface:
    return cndev_standin.build_binding(recording, clock=clock)


def _ixml(recording: Recording, clock: Clock | None) -> IxmlSurface:
    return ixml_standin.build_binding(recording, clock=clock)


def _mxsml(recording: Recording, clock: Clock | None) -> MxsmlSurface:
    return mxsml_standin.build_binding(recording, clock=clock)


def _module_of(as_module: Callable[[Any], types.ModuleType]) -> Callable[[Any], object]:
    return as_module


_ROCM_SMI_AMD: Final = Standin[AmdRocmSmiSurface](
    replay=_amd_rocm_smi,
    view=_module_of(rocm_smi_standin.as_module),
    codec=_fresh(RocmSmiCodec),
    functions=frozenset(rocm_smi_standin.FUNCTIONS),
)

STANDINS: Final[Mapping[str, Mapping[str, Standin[Any]]]] = {
    "nvidia": {
        "pynvml": Standin[NvmlSurface](
            replay=_pynvml,
            view=_same,
            codec=_pynvml_codec,
            functions=frozenset(name for name in dir(pynvml) if name.startswith("nvml")),
        ),
    },
    "amd": {
        "amdsmi": Standin[AmdSmiSurface](
            replay=_amdsmi,
            view=_same,
            codec=_fresh(AmdsmiCodec),
            functions=frozenset(amdsmi_standin.FUNCTIONS),
        ),
        "rocm_smi": _ROCM_SMI_AMD,
    },
    "hygon": {
        "rocm_smi": Standin[HygonRocmSmiSurface](
            replay=_hygon_rocm_smi,
            view=_module_of(hygon_standin.rocm_smi_module),
            codec=_fresh(RocmSmiCodec),
            functions=frozenset(hygon_rocm_smi.FUNCTIONS),
        ),
        "hydmi_mig": Standin[HyDmiSurface](
            replay=_hydmi,
            view=_module_of(hygon_standin.hydmi_module),
            codec=_fresh(HyDmiCodec),
            functions=frozenset(hydmi.FUNCTIONS),
        ),
    },
    "ascend": {
        "dcmi": Standin[DcmiSurface](
            replay=_dcmi,
            view=_module_of(dcmi_standin.as_module),
            codec=_fresh(DcmiCodec),
            functions=frozenset(dcmi_standin.FUNCTIONS),
        ),
    },
    "thead": {
        "hgml": Standin[HgmlSurface](
            replay=_hgml,
            view=_module_of(hgml_standin.as_module),
            codec=_fresh(HgmlCodec),
            functions=frozenset(hgml_standin.FUNCTIONS),
        ),
    },
    "cambricon": {
        "cndev": Standin[CndevSurface](
            replay=_cndev,
            view=_module_of(cndev_standin.as_module),
            codec=_fresh(CndevCodec),
            functions=frozenset(cndev_standin.FUNCTIONS),
        ),
    },
    "iluvatar": {
        "ixml": Standin[IxmlSurface](
            replay=_ixml,
            view=_module_of(ixml_standin.as_module),
            codec=_fresh(IxmlCodec),
            functions=frozenset(ixml_standin.FUNCTIONS),
        ),
    },
    "metax": {
        "mxsml": Standin[MxsmlSurface](
            replay=_mxsml,
            view=_module_of(mxsml_standin.as_module),
            codec=_fresh(MxsmlCodec),
            functions=frozenset(mxsml_standin.FUNCTIONS),
        ),
    },
}
"""Manufacturer → library id → its stand-in; the same keys as the registry's (a test holds it)."""


def standin(vendor: str, library_id: str) -> Standin[Any]:
    """The stand-in for one registry library."""
    return STANDINS[vendor][library_id]


def _absence(entry: Vendor, library_id: str, recording: Recording) -> RecordedAbsence | None:
    """Why an optional library is absent from ``recording``; ``None`` when it is there."""
    library = next((lib for lib in recording.libraries if lib.id == library_id), None)
    if library is None:
        return RecordedAbsence(f"the recording holds no {library_id}", None)
    if library.load.ok:
        return None
    raises = library.load.raises
    detail = f"{raises.type}, code {raises.code}" if raises is not None else "not loaded"
    soname = entry.library(library_id).soname
    return RecordedAbsence(f"{soname} did not load when recorded ({detail})", raises)


def replay_bindings(recording: Recording, *, clock: Clock | None = None) -> Bindings:
    """Every library of ``recording``'s vendor, answering from it: what the backend is handed.

    A required library is always replayed (a call the recording lacks raises the binding's own
    function-not-found error); an optional one the recording says did not load is absent, with
    why, as it was on the recorded node.
    """
    entry = VENDORS[recording.vendor]
    opened: dict[str, object] = {}
    absent: dict[str, BaseException] = {}
    for library in entry.libraries:
        missing = None if library.required else _absence(entry, library.id, recording)
        if missing is not None:
            absent[library.id] = missing
            continue
        opened[library.id] = standin(recording.vendor, library.id).replay(recording, clock)
    return Bindings(opened=opened, absent=absent, clock=time.monotonic if clock is None else clock)


def recorded_error(exc: BaseException, absent_code: int | None) -> Raises:
    """How a library that did not open is written into a recording (``load.raises``)."""
    if isinstance(exc, RecordedAbsence) and exc.raises is not None:
        return exc.raises
    code = absent_code if absent_code is not None else -1
    return Raises(type=type(exc).__name__, code=code)


def library_functions() -> Mapping[str, Mapping[str, frozenset[str]]]:
    """Vendor → library id → the function names its replay stand-in answers."""
    return {
        vendor: {library_id: s.functions for library_id, s in libraries.items()}
        for vendor, libraries in STANDINS.items()
    }


__all__ = [
    "STANDINS",
    "RecordedAbsence",
    "Standin",
    "library_functions",
    "recorded_error",
    "replay_bindings",
    "standin",
]
