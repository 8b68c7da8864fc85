"""Real kubelet summaries through the subresource's composition produce the expected sample.

For every Pod entry of every captured summary, a started Pod with that identity is composed the
way the subresource composes it; the used figures must equal an independent recomputation from
the raw JSON (rounded up), and an entry without a figure must leave it absent, never zero.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from corpus_paths import corpus_dir, needs_corpus
from gpustack_core.kubelet import parse_summary, usage_from_summary
from gpustack_core.pods import pod_from_object
from gpustack_core.sample import instance_sample
from gpustack_core.usage import DeclaredTotals

CORPUS = corpus_dir("kubelet-summary")
FILES = sorted(CORPUS.glob("*.json")) if CORPUS.is_dir() else []
MIB = 1 << 20


def started_pod(ref: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": ref["name"],
            "namespace": ref["namespace"],
            "uid": ref["uid"],
            "creationTimestamp": "2000-01-01T00:00:00Z",
        },
        "spec": {"nodeName": "n", "containers": [{"name": "main"}]},
        "status": {"containerStatuses": [{"name": "main", "state": {"running": {}}}]},
    }


def pod_level(entry: dict[str, Any], block: str, field: str) -> int | None:
    value = (entry.get(block) or {}).get(field)
    return None if value is None else int(value)


@needs_corpus("kubelet-summary")
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_corpus_summary_produces_the_expected_samples(path: Path) -> None:
    raw = json.loads(path.read_bytes())
    summary = parse_summary(path.read_bytes())
    checked = 0
    for entry in raw.get("pods") or []:
        ref = entry["podRef"]
        usage = usage_from_summary(
            summary, namespace=ref["namespace"], name=ref["name"], uid=ref["uid"]
        )
        if usage is None:
            continue  # the kubelet does not measure this Pod: the subresource falls back
        sample = instance_sample(
            pod=pod_from_object(started_pod(ref)),
            fallback=DeclaredTotals(0, 0, 0),
            usage=usage,
            snapshots={},
            now=datetime(2026, 11, 29, tzinfo=UTC),
        ).sample
        storage = pod_level(entry, "ephemeral-storage", "usedBytes")
        assert sample.storage_used_mib == (None if storage is None else math.ceil(storage / MIB))
        cpu = pod_level(entry, "cpu", "usageNanoCores")
        if cpu is not None:
            assert sample.cpu_used_milli_cores == math.ceil(cpu / 1_000_000)
        memory = pod_level(entry, "memory", "workingSetBytes")
        if memory is not None:
            assert sample.memory_used_mib == math.ceil(memory / MIB)
        assert sample.timestamp == usage.timestamp
        assert sample.accelerators == []  # nothing allocated: an empty list, not absent
        checked += 1
    assert checked > 0 or not raw.get("pods")
