"""Suite-wide checks."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from corpus_paths import CORPUS

# Hypothesis's two wall-clock checks off for the whole suite (docs/testing.md: a deadline only
# bounds a hang). Its per-example ``deadline`` (200 ms) and the ``too_slow`` health check (input
# generation past ~1 s) are timings: under load a correct property failed with "Input generation
# is slow" while another job held the second core. Every other health check stays on, and a
# test may still set its own. ``HYPOTHESIS_PROFILE=default`` brings Hypothesis's defaults back.
settings.register_profile(
    "suite", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))


def pytest_sessionstart(session: pytest.Session) -> None:
    """In CI the corpus must be there: a skipped corpus test would hide unread captures."""
    if os.environ.get("CI") and not CORPUS.is_dir():
        raise pytest.UsageError(
            f"CI is set but the shared corpus is missing at {CORPUS}; "
            "set GPUSTACK_CORPUS or check it out beside the repository"
        )
