"""The serving pieces both daemons share (gpustack_serving), and that both daemons use them."""

from __future__ import annotations

import logging
import signal
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio
from hypercorn.config import Config

from gpustack_devicemanager import daemon as device_manager
from gpustack_devicemanager.tls import ReloadableConfig
from gpustack_kube.certs import self_signed
from gpustack_serving.certs import CertReloader, serving_hosts, serving_pair
from gpustack_serving.config import ALPN, hypercorn_config, terminate_tls
from gpustack_serving.signals import serve_until_signalled
from gpustack_worker import daemon as worker
from gpustack_worker import tls as worker_tls
from patience import HANG

REPO = Path(__file__).resolve().parents[2]


def test_hosts_are_the_names_then_this_host_and_the_pod_ip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POD_IP", "10.0.0.7")
    monkeypatch.setattr("socket.gethostname", lambda: "box")
    assert serving_hosts(["a", "b", "a"], "0.0.0.0") == ["a", "b", "box", "10.0.0.7"]
    assert serving_hosts(["a"], "::") == ["a", "box", "10.0.0.7"]
    assert serving_hosts(["a"], "192.0.2.1") == ["a", "box", "10.0.0.7", "192.0.2.1"]
    monkeypatch.delenv("POD_IP")
    assert serving_hosts(["a"], "0.0.0.0") == ["a", "box"]


def test_a_cert_dir_is_served_as_is_and_mints_nothing(tmp_path: Path) -> None:
    def never() -> list[str]:
        raise AssertionError("no certificate is minted for --cert-dir")

    assert serving_pair(tmp_path, never, organization="x") == (
        tmp_path / "tls.crt",
        tmp_path / "tls.key",
    )
    cert, key = serving_pair(None, lambda: ["localhost"], organization="x")
    assert (cert.name, key.name) == ("tls.crt", "tls.key")
    assert cert.exists()
    assert key.exists()


def test_hypercorn_settings_are_the_daemons_settings() -> None:
    config = hypercorn_config(ReloadableConfig(), "gpustack.test.http")
    assert isinstance(config, ReloadableConfig)  # the subclass comes back, typed
    assert config.accesslog is None
    assert config.errorlog is logging.getLogger("gpustack.test.http")
    assert config.graceful_timeout == 2.0
    cert, key = Path("/c/tls.crt"), Path("/c/tls.key")
    terminate_tls(config, "127.0.0.1", 32443, cert, key)
    assert config.bind == ["127.0.0.1:32443"]
    assert (config.certfile, config.keyfile) == (str(cert), str(key))
    assert config.alpn_protocols == ["h2", "http/1.1"]
    mine = worker._hypercorn_config()
    assert (mine.accesslog, mine.errorlog, mine.graceful_timeout) == (
        None,
        logging.getLogger("gpustack.worker.http"),
        2.0,
    )
    assert isinstance(mine, Config)
    # The worker's own TLS offers what hypercorn's offers for the Device Manager.
    assert worker_tls.ALPN == tuple(p.encode() for p in ALPN) == (b"h2", b"http/1.1")


def test_the_reloader_applies_a_changed_pair_and_keeps_one_that_fails(tmp_path: Path) -> None:
    cert, key = self_signed(["localhost"], tmp_path)
    applied: list[Path] = []
    refuse = False

    def apply(new_cert: Path, new_key: Path) -> None:
        if refuse:
            raise ValueError("does not load")
        applied.append(new_cert)

    reloader = CertReloader(apply, cert, key)
    assert reloader.check() is False
    self_signed(["localhost"], tmp_path)  # rotated
    assert reloader.check() is True
    assert (reloader.reloads, applied) == (1, [cert])
    refuse = True
    self_signed(["localhost"], tmp_path)
    assert reloader.check() is False
    assert (reloader.reloads, reloader.failures) == (1, 1)
    key.unlink()
    assert reloader.check() is False
    assert reloader.failures == 2


@dataclass
class _Running:
    urls: list[str]
    shutdown: trio.Event = field(default_factory=trio.Event)


async def test_a_signal_stops_what_serves_gracefully(caplog: pytest.LogCaptureFixture) -> None:
    stopped: list[str] = []
    announced: list[_Running] = []

    async def serve(task_status: trio.TaskStatus[_Running]) -> None:
        running = _Running(["https://127.0.0.1:1"])
        task_status.started(running)
        await running.shutdown.wait()
        stopped.append("graceful")

    def announce(running: _Running) -> None:
        announced.append(running)
        signal.raise_signal(signal.SIGTERM)  # caught by the receiver, not the test process

    with caplog.at_level(logging.INFO, logger="gpustack.test"):
        with trio.fail_after(HANG):
            await serve_until_signalled(serve, announce, logging.getLogger("gpustack.test"))
    assert stopped == ["graceful"]
    assert announced[0].shutdown.is_set()
    assert "received SIGTERM, stopping" in caplog.text


def test_both_daemons_serve_through_the_shared_package() -> None:
    for module in (device_manager, worker):
        text = Path(module.__file__ or "").read_text()
        assert "from gpustack_serving." in text
        assert "open_signal_receiver" not in text
        assert "CertReloader(" in text
    kube_certs = REPO / "packages" / "kube" / "src" / "gpustack_kube" / "certs.py"
    assert "class CertReloader" not in kube_certs.read_text()
