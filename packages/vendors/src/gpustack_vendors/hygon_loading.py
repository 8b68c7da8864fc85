"""Opening Hygon's real libraries: ROCm SMI (required) and ``libhydmi_mig`` (optional).

ROCm SMI is the card and process source, so a node without it has no Hygon backend: the error
names the library and every path searched, on one line. ``libhydmi_mig`` only adds partitions;
a node without it (a DTK that predates MIG) is served without them, and detection says why.
"""

from __future__ import annotations

from gpustack_vendors.bindings import hydmi, hygon_rocm_smi
from gpustack_vendors.hygon import HygonBackend, HygonCallError


class HygonUnavailableError(RuntimeError):
    """Hygon's ROCm SMI cannot be loaded or initialised on this machine."""


def open_hygon_backend() -> HygonBackend:
    """Load both libraries lazily, from the usual paths or ``$ROCM_SMI_LIB``/``$HYDMI_MIG_LIB``."""
    try:
        rocm_smi = hygon_rocm_smi.load_library()
    except OSError as exc:
        raise HygonUnavailableError(f"hygon: {exc}") from exc
    dmi: hydmi.HyDmiMig | None = None
    missing = ""
    try:
        dmi = hydmi.load_library()
    except OSError as exc:
        missing = str(exc)
    try:
        return HygonBackend(rocm_smi, dmi, dmi_missing=missing)
    except HygonCallError as exc:
        raise HygonUnavailableError(f"hygon: ROCm SMI did not initialise: {exc}") from exc
