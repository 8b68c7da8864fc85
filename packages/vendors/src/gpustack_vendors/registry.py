"""One entry per manufacturer: its libraries, how to open them, and how to build its backend.

This is the only table of manufacturers in the vendor package. Everything that opens a vendor's
real library goes through it — the Device Manager (:func:`gpustack_vendors.loading.
open_backend`) and the recorder (``gpustack_simulator.capture.record``) alike — and the
simulator keys its replay and synthesis counterparts by the same names and library ids
(``gpustack_simulator.replay.standins``). Adding a manufacturer is its modules plus one
:class:`Vendor` here and its row in :mod:`gpustack_core.manufacturers` (``docs/vendors.md``).

A :class:`Vendor` says:

- which **libraries** its backend reads, in the order the backend takes them (and a recording
  lists them), each with the id a recording names it by, the shared object, the Python binding
  (import name and distribution) and how to open the real one (:attr:`Library.load`); a library
  may be optional (Hygon's ``libhydmi_mig``: partitions only);
- the order they are **loaded** in, where that matters (AMD: ROCm SMI before AMD SMI);
- how to **build** the backend from opened bindings (:class:`Bindings`): real ones, replay
  stand-ins, synthetic ones, or recording proxies around any of those;
- what a failing first call (the library's init) is called in the one-line error.

Nothing else about a manufacturer is repeated here: its resource base, slices, partition word,
device nodes, privilege and chart hint are its row in :mod:`gpustack_core.manufacturers`
(:attr:`Vendor.resources`, :attr:`Vendor.partition_kind` read it). This table keeps only what
must live beside the bindings: how to open them and build the backend. The container runtime's
visibility and quota variables live in ``gpustack_devicemanager.deviceplugin.injection`` (a
daemon table this package may not import).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import time
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar, cast

from gpustack_core.manufacturers import partition_kind
from gpustack_core.modes import Manufacturer
from gpustack_core.resources import ResourceNames
from gpustack_vendors.amd.backend import AmdBackend
from gpustack_vendors.amd.surface import AmdRocmSmiSurface, AmdSmiSurface
from gpustack_vendors.ascend import dcmi
from gpustack_vendors.ascend.backend import AscendBackend, DcmiCallError
from gpustack_vendors.ascend.surface import DcmiSurface
from gpustack_vendors.bindings import rocm_smi as rocm_smi_binding
from gpustack_vendors.cambricon import cndev
from gpustack_vendors.cambricon.backend import CambriconBackend, CndevCallError
from gpustack_vendors.cambricon.surface import CndevSurface
from gpustack_vendors.hygon import hydmi
from gpustack_vendors.hygon import rocm_smi as hygon_rocm_smi
from gpustack_vendors.hygon.backend import HygonBackend, HygonCallError
from gpustack_vendors.hygon.surface import HyDmiSurface, HygonRocmSmiSurface
from gpustack_vendors.iluvatar import ixml
from gpustack_vendors.iluvatar.backend import IluvatarBackend, IxmlCallError
from gpustack_vendors.iluvatar.surface import IxmlSurface
from gpustack_vendors.metax import mxsml
from gpustack_vendors.metax.backend import MetaxBackend, MxsmlCallError
from gpustack_vendors.metax.surface import MxsmlSurface
from gpustack_vendors.nvidia.backend import NvidiaBackend
from gpustack_vendors.nvidia.surface import NvmlSurface
from gpustack_vendors.protocol import Backend
from gpustack_vendors.thead import hgml
from gpustack_vendors.thead.backend import HgmlCallError, TheadBackend
from gpustack_vendors.thead.surface import HgmlSurface

S = TypeVar("S")
"""A library's surface: what its loader returns and what the backend is handed."""


class LibraryUnavailableError(RuntimeError):
    """The manufacturer's management library cannot be loaded on this machine."""


