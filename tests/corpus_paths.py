"""Where the shared capture corpus lives, for tests that read real payloads.

The corpus sits beside the checkout (``../shared/corpus``); ``GPUSTACK_CORPUS`` points
elsewhere. Outside CI a missing corpus skips those tests with the path in the reason; in CI
(``CI`` set) ``conftest.py`` refuses to start, so real captures can never silently go unread.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("GPUSTACK_CORPUS", REPO.parent / "shared" / "corpus")).resolve()


def corpus_dir(kind: str) -> Path:
    """The corpus folder for one kind of capture (``kubelet-summary``, ``podmetrics``, …)."""
    return CORPUS / kind


def needs_corpus(kind: str) -> pytest.MarkDecorator:
    """Skip (outside CI) when that part of the corpus is not checked out."""
    path = corpus_dir(kind)
    return pytest.mark.skipif(not path.is_dir(), reason=f"shared corpus not found at {path}")
