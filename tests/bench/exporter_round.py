"""The exporter's whole CPU per monitor round, in process: compose, then what scrapes make.

Before this change a round rendered both formats and gzipped both (``_render_direct`` and two
``Encoded.of``: exactly what ``exposition.render`` did) whatever the scrapes. Now a round
publishes families and a scrape makes its format on first use (:mod:`gpustack_devicemanager.
incremental`). Both are timed here on the same rounds, CPU time (``time.process_time``), at 0,
1 and 4 scrapes a round; the compose is timed on its own on the demo node's Pods cloned to
about the same number of series, through the exporter's real ``compose``.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial

from scrape_targets import round_families

from gpustack_core.kubelet import parse_summary
from gpustack_core.snapshot import parse_snapshot
from gpustack_devicemanager.exporter import RoundInputs, compose
from gpustack_devicemanager.exposition import ExpositionHolder, Family, Rendered, render
from gpustack_devicemanager.podview import node_pod
from gpustack_simulator.demo import load_demo

OPENMETRICS_GZIP = (True, True)
SCRAPES: dict[str, list[tuple[bool, bool]]] = {
    "0": [],
    "1": [OPENMETRICS_GZIP],
    "4 (Prometheus HA pair, twice)": [OPENMETRICS_GZIP] * 4,
    "4 (mixed: 2 OpenMetrics gzip, text gzip, text plain)": [
        OPENMETRICS_GZIP,
        OPENMETRICS_GZIP,
        (False, True),
        (False, False),
    ],
}


def _families(number: int) -> list[Family]:
    made = []
    for name, text, labels, samples in round_families(number):
        family = Family(name, text, labels)
        family.samples.extend(samples)
        made.append(family)
    return made


def _cpu_ms(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return (time.process_time() - start) * 1e3


def render_rounds(rounds: int) -> dict[str, dict[str, float]]:
    """CPU per round of what scrapes get, per scrape pattern (the tree imported decides how).

    Run against the code before this change (``scrape_bench.py --before REV`` puts that
    revision's packages first on the path), a round renders eagerly: one figure whatever the
    scrapes.
    """
    prepared = [_families(n) for n in range(rounds + 1)]
    if not hasattr(Rendered, "make"):  # the eager renderer: both formats, two gzips, a round
        samples = [_cpu_ms(partial(render, f)) for f in prepared[1:]]
        return {"every round, whatever the scrapes": _summary(samples)}
    figures: dict[str, dict[str, float]] = {}
    for label, scrapes in SCRAPES.items():
        holder = ExpositionHolder()
        holder.publish(prepared[0])
        holder.current.make(True, True)  # the previous round was scraped
        samples = []
        for families in prepared[1:]:

            def one_round(
                families: list[Family] = families,
                scrapes: list[tuple[bool, bool]] = scrapes,
                holder: ExpositionHolder = holder,
            ) -> None:
                holder.publish(families)
                for openmetrics, gzipped in scrapes:
                    if not holder.current.ready(openmetrics, gzipped):
                        holder.current.make(openmetrics, gzipped)

            samples.append(_cpu_ms(one_round))
        figures[f"{label} scrapes a round"] = _summary(samples)
    return figures


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": statistics.median(ordered),
        "p90_ms": ordered[int(0.9 * (len(ordered) - 1))],
        "n": len(ordered),
    }


def compose_round(repeat: int, copies: int = 190) -> dict[str, float]:
    """The exporter's ``compose`` on the demo node's Pods cloned ``copies`` times.

    Each copy gets its own names and UIDs (and the kubelet summary its entries); the grants
    come parsed, as the informer hands them to a round. The demo snapshot does not know the
    copies, so their accelerator figures are partly absent: about 8.9 series a Pod.
    """
    node = load_demo()
    pods = [json.loads(bytes(raw)) for raw in node.pods]
    summary = json.loads(bytes(node.kubelet_summary))
    copied_pods: list[dict[str, object]] = []
    copied_stats = []
    for k in range(copies):
        for pod in pods:
            clone = json.loads(json.dumps(pod))
            meta = clone["metadata"]
            original = meta["uid"]
            meta["name"] += f"-{k}"
            meta["uid"] = f"{k:08x}{original[8:]}"
            part_of = meta.get("labels", {}).get("app.kubernetes.io/part-of")
            if part_of is not None:
                meta["labels"]["app.kubernetes.io/part-of"] = f"{k:08x}{part_of[8:]}"
                for owner in meta.get("ownerReferences", []):
                    owner["uid"] = meta["labels"]["app.kubernetes.io/part-of"]
                    owner["name"] += f"-{k}"
            copied_pods.append(clone)
            for entry in summary["pods"]:
                if entry["podRef"]["uid"] == original:
                    stats = json.loads(json.dumps(entry))
                    stats["podRef"].update(name=meta["name"], uid=meta["uid"])
                    copied_stats.append(stats)
    node_pods = [node_pod(obj) for obj in copied_pods]
    inputs = RoundInputs(
        node="gpu-node-1",
        manufacturer="nvidia",
        pods=[p.pod for p in node_pods],
        publisher=True,
        summary=parse_summary(json.dumps({"node": summary["node"], "pods": copied_stats}).encode()),
        kubelet_seconds=0.01,
        snapshot=parse_snapshot(bytes(node.snapshots["nvidia"])),
        now=datetime(2026, 11, 29, 9, 0, 5, tzinfo=UTC),
        grants={p.pod.metadata.uid: p.grants for p in node_pods},
    )
    series = sum(len(f.samples) for f in compose(inputs).families)
    samples = sorted(_cpu_ms(lambda: compose(inputs)) for _ in range(repeat))
    return {
        "pods": float(len(node_pods)),
        "series": float(series),
        "p50_ms": statistics.median(samples),
        "n": float(repeat),
    }


def main() -> None:
    """``[ROUNDS [COMPOSE_REPEAT]]``: the figures as JSON on stdout."""
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    figures = {"render": render_rounds(rounds), "compose": compose_round(repeat)}
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
