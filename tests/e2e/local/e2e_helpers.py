"""What several local e2e modules do the same way: poll, read JSON through kubectl, create."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from e2e_system import System

from patience import HANG

T = TypeVar("T")


def eventually(probe: Callable[[], T | None], what: str, timeout: float = HANG) -> T:
    """``probe()``'s first non-None answer, polled; fail naming ``what`` after the bound.

    The bound only catches a hang (``tests/patience.py``): it is ``timeout`` or :data:`HANG`,
    whichever is longer, so a caller may allow a slow flow more but never a loaded machine less.
    """
    deadline = time.monotonic() + max(timeout, HANG)
    while True:
        found = probe()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.5)


def kubectl_json(system: System, *args: str) -> Any:
    done = system.kubectl(*args, "-o", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def create(system: System, manifest: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", system.endpoints.kubeconfig, "--context", "admin",
         "create", "--validate=false", "-f", "-"],
        input=json.dumps(manifest), capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "KUBECONFIG": ""},
    )  # fmt: skip
