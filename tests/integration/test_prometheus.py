"""The node exporter as Prometheus itself sees it: ``promtool``'s lint and a real server's PromQL.

The daemon runs exactly as in ``test_device_manager`` (stand-in cluster, replayed library, HTTPS
on loopback). These tests need Debian's ``prometheus`` package (``prometheus`` and ``promtool``),
which ``.ci/run`` installs; without it they skip and say so.

No committed scenario has a slice running above its compute cap (the recordings' slices stay
inside theirs), so the "cap not enforced" query is checked twice: over ``nvidia-mixed``, where it
must find nothing, and over a copy of it in which ``qwen-b``'s cap is lowered from 25 % to 5 % of
the card. Its process keeps the recording's 6 % of the card, i.e. 120 % of its allowance: what a
slice escaping its cap looks like on this surface.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import yaml
from dm_stack import SCENARIOS, Stack, open_stack, scenario, stack
from prometheus_client.parser import text_string_to_metric_families

from patience import HANG

# pytest finds the imported fixtures by name; listing them is what marks the import as used.
__all__ = ["scenario", "stack"]

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
MISSING = (
    "Debian's `prometheus` package (prometheus, promtool) is not installed; .ci/run installs it"
)

CORES = "gpustack_instance_accelerator_cores_utilization_percent"
MEMORY_USED = "gpustack_instance_memory_used_mib"
UNIT_SUFFIXES = ("_mib", "_millicores", "_percent")
"""The documented unit choice (the API's own units): the only lint complaints tolerated."""

COMMITTED = "nvidia-mixed"
OVER_CAP = "nvidia-mixed-over-cap"
SLICED_CARD = "GPU-8d2f4a61-3c7e-4b19-a5d0-6e1f2b3c4d03"
POLL_BUDGET = HANG
"""Prometheus publishes its first sample ~6 s after start; the budget only bounds a hang."""


# --------------------------------------------------------------------------------------------
# promtool
# --------------------------------------------------------------------------------------------


def promtool_complaints(exposition: bytes) -> list[str]:
    """``promtool check metrics`` on exposition text: one line per complaint, none if clean."""
    assert PROMTOOL is not None
    result = subprocess.run(
        [PROMTOOL, "check", "metrics"],
        input=exposition,
        capture_output=True,
        timeout=60,
        check=False,
    )
    lines = [line for line in (result.stdout + result.stderr).decode().splitlines() if line]
    # 0: clean; 3: lint problems listed; anything else (1: unparsable) is a failure of its own.
    assert result.returncode in {0, 3}, (result.returncode, lines)
    assert (result.returncode == 3) == bool(lines), (result.returncode, lines)
    return lines


def is_documented_unit_choice(complaint: str) -> bool:
    """A complaint about the ``_mib``/``_millicores``/``_percent`` unit suffix of our families."""
    name, _, reason = complaint.partition(" ")
    return name.startswith("gpustack_") and name.endswith(UNIT_SUFFIXES) and "unit" in reason


@pytest.mark.skipif(PROMTOOL is None, reason=MISSING)
async def test_promtool_finds_nothing_but_the_documented_unit_suffixes(stack: Stack) -> None:
    response = await stack.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain;")  # what promtool reads
    text = response.content
    # The lint must see the real thing: every family kind, with series, not an empty round.
    for family in (CORES, MEMORY_USED, "gpustack_accelerator_process_capability"):
        assert f"\n{family}{{".encode() in text, family
    complaints = await trio.to_thread.run_sync(promtool_complaints, text)
    assert [c for c in complaints if not is_documented_unit_choice(c)] == []

    # The filter hides the unit choice only: promtool still reports a real mistake beside it.
    planted = (
        b"# HELP gpustack_instance_bogus_total A gauge misnamed as a counter.\n"
        b"# TYPE gpustack_instance_bogus_total gauge\n"
        b"gpustack_instance_bogus_total 1\n"
    )
    complaints = await trio.to_thread.run_sync(promtool_complaints, text + planted)
    assert [c for c in complaints if not is_documented_unit_choice(c)] == [
        'gpustack_instance_bogus_total non-counter metrics should not have "_total" suffix'
    ]


# --------------------------------------------------------------------------------------------
# A real Prometheus
# --------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def running_prometheus(folder: Path, targets: dict[str, str]) -> AsyncIterator[str]:
    """Prometheus scraping ``targets`` (job → ``host:port``) over HTTPS every second.

    Yields its base URL; the process is killed and reaped however the block ends.
    """
    assert PROMETHEUS is not None
    folder.mkdir(parents=True)
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": job,
                "scheme": "https",
                "metrics_path": "/metrics",
                # The daemon's serving certificate is self-signed, as in a cluster without
                # --cert-dir: the spec's scrape configuration skips verification the same way.
                "tls_config": {"insecure_skip_verify": True},
                "static_configs": [{"targets": [address]}],
            }
            for job, address in targets.items()
        ],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    port = _free_port()
    with (folder / "prometheus.log").open("wb") as log:
        process = await trio.lowlevel.open_process(
            [
                PROMETHEUS,
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            with trio.CancelScope(shield=True):
                process.kill()
                await process.wait()


async def query(client: httpx.AsyncClient, base: str, promql: str) -> list[dict[str, Any]]:
    """An instant query's vector: ``[{"metric": {...}, "value": [t, "v"]}, ...]``."""
    response = await client.get(f"{base}/api/v1/query", params={"query": promql})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "success", body
    assert body["data"]["resultType"] == "vector", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


async def wait_for_targets(
    client: httpx.AsyncClient, base: str, jobs: Iterable[str], log: Path
) -> None:
    """Poll until every job is up and its first scrape's gpustack series are queryable."""
    wanted = set(jobs)
    deadline = trio.current_time() + POLL_BUDGET
    seen: Any = None
    while trio.current_time() < deadline:
        try:
            ready = await client.get(f"{base}/-/ready")  # 503 while its storage opens
            if ready.status_code != 200:
                seen = f"/-/ready: {ready.status_code} {ready.text}"
                await trio.sleep(0.5)
                continue
            up = {
                r["metric"]["job"]
                for r in await query(client, base, "up == 1")
                if r["metric"]["job"] in wanted
            }
            scraped = {
                r["metric"]["job"] for r in await query(client, base, f"count by (job) ({CORES})")
            }
            if up == wanted and wanted <= scraped:
                return
            seen = (await client.get(f"{base}/api/v1/targets")).json()
        except httpx.TransportError as exc:  # still starting up
            seen = repr(exc)
        await trio.sleep(0.5)
    raise AssertionError(
        f"Prometheus never scraped {sorted(wanted)}: {json.dumps(seen)[:2000]}\n"
        + log.read_text(errors="replace")[-3000:]
    )


def exposed(text: str, family: str) -> list[tuple[dict[str, str], float]]:
    """A family's samples as the daemon exposes them, read by the reference parser."""
    for parsed in text_string_to_metric_families(text):
        if parsed.name == family:
            return [(dict(s.labels), s.value) for s in parsed.samples]
    return []


def _over_cap_scenario(path: Path) -> Path:
    """``nvidia-mixed`` with ``qwen-b`` capped at 5 % of the card it keeps using 6 % of."""
    document = yaml.safe_load((SCENARIOS / f"{COMMITTED}.yaml").read_text())
    [qwen_b] = [i for i in document["instances"] if i["name"] == "qwen-b"]
    [main] = [c for c in qwen_b["pod"]["containers"] if c["name"] == "main"]
    [grant] = main["accelerators"]
    assert grant["mode"] == "Sliced"
    assert grant["coresPercent"] == 25
    grant["coresPercent"] = 5
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _scenario_instances(*, sliced_and_running: bool) -> set[str]:
    """Instance names straight from the committed scenario: with a live Pod, or Sliced ones too.

    A Sliced Instance is running when a container holding the slice has processes; a pending
    one has none, hence no compute figure and no series in the cores family.
    """
    document = yaml.safe_load((SCENARIOS / f"{COMMITTED}.yaml").read_text())
    names = set()
    for instance in document["instances"]:
        pod = instance.get("pod")
        if pod is None or "deleted" in pod:
            continue
        if sliced_and_running and not any(
            container.get("pids")
            and any(g["mode"] == "Sliced" for g in container.get("accelerators", []))
            for container in pod["containers"]
        ):
            continue
        names.add(instance["name"])
    return names


@pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None, reason=MISSING)
async def test_a_real_prometheus_answers_the_specs_queries(tmp_path: Path) -> None:
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

            busiest = await query(client, base, f'topk(10, {CORES}{{mode="Sliced"}})')
            over = await query(client, base, f'{CORES}{{mode="Sliced"}} > 100')
            top = await query(client, base, f'topk(1, {CORES}{{mode="Sliced"}})')
            memory = await query(client, base, MEMORY_USED)
            renamed = await query(client, base, '{__name__=~"gpustack_.+", exported_instance!=""}')

            texts = {job: (await d.get("/metrics")).text for job, d in daemons.items()}

    # The busiest slices: every running Sliced Instance of the scenario, from both daemons,
    # each still labelled by its own target (`instance` is Prometheus's, never overwritten).
    sliced = _scenario_instances(sliced_and_running=True)
    assert sliced == {"qwen-a", "qwen-b"}
    assert {(r["metric"]["job"], r["metric"]["instance_name"]) for r in busiest} == {
        (job, name) for job in targets for name in sliced
    }
    for r in busiest:
        assert r["metric"]["mode"] == "Sliced"
        assert r["metric"]["instance"] == targets[r["metric"]["job"]]
    for job, text in texts.items():
        assert {labels["instance_name"] for labels, _ in exposed(text, CORES)} >= sliced, job

    # "Cap not enforced": exactly the series /metrics shows above 100, and that set is not
    # empty: qwen-b under its lowered cap (6 % of the card against 5 %), and nothing from the
    # committed scenario, whose slices stay within their caps.
    expected = {
        (job, labels["namespace"], labels["instance_name"], labels["id"], value)
        for job, text in texts.items()
        for labels, value in exposed(text, CORES)
        if labels["mode"] == "Sliced" and value > 100
    }
    assert {
        (
            r["metric"]["job"],
            r["metric"]["namespace"],
            r["metric"]["instance_name"],
            r["metric"]["id"],
            float(r["value"][1]),
        )
        for r in over
    } == expected
    assert expected == {(OVER_CAP, "team-b", "qwen-b", SLICED_CARD, 120.0)}
    # ...and it is the busiest slice on the fleet, which topk(1) must find.
    assert [(r["metric"]["job"], r["metric"]["instance_name"]) for r in top] == [
        (OVER_CAP, "qwen-b")
    ]

    # Pod-level series carry `instance_name`, and nothing was renamed to `exported_instance`.
    assert renamed == []
    running = _scenario_instances(sliced_and_running=False)
    for job, address in targets.items():
        series = [r["metric"] for r in memory if r["metric"]["job"] == job]
        assert {m["instance_name"] for m in series} == running, job
        assert {labels["instance_name"] for labels, _ in exposed(texts[job], MEMORY_USED)} == (
            running
        )
        for metric in series:
            assert "exported_instance" not in metric
            assert metric["instance"] == address
