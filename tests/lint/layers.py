"""The import contracts between the project's packages, checked from the source (``just lint``).

- ``gpustack_core`` imports nothing of ours, and nothing that does I/O: it is pure contracts and
  arithmetic, used by every daemon, so a figure means the same thing wherever it is computed.
- ``gpustack_vendors`` imports only core: a backend is handed its binding and knows no daemon.
- ``gpustack_kube`` imports only core: the cluster client serves both daemons.
- The daemons (``gpustack_devicemanager``, ``gpustack_worker``) never import each other, the
  simulator or the CLI.
- The simulator imports no daemon and no CLI; only the CLI composes everything.

Every ``import``/``from`` statement is read with :mod:`ast` (function-local imports included),
so a lazy import cannot slip past. Exit 1 with one line per violation.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
OURS: Final = (
    "gpustack_core",
    "gpustack_vendors",
    "gpustack_kube",
    "gpustack_devicemanager",
    "gpustack_worker",
    "gpustack_simulator",
    "gpustack_cli",
)
ALLOWED: Final[dict[str, frozenset[str]]] = {
    "gpustack_core": frozenset(),
    "gpustack_vendors": frozenset({"gpustack_core"}),
    "gpustack_kube": frozenset({"gpustack_core"}),
    "gpustack_devicemanager": frozenset({"gpustack_core", "gpustack_kube", "gpustack_vendors"}),
    "gpustack_worker": frozenset({"gpustack_core", "gpustack_kube"}),
    "gpustack_simulator": frozenset({"gpustack_core", "gpustack_kube", "gpustack_vendors"}),
    "gpustack_cli": frozenset(OURS),
}
NO_IO: Final = frozenset(
    {
        "asyncio",
        "ctypes",
        "http",
        "httpx",
        "io",
        "os",
        "pathlib",
        "requests",
        "shutil",
        "socket",
        "ssl",
        "subprocess",
        "tempfile",
        "trio",
        "urllib",
    }
)
"""Top-level modules core may not import: each exists to reach a file, a socket or a process."""


def sources(package: str) -> Iterator[Path]:
    """Every module of ``package`` in the workspace."""
    for base in (ROOT / "packages", ROOT / "simulator"):
        for found in base.glob(f"**/src/{package}"):
            yield from sorted(found.rglob("*.py"))


def imported(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, top-level module)`` for every absolute import in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]


def violations() -> list[str]:
    """One line per import that breaks a contract."""
    found: list[str] = []
    for package, allowed in ALLOWED.items():
        for path in sources(package):
            where = path.relative_to(ROOT)
            for line, module in imported(path):
                if module in OURS and module != package and module not in allowed:
                    found.append(f"{where}:{line}: {package} may not import {module}")
                if package == "gpustack_core" and module in NO_IO:
                    found.append(f"{where}:{line}: gpustack_core does no I/O; {module} is I/O")
    return found


def main() -> int:
    """Print each violation; exit 1 if there is any."""
    problems = violations()
    for problem in problems:
        print(problem, file=sys.stderr)
    checked = sum(1 for package in ALLOWED for _ in sources(package))
    print(f"layers: {checked} modules, {len(problems)} violations")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
