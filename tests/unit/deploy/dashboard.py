"""The shipped Grafana dashboard, its queries, and those queries with the variables set to All."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = REPO / "clusters" / "chart" / "dashboards" / "gpustack-instances.json"
VARIABLE = re.compile(r"\$(\w+)")


def load() -> dict[str, Any]:
    document = json.loads(DASHBOARD.read_text())
    assert isinstance(document, dict)
    return document


def queries(document: dict[str, Any] | None = None) -> dict[str, str]:
    """``"<panel title> / <refId>"`` → PromQL, every panel target's expression."""
    document = document or load()
    return {
        f"{panel['title']} / {target['refId']}": target["expr"]
        for panel in document["panels"]
        for target in panel["targets"]
    }


def as_all(expr: str) -> str:
    """The query as Grafana sends it with every variable at All (``allValue`` is ``.*``)."""
    return VARIABLE.sub(".*", expr)
