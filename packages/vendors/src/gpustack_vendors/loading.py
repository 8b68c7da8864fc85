"""Opening the real vendor library for a manufacturer, for the Device Manager.

Which libraries a manufacturer has and how each is opened is :mod:`gpustack_vendors.registry`;
this module adds what a Device Manager in a Pod needs on top: a failure's message names the
chart value that brings the library into the Pod.
"""

from __future__ import annotations

from gpustack_vendors.protocol import Backend
from gpustack_vendors.registry import (
    VENDORS,
    LibraryUnavailableError,
    import_quietly,
    open_bindings,
    start,
    vendor,
)

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
    """Open the real libraries for ``manufacturer`` and hand them to that manufacturer's backend.

    A failure's message ends with :func:`chart_hint`; a manufacturer without a backend has none.
    """
    entry = vendor(manufacturer)
    try:
        return start(entry, open_bindings(entry))
    except LibraryUnavailableError as exc:
        raise LibraryUnavailableError(f"{exc}; {chart_hint(manufacturer)}") from exc


__all__ = [
    "CHART_HINTS",
    "VENDORS",
    "LibraryUnavailableError",
    "chart_hint",
    "import_quietly",
    "open_backend",
]
