"""The test suite's wall time and steadiness, quiet and under load (issue #32, item 4).

``python tests/bench/suite_runs.py --runs 3 --load 1 --json out.json``: runs ``./dev test``
(README command 2: lint, the whole pytest suite, the walkthrough replay) ``--runs`` times in a
row. With ``--load N``, ``stress-ng --cpu N`` (or, without stress-ng, N Python busy loops)
keeps N cores busy for the whole of each run, as a second job on a shared machine would. Each
run's record: wall time, the passed / failed / skipped / errors counts from pytest's summaries,
the names of the failed tests, and the load average before and after. Figures only; nothing is
asserted, and a failed run does not stop the next (three consecutive runs are the point).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SUMMARY = re.compile(r"^=* ?(?P<body>(?:\d+ \w+,? ?)+) in (?P<seconds>[\d.]+)s", re.M)
COUNT = re.compile(r"(?P<n>\d+) (?P<what>passed|failed|skipped|errors?|xfailed|xpassed)")
FAILED = re.compile(r"^(?:FAILED|ERROR) (?P<test>\S+)", re.M)


def _busy(cores: int) -> subprocess.Popen[bytes] | None:
    """Keep ``cores`` cores busy until stopped: stress-ng where installed, else busy loops."""
    if cores <= 0:
        return None
    stress = shutil.which("stress-ng")
    if stress:
        command = [stress, "--cpu", str(cores), "--quiet"]
    else:
        loop = f"{sys.executable} -c 'while True: pass' &"
        command = ["sh", "-c", f"{' '.join([loop] * cores)} wait"]
    return subprocess.Popen(command, start_new_session=True)


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def counts(output: str) -> dict[str, int]:
    """Summed over every pytest session in ``output`` (the suite, then the walkthrough)."""
    total: dict[str, int] = {}
    for summary in SUMMARY.finditer(output):
        for found in COUNT.finditer(summary["body"]):
            what = "errors" if found["what"].startswith("error") else found["what"]
            total[what] = total.get(what, 0) + int(found["n"])
    return total


def one_run(load: int, log: Path) -> dict[str, Any]:
    before = os.getloadavg()
    busy = _busy(load)
    started = time.monotonic()
    try:
        with log.open("w") as sink:
            done = subprocess.run(
                [str(REPO / "dev"), "test"], cwd=REPO, stdout=sink, stderr=subprocess.STDOUT,
                check=False,
            )  # fmt: skip
    finally:
        wall = time.monotonic() - started
        _stop(busy)
    output = log.read_text(errors="replace")
    return {
        "exit": done.returncode,
        "wall_s": round(wall, 1),
        "counts": counts(output),
        "failed": FAILED.findall(output),
        "load_before": [round(x, 2) for x in before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "log": str(log),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--load", type=int, default=0, help="cores kept busy during each run")
    parser.add_argument("--json", type=Path, required=True, help="where the records go")
    options = parser.parse_args()
    revision = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
        check=False,
    ).stdout.strip()  # fmt: skip
    records: list[dict[str, Any]] = []
    for index in range(options.runs):
        log = options.json.with_suffix(f".run{index + 1}.log")
        record = one_run(options.load, log)
        records.append(record)
        print(json.dumps(record), flush=True)
        document = {
            "revision": revision,
            "cpus": os.cpu_count(),
            "load": options.load,
            "busy_with": "stress-ng" if shutil.which("stress-ng") else "python busy loops",
            "runs": records,
        }
        options.json.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
