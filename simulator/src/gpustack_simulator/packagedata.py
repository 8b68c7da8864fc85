"""Where the simulator's data lies: inside the package, so it is there wherever it is installed.

``data/crds`` and ``data/recordings`` are links to the repository's one copy
(``clusters/crds``, ``recordings``); building the wheel follows them, so an installed simulator
carries the files themselves and no module finds data by counting parent folders up to a
checkout. Resolved, in a checkout the paths are the repository's own (what scenarios and their
error messages have always named).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

DATA: Final = Path(__file__).resolve().parent / "data"
RECORDINGS: Final = (DATA / "recordings").resolve()
"""The committed recordings and scenarios (``recordings/``)."""
CRDS: Final = (DATA / "crds").resolve()
"""The project's CustomResourceDefinitions (``clusters/crds/``), which the stand-in serves."""


def crd(plural: str) -> Path:
    """The CRD file of ``<plural>.worker.gpustack.ai`` (``instances``, ``devices``, …)."""
    return CRDS / f"{plural}.worker.gpustack.ai.yaml"
