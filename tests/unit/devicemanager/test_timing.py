"""Time-driven behaviour under ``trio.testing.MockClock``: period, liveness, cert reload."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
import trustme

from gpustack_devicemanager.health import STALE_PERIODS, Liveness
from gpustack_devicemanager.holder import SnapshotHolder
from gpustack_devicemanager.monitor import TickContext, run_monitor
from gpustack_devicemanager.tls import ReloadableConfig
from gpustack_serving.certs import CertReloader
from gpustack_vendors.model import CardSample, Detection

PERIOD = 15.0


class FakeBackend:
    """Counts ticks; can be told to fail."""

    manufacturer = "nvidia"

    def __init__(self) -> None:
        self.samples = 0
        self.fail = False

    def detect(self) -> Detection:
        return Detection("nvidia", ())

    def sample(self) -> list[CardSample]:
        self.samples += 1
        if self.fail:
            raise RuntimeError("driver went away")
        return [CardSample("GPU-0", 100, self.samples, 1, 40, 70.0, False)]

    def processes(self, device_ids: Any) -> dict[str, Any]:
        return {}

    def partitions(self, partition_ids: Any) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


async def inline(fn: Callable[..., Any], *args: Any, limiter: object = None) -> Any:
    return fn(*args)


async def start_monitor(
    nursery: trio.Nursery, backend: FakeBackend, holder: SnapshotHolder, tmp_path: Path
) -> None:
    context = TickContext("nvidia", PERIOD, tmp_path)
    await nursery.start(
        lambda task_status: run_monitor(
            backend,
            holder,
            lambda: None,
            context,
            limiter=trio.CapacityLimiter(1),
            wall_clock=lambda: datetime(2026, 11, 29, tzinfo=UTC),
            run_sync=inline,
            task_status=task_status,
        )
    )


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_ticks_on_the_period_first_at_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    backend, holder = FakeBackend(), SnapshotHolder(15)
    async with trio.open_nursery() as nursery:
        await start_monitor(nursery, backend, holder, tmp_path)
        await trio.sleep(0)
        assert backend.samples == 1  # the first tick runs immediately
        await trio.sleep(PERIOD * 4 + 1)
        assert backend.samples == 5  # t = 0, 15, 30, 45, 60
        snapshot = holder.current.snapshot
        assert snapshot is not None
        assert snapshot.groups[0].accelerators[0].memory_usage == 5
        assert snapshot.period_seconds == 15
        assert snapshot.slices is None  # standalone: could not measure, not "nothing carved"
        nursery.cancel_scope.cancel()


async def test_a_failing_tick_keeps_the_previous_snapshot(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    backend, holder = FakeBackend(), SnapshotHolder(15)
    async with trio.open_nursery() as nursery:
        await start_monitor(nursery, backend, holder, tmp_path)
        await trio.sleep(1)
        kept = holder.current
        backend.fail = True
        await trio.sleep(PERIOD * 2)
        assert backend.samples == 3  # it kept trying on the period
        assert holder.current is kept  # but published nothing new
        nursery.cancel_scope.cancel()


async def test_livez_fails_once_the_monitor_stalls(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    backend, holder = FakeBackend(), SnapshotHolder(15)
    liveness = Liveness(PERIOD, trio.current_time())
    async with trio.open_nursery() as nursery:
        await start_monitor(nursery, backend, holder, tmp_path)
        await trio.sleep(PERIOD * 2 + 1)  # ticks at 0, 15 and 30 completed
        assert liveness.alive(trio.current_time(), holder.current.completed_at)
        backend.fail = True
        await trio.sleep(PERIOD * STALE_PERIODS - 2)  # 44 s after the last good tick
        assert liveness.alive(trio.current_time(), holder.current.completed_at)
        await trio.sleep(PERIOD + 2)
        assert not liveness.alive(trio.current_time(), holder.current.completed_at)
        backend.fail = False
        await trio.sleep(PERIOD)
        assert liveness.alive(trio.current_time(), holder.current.completed_at)
        nursery.cancel_scope.cancel()


def test_liveness_allows_the_first_tick_the_same_grace() -> None:
    liveness = Liveness(PERIOD, started_at=100.0)
    assert liveness.alive(100.0 + 3 * PERIOD, None)
    assert not liveness.alive(100.0 + 3 * PERIOD + 0.1, None)


def _pair(ca: trustme.CA, folder: Path) -> None:
    leaf = ca.issue_cert("localhost")
    leaf.cert_chain_pems[0].write_to_path(str(folder / "tls.crt"))
    leaf.private_key_pem.write_to_path(str(folder / "tls.key"))


async def _handshake_trusts(config: ReloadableConfig, ca: trustme.CA) -> bool:
    """A real TLS handshake over memory streams: does the server present ``ca``'s leaf?"""
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    client_raw, server_raw = trio.testing.memory_stream_pair()
    server = trio.SSLStream(server_raw, config.ssl_contexts[0], server_side=True)
    client = trio.SSLStream(client_raw, client_context, server_hostname="localhost")
    ok = True

    async def serve() -> None:
        with contextlib.suppress(trio.BrokenResourceError):
            await server.do_handshake()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        try:
            await client.do_handshake()
        except trio.BrokenResourceError:
            ok = False
        nursery.cancel_scope.cancel()  # the server side may still wait for a peer that gave up
    return ok


async def test_cert_dir_is_hot_reloaded(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    first, second = trustme.CA(), trustme.CA()
    _pair(first, tmp_path)
    config = ReloadableConfig()
    config.certfile, config.keyfile = str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")
    config.create_ssl_context()
    reloader = CertReloader(config.load, tmp_path / "tls.crt", tmp_path / "tls.key", interval=10)
    assert await _handshake_trusts(config, first)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reloader.run)
        _pair(second, tmp_path)
        await trio.sleep(5)
        assert reloader.reloads == 0  # not yet checked
        await trio.sleep(6)
        assert reloader.reloads == 1
        assert await _handshake_trusts(config, second)
        assert not await _handshake_trusts(config, first)
        (tmp_path / "tls.key").write_text("not a key")  # a half-written rotation
        await trio.sleep(10.5)
        assert reloader.failures == 1
        assert await _handshake_trusts(config, second)  # the working certificate stays
        nursery.cancel_scope.cancel()
