"""Write the Instance, InstanceType and InstanceTypeFlavor CRDs' schemas from their structs.

``openAPIV3Schema`` in ``clusters/crds/instances.worker.gpustack.ai.yaml`` is generated from
``gpustack_core.instance`` through ``gpustack_worker.openapi.instance_crd_schema``, the
InstanceType's from ``gpustack_core.instancetype`` and the InstanceTypeFlavor's from
``gpustack_core.instancetypeflavor`` (``just instance-crd``); the rest of each file (names,
versions, printer columns, the header) is kept as written. ``--write`` rewrites the CRDs and
their chart copies; without it the script exits 1 when any differs, which the tests check too.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from gpustack_worker.openapi import (
    instance_crd_schema,
    instancetype_crd_schema,
    instancetypeflavor_crd_schema,
)

REPO = Path(__file__).resolve().parents[1]
CRDS = REPO / "clusters" / "crds"
CHART_CRDS = REPO / "clusters" / "chart" / "crds"
SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "instances.worker.gpustack.ai.yaml": instance_crd_schema,
    "instancetypes.worker.gpustack.ai.yaml": instancetype_crd_schema,
    "instancetypeflavors.worker.gpustack.ai.yaml": instancetypeflavor_crd_schema,
}


def rendered(name: str) -> str:
    """The CRD file as it must read: its header comments, then the document with the schema."""
    text = (CRDS / name).read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    document = yaml.safe_load(text)
    (version,) = document["spec"]["versions"]
    version["schema"] = {"openAPIV3Schema": SCHEMAS[name]()}
    return header + yaml.safe_dump(document, sort_keys=False, width=100)


def main(argv: list[str]) -> int:
    """Write (``--write``) or check every generated CRD and its chart copy."""
    stale: list[tuple[Path, str]] = []
    for name in SCHEMAS:
        expected = rendered(name)
        for path in (CRDS / name, CHART_CRDS / name):
            if not path.exists() or path.read_text() != expected:
                stale.append((path, expected))
    if "--write" in argv:
        for path, expected in stale:
            path.write_text(expected)
        return 0
    for path, _ in stale:
        print(f"{path.relative_to(REPO)} is stale: run `just instance-crd`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
