"""Commands printed for the user to type next, spelled so they run from where they stand.

``gpustack-operator`` is installed in ``.venv/bin``, which is on nobody's ``PATH`` (``./dev``
and ``uv run`` find it there; a shell does not), so a hint naming it bare would fail as typed.
"""

from __future__ import annotations

import sys
from pathlib import Path


def self_command() -> str:
    """The console script as a path the user can type from the working directory.

    ``./dev demo`` runs from the checkout: ``.venv/bin/gpustack-operator``. A script outside
    the working directory is named by its absolute path; ``python -m gpustack_cli`` by the
    interpreter that ran it.
    """
    script = Path(sys.argv[0])
    if script.name != "gpustack-operator" or not script.is_file():
        return f"{sys.executable} -m gpustack_cli"
    absolute, here = script.absolute(), Path.cwd()
    return str(absolute.relative_to(here)) if absolute.is_relative_to(here) else str(absolute)


__all__ = ["self_command"]
