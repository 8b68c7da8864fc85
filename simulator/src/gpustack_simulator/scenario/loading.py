"""Finding, parsing and loading scenario files.

Parsing runs the checks that need no recording (:mod:`.validation`), so a broken file fails at
load time with its path, the JSON path and the field; those needing recordings run in
:func:`~gpustack_simulator.scenario.expansion.expand`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from gpustack_core.decoding import ContractError, convert
from gpustack_kube.files import read_capped
from gpustack_simulator.scenario.schema import RECORDINGS_DIR, Scenario, ScenarioDocument
from gpustack_simulator.scenario.validation import check
from gpustack_simulator.yamlsafe import MAX_DOCUMENT_BYTES

SCENARIOS_DIR = Path(os.environ.get("GPUSTACK_SCENARIOS") or RECORDINGS_DIR / "scenarios")
"""Where a bare scenario name is looked up; ``GPUSTACK_SCENARIOS`` points elsewhere."""


def find_scenario(name_or_path: str) -> Path:
    """A path as given, or a bare name looked up as ``SCENARIOS_DIR/<name>.yaml``.

    A bare name keeps command lines and tests short (``nvidia-mixed``); anything that looks
    like a path is taken as one, so a scenario outside the repository works the same way.
    """
    looks_like_path = "/" in name_or_path or name_or_path.endswith((".yaml", ".yml"))
    path = Path(name_or_path) if looks_like_path else SCENARIOS_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in SCENARIOS_DIR.glob("*.yaml"))
        raise FileNotFoundError(
            f"no scenario {name_or_path!r} ({path}); scenarios in {SCENARIOS_DIR}: "
            + (", ".join(known) or "none")
        )
    return path


_SCHEMA_LINE = re.compile(r"^schema:[ \t]*(['\"]?)cluster-scenario/v1\1[ \t]*(#.*)?$", re.M)


def is_scenario(path: Path) -> bool:
    """Whether the file declares this schema, read from its top-level ``schema`` key only.

    Recordings and scenarios share a folder tree, and listing them must not parse every
    recording twice just to tell them apart.
    """
    try:
        data = read_capped(path, MAX_DOCUMENT_BYTES, "scenario")
    except OSError:
        return False  # too large or unreadable: the recording reader says which, in one line
    return _SCHEMA_LINE.search(data.decode(errors="replace")) is not None


def parse_scenario(data: str | bytes, *, source: str) -> Scenario:
    """Parse and check a scenario; every problem names ``source``, the path and the field."""
    try:
        # libyaml's loader where the install has it: the same safe constructors, about four
        # times faster, which a generated thousand-node fleet (``simulator fleet``) needs.
        document = yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise ContractError(f"{source}: not valid YAML ({exc})") from exc
    except RecursionError as exc:
        raise ContractError(f"{source}: nested too deeply to read") from exc
    parsed = convert(document, ScenarioDocument, what=source)
    problems = check(parsed)
    if problems:
        raise ContractError(f"{source}: " + "; ".join(problems))
    return Scenario(source=source, document=parsed)


def load_scenario(path: Path) -> Scenario:
    """Read a scenario file."""
    try:
        data = read_capped(path, MAX_DOCUMENT_BYTES, "scenario")
    except OSError as exc:
        raise ContractError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    return parse_scenario(data, source=str(path))


def recordings_for(path: Path) -> Path:
    """The folder a scenario's recording paths are relative to.

    A scenario kept in ``<dir>/scenarios/`` reads recordings from ``<dir>``, so a copied tree
    stays self-contained; one kept anywhere else reads the repository's recordings.
    """
    parent = path.resolve().parent
    return parent.parent if parent.name == "scenarios" else RECORDINGS_DIR
