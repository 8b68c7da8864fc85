"""The exporter's round follows the monitor's publish, and ``/metrics`` negotiates ``Accept``.

Under ``trio.testing.MockClock``: a round is counted by the reads of the node's Pods (one per
round), and what it rendered by the collector's ``snapshot`` success sample.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from gpustack_devicemanager.exporter import ExporterSource, run_exporter
from gpustack_devicemanager.exposition import ExpositionHolder, prefers_openmetrics
from gpustack_devicemanager.holder import SnapshotHolder
from gpustack_devicemanager.monitor import TickContext, run_monitor
from gpustack_devicemanager.podview import PodEntry
from gpustack_vendors.model import CardSample, Detection

PERIOD = 15.0
EPOCH = datetime(2026, 11, 29, tzinfo=UTC)
SUCCESS = b'gpustack_instance_metrics_collector_success{source="snapshot"}'


class Cards:
    """One card; ``fail`` makes every tick raise, as a library that went away does."""

    manufacturer = "nvidia"

    def __init__(self) -> None:
        self.fail = False

    def detect(self) -> Detection:
        return Detection("nvidia", ())

    def sample(self) -> list[CardSample]:
        if self.fail:
            raise RuntimeError("driver went away")
        return [CardSample("GPU-0", 100, 5, 1, 40, 70.0, False)]

    def processes(self, device_ids: Any) -> dict[str, Any]:
        return {}

    def partitions(self, partition_ids: Any) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


async def inline(fn: Callable[..., Any], *args: Any, limiter: object = None) -> Any:
    return fn(*args)


class Rounds:
    """Counts rounds by the exporter's one read of the node's Pods per round."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> list[PodEntry]:
        self.count += 1
        return []


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


def wall(start: float) -> Callable[[], datetime]:
    """Wall time that moves with the mock clock, so freshness is judged in virtual time."""
    return lambda: EPOCH + timedelta(seconds=trio.current_time() - start)


async def test_a_round_follows_every_publish_and_only_then(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    cards, holder, exposition, rounds = Cards(), SnapshotHolder(15), ExpositionHolder(), Rounds()
    clock = wall(trio.current_time())
    source = ExporterSource("n1", "nvidia", "gpustack-system", rounds, None, holder)
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: run_exporter(
                source,
                exposition,
                period=PERIOD,
                wall_clock=clock,
                run_sync=inline,
                task_status=task_status,
            )
        )
        await trio.sleep(PERIOD)  # no tick yet: the exporter waits for one (up to 1.5 periods)
        assert rounds.count == 0
        await nursery.start(
            lambda task_status: run_monitor(
                cards,
                holder,
                lambda: None,
                TickContext("nvidia", PERIOD, tmp_path),
                limiter=trio.CapacityLimiter(1),
                wall_clock=clock,
                run_sync=inline,
                task_status=task_status,
            )
        )
        await trio.sleep(1)
        assert rounds.count == 1  # the first tick's publish
        assert SUCCESS + b" 1.0" in exposition.current.text
        await trio.sleep(PERIOD * 3)
        assert rounds.count == 4  # ticks at 15, 30 and 45 s: one round each, no more
        nursery.cancel_scope.cancel()


async def test_rounds_go_on_without_ticks_and_say_the_snapshot_is_stale(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    cards, holder, exposition, rounds = Cards(), SnapshotHolder(15), ExpositionHolder(), Rounds()
    clock = wall(trio.current_time())
    source = ExporterSource("n1", "nvidia", "gpustack-system", rounds, None, holder)
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: run_monitor(
                cards,
                holder,
                lambda: None,
                TickContext("nvidia", PERIOD, tmp_path),
                limiter=trio.CapacityLimiter(1),
                wall_clock=clock,
                run_sync=inline,
                task_status=task_status,
            )
        )
        await trio.sleep(1)
        await nursery.start(
            lambda task_status: run_exporter(
                source,
                exposition,
                period=PERIOD,
                wall_clock=clock,
                run_sync=inline,
                task_status=task_status,
            )
        )
        await trio.sleep(0.5)
        assert rounds.count == 1  # a snapshot was already there: a round at once
        assert SUCCESS + b" 1.0" in exposition.current.text
        cards.fail = True  # every later tick raises: nothing more is published
        await trio.sleep(PERIOD * 6)
        assert rounds.count >= 4  # one round per 1.5 periods all the same
        assert SUCCESS + b" 0.0" in exposition.current.text
        nursery.cancel_scope.cancel()


async def test_next_publication_returns_at_once_when_it_already_happened(
    autojump_clock: trio.testing.MockClock,
) -> None:
    holder = SnapshotHolder(15)
    first = holder.current
    with trio.fail_after(1):
        assert await holder.next_publication(None, timeout=60) is first


@pytest.mark.parametrize(
    ("accept", "openmetrics"),
    [
        ("", False),
        ("*/*", False),  # curl: the classic text
        ("text/plain;version=0.0.4", False),
        ("application/openmetrics-text", True),
        # Prometheus 2.x's scrape header, OpenMetrics first
        (
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
            "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
            True,
        ),
        # A scraper configured for text first
        ("text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.5", False),
        ("application/openmetrics-text;q=0", False),  # q=0 means "not this"
        ("application/openmetrics-text;q=0, */*", False),  # the specific range wins
        ("application/openmetrics-text;q=0.0, text/plain;q=0.1", False),
        ("application/openmetrics-text;q=bogus", False),  # unreadable quality: refusal
        ("APPLICATION/OpenMetrics-Text; q=0.8, text/plain; q=0.2", True),
        ("application/openmetrics-text;q=0.5, text/plain;q=0.5", True),  # tie, named outright
        ("application/*;q=0.5, text/plain;q=0.6", False),
        ("application/json", False),  # neither acceptable: text, as prometheus_client does
    ],
)
def test_accept_negotiation(accept: str, openmetrics: bool) -> None:
    assert prefers_openmetrics(accept) is openmetrics


def test_the_negotiated_body_is_the_rounds_format() -> None:
    exposition = ExpositionHolder()
    body, content_type = exposition.negotiate("application/openmetrics-text;q=0, text/plain")
    assert content_type.startswith("text/plain")
    assert body is exposition.current.text_body
    body, content_type = exposition.negotiate("application/openmetrics-text;version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.identity.endswith(b"# EOF\n")
