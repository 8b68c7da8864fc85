"""The allocation-annotation check finds a second reader, and the tree has none."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

CHECK = Path(__file__).resolve().parents[1] / "lint" / "annotation.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("annotation_check", CHECK)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["annotation_check"] = module
    spec.loader.exec_module(module)
    return module


def _plant(root: Path, module: str, text: str) -> None:
    path = root / "packages" / "x" / "src" / module
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_tree_reads_the_annotation_in_one_place() -> None:
    assert _load().violations() == []


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "from gpustack_core import contract\n"
            "def f(a):\n    return a.get(contract.ALLOCATION_ANNOTATION)\n",
            "reads the allocation annotation",
        ),
        (
            "from gpustack_core.allocation import ANNOTATION as KEY\n"
            "def f(a):\n    return a[KEY]\n",
            "reads the allocation annotation",
        ),
        (
            "from gpustack_core import allocation\n"
            "def f(a):\n    return a.get(allocation.ANNOTATION, '')\n",
            "reads the allocation annotation",
        ),
        (
            "import json\nfrom gpustack_core.contract import ALLOCATION_ANNOTATION\n"
            "def f(meta):\n    return json.loads(meta['annotations'][ALLOCATION_ANNOTATION])\n",
            "reads the allocation annotation",
        ),
        (
            "from gpustack_core.allocation import parse_allocation\n",
            "parse_allocation is the reader's own decoder",
        ),
        (
            "from gpustack_core import allocation\n"
            "def f(t):\n    return allocation.parse_allocation(t)\n",
            "parse_allocation is the reader's own decoder",
        ),
        (
            "KEY = 'device.gpustack.ai/accelerator.allocated'\n",
            "restates the annotation key",
        ),
    ],
)
def test_a_second_reader_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, needle: str
) -> None:
    check = _load()
    monkeypatch.setattr(check, "ROOT", tmp_path)
    _plant(tmp_path, "gpustack_worker/bad.py", text)
    problems = check.violations()
    assert problems
    assert all(p.startswith("packages/x/src/gpustack_worker/bad.py:") for p in problems)
    assert any(needle in p for p in problems)


def test_writing_and_presence_tests_are_not_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check = _load()
    monkeypatch.setattr(check, "ROOT", tmp_path)
    _plant(
        tmp_path,
        "gpustack_devicemanager/writer.py",
        "from gpustack_core import contract\n"
        "from gpustack_core.allocation import read_allocation\n"
        "def write(text, a):\n"
        "    patch = {'metadata': {'annotations': {contract.ALLOCATION_ANNOTATION: text}}}\n"
        "    a[contract.ALLOCATION_ANNOTATION] = text\n"
        "    return patch, contract.ALLOCATION_ANNOTATION in a, read_allocation(a, pod='n/p')\n",
    )
    assert check.violations() == []


def test_only_the_reader_and_the_definition_are_exempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check = _load()
    monkeypatch.setattr(check, "ROOT", tmp_path)
    read = (
        "from gpustack_core import contract\n"
        "from gpustack_core.allocation import parse_allocation\n"
        "def f(a):\n    return parse_allocation(a[contract.ALLOCATION_ANNOTATION])\n"
    )
    _plant(tmp_path, "gpustack_core/allocation.py", read)
    _plant(
        tmp_path, "gpustack_core/contract.py", "K = 'device.gpustack.ai/accelerator.allocated'\n"
    )
    assert check.violations() == []
    _plant(tmp_path, "gpustack_core/ledger.py", read)
    assert len(check.violations()) == 3  # the import, the call, the key


def test_the_checker_exits_1_on_a_violation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    check = _load()
    monkeypatch.setattr(check, "ROOT", tmp_path)
    assert check.main() == 0
    _plant(
        tmp_path,
        "gpustack_worker/bad.py",
        "from gpustack_core.allocation import parse_allocation\n",
    )
    assert check.main() == 1
    assert "bad.py:1:" in capsys.readouterr().err
