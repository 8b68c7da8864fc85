"""``simulator up``'s supervision: a Device Manager killed by a signal gets one restart."""

from __future__ import annotations

import sys
from pathlib import Path

from gpustack_simulator.up import WEBHOOK_CONFIGURATIONS, _restart_if_crashed, _spawn

CRASH = "import os, signal; print('starting', flush=True); os.kill(os.getpid(), signal.SIGSEGV)"


def test_a_crash_by_signal_is_restarted_once_keeping_the_crashed_log(tmp_path: Path) -> None:
    first = _spawn("device-manager-x", [sys.executable, "-c", CRASH], tmp_path, {"A": "1"})
    assert first.process.wait(timeout=30) < 0
    again = _restart_if_crashed(first, tmp_path)
    assert again is not None
    assert again.command == first.command
    assert again.env == {"A": "1"}
    assert again.process.wait(timeout=30) < 0
    assert (tmp_path / "device-manager-x.crashed.log").read_text().startswith("starting")
    assert again.log == tmp_path / "device-manager-x.log"


def test_an_ordinary_failure_is_not_restarted(tmp_path: Path) -> None:
    failed = _spawn("device-manager-y", [sys.executable, "-c", "raise SystemExit(3)"], tmp_path)
    assert failed.process.wait(timeout=30) == 3
    assert _restart_if_crashed(failed, tmp_path) is None
    assert not (tmp_path / "device-manager-y.crashed.log").exists()


def test_gate_one_is_registered_where_the_admissionregistration_api_serves_it() -> None:
    # The paths kube-apiserver serves (admissionregistration.k8s.io/v1, cluster-scoped).
    assert {kind: r.path() for kind, r in WEBHOOK_CONFIGURATIONS.items()} == {
        "MutatingWebhookConfiguration": (
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
        ),
        "ValidatingWebhookConfiguration": (
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
        ),
    }
