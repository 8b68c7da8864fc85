"""The Grafana dashboard: a well-formed dashboard, on the spec's families, every query parsed.

``promtool check rules`` parses each query as the expression of a recording rule, so a PromQL
syntax error fails here; the variables stay inside label matchers' quoted values, where they are
plain strings to the parser. tests/integration/test_dashboard_queries.py runs every query
against a real Prometheus scraping the demo's exporters.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helm import NAMESPACE, find, needs_helm, render
from dashboard import DASHBOARD, as_all, load, queries

SPEC = Path(__file__).resolve().parents[4] / "shared" / "spec" / "instance-metrics-reference.md"
PROMTOOL = shutil.which("promtool")
FAMILY = re.compile(r"\bgpustack_[a-z_]+\b")


def test_the_dashboard_is_a_well_formed_grafana_dashboard() -> None:
    document = load()
    assert document["uid"] == "gpustack-instances"
    assert isinstance(document["schemaVersion"], int)
    ids = [panel["id"] for panel in document["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in document["templating"]["list"]}
    assert variables == {"datasource", "namespace", "instance", "node"}
    for panel in document["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        grid = panel["gridPos"]
        assert grid["x"] >= 0, panel["title"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            # Every variable a query names is one the dashboard defines.
            assert set(re.findall(r"\$(\w+)", target["expr"])) <= variables, target["expr"]
    # Panels do not overlap.
    cells = set()
    for panel in document["panels"]:
        g = panel["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, panel["title"]
                cells.add((x, y))


def test_the_dashboard_covers_what_the_issue_and_spec_ask_for() -> None:
    exprs = queries()
    joined = "\n".join(exprs.values())
    for family in (
        "gpustack_instance_accelerator_memory_used_mib",
        "gpustack_instance_accelerator_cores_utilization_percent",
        "gpustack_accelerator_process_capability",
        "gpustack_instance_metrics_collector_success",
    ):
        assert family in joined, family
    # The spec's "cap not enforced" query, with the dashboard's filters.
    assert any(
        'gpustack_instance_accelerator_cores_utilization_percent{mode="Sliced"' in e
        and e.rstrip().endswith("> 100")
        for e in exprs.values()
    )
    # Grouped by mode, never by Prometheus' own `instance` target label for an Instance.
    assert "by (namespace, instance_name, mode)" in joined


def test_every_family_the_dashboard_reads_is_one_the_spec_defines() -> None:
    if not SPEC.is_file():
        pytest.skip(f"the specification is not beside the checkout ({SPEC})")
    defined = set(FAMILY.findall(SPEC.read_text()))
    used = {f for e in queries().values() for f in FAMILY.findall(e)}
    assert used
    assert used <= defined, sorted(used - defined)


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian's prometheus)")
def test_promtool_parses_every_query(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    exprs = queries()
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": expr}
                    for i, expr in enumerate(
                        list(exprs.values()) + [as_all(e) for e in exprs.values()]
                    )
                ],
            }
        ]
    }
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    done = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {2 * len(exprs)} rules found" in done.stdout


def test_promtool_refuses_a_broken_query(tmp_path: Path) -> None:
    """The check above would catch a syntax error: the same harness fails on one."""
    if PROMTOOL is None:
        pytest.skip("promtool not installed (Debian's prometheus)")
    path = tmp_path / "rules.yaml"
    path.write_text(
        yaml.safe_dump({"groups": [{"name": "d", "rules": [{"record": "r", "expr": "sum by ("}]}]})
    )
    done = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode != 0


@needs_helm
def test_the_configmap_is_opt_in_and_carries_the_file_and_the_sidecar_label() -> None:
    dashboards = [
        o for o in render() if o["kind"] == "ConfigMap" and "grafana_dashboard" in _labels(o)
    ]
    assert not dashboards
    objects = render({"grafana": {"dashboard": {"enabled": True, "namespace": "monitoring"}}})
    configmap = find(objects, "ConfigMap", "gpustack-operator-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["namespace"] == "monitoring"
    assert json.loads(configmap["data"]["gpustack-instances.json"]) == json.loads(
        DASHBOARD.read_text()
    )
    default_ns = render({"grafana": {"dashboard": {"enabled": True}}})
    assert (
        find(default_ns, "ConfigMap", "gpustack-operator-dashboard")["metadata"]["namespace"]
        == NAMESPACE
    )


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = obj["metadata"].get("labels") or {}
    return labels
