"""The import contracts between the project's packages, checked from the source (``just lint``).

``docs/architecture.md`` explains them beside the data paths they keep apart.

- ``gpustack_core`` imports nothing of ours, and nothing that does I/O: it is pure contracts and
  arithmetic, used by every daemon, so a figure means the same thing wherever it is computed.
- ``gpustack_vendors`` imports only core: a backend is handed its binding and knows no daemon.
- ``gpustack_kube`` imports only core: the cluster client serves both daemons.
- ``gpustack_serving`` imports only core and kube: what both daemons' secure ports share.
- The daemons (``gpustack_devicemanager``, ``gpustack_worker``) never import each other, the
  simulator or the CLI.
- The simulator imports no daemon and no CLI (it serves its stand-ins through
  ``gpustack_serving``, as the daemons do); only the CLI composes everything. The one
  exception is a module that plugs *into* a daemon (:data:`PLUGINS`): it may read that daemon's
  types and parsers, and the CLI hands it to the daemon through a seam the daemon declares.
- Core does no I/O: besides the modules in :data:`NO_IO`, it calls none of the builtins that
  reach a file or the terminal (:data:`IO_BUILTINS`).
- Every ``gpustack_*`` package in the workspace has a contract here, and every ``gpustack_*``
  import names one of them: a new package cannot sidestep the check by being unlisted.
- The simulator restates no contract: no string or integer literal in ``gpustack_simulator``
  equals a value of ``gpustack_core.contract`` (:func:`contract_values`), so a stand-in cannot
  keep answering with a name the daemons no longer use. It imports the constant instead.

Every ``import``/``from`` statement is read with :mod:`ast` (function-local imports included),
so a lazy import cannot slip past. Exit 1 with one line per violation.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
OURS: Final = (
    "gpustack_core",
    "gpustack_vendors",
    "gpustack_kube",
    "gpustack_serving",
    "gpustack_devicemanager",
    "gpustack_worker",
    "gpustack_simulator",
    "gpustack_cli",
)
ALLOWED: Final[dict[str, frozenset[str]]] = {
    "gpustack_core": frozenset(),
    "gpustack_vendors": frozenset({"gpustack_core"}),
    "gpustack_kube": frozenset({"gpustack_core"}),
    "gpustack_serving": frozenset({"gpustack_core", "gpustack_kube"}),
    "gpustack_devicemanager": frozenset(
        {"gpustack_core", "gpustack_kube", "gpustack_serving", "gpustack_vendors"}
    ),
    "gpustack_worker": frozenset({"gpustack_core", "gpustack_kube", "gpustack_serving"}),
    "gpustack_simulator": frozenset(
        {"gpustack_core", "gpustack_kube", "gpustack_serving", "gpustack_vendors"}
    ),
    "gpustack_cli": frozenset(OURS),
}
PLUGINS: Final[dict[str, frozenset[str]]] = {
    # Binds a replay's PIDs to live processes as the Device Manager's attribution reads them
    # (its cgroup and Pod-view parsers); plugged in by the CLI as ServeOptions.monitor_wrapper.
    "gpustack_simulator.pidbind": frozenset({"gpustack_devicemanager"}),
}
"""Modules allowed one more package than their own package's contract: plug-ins of a daemon."""
NO_IO: Final = frozenset(
    {
        "aiofiles",
        "anyio",
        "asyncio",
        "ctypes",
        "fcntl",
        "glob",
        "grpc",
        "http",
        "httpx",
        "io",
        "kubernetes",
        "mmap",
        "multiprocessing",
        "os",
        "pathlib",
        "requests",
        "select",
        "selectors",
        "shutil",
        "signal",
        "socket",
        "sqlite3",
        "ssl",
        "subprocess",
        "tempfile",
        "trio",
        "urllib",
    }
)
"""Top-level modules core may not import: each exists to reach a file, a socket or a process."""
IO_BUILTINS: Final = frozenset({"open", "input", "print", "breakpoint"})
"""Builtins core may not call: each reads or writes a file or the terminal."""


