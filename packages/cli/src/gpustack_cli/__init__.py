"""The ``gpustack-operator`` console script.

httpx's package ``__init__`` imports its own command-line client (``httpx._main``) whenever
click, rich and pygments are installed, and typer brings all three: about 200 ms of imports in
every daemon process, for a command nobody runs from here. A ``None`` entry in ``sys.modules``
makes that import raise ``ImportError``, which httpx already handles by defining a stub
``main``; nothing else about httpx changes. ``setdefault`` leaves an already-imported httpx
alone.
"""

import sys

sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
