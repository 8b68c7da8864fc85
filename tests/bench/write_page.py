"""Write ``docs/performance.md`` from one ``scrape_bench.py`` JSON run and the page's template.

``python tests/bench/write_page.py docs/performance.json docs/performance.md``. The figures
come only from the JSON (one run, its load average and machine); the prose only from
``performance.md.in`` beside this file. The page is never edited by hand.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TEMPLATE = Path(__file__).with_name("performance.md.in")
TARGETS = {
    "ours": "`/metrics` (ours: rendered on a round's first scrape, only what changed)",
    "static": "the same exposition as a constant, same server (the floor)",
    "prometheus_client": "`prometheus_client` `start_http_server` (render + gzip per scrape)",
    "node_exporter": "node_exporter textfile collector (parse + render + gzip per scrape)",
}


def _ms(value: float) -> str:
    return f"{value:,.1f}" if value >= 10 else f"{value:.2f}"


def run_section(data: dict[str, Any]) -> str:
    """Date, load average, machine, versions."""
    machine = data["machine"]
    start = " / ".join(f"{x:.2f}" for x in data["load_average_start"])
    end = " / ".join(f"{x:.2f}" for x in data["load_average_end"])
    node_exporter = data.get("node_exporter") or "not installed (its rows are absent)"
    return "\n".join(
        [
            f"- Taken {data['date']}; {data['seconds']} s in all.",
            f"- Load average (1 / 5 / 15 min): {start} at the start, {end} at the end.",
            f"- Machine: {machine['cpus']} CPUs ({machine['cpu_model']}), "
            f"{machine['memory_mib']:,} MiB, Linux {machine['kernel']}, CPython "
            f"{machine['python']}, httpx {machine['httpx']}, prometheus_client "
            f"{machine['prometheus_client']}; node_exporter: `{node_exporter}`.",
            f"- n: {data['rounds_per_cell']} rounds per (scrapes per round × encoding) cell; a "
            f"target's scrapes per encoding are {data['rounds_per_cell']} × 1 + "
            f"{data['rounds_per_cell']} × 4 = {data['rounds_per_cell'] * 5} (the latency "
            f"cells), {data['rounds_per_cell'] * 2} of them first in their round; seed "
            f"{data['seed']}.",
            "- The machine is shared (other work ran beside it): the ratios, both sides taken "
            "interleaved in the same rounds, hold up better than the absolute figures.",
        ]
    )


def scrape_table(data: dict[str, Any]) -> str:
    """One row per target: latency and CPU per scrape, both encodings; CPU per round."""
    rows = [
        "| Target | encoding | p50 ms | p90 ms | p99 ms | first scrape of a round, p50 ms "
        "| server CPU ms / scrape | server CPU ms / round at 0 · 1 · 4 scrapes | bytes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in data["targets"]:
        for encoding in ("gzip", "identity"):
            cell = data["scrapes"][f"{name}/{encoding}"]
            rounds = " · ".join(
                _ms(data["rounds"][f"{name}/{encoding}/{k}"]["server_cpu_ms_per_round"])
                for k in (0, 1, 4)
            )
            rows.append(
                f"| {TARGETS.get(name, name)} | {encoding} | {_ms(cell['p50_ms'])} | "
                f"{_ms(cell['p90_ms'])} | {_ms(cell['p99_ms'])} | "
                f"{_ms(cell['first_in_round_p50_ms'])} | "
                f"{_ms(cell['server_cpu_ms_per_request'])} | {rounds} | "
                f"{cell['bytes_on_the_wire']:,} |"
            )
    types = ", ".join(f"{k}: `{v}`" for k, v in sorted(data["content_types"].items()))
    rows.append("")
    rows.append(f"Served content types (Prometheus's `Accept`): {types}.")
    return "\n".join(rows)


def ratios(data: dict[str, Any]) -> str:
    """The peers against ours, per scrape and per round, gzip (as Prometheus scrapes)."""
    scrapes, rounds = data["scrapes"], data["rounds"]
    compose = data["exporter_round"]["now"]["compose"]["p50_ms"]
    lines = [
        "| Peer vs ours, gzip | p50 | p90 | CPU / round, 1 scrape | the same, ours + compose |"
    ]
    lines.append("|---|---|---|---|---|")
    ours = scrapes["ours/gzip"]
    ours_round = rounds["ours/gzip/1"]["server_cpu_ms_per_round"]
    floor = scrapes.get("static/gzip")
    if floor is not None:
        floor_round = rounds["static/gzip/1"]["server_cpu_ms_per_round"]
        lines.append(
            f"| ours ÷ the constant floor (lower is better, 1× is the floor) | "
            f"{ours['p50_ms'] / floor['p50_ms']:.2f}× | {ours['p90_ms'] / floor['p90_ms']:.2f}× | "
            f"{f'{ours_round / floor_round:.1f}×' if floor_round else 'floor under a tick'} | — |"
        )
    for name in data["targets"]:
        if name in ("ours", "static"):
            continue
        cell = scrapes[f"{name}/gzip"]
        peer_round = rounds[f"{name}/gzip/1"]["server_cpu_ms_per_round"]
        per_round = f"{peer_round / ours_round:.1f}×" if ours_round else "ours: under a tick"
        lines.append(
            f"| {name} | {cell['p50_ms'] / ours['p50_ms']:.1f}× | "
            f"{cell['p90_ms'] / ours['p90_ms']:.1f}× | {per_round} | "
            f"{peer_round / (ours_round + compose):.1f}× |"
        )
    lines.append("")
    lines.append(
        f'"ours + compose" adds the compose of a round ({_ms(compose)} ms, the table below) to '
        "ours' server CPU: the peers' figures include setting their values (`prometheus_client`) "
        "or nothing of the kind (node_exporter reads a file someone else wrote)."
    )
    return "\n".join(lines)


def round_table(data: dict[str, Any]) -> str:
    """Compose and render, before and now, per scrapes a round."""
    runs = data["exporter_round"]
    now, before = runs["now"], runs.get("before")
    lines = [
        "| Part of a round | before | now |",
        "|---|---|---|",
    ]
    compose_now = now["compose"]
    compose_before = before["compose"]["p50_ms"] if before else None
    lines.append(
        f"| compose ({compose_now['pods']:,.0f} Instance Pods, {compose_now['series']:,.0f} "
        f"series), p50 ms | {_ms(compose_before) if compose_before else '—'} | "
        f"{_ms(compose_now['p50_ms'])} |"
    )
    eager = next(iter(before["render"].values()))["p50_ms"] if before else None
    for label, cell in now["render"].items():
        lines.append(
            f"| render + gzip, {label}, p50 ms | {_ms(eager) if eager else '—'} (both formats, "
            f"both gzipped, every round) | {_ms(cell['p50_ms'])} |"
        )
    one = now["render"]["1 scrapes a round"]["p50_ms"] + compose_now["p50_ms"]
    if eager is not None and compose_before is not None:
        total_before = eager + compose_before
        lines.append(
            f"| **whole round at 1 scrape**, p50 ms | {_ms(total_before)} | **{_ms(one)}** |"
        )
    lines.append("")
    lines.append(
        f"Before: revision `{before['revision'] if before else '—'}`; now: `{now['revision']}`. "
        f"n = {next(iter(now['render'].values()))['n']} rounds per render row, "
        f"{compose_now['n']:.0f} composes."
    )
    return "\n".join(lines)


AGGREGATED_TARGETS = {
    "metrics.k8s.io": "metrics-server, `pods/llama-70b`",
    "ours": "ours, `instances/llama-70b/metrics`",
    "apiserver": "kube-apiserver itself, `pods/llama-70b` (the floor)",
}
CLIENT_LABELS = {"kubectl": "`kubectl get --raw`, 1 at a time", "1": "1 httpx client",
                 "32": "32 httpx clients"}  # fmt: skip


def aggregated_section(peer: dict[str, Any] | None) -> str:
    """The subresource against metrics-server through one kube-aggregator (its own run)."""
    if peer is None:
        return "Not run: `tests/bench/aggregated_peer.py` wrote no JSON beside this page's."
    load = " → ".join(f"{x[0]:.2f}" for x in (peer["load_average_start"], peer["load_average_end"]))
    machine = peer["machine"]
    lines = [
        f"From one run of `{peer['command']}` ({peer['date']}, revision `{peer['revision']}`, "
        f"{peer['seconds']} s, 1-minute load average {load}; {machine['cpus']} CPUs, "
        f"{machine['cpu_model']}), written to "
        "[`performance-aggregated.json`](performance-aggregated.json). "
        f"{peer['rounds']} shuffled rounds (seed {peer['seed']}), each running every cell once "
        f"after a round that warms them: per round a cell makes "
        + ", ".join(f"{n} ({CLIENT_LABELS[c]})" for c, n in peer["per_burst"].items())
        + " requests.",
        "",
        "| Target | clients | n | p50 ms | p90 ms | p99 ms | req/s | CPU ms / request: "
        "kube-apiserver · worker · metrics-server | bytes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    cells = peer["cells"]
    for clients, who in CLIENT_LABELS.items():
        for target, label in AGGREGATED_TARGETS.items():
            cell = cells[f"{target}/{clients}"]
            cpu = cell["server_cpu_ms_per_request"]
            failed = f" ({cell['errors']} not 200)" if cell["errors"] else ""
            lines.append(
                f"| {label} | {who} | {cell['n']:,}{failed} | "
                f"{_ms(cell['p50_ms'])} | {_ms(cell['p90_ms'])} | {_ms(cell['p99_ms'])} | "
                f"{cell['requests_per_second']:,.0f} | {_ms(cpu['kube-apiserver'])} · "
                f"{_ms(cpu['worker'])} · {_ms(cpu['metrics-server'])} | {cell['bytes']:,} |"
            )
    lines += ["", "| Ours ÷ metrics-server (lower is better; the goal is ≤ 1.2×) | p50 | p90 | "
              "p99 | req/s (higher is better) |", "|---|---|---|---|---|"]  # fmt: skip
    for clients, who in CLIENT_LABELS.items():
        ours, peer_cell = cells[f"ours/{clients}"], cells[f"metrics.k8s.io/{clients}"]
        lines.append(
            f"| {who} | "
            + " | ".join(f"{ours[k] / peer_cell[k]:.2f}×" for k in ("p50_ms", "p90_ms", "p99_ms"))
            + f" | {ours['requests_per_second'] / peer_cell['requests_per_second']:.2f}× |"
        )
    return "\n".join(lines)


def aggregated_before_after(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    """Ours before and after the fix the first run found, one run each, per client shape."""
    if before is None or after is None:
        return ""
    lines = [
        f"Ours before (`{before['revision']}`, {before['date']}) and after "
        f"(`{after['revision']}`, {after['date']}), from "
        "[`performance-aggregated-before.json`](performance-aggregated-before.json) and the run "
        "above:",
        "",
        "| ours, clients | p50 ms | p99 ms | req/s | not 200 | connections the server cut | "
        "CPU ms / request: kube-apiserver · worker |",
        "|---|---|---|---|---|---|---|",
    ]
    for clients, who in CLIENT_LABELS.items():
        cells = [run["cells"][f"ours/{clients}"] for run in (before, after)]
        b, a = cells
        lines.append(
            f"| {who} | {_ms(b['p50_ms'])} → {_ms(a['p50_ms'])} | "
            f"{_ms(b['p99_ms'])} → {_ms(a['p99_ms'])} | "
            f"{b['requests_per_second']:,.0f} → {a['requests_per_second']:,.0f} | "
            f"{b['errors']} → {a['errors']} | "
            f"{b.get('reconnects', 0)} → {a.get('reconnects', 0)} | "
            f"{_ms(b['server_cpu_ms_per_request']['kube-apiserver'])} · "
            f"{_ms(b['server_cpu_ms_per_request']['worker'])} → "
            f"{_ms(a['server_cpu_ms_per_request']['kube-apiserver'])} · "
            f"{_ms(a['server_cpu_ms_per_request']['worker'])} |"
        )
    return "\n".join(lines)


def _verdict(met: bool) -> str:
    return "met" if met else "**not met**"


def goals(data: dict[str, Any], peer: dict[str, Any] | None) -> str:
    """Issue #33's goals against this page's runs, each computed from the JSON."""
    scrapes, rounds = data["scrapes"], data["rounds"]
    now = data["exporter_round"]["now"]
    whole = now["render"]["1 scrapes a round"]["p50_ms"] + now["compose"]["p50_ms"]
    ours_round = rounds["ours/gzip/1"]["server_cpu_ms_per_round"]
    lines = ["| Goal | This page's figure | |", "|---|---|---|"]
    lines.append(
        f"| the exporter's whole round ≤ 25 ms of CPU at 10k series | {_ms(whole)} ms "
        f"(compose {_ms(now['compose']['p50_ms'])} + render "
        f"{_ms(now['render']['1 scrapes a round']['p50_ms'])}) | {_verdict(whole <= 25)} |"
    )
    if "node_exporter/gzip" in scrapes:
        peer_round = rounds["node_exporter/gzip/1"]["server_cpu_ms_per_round"]
        by_round = peer_round / (ours_round + now["compose"]["p50_ms"])
        p90 = scrapes["node_exporter/gzip"]["p90_ms"] / scrapes["ours/gzip"]["p90_ms"]
        lines.append(
            f"| ≥ 8× less CPU than node_exporter a round at one scrape | {by_round:.1f}× "
            f"(ours with its compose; {peer_round / ours_round:.1f}× without) | "
            f"{_verdict(by_round >= 8)} |"
        )
        lines.append(
            f"| ≥ 50× node_exporter's p90 per scrape | {p90:.1f}× | {_verdict(p90 >= 50)} |"
        )
    if peer is not None:
        cells = peer["cells"]
        worst = max(
            cells[f"ours/{c}"][k] / cells[f"metrics.k8s.io/{c}"][k]
            for c in CLIENT_LABELS
            for k in ("p50_ms", "p99_ms")
        )
        rate = (
            cells["ours/32"]["requests_per_second"]
            / cells["metrics.k8s.io/32"]["requests_per_second"]
        )
        lines.append(
            f"| ours ≤ 1.2× metrics-server's latency, the same or better at 32 clients | "
            f"up to {worst:.2f}× (p50 and p99, all three client shapes); {rate:.2f}× its "
            f"req/s at 32 | {_verdict(worst <= 1.2 and rate >= 1)} |"
        )
    return "\n".join(lines)


