"""Every query of the Grafana dashboard, run by a real Prometheus scraping the exporter.

The same two exporters as ``test_prometheus``'s PromQL test: the committed ``nvidia-mixed``
scenario and its copy with ``qwen-b``'s cap lowered below what it uses, so the "slices over
their cap" panel has a series to show. Every query, with the dashboard's variables at All,
must return data: a panel that is empty on the demo is either broken or measuring nothing.
"""

from __future__ import annotations

import sys
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest
from dm_stack import open_stack
from test_prometheus import (
    COMMITTED,
    MISSING,
    OVER_CAP,
    PROMETHEUS,
    PROMTOOL,
    _over_cap_scenario,
    query,
    running_prometheus,
    wait_for_targets,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "deploy"))
from dashboard import as_all, queries


@pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None, reason=MISSING)
async def test_every_dashboard_query_returns_data_for_the_demo(tmp_path: Path) -> None:
    over_cap = _over_cap_scenario(tmp_path / f"{OVER_CAP}.yaml")
    async with AsyncExitStack() as stacks:
        daemons = {
            COMMITTED: await stacks.enter_async_context(
                open_stack(COMMITTED, tmp_path / COMMITTED)
            ),
            OVER_CAP: await stacks.enter_async_context(open_stack(over_cap, tmp_path / OVER_CAP)),
        }
        targets = {job: daemon.address for job, daemon in daemons.items()}
        async with (
            running_prometheus(tmp_path / "prometheus", targets) as base,
            httpx.AsyncClient(trust_env=False, timeout=10) as client,
        ):
            await wait_for_targets(
                client, base, targets, tmp_path / "prometheus" / "prometheus.log"
            )
            answers = {name: await query(client, base, as_all(e)) for name, e in queries().items()}
    empty = sorted(name for name, vector in answers.items() if not vector)
    assert not empty, f"dashboard queries with no data on the demo: {empty}"
    [over] = [v for name, v in answers.items() if name.startswith("Slices over their compute cap")]
    assert {r["metric"]["instance_name"] for r in over} == {"qwen-b"}
    assert all(r["metric"]["job"] == OVER_CAP for r in over)
