"""Build (or find cached) the real control plane's binaries from the committed Go modules.

    python3 clusters/controlplane/build.py [--print-dir] [component ...]

Components: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd, kueue,
nfd-master, prom-label-proxy, metrics-server (default: all).
Binaries land in ``.tools/controlplane/<key>/`` where ``<key>`` hashes the module's go.mod, go.sum,
its sources and ``go version``: a change to a pin is a new key, never a stale binary. A clean
clone (CI) finds earlier builds through ``$GPUSTACK_CACHE`` (default
``~/.cache/gpustack-operator``), where each finished binary is also kept, and Go's own build and
module caches (``GOCACHE``, ``GOMODCACHE``) stay where Go keeps them, so a rebuild after a pin
change is incremental.
Each build records its wall time and peak memory (``build.json`` beside the binaries).
Standard library only.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from gomod import KUBERNETES  # noqa: E402

#: component -> (module directory, package to build, extra ldflags)
_VERSION_PKG = "k8s.io/component-base/version"


def _kube_ldflags() -> str:
    major, minor, _ = KUBERNETES.lstrip("v").split(".")
    return " ".join(
        [
            f"-X {_VERSION_PKG}.gitVersion={KUBERNETES}",
            f"-X {_VERSION_PKG}.gitMajor={major}",
            f"-X {_VERSION_PKG}.gitMinor={minor}",
            f"-X {_VERSION_PKG}.gitTreeState=clean",
        ]
    )


COMPONENTS: dict[str, tuple[str, str]] = {
    "kube-apiserver": ("kubernetes", "k8s.io/kubernetes/cmd/kube-apiserver"),
    "kube-controller-manager": ("kubernetes", "k8s.io/kubernetes/cmd/kube-controller-manager"),
    "kube-scheduler": ("kubernetes", "k8s.io/kubernetes/cmd/kube-scheduler"),
    # The client at the server's version: kubectl supports one minor version of skew.
    "kubectl": ("kubernetes", "k8s.io/kubernetes/cmd/kubectl"),
    "etcd": ("etcd", "."),
    "kueue": ("kueue", "sigs.k8s.io/kueue/cmd/kueue"),
    "nfd-master": ("nfd", "sigs.k8s.io/node-feature-discovery/cmd/nfd-master"),
    # Query-time tenant isolation in front of a Prometheus (docs/multi-tenant-metrics.md).
    "prom-label-proxy": ("promlabelproxy", "github.com/prometheus-community/prom-label-proxy"),
    # The aggregated metrics.k8s.io API clusters run: the worker's peer in docs/performance.md.
    "metrics-server": ("metricsserver", "sigs.k8s.io/metrics-server/cmd/metrics-server"),
}


def _go_version() -> str:
    done = subprocess.run(["go", "env", "GOVERSION"], check=True, capture_output=True, text=True)
    return done.stdout.strip()


def cache_key(component: str) -> str:
    """A digest of everything the binary is built from (module files, our sources, Go)."""
    module_dir = HERE / COMPONENTS[component][0]
    h = hashlib.sha256()
    h.update(component.encode() + b"\0" + _go_version().encode() + b"\0")
    h.update(_kube_ldflags().encode())
    for path in sorted(module_dir.iterdir()):
        if path.suffix in {".mod", ".sum", ".go"}:
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def tools_dir() -> Path:
    """Where this checkout keeps its binaries (ignored by git)."""
    return REPO / ".tools" / "controlplane"


def shared_cache() -> Path:
    """Where every checkout on this machine (a CI clone too) finds binaries already built."""
    base = os.environ.get("GPUSTACK_CACHE") or Path.home() / ".cache" / "gpustack-operator"
    return Path(base) / "controlplane"


def binary_path(component: str) -> Path:
    """The binary's path under this checkout, keyed by what it is built from."""
    return tools_dir() / cache_key(component) / component


def build(component: str) -> Path:
    """The binary for ``component``: the checkout's, else the shared cache's, else built now.

    One build per key at a time (an exclusive lock in the shared cache): two callers, say a
    test run and a ``simulator up``, wait for each other instead of racing on the same files.
    """
    target = binary_path(component)
    if target.is_file():
        return target
    lock_dir = shared_cache()
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{target.parent.name}-{component}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():  # built by whoever held the lock
            return target
        return _build_locked(component, target)


def _build_locked(component: str, target: Path) -> Path:
    """Copy from the shared cache, or build; every file appears whole (a rename)."""
    key = target.parent.name
    cached = shared_cache() / key / component
    target.parent.mkdir(parents=True, exist_ok=True)
    if cached.is_file():
        part = target.with_name(f"{component}.{os.getpid()}.part")
        shutil.copy2(cached, part)
        part.replace(target)
        return target
    module, package = COMPONENTS[component]
    ldflags = "-s -w " + (_kube_ldflags() if module == "kubernetes" else "")
    tmp = target.with_name(f"{component}.{os.getpid()}.part")
    started = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"build: {component} from clusters/controlplane/{module}", file=sys.stderr, flush=True)
    subprocess.run(
        ["go", "build", "-trimpath", "-ldflags", ldflags.strip(), "-o", str(tmp), package],
        check=True,
        cwd=HERE / module,
        env={**os.environ, "CGO_ENABLED": "0"},
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    tmp.replace(target)
    record = {
        "component": component,
        "key": key,
        "wallSeconds": round(time.monotonic() - started, 1),
        "cpuSeconds": round(
            (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), 1
        ),
        # ru_maxrss of children is the largest single child (the compiler or the linker), in KiB.
        "peakChildRssMiB": round(after.ru_maxrss / 1024),
        "bytes": target.stat().st_size,
    }
    (target.parent / f"{component}.build.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"build: {json.dumps(record)}", file=sys.stderr, flush=True)
    cached.parent.mkdir(parents=True, exist_ok=True)
    part = cached.with_name(f"{component}.{os.getpid()}.part")
    shutil.copy2(target, part)
    part.replace(cached)
    return target


def main(argv: list[str]) -> int:
    """Build the named components (all by default); ``--print-dir`` prints ``name=path``."""
    print_dir = "--print-dir" in argv
    names = [a for a in argv if not a.startswith("--")] or list(COMPONENTS)
    unknown = [n for n in names if n not in COMPONENTS]
    if unknown:
        print(f"build: unknown {unknown}; known: {sorted(COMPONENTS)}", file=sys.stderr)
        return 2
    if shutil.which("go") is None:
        print("build: go not found on PATH (Go 1.26 builds the control plane)", file=sys.stderr)
        return 3
    for name in names:
        path = build(name)
        if print_dir:
            print(f"{name}={path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
