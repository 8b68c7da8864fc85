"""The last answer per Instance: bounded, and an answer nobody asks for is let go."""

from __future__ import annotations

from typing import Any

from gpustack_worker.subresource import AnswerCache, _Answer


def _answer() -> _Answer:
    inputs: Any = object()  # what it was computed from: held, never looked into here
    return _Answer(inputs, (), b"{}")


def test_the_cache_is_bounded_oldest_first() -> None:
    cache = AnswerCache(limit=2)
    for name in ("a", "b", "c"):
        cache.put("ns", name, _answer())
    assert len(cache) == 2
    assert cache.get("ns", "a") is None


def test_answers_nobody_asked_for_lately_are_dropped() -> None:
    now = [1000.0]
    cache = AnswerCache(idle=60, clock=lambda: now[0])
    cache.put("ns", "kept", _answer())
    cache.put("ns", "forgotten", _answer())
    now[0] += 40
    kept = cache.get("ns", "kept")
    assert kept is not None
    cache.sent(kept)  # sent again: in use
    now[0] += 40  # "forgotten" is 80 s unused, "kept" 40 s
    assert cache.get("ns", "forgotten") is None
    assert cache.get("ns", "kept") is kept
    assert len(cache) == 1
