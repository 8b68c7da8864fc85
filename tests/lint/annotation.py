"""The Pod allocation annotation is read in one place, checked from the source (``just lint``).

``device.gpustack.ai/accelerator.allocated`` is written by the device plugin and read by the
Device Manager, the worker and the simulator. It used to be parsed at seven sites with four
error policies; now :func:`gpustack_core.allocation.read_allocation` is the one reader, and
everything downstream takes its typed grants. This check keeps it so, in every module under
``packages/*/src`` and ``simulator/src``:

- Only ``gpustack_core/allocation.py`` names ``parse_allocation`` (the text decoder the reader
  wraps): anyone else holding the annotation's text would be a second parse site.
- Outside ``gpustack_core/contract.py`` (its definition) and ``gpustack_core/allocation.py``
  (the reader), the annotation key may appear only where the value is *written* or its
  presence tested: a key of a dict literal, the target of a subscript assignment, an operand of
  ``in``/``not in``. Any other use (``annotations.get(KEY)``, ``annotations[KEY]``, passing the
  key on) reads the text, and is reported — unless the file is in :data:`EXEMPT` with a reason.
- The key's literal text appears only in ``gpustack_core/contract.py`` (one place per fact).

The key is recognised as ``ALLOCATION_ANNOTATION`` (a name or an attribute) and as the
``ANNOTATION`` alias of ``gpustack_core.allocation`` (imported by name, or as
``allocation.ANNOTATION``). Exit 1 with one line per violation.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
KEY: Final = "device.gpustack.ai/accelerator.allocated"
DEFINITION: Final = "gpustack_core/contract.py"
READER: Final = "gpustack_core/allocation.py"
DECODER: Final = "parse_allocation"
EXEMPT: Final[dict[str, str]] = {
    "gpustack_worker/held.py": (
        "lists the key among the annotations the Instance controller keeps on the Pods it "
        "holds; it copies the value for allocations_of, which reads it through the reader"
    ),
}
"""Module (``package/path.py``) → why it may name the key in a reading position."""


def sources() -> Iterator[Path]:
    """Every module of every workspace package (``packages/*/src``, ``simulator/src``)."""
    for base in (ROOT / "packages", ROOT / "simulator"):
        for src in sorted(base.glob("**/src")):
            yield from sorted(src.rglob("*.py"))


def _module(path: Path) -> str:
    """``gpustack_core/allocation.py`` for ``…/src/gpustack_core/allocation.py``."""
    parts = path.parts
    return "/".join(parts[len(parts) - 1 - parts[::-1].index("src") + 1 :])


def _aliases(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Names bound to the key, and names bound to the ``gpustack_core.allocation`` module."""
    key_names = {"ALLOCATION_ANNOTATION"}
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "gpustack_core.allocation":
            key_names.update(a.asname or a.name for a in node.names if a.name == "ANNOTATION")
        elif isinstance(node, ast.ImportFrom) and node.module == "gpustack_core":
            modules.update(a.asname or a.name for a in node.names if a.name == "allocation")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "gpustack_core.allocation" and alias.asname:
                    modules.add(alias.asname)
    return key_names, modules


def _is_key(node: ast.AST, key_names: set[str], modules: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in key_names
    if isinstance(node, ast.Attribute):
        if node.attr == "ALLOCATION_ANNOTATION":
            return True
        return node.attr == "ANNOTATION" and (
            (isinstance(node.value, ast.Name) and node.value.id in modules)
            or ast.unparse(node.value) == "gpustack_core.allocation"
        )
    return False


def _writes(node: ast.AST, parent: ast.AST | None) -> bool:
    """Whether the key at ``node`` is written or tested for presence, not read."""
    if isinstance(parent, ast.Dict):
        return any(k is node for k in parent.keys)
    if isinstance(parent, ast.Subscript):
        return parent.slice is node and isinstance(parent.ctx, ast.Store)
    if isinstance(parent, ast.Compare):
        ops = [parent.left, *parent.comparators]
        at = next(i for i, operand in enumerate(ops) if operand is node)
        near = [parent.ops[i] for i in (at - 1, at) if 0 <= i < len(parent.ops)]
        return bool(near) and all(isinstance(op, ast.In | ast.NotIn) for op in near)
    return False


def problems_in(path: Path, module: str) -> Iterator[tuple[int, str]]:
    """``(line, what)`` for each way ``path`` reads the annotation other than the reader."""
    tree = ast.parse(path.read_text(), filename=str(path))
    if module == DEFINITION:
        return
    parents: dict[ast.AST, ast.AST] = {
        child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)
    }
    key_names, modules = _aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value == KEY:
            yield node.lineno, "restates the annotation key; use contract.ALLOCATION_ANNOTATION"
        if module == READER:
            continue
        named = (
            (isinstance(node, ast.Name) and node.id == DECODER)
            or (isinstance(node, ast.Attribute) and node.attr == DECODER)
            or (isinstance(node, ast.alias) and node.name == DECODER)
        )
        if named:
            yield (
                getattr(node, "lineno", 0),
                f"{DECODER} is the reader's own decoder; call "
                "gpustack_core.allocation.read_allocation",
            )
        elif (
            _is_key(node, key_names, modules)
            and module not in EXEMPT
            and not _writes(node, parents.get(node))
        ):
            yield (
                getattr(node, "lineno", 0),
                "reads the allocation annotation; only "
                "gpustack_core.allocation.read_allocation may",
            )


def violations() -> list[str]:
    """One line per place that reads the allocation annotation besides the one reader."""
    found: list[str] = []
    for path in sources():
        module = _module(path)
        where = path.relative_to(ROOT)
        found.extend(f"{where}:{line}: {what}" for line, what in problems_in(path, module))
    return found


def main() -> int:
    """Print each violation; exit 1 if there is any."""
    problems = violations()
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"annotation: {sum(1 for _ in sources())} modules, {len(problems)} violations")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
