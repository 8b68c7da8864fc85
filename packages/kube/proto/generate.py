"""Regenerate the committed kubelet API modules from the ``.proto`` files beside this script.

``python packages/kube/proto/generate.py [OUT]`` writes ``*_pb2.py``, ``*_pb2.pyi`` and
``*_pb2_grpc.py`` under ``OUT`` (default: the package's ``src``). The protos are mapped onto the
import path ``gpustack_kube/kubeletapi`` so the generated gRPC module imports its
messages as a package module rather than as a top-level one that would not resolve. The test
``tests/unit/kube/test_kubeletapi_generated.py`` runs this into a temporary directory and compares.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = "gpustack_kube/kubeletapi"
PROTOS = ("deviceplugin_v1beta1.proto", "podresources_v1.proto")
DEFAULT_OUT = HERE.parent / "src"


def generate(out: Path) -> list[Path]:
    """Run protoc (from grpcio-tools) into ``out``; the written module paths, or an error."""
    from grpc_tools import protoc  # type: ignore[import-untyped]  # noqa: PLC0415 - dev tool

    (out / PACKAGE).mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PACKAGE}={HERE}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *(f"{PACKAGE}/{name}" for name in PROTOS),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed: {' '.join(args)}")
    return sorted(
        out / PACKAGE / f"{Path(name).stem}{suffix}"
        for name in PROTOS
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
    )


if __name__ == "__main__":
    for path in generate(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT):
        print(path)
