"""The release version: every place that states it, checked to agree, and set in one step.

The version lives in the seven workspace packages' ``pyproject.toml`` (``uv.lock`` records them),
``gpustack_core.__version__`` (what ``gpustack-operator --version`` prints), and the chart's
``version`` and ``appVersion`` (the image tag the chart deploys by default). Python packaging and
Helm each insist on a literal in their own file, so the version cannot live in one file without a
build step that every tool would have to run; instead this script is the one place that *changes*
it (``set``), and ``check`` — run by the tests and by the release workflow against the tag —
refuses any disagreement. Standard library only: the release job runs it with the runner's
Python, before any environment exists.

    python3 clusters/version.py check [EXPECTED]
    python3 clusters/version.py set NEW      # then: uv lock
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYPROJECTS = [
    *(
        REPO / "packages" / p / "pyproject.toml"
        for p in ("core", "vendors", "kube", "serving", "devicemanager", "worker", "cli")
    ),
    REPO / "simulator" / "pyproject.toml",
]
CORE_INIT = REPO / "packages" / "core" / "src" / "gpustack_core" / "__init__.py"
CHART = REPO / "clusters" / "chart" / "Chart.yaml"
VERSION = r"[0-9]+\.[0-9]+\.[0-9]+(?:[-+.][0-9A-Za-z.-]+)?"
PLACES: list[tuple[Path, str, re.Pattern[str]]] = [
    *((p, "version", re.compile(rf'^(version = ")({VERSION})(")$', re.M)) for p in PYPROJECTS),
    (CORE_INIT, "__version__", re.compile(rf'^(__version__ = ")({VERSION})(")$', re.M)),
    (CHART, "version", re.compile(rf"^(version: )({VERSION})()$", re.M)),
    (CHART, "appVersion", re.compile(rf'^(appVersion: ")({VERSION})(")$', re.M)),
]


def found() -> list[tuple[str, str]]:
    """``(place, version)`` for each place; a place that states none is an error."""
    result = []
    for path, key, pattern in PLACES:
        where = f"{path.relative_to(REPO)} {key}"
        matches = pattern.findall(path.read_text())
        if len(matches) != 1:
            raise SystemExit(f"{where}: expected one version, found {len(matches)}")
        result.append((where, matches[0][1]))
    return result


def check(expected: str | None = None) -> list[str]:
    """What disagrees: with ``expected`` if given, else with the first place."""
    places = found()
    want = expected if expected is not None else places[0][1]
    return [f"{place}: {version} (expected {want})" for place, version in places if version != want]


def set_version(new: str) -> None:
    """Write ``new`` into every place."""
    if not re.fullmatch(VERSION, new):
        raise SystemExit(f"not a version: {new!r}")
    for path, _, pattern in PLACES:
        path.write_text(pattern.sub(lambda m: m[1] + new + m[3], path.read_text()))


def main(argv: list[str]) -> int:
    """``check [EXPECTED]`` (exit 1 on any disagreement) or ``set NEW``."""
    if len(argv) >= 1 and argv[0] == "set" and len(argv) == 2:
        set_version(argv[1])
        return 0
    if len(argv) >= 1 and argv[0] == "check" and len(argv) <= 2:
        problems = check(argv[1] if len(argv) == 2 else None)
        for problem in problems:
            print(problem)
        return 1 if problems else 0
    print(__doc__.strip().splitlines()[-2].strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
