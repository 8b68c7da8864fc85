"""Suite-wide checks."""

from __future__ import annotations

import os

import pytest

from corpus_paths import CORPUS


def pytest_sessionstart(session: pytest.Session) -> None:
    """In CI the corpus must be there: a skipped corpus test would hide unread captures."""
    if os.environ.get("CI") and not CORPUS.is_dir():
        raise pytest.UsageError(
            f"CI is set but the shared corpus is missing at {CORPUS}; "
            "set GPUSTACK_CORPUS or check it out beside the repository"
        )