def page(
    data: dict[str, Any],
    json_path: Path,
    out: Path,
    peer: dict[str, Any] | None = None,
    peer_before: dict[str, Any] | None = None,
) -> str:
    """The template with this run's figures in place."""
    text = TEMPLATE.read_text()
    json_name = Path(json_path).name if json_path.parent == out.parent else str(json_path)
    before = (data["exporter_round"].get("before") or {}).get("revision", "—")
    values = {
        "json_path": str(json_path),
        "json_name": json_name,
        "date": data["date"],
        "seconds": str(data["seconds"]),
        "command": data["command"],
        "before": before,
        "run": run_section(data),
        "scrape_table": scrape_table(data),
        "ratios": ratios(data),
        "round_table": round_table(data),
        "aggregated": aggregated_section(peer),
        "goals": goals(data, peer),
        "aggregated_before": aggregated_before_after(peer_before, peer),
    }
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def main() -> None:
    """``JSON OUT``; ``performance-aggregated[-before].json`` beside ``JSON`` when present."""
    json_path, out = Path(sys.argv[1]), Path(sys.argv[2])
    found = []
    for name in ("performance-aggregated.json", "performance-aggregated-before.json"):
        path = json_path.with_name(name)
        found.append(json.loads(path.read_text()) if path.is_file() else None)
    out.write_text(page(json.loads(json_path.read_text()), json_path, out, *found))


if __name__ == "__main__":
    main()
