"""Where the control plane's binaries are: built (or found cached) by ``clusters/controlplane``.

The build lives in the repository (``clusters/controlplane/build.py``, standard library only)
because it is the project's, not the simulator's; the simulator only asks it for paths. A
directory named by ``GPUSTACK_CONTROLPLANE_BIN`` (each binary by its component name) wins, so
a machine with binaries from elsewhere can use them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kueue",
    "nfd-master",
    "metrics-server",
)
BUILD_SCRIPT = Path("clusters") / "controlplane" / "build.py"


class BinariesError(Exception):
    """The binaries cannot be found or built; the message says what to do."""


def repository_root(start: Path | None = None) -> Path | None:
    """The checkout this package runs from (the folder holding ``clusters/controlplane``)."""
    here = (start or Path(__file__)).resolve()
    for parent in here.parents:
        if (parent / BUILD_SCRIPT).is_file():
            return parent
    return None


def locate(components: tuple[str, ...] = COMPONENTS) -> dict[str, Path]:
    """Each component's binary; builds what is missing (minutes cold, seconds cached)."""
    given = os.environ.get("GPUSTACK_CONTROLPLANE_BIN")
    if given:
        found = {c: Path(given) / c for c in components}
        missing = [str(p) for p in found.values() if not os.access(p, os.X_OK)]
        if missing:
            raise BinariesError(f"GPUSTACK_CONTROLPLANE_BIN lacks {', '.join(missing)}")
        return found
    root = repository_root()
    if root is None:
        raise BinariesError(
            "the control plane is built from the repository's clusters/controlplane; "
            "run from a checkout or set GPUSTACK_CONTROLPLANE_BIN"
        )
    if shutil.which("go") is None:
        raise BinariesError("go is not on PATH: Go 1.26 builds the real control plane")
    done = subprocess.run(
        [sys.executable, str(root / BUILD_SCRIPT), "--print-dir", *components],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise BinariesError(f"building the control plane failed:\n{tail}")
    paths = dict(line.split("=", 1) for line in done.stdout.split() if "=" in line)
    return {c: Path(paths[c]) for c in components}


def module_source(module: Path, path: str, needs: str) -> Path:
    """``path``'s source in Go's module cache, the version the Go module ``module`` builds.

    ``needs``: a folder the source must hold (the manifests read from it); ``BinariesError``
    says what Go answered when it is missing.
    """
    done = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", path],
        cwd=module,
        capture_output=True,
        text=True,
        check=False,
    )
    found = Path(done.stdout.strip())
    if done.returncode != 0 or not (found / needs).is_dir():
        raise BinariesError(f"cannot find {path}'s source: {done.stderr.strip()}")
    return found
