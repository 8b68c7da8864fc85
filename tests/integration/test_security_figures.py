"""Figures no card can produce are dropped as ``invalid_data``, through the worker over TLS.

A Device Manager's snapshot is an upstream the worker does not control (a vendor library's
garbage, a compromised node). Issue #28: a negative, non-finite or physically impossible figure
— a card total of 10^15 MiB, 10^6 °C, negative watts, negative memory or percentages — is
absent from the Instance's sample, exactly as a usage beyond the card already was. Each case
below was published as given before the fix. The worker reads the double's snapshot over HTTPS
and answers the aggregator's TLS request, as in ``test_security.py``.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from test_security import _live_snapshot
from worker_stack import WorkerStack, open_worker_stack, serving_snapshot

EXCLUSIVE_CARD = "GPU-8d2f4a61-3c7e-4b19-a5d0-6e1f2b3c4d01"  # llama-70b's, Exclusive
PARTITIONED = "MIG-8d2f4a61-3c7e-5b19-a5d0-6e1f2b3c4d40"  # mig-3g's 3g.40gb


@pytest.fixture
async def mixed(tmp_path: Path) -> AsyncIterator[WorkerStack]:
    async with open_worker_stack("nvidia-mixed", tmp_path) as stack:
        yield stack


async def _samples(stack: WorkerStack, snapshot: dict[str, Any], *names: str) -> list[Any]:
    """Each named Instance's sample while the Device Manager serves ``snapshot``."""
    [dm] = stack.cluster.state.expanded.device_managers
    snapshot["timestamp"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    answers = []
    async with serving_snapshot(json.dumps(snapshot).encode(), stack.tmp / "forged-dm") as port:
        stack.cluster.state.bind_pod_address(dm.namespace, dm.name, "127.0.0.1", port)
        for name in names:
            answer = await stack.metrics("team-a", name)
            assert answer.status_code == 200, answer.text
            answers.append(answer.json()["sample"])
    return answers


def _card(snapshot: dict[str, Any], card_id: str) -> dict[str, Any]:
    for group in snapshot["groups"]:
        for card in group["accelerators"]:
            if card["id"] == card_id:
                found: dict[str, Any] = card
                return found
    raise AssertionError(f"{card_id} is not in the snapshot")


async def test_impossible_card_figures_are_absent(mixed: WorkerStack) -> None:
    snapshot = await _live_snapshot(mixed)
    card = _card(snapshot, EXCLUSIVE_CARD)
    assert card["memory"] > 0  # the recording states the card's total
    card["temperature"] = 10**6
    card["powerUsage"] = -35.5
    card["coresUtilization"] = -5
    card["memoryUsage"] = -1
    [sample] = await _samples(mixed, snapshot, "llama-70b")
    [entry] = sample["accelerators"]
    for absent in (
        "temperatureCelsius",
        "powerUsageWatts",
        "coresUtilizationPercent",
        "memoryUsedMiB",
        "memoryUtilizationPercent",
    ):
        assert absent not in entry, (absent, entry)
    assert entry["memoryTotalMiB"] == card["memory"]  # a sound figure beside them stays
    assert entry["unhealthy"] is False


async def test_a_card_total_beyond_any_card_is_absent(mixed: WorkerStack) -> None:
    snapshot = await _live_snapshot(mixed)
    card = _card(snapshot, EXCLUSIVE_CARD)
    card["memory"] = 10**15
    [sample] = await _samples(mixed, snapshot, "llama-70b")
    [entry] = sample["accelerators"]
    assert "memoryTotalMiB" not in entry, entry
    assert "memoryUtilizationPercent" not in entry, entry
    assert entry["temperatureCelsius"] == card["temperature"]  # the rest still answers


async def test_negative_share_figures_are_absent(mixed: WorkerStack) -> None:
    snapshot = await _live_snapshot(mixed, with_slices=True)
    usages = snapshot["slices"]["usages"]
    assert usages, "the scenario has a Sliced Instance with usage"
    for row in usages:
        row["memoryUsedMiB"] = -1
        row["coresUtilizationPercent"] = -7
    [sample] = await _samples(mixed, snapshot, "qwen-a")
    [entry] = sample["accelerators"]
    assert "memoryUsedMiB" not in entry, entry
    assert "coresUtilizationPercent" not in entry, entry
    assert entry["memoryTotalMiB"] > 0  # the slice's quota comes from the allocation


async def test_negative_partition_figures_are_absent(mixed: WorkerStack) -> None:
    snapshot = await _live_snapshot(mixed, with_slices=True)
    partitions = [p for p in snapshot["slices"]["partitions"] if p["id"] == PARTITIONED]
    assert partitions, "the scenario's MIG Instance has its partition record"
    for row in partitions:
        row["memoryTotalMiB"] = -40
        row["memoryUsedMiB"] = -1
    [sample] = await _samples(mixed, snapshot, "mig-3g")
    [entry] = sample["accelerators"]
    assert entry["id"] == PARTITIONED
    assert "memoryTotalMiB" not in entry, entry
    assert "memoryUsedMiB" not in entry, entry


async def test_a_partition_larger_than_its_card_is_absent(mixed: WorkerStack) -> None:
    """The issue's example, ``memoryTotalMiB`` 10^15: refused already, kept so."""
    snapshot = await _live_snapshot(mixed, with_slices=True)
    for row in snapshot["slices"]["partitions"]:
        row["memoryTotalMiB"] = 10**15
    [sample] = await _samples(mixed, snapshot, "mig-3g")
    [entry] = sample["accelerators"]
    assert "memoryTotalMiB" not in entry, entry
