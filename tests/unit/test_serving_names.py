"""The self-signed serving certificates name the Pod IP the downward API hands each daemon."""

from __future__ import annotations

import pytest

from gpustack_devicemanager import daemon as device_manager
from gpustack_worker import daemon as worker


def test_the_pod_ip_is_a_name_of_both_certificates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_IP", "10.244.3.17")
    dm_hosts = device_manager._hosts(device_manager.ServeOptions("nvidia", "gpu-node-1"))
    worker_hosts = worker._hosts(worker.WorkerOptions())
    assert "10.244.3.17" in dm_hosts
    assert "10.244.3.17" in worker_hosts
    assert "gpustack-operator-worker.gpustack-system.svc" in worker_hosts


def test_without_pod_ip_no_empty_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_IP", raising=False)
    assert "" not in device_manager._hosts(device_manager.ServeOptions("nvidia", "gpu-node-1"))
    assert "" not in worker._hosts(worker.WorkerOptions())