def import_quietly(module: str) -> types.ModuleType:
    """Import a binding whose import may fail noisily.

    ``amdsmi`` prints two lines to **stdout** and raises ``KeyError`` when ``libamd_smi.so`` is
    missing; stdout is where our YAML goes, so it is captured and folded into the error.
    """
    noise = io.StringIO()
    try:
        with contextlib.redirect_stdout(noise):
            return importlib.import_module(module)
    except (ImportError, KeyError, OSError) as exc:
        said = " ".join(noise.getvalue().split())
        detail = f"{type(exc).__name__}: {exc}" + (f" ({said})" if said else "")
        raise LibraryUnavailableError(f"cannot import {module}: {detail}") from exc


@dataclass(frozen=True)
class Library(Generic[S]):
    """One vendor library a backend reads."""

    id: str
    """What a recording names it by (``libraries[].id``): ``pynvml``, ``rocm_smi``, ``cndev``."""
    soname: str
    """The shared object the binding opens (``libnvidia-ml.so.1``), for messages and docs."""
    module: str
    """The Python binding's import name (``pynvml``, ``gpustack_vendors.cambricon.cndev``)."""
    dist: str
    """The distribution that ships the binding (its version goes into a recording)."""
    load: Callable[[], S]
    """Open the real library. An absent one raises ``OSError`` naming every path tried (our
    ctypes loaders, :mod:`gpustack_vendors.bindings.loader`) or :class:`LibraryUnavailableError`
    (an official package that does not import)."""
    required: bool = True
    """``False``: the backend runs without it (and says why in detection)."""
    absent_code: int | None = None
    """The library's own "library not found" code, for an optional library recorded absent."""


@dataclass(frozen=True)
class Bindings:
    """Opened libraries by id, handed to :attr:`Vendor.build`.

    Each value is whatever stands in for that library: the real binding, a replay stand-in, a
    synthetic binding or a recording proxy around one of them. ``absent`` holds the optional
    libraries that did not open, each with why.
    """

    opened: Mapping[str, object]
    absent: Mapping[str, BaseException] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic
    """The backend's own clock where it keeps one (AMD's 1 s rule between process lists)."""

    def __getitem__(self, library_id: str) -> Any:
        return self.opened[library_id]

    def get(self, library_id: str) -> Any:
        """An optional library, or ``None`` when it is absent."""
        return self.opened.get(library_id)

    def why_absent(self, library_id: str) -> str:
        """Why an optional library did not open; empty when it did."""
        failure = self.absent.get(library_id)
        return "" if failure is None else str(failure)


@dataclass(frozen=True)
class Vendor:
    """One manufacturer: its libraries and its backend."""

    manufacturer: str
    """Its token, a row of :data:`gpustack_core.manufacturers.MANUFACTURERS` (where every other
    fact about it lives: resource base, slices, device nodes, chart hint)."""
    libraries: tuple[Library[Any], ...]
    """In the order the backend takes them and a recording lists them."""
    build: Callable[[Bindings], Backend]
    """The backend over ``bindings``; its constructor makes the library's first call (init)."""
    init_failure: str
    """How a failing first call reads: ``NVML did not initialise``."""
    init_errors: tuple[type[Exception], ...]
    """What the backend's constructor raises when that first call fails."""
    load_order: tuple[str, ...] = ()
    """Library ids in the order they must be opened, where it is not :attr:`libraries`'."""
    load_prefix: str = ""
    """Put before a load error's message (Hygon's say ``hygon: …``)."""

    @property
    def name(self) -> str:
        """The manufacturer token (``nvidia``), as on the ``gpustack.ai/manufacturer`` label."""
        return str(self.manufacturer)

    @property
    def resources(self) -> ResourceNames:
        """Its extended-resource names, from :mod:`gpustack_core.resources`."""
        return ResourceNames.of(self.name)

    @property
    def partition_kind(self) -> str | None:
        """Its word for a hardware partition (``mig``), ``None`` where it has none."""
        return partition_kind(self.name)

    def library(self, library_id: str) -> Library[Any]:
        """The library with that id."""
        for library in self.libraries:
            if library.id == library_id:
                return library
        raise KeyError(f"{self.name} has no library {library_id!r}")

    def opening_order(self) -> tuple[Library[Any], ...]:
        """:attr:`libraries` in :attr:`load_order`."""
        if not self.load_order:
            return self.libraries
        return tuple(self.library(library_id) for library_id in self.load_order)


