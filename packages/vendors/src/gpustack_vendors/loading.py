"""Opening the real vendor library for a manufacturer.

This is the only place a real binding is imported; backends are handed what it returns. A
missing library is a clear error naming what was tried, not an ``ImportError`` from deep inside.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import types
from collections.abc import Callable

from gpustack_vendors.amd import AmdBackend
from gpustack_vendors.ascend import AscendUnavailableError, open_ascend_backend
from gpustack_vendors.bindings.rocm_smi import load_library
from gpustack_vendors.cambricon import open_cambricon_backend
from gpustack_vendors.hygon_loading import HygonUnavailableError, open_hygon_backend
from gpustack_vendors.iluvatar import open_iluvatar_backend
from gpustack_vendors.metax import open_metax_backend
from gpustack_vendors.nvidia import NvidiaBackend
from gpustack_vendors.protocol import Backend
from gpustack_vendors.thead import TheadUnavailableError, open_thead_backend


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


CHART_HINTS: dict[str, str] = {
    "nvidia": (
        "in the Helm chart, libnvidia-ml comes from the NVIDIA container toolkit: set "
        "deviceManager.manufacturers.nvidia.runtimeClassName (e.g. nvidia) where its runtime "
        "is not the node's default"
    ),
}
"""What to set in the chart when a manufacturer's library does not open; the others share
:func:`chart_hint`'s ``libraryPath`` advice (docs/deploy.md, "Vendor libraries")."""


def chart_hint(manufacturer: str) -> str:
    """The chart value that brings ``manufacturer``'s library into the Device Manager's Pod.

    A Pod that cannot open its library crash-loops with this message in its log, so the message
    names the value to set rather than leaving the operator to map a ``.so`` name to the chart.
    """
    return CHART_HINTS.get(
        manufacturer,
        f"in the Helm chart, set deviceManager.manufacturers.{manufacturer}.libraryPath to the "
        'host directory that holds it (docs/deploy.md, "Vendor libraries")',
    )


def open_backend(manufacturer: str) -> Backend:
    """Open the real library for ``manufacturer`` and hand it to that manufacturer's backend.

    A failure's message ends with :func:`chart_hint`; a manufacturer without a backend has none.
    """
    try:
        return _open_backend(manufacturer)
    except LibraryUnavailableError as exc:
        if manufacturer not in _BACKENDS:
            raise
        raise LibraryUnavailableError(f"{exc}; {chart_hint(manufacturer)}") from exc


def _open_backend(manufacturer: str) -> Backend:
    if manufacturer == "nvidia":
        nvml = import_quietly("pynvml")
        try:
            return NvidiaBackend(nvml)
        except Exception as exc:
            raise LibraryUnavailableError(f"NVML did not initialise: {exc}") from exc
    if manufacturer == "amd":
        # ROCm SMI first: loading AMD SMI before ROCm SMI has been measured to abort the
        # process with SIGBUS, so the order is part of the contract.
        try:
            rocm_smi = load_library()
        except OSError as exc:
            raise LibraryUnavailableError(str(exc)) from exc
        amdsmi = import_quietly("amdsmi")
        try:
            return AmdBackend(amdsmi, rocm_smi)
        except Exception as exc:
            raise LibraryUnavailableError(f"AMD SMI / ROCm SMI did not initialise: {exc}") from exc
    if manufacturer == "hygon":
        try:
            return open_hygon_backend()
        except HygonUnavailableError as exc:
            raise LibraryUnavailableError(str(exc)) from exc
    if manufacturer == "ascend":
        try:
            return open_ascend_backend()
        except AscendUnavailableError as exc:
            raise LibraryUnavailableError(str(exc)) from exc
    if manufacturer == "thead":
        try:
            return open_thead_backend()
        except TheadUnavailableError as exc:
            raise LibraryUnavailableError(str(exc)) from exc
    return _open_ctypes_backend(manufacturer)


_CTYPES_OPENERS: dict[str, Callable[[], Backend]] = {
    "cambricon": open_cambricon_backend,
    "metax": open_metax_backend,
    "iluvatar": open_iluvatar_backend,
}
"""Backends over our own lazily loaded ctypes bindings: an absent library is an ``OSError``."""

_BACKENDS: frozenset[str] = frozenset(
    {"nvidia", "amd", "hygon", "ascend", "thead", *_CTYPES_OPENERS}
)
"""Every manufacturer :func:`open_backend` has a backend for."""


def _open_ctypes_backend(manufacturer: str) -> Backend:
    """One of :data:`_CTYPES_OPENERS`; its load error names the library and every path tried."""
    opener = _CTYPES_OPENERS.get(manufacturer)
    if opener is None:
        raise LibraryUnavailableError(f"no backend for manufacturer {manufacturer!r} yet")
    try:
        return opener()
    except (OSError, RuntimeError) as exc:  # library absent, or present but failed to initialise
        raise LibraryUnavailableError(str(exc)) from exc