CONTRACT: Final = ROOT / "packages" / "core" / "src" / "gpustack_core" / "contract.py"
GENERIC: Final = frozenset({"v1", "v1alpha1", "gpustack.ai", "device-manager", "disabled"})
"""Contract values that are also plain words of Kubernetes or of the simulator itself (the core
API's ``v1``, NFD's ``v1alpha1``, a container named ``device-manager``): a literal equal to one
is not taken for a restated contract. Composed, they are (:func:`contract_values`)."""
RESTATING: Final = ("gpustack_simulator",)
"""Packages that may not write a contract value out (:func:`restated`)."""


def contract_values() -> dict[str | int, str]:
    """Each distinctive value of ``gpustack_core.contract`` → the constant that holds it.

    The module imports nothing (its docstring says so), so it is loaded from its file; the API
    versions it spells in two parts (``worker.gpustack.ai/v1alpha1``) are added whole.
    """
    spec = importlib.util.spec_from_file_location("_contract", CONTRACT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found: dict[str | int, str] = {}
    for name, value in vars(module).items():
        if name.isupper() and type(value) in (str, int) and value not in GENERIC:
            found.setdefault(value, name)
    for group, version in (("API_GROUP", "CRD_VERSION"), ("API_GROUP", "API_VERSION"),
                           ("SETTINGS_API_GROUP", "SETTINGS_API_VERSION")):  # fmt: skip
        whole = f"{getattr(module, group)}/{getattr(module, version)}"
        found.setdefault(whole, f"{group}/{version}")
    return found


def restated(path: Path, values: dict[str | int, str]) -> Iterator[tuple[int, str]]:
    """``(line, constant)`` for every literal (docstrings aside) equal to a contract value."""
    tree = ast.parse(path.read_text(), filename=str(path))
    prose = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in prose:
            continue
        value = node.value
        if (
            isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
        ) and (value in values):
            yield node.lineno, values[value]


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


def builtin_calls(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, name)`` for every call of a bare name among :data:`IO_BUILTINS`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in IO_BUILTINS
        ):
            yield node.lineno, node.func.id


def module_name(path: Path, package: str) -> str:
    """The dotted name of a module found by :func:`sources` (``gpustack_simulator.pidbind``)."""
    parts = path.with_suffix("").parts
    dotted = list(parts[len(parts) - 1 - parts[::-1].index(package) :])
    if dotted[-1] == "__init__":
        dotted.pop()
    return ".".join(dotted)


def unlisted() -> list[str]:
    """One line per workspace ``gpustack_*`` package without a contract in :data:`ALLOWED`."""
    found: list[str] = []
    for base in (ROOT / "packages", ROOT / "simulator"):
        for src in sorted(base.glob("**/src/gpustack_*")):
            if src.is_dir() and src.name not in ALLOWED:
                where = src.relative_to(ROOT)
                found.append(f"{where}: {src.name} has no layer contract in tests/lint/layers.py")
    return found


def violations() -> list[str]:
    """One line per import (or core I/O call) that breaks a contract."""
    found: list[str] = unlisted()
    values = contract_values()
    for package, allowed in ALLOWED.items():
        for path in sources(package):
            where = path.relative_to(ROOT)
            permitted = allowed | PLUGINS.get(module_name(path, package), frozenset())
            for line, module in imported(path):
                if module.startswith("gpustack_") and module not in OURS:
                    found.append(f"{where}:{line}: {module} is no package of the layer contracts")
                elif module in OURS and module != package and module not in permitted:
                    found.append(f"{where}:{line}: {package} may not import {module}")
                if package == "gpustack_core" and module in NO_IO:
                    found.append(f"{where}:{line}: gpustack_core does no I/O; {module} is I/O")
            if package == "gpustack_core":
                for line, name in builtin_calls(path):
                    found.append(f"{where}:{line}: gpustack_core does no I/O; {name}() is I/O")
            if package in RESTATING:
                for line, name in restated(path, values):
                    found.append(
                        f"{where}:{line}: {package} restates gpustack_core.contract.{name}; "
                        "import it"
                    )
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