# -- the real libraries ---------------------------------------------------------------------------
# Each loader looks its binding module's ``load_library`` up when called, not at import, so the
# import loads nothing and a test can stand in for one binding's loader.


def _pynvml() -> NvmlSurface:
    return import_quietly("pynvml")


def _amdsmi() -> AmdSmiSurface:
    return import_quietly("amdsmi")


def _amd_rocm_smi() -> AmdRocmSmiSurface:
    return rocm_smi_binding.load_library()


def _hygon_rocm_smi() -> HygonRocmSmiSurface:
    return hygon_rocm_smi.load_library()


def _hydmi() -> HyDmiSurface:
    return hydmi.load_library()


def _dcmi() -> DcmiSurface:
    return dcmi.load_library()


def _hgml() -> HgmlSurface:
    return hgml.load_library()


def _cndev() -> CndevSurface:
    return cndev.load_library()


def _ixml() -> IxmlSurface:
    return ixml.load_library()


def _mxsml() -> MxsmlSurface:
    return mxsml.load_library()


OURS: Final = "gpustack-vendors"
"""The distribution of our own ctypes bindings."""


def _ours(
    library_id: str, soname: str, module: types.ModuleType, load: Callable[[], S]
) -> Library[S]:
    return Library(id=library_id, soname=soname, module=module.__name__, dist=OURS, load=load)


# -- the backends over opened bindings -------------------------------------------------------------


def _nvidia(b: Bindings) -> Backend:
    return NvidiaBackend(cast("NvmlSurface", b["pynvml"]))


def _amd(b: Bindings) -> Backend:
    return AmdBackend(
        cast("AmdSmiSurface", b["amdsmi"]),
        cast("AmdRocmSmiSurface", b["rocm_smi"]),
        clock=b.clock,
    )


def _hygon(b: Bindings) -> Backend:
    return HygonBackend(
        cast("HygonRocmSmiSurface", b["rocm_smi"]),
        cast("HyDmiSurface | None", b.get("hydmi_mig")),
        dmi_missing=b.why_absent("hydmi_mig"),
    )


def _ascend(b: Bindings) -> Backend:
    return AscendBackend(cast("DcmiSurface", b["dcmi"]))


def _thead(b: Bindings) -> Backend:
    return TheadBackend(cast("HgmlSurface", b["hgml"]))


def _cambricon(b: Bindings) -> Backend:
    return CambriconBackend(cast("CndevSurface", b["cndev"]))


def _iluvatar(b: Bindings) -> Backend:
    return IluvatarBackend(cast("IxmlSurface", b["ixml"]))


def _metax(b: Bindings) -> Backend:
    return MetaxBackend(cast("MxsmlSurface", b["mxsml"]))


