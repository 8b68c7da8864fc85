"""Opening the real vendor library for a manufacturer, for the Device Manager.

Which libraries a manufacturer has and how each is opened is :mod:`gpustack_vendors.registry`;
this module adds what a Device Manager in a Pod needs on top: a failure's message names the
chart value that brings the library into the Pod.
"""

from __future__ import annotations

from gpustack_core.manufacturers import maker
from gpustack_vendors.protocol import Backend
from gpustack_vendors.registry import (
    VENDORS,
    LibraryUnavailableError,
    import_quietly,
    open_bindings,
    start,
    vendor,
)


def chart_hint(manufacturer: str) -> str:
    """The chart value that brings ``manufacturer``'s library into the Device Manager's Pod.

    A Pod that cannot open its library crash-loops with this message in its log, so the message
    names the value to set rather than leaving the operator to map a ``.so`` name to the chart.
    The manufacturer's row (:mod:`gpustack_core.manufacturers`) may say what instead (NVIDIA:
    its container toolkit); the others share the ``libraryPath`` advice.
    """
    row = maker(manufacturer)
    if row is not None and row.chart_hint is not None:
        return row.chart_hint
    return (
        f"in the Helm chart, set deviceManager.manufacturers.{manufacturer}.libraryPath to the "
        'host directory that holds it (docs/deploy.md, "Vendor libraries")'
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
    "VENDORS",
    "LibraryUnavailableError",
    "chart_hint",
    "import_quietly",
    "open_backend",
]
