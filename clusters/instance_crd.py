"""Write the Instance CRD's schema from the structs that define it (``just instance-crd``).

``openAPIV3Schema`` in ``clusters/crds/instances.worker.gpustack.ai.yaml`` is generated from
``gpustack_core.instance`` through ``gpustack_worker.openapi.instance_crd_schema``; the rest of
the file (names, versions, printer columns, the header) is kept as written. ``--write`` rewrites
the CRD and its chart copy; without it the script exits 1 when either differs, which is what
``tests/unit/worker/test_crd.py`` checks too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from gpustack_worker.openapi import instance_crd_schema

REPO = Path(__file__).resolve().parents[1]
CRD = REPO / "clusters" / "crds" / "instances.worker.gpustack.ai.yaml"
CHART_COPY = REPO / "clusters" / "chart" / "crds" / CRD.name


def rendered() -> str:
    """The CRD file as it must read: its header comments, then the document with the schema."""
    text = CRD.read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    document = yaml.safe_load(text)
    (version,) = document["spec"]["versions"]
    version["schema"] = {"openAPIV3Schema": instance_crd_schema()}
    return header + yaml.safe_dump(document, sort_keys=False, width=100)


def main(argv: list[str]) -> int:
    """Write (``--write``) or check the CRD and its chart copy."""
    expected = rendered()
    stale = [path for path in (CRD, CHART_COPY) if path.read_text() != expected]
    if "--write" in argv:
        for path in stale:
            path.write_text(expected)
        return 0
    for path in stale:
        print(f"{path.relative_to(REPO)} is stale: run `just instance-crd`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