VENDORS: Final[Mapping[str, Vendor]] = {
    vendor.name: vendor
    for vendor in (
        Vendor(
            manufacturer=Manufacturer.NVIDIA,
            libraries=(
                Library[NvmlSurface](
                    id="pynvml",
                    soname="libnvidia-ml.so.1",
                    module="pynvml",
                    dist="nvidia-ml-py",
                    load=_pynvml,
                ),
            ),
            build=_nvidia,
            init_failure="NVML did not initialise",
            # pynvml's NVMLError, or anything else its first call raises.
            init_errors=(Exception,),
        ),
        Vendor(
            manufacturer=Manufacturer.AMD,
            libraries=(
                Library[AmdSmiSurface](
                    id="amdsmi",
                    soname="libamd_smi.so",
                    module="amdsmi",
                    dist="amdsmi",
                    load=_amdsmi,
                ),
                _ours("rocm_smi", rocm_smi_binding.LIBRARY_NAME, rocm_smi_binding, _amd_rocm_smi),
            ),
            build=_amd,
            init_failure="AMD SMI / ROCm SMI did not initialise",
            init_errors=(Exception,),
            # ROCm SMI first: loading AMD SMI before ROCm SMI has been measured to abort the
            # process with SIGBUS, so the order is part of the contract.
            load_order=("rocm_smi", "amdsmi"),
        ),
        Vendor(
            manufacturer=Manufacturer.HYGON,
            libraries=(
                _ours("rocm_smi", rocm_smi_binding.LIBRARY_NAME, hygon_rocm_smi, _hygon_rocm_smi),
                Library[HyDmiSurface](
                    id="hydmi_mig",
                    soname=hydmi.LIBRARY_NAME,
                    module=hydmi.__name__,
                    dist=OURS,
                    load=_hydmi,
                    required=False,
                    absent_code=hydmi.DMI_ERROR_LIBRARY_NOT_FOUND,
                ),
            ),
            build=_hygon,
            init_failure="hygon: ROCm SMI did not initialise",
            init_errors=(HygonCallError,),
            load_prefix="hygon: ",
        ),
        Vendor(
            manufacturer=Manufacturer.ASCEND,
            libraries=(_ours("dcmi", dcmi.LIBRARY_NAME, dcmi, _dcmi),),
            build=_ascend,
            init_failure="DCMI did not initialise",
            init_errors=(DcmiCallError,),
        ),
        Vendor(
            manufacturer=Manufacturer.THEAD,
            libraries=(_ours("hgml", hgml.LIBRARY_NAME, hgml, _hgml),),
            build=_thead,
            init_failure="HGML did not initialise",
            init_errors=(HgmlCallError,),
        ),
        Vendor(
            manufacturer=Manufacturer.CAMBRICON,
            libraries=(_ours("cndev", cndev.LIBRARY_NAME, cndev, _cndev),),
            build=_cambricon,
            init_failure="CNDev did not initialise",
            init_errors=(CndevCallError,),
        ),
        Vendor(
            manufacturer=Manufacturer.ILUVATAR,
            libraries=(_ours("ixml", ixml.LIBRARY_NAME, ixml, _ixml),),
            build=_iluvatar,
            init_failure="IXML did not initialise",
            init_errors=(IxmlCallError,),
        ),
        Vendor(
            manufacturer=Manufacturer.METAX,
            libraries=(_ours("mxsml", mxsml.LIBRARY_NAME, mxsml, _mxsml),),
            build=_metax,
            init_failure="MXSML did not initialise",
            init_errors=(MxsmlCallError,),
        ),
    )
}
"""Every manufacturer with a backend, by token."""


def vendor(manufacturer: str) -> Vendor:
    """The registry entry; a manufacturer without one is a :class:`LibraryUnavailableError`."""
    entry = VENDORS.get(manufacturer)
    if entry is None:
        raise LibraryUnavailableError(f"no backend for manufacturer {manufacturer!r} yet")
    return entry


def open_bindings(entry: Vendor) -> Bindings:
    """Open ``entry``'s real libraries in their load order.

    A required library that does not open is a :class:`LibraryUnavailableError` whose one line
    names it and every path tried; an optional one is listed in :attr:`Bindings.absent`.
    """
    opened: dict[str, object] = {}
    absent: dict[str, BaseException] = {}
    for library in entry.opening_order():
        try:
            opened[library.id] = library.load()
        except OSError as exc:
            if library.required:
                raise LibraryUnavailableError(f"{entry.load_prefix}{exc}") from exc
            absent[library.id] = exc
    return Bindings(opened=opened, absent=absent)


def start(entry: Vendor, bindings: Bindings) -> Backend:
    """Build ``entry``'s backend over ``bindings``; a failing first call is one line."""
    try:
        return entry.build(bindings)
    except entry.init_errors as exc:
        raise LibraryUnavailableError(f"{entry.init_failure}: {exc}") from exc


__all__ = [
    "VENDORS",
    "Bindings",
    "Library",
    "LibraryUnavailableError",
    "Vendor",
    "import_quietly",
    "open_bindings",
    "start",
    "vendor",
]
