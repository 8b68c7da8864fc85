"""``gpustack-operator demo``: the whole system up on this machine, its figures on screen.

Everything shown is read the way a user would read it: each Instance's ``metrics`` through the
stand-in's API server and aggregator with the ``admin`` user's token (what ``kubectl get --raw``
sends), and the exporter's series from a Device Manager's ``/metrics``. Nothing is computed
here; the tables only lay out the API's answers.
"""

from __future__ import annotations

import contextlib
import signal
import ssl
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec
from rich.console import Console

from gpustack_cli.demo_view import ARRIVING, accelerator_table, pod_table
from gpustack_core import contract
from gpustack_core.instance_metrics import InstanceMetrics
from gpustack_kube.paths import INSTANCES
from gpustack_simulator.demo import DemoRow
from gpustack_simulator.hints import self_command
from gpustack_simulator.up import Endpoints, UpError, down, up

V1 = "/apis/worker.gpustack.ai/v1"
INSTANCES_V1 = INSTANCES.with_version("v1")
REFRESH_SECONDS = 5.0
"""Screens start this far apart, however long a read takes (as the README promises)."""
ONCE_SETTLE_SECONDS = 20.0
"""``--once`` prints one screen: it waits this long at most for what is still arriving."""
READERS = 8
"""Concurrent metrics reads: one pass over the demo's 37 Instances one by one took 5-10 s on
two busy cores, each read a round trip through the aggregator to the worker."""
EXCERPT_FAMILIES = (
    "gpustack_instance_cpu_used_millicores",
    "gpustack_instance_accelerator_memory_used_mib",
    "gpustack_instance_accelerator_cores_utilization_percent",
)


class Reader:
    """The admin's view of the running system, over the same HTTPS paths kubectl takes."""

    def __init__(self, state_dir: Path, endpoints: Endpoints) -> None:
        self.endpoints = endpoints
        token = _token(Path(endpoints.kubeconfig), "admin")
        context = ssl.create_default_context(cafile=str(state_dir / "cluster" / "pki" / "ca.crt"))
        self.api = httpx.Client(
            base_url=endpoints.cluster,
            verify=context,
            headers={"Authorization": f"Bearer {token}"},
            timeout=15,
            trust_env=False,
        )
        self.device_managers = httpx.Client(verify=False, timeout=5, trust_env=False)

    def close(self) -> None:
        """Release both connection pools."""
        self.api.close()
        self.device_managers.close()

    def rows(self) -> tuple[list[DemoRow], list[str]]:
        """Every Instance's metrics (rows) and the Instances that answered otherwise (why)."""
        listed = self.api.get(INSTANCES_V1.path())
        listed.raise_for_status()
        metas = [item["metadata"] for item in listed.json()["items"]]

        def read(meta: dict[str, Any]) -> httpx.Response:
            return self.api.get(INSTANCES_V1.path(meta["namespace"], meta["name"], "metrics"))

        with ThreadPoolExecutor(READERS) as pool:
            answers = list(pool.map(read, metas))
        rows: list[DemoRow] = []
        problems: list[str] = []
        for meta, answer in zip(metas, answers, strict=True):
            if answer.status_code != 200:
                message = answer.json().get("message", answer.text)
                problems.append(
                    f"{meta['namespace']}/{meta['name']}: {answer.status_code} {message}"
                )
                continue
            metrics = msgspec.json.decode(answer.content, type=InstanceMetrics)
            rows.append(DemoRow(metrics, {}, []))
        rows.sort(key=lambda r: (r.metrics.metadata.namespace, r.metrics.metadata.name))
        return rows, problems

    def arriving(self, rows: list[DemoRow]) -> set[str]:
        """The Instances (``ns/name``) whose accelerator figures are still on their way.

        An Instance without ``accelerators`` is one no Device Manager answered for. That is
        for good where its Pod is not running or runs on a node without a Device Manager (a
        stopped or pending Instance, a CPU node); it is still arriving where its Pod runs on
        a node whose Device Manager has not sampled it yet. Read from the Pods as the API
        lists them, and the Device Managers ``up`` started.
        """
        absent = {
            r.metrics.metadata.uid: _key(r) for r in rows if r.metrics.sample.accelerators is None
        }
        if not absent:
            return set()
        listed = self.api.get("/api/v1/pods", params={"labelSelector": contract.PART_OF_LABEL})
        listed.raise_for_status()
        served = {dm.node for dm in self.endpoints.device_managers}
        out = set()
        for pod in listed.json()["items"]:
            owner = (pod["metadata"].get("labels") or {}).get(contract.PART_OF_LABEL)
            node = (pod.get("spec") or {}).get("nodeName")
            running = (pod.get("status") or {}).get("phase") == "Running"
            if owner in absent and running and node in served:
                out.add(absent[owner])
        return out

    def excerpt(self, lines: int = 12) -> list[str]:
        """A few of the exporter's series from the first Device Manager."""
        first = self.endpoints.device_managers[0]
        text = self.device_managers.get(first.metrics).text
        chosen = [line for line in text.splitlines() if line.startswith(EXCERPT_FAMILIES)]
        return [f"# from {first.metrics} ({first.manufacturer} on {first.node})", *chosen[:lines]]


def _token(kubeconfig: Path, user: str) -> str:
    import yaml

    document = yaml.safe_load(kubeconfig.read_text())
    for entry in document["users"]:
        if entry["name"] == user:
            return str(entry["user"]["token"])
    raise UpError(f"{kubeconfig} has no user {user!r}")


def _key(row: DemoRow) -> str:
    return f"{row.metrics.metadata.namespace}/{row.metrics.metadata.name}"


@dataclass(frozen=True)
class Screen:
    """One read of everything a screen shows."""

    rows: list[DemoRow]
    problems: list[str]
    """Instances that answered otherwise than 200, with the answer."""
    arriving: set[str]
    """Instances (``ns/name``) whose Device Manager has not answered for them yet."""
    excerpt: list[str]
    """The exporter's series, after a ``# from …`` line; only that line before its first round."""

    @classmethod
    def read(cls, reader: Reader) -> Screen:
        """Read the Instances, what is arriving and the exporter excerpt."""
        rows, problems = reader.rows()
        return cls(rows, problems, reader.arriving(rows), reader.excerpt())

    @property
    def complete(self) -> bool:
        """Nothing is still on its way (Instances that never report accelerators aside)."""
        return not self.arriving and not self.problems and len(self.excerpt) > 1


def show(console: Console, reader: Reader, state_dir: Path, *, once: bool = False) -> bool:
    """One screen: the Instances' figures, an exporter excerpt, how to explore by hand.

    Shown with whatever has arrived; what has not is marked (``…`` in Grants and a line naming
    the Instances, a line under the exporter's). Returns whether everything had arrived.
    """
    screen = Screen.read(reader)
    render(console, screen, reader.endpoints.kubeconfig, state_dir, once=once)
    return screen.complete


def render(
    console: Console, screen: Screen, kubeconfig: str, state_dir: Path, *, once: bool = False
) -> None:
    """Print ``screen``."""
    stamp = time.strftime("%H:%M:%S")
    rows = [
        r._replace(notes=[*r.notes, ARRIVING]) if _key(r) in screen.arriving else r
        for r in screen.rows
    ]
    console.print(pod_table(rows, title=f"InstanceMetrics through the aggregator at {stamp}"))
    console.print(accelerator_table(rows))
    for problem in screen.problems:
        console.print(f"[yellow]{problem}[/yellow]")
    if screen.arriving:
        console.print(
            f"[dim]{ARRIVING} still arriving: the Device Manager's first sample for "
            f"{', '.join(sorted(screen.arriving))}[/dim]",
            highlight=False,
            soft_wrap=True,
        )
    excerpt = screen.excerpt
    if len(excerpt) < 2:
        excerpt = [*excerpt, "# (its first round is still arriving)"]
    console.print("\n".join(excerpt), highlight=False, soft_wrap=True)
    lead = (
        f"\nTo keep it running: {self_command()} simulator up --state-dir {state_dir}; then:\n"
        if once
        else "\nExplore it with kubectl while the demo runs:\n"
    )
    console.print(
        lead + f"  kubectl --kubeconfig {kubeconfig} get --raw "
        f"{V1}/namespaces/team-a/instances/qwen-a/metrics\n"
        f"  kubectl --kubeconfig {kubeconfig} --context no-metrics get --raw "
        f"{V1}/namespaces/team-a/instances/qwen-a/metrics   # 403: get instances/metrics\n"
        f"  endpoints: {state_dir / 'endpoints.json'}   logs: {state_dir / 'logs'}",
        highlight=False,
        soft_wrap=True,
    )


def run_live_demo(
    state_dir: Path, *, once: bool, scenario: str = "demo", console: Console | None = None
) -> int:
    """Bring the system up, show it (once, or until Ctrl-C), bring it down; the exit code.

    Ctrl-C is how the demo is meant to end: wherever it lands (while starting, between
    screens, mid-read), everything is stopped and the demo exits 0 after one ``stopped …``
    line. A second Ctrl-C while stopping is ignored, so stopping always finishes.
    """
    console = console or Console()
    with _sigterm_as_ctrl_c():
        return _run(console, state_dir, once=once, scenario=scenario)


@contextlib.contextmanager
def _sigterm_as_ctrl_c() -> Iterator[None]:
    """SIGTERM (``kill``, a closing terminal's supervisor) stops the demo as Ctrl-C does.

    Python's default for SIGTERM is to die on the spot, which would leave every process ``up``
    started running in the background.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(console: Console, state_dir: Path, *, once: bool, scenario: str) -> int:
    console.print(f"starting the stand-in, the Device Managers and the worker ({scenario}) …")
    started = time.monotonic()
    try:
        endpoints = up(scenario, state_dir)
    except UpError as exc:
        console.print(
            f"[red]the demo did not come up:[/red] {exc}", highlight=False, soft_wrap=True
        )
        return 1
    except KeyboardInterrupt:  # `up` has stopped whatever it had started
        _stop(console, state_dir, interrupted="while starting")
        return 0
    console.print(f"up in {time.monotonic() - started:.1f}s", highlight=False)
    reader: Reader | None = None
    try:
        reader = Reader(state_dir.resolve(), endpoints)
        if once:
            _once(console, reader, state_dir.resolve())
            return 0
        # The first screen as soon as the stack answers, what is missing marked; then one
        # every REFRESH_SECONDS from the start of the last, so a slow read does not stretch it.
        due = time.monotonic()
        while True:
            show(console, reader, state_dir.resolve())
            console.print(f"[dim]refreshing every {REFRESH_SECONDS:g}s; Ctrl-C stops[/dim]")
            due += REFRESH_SECONDS
            time.sleep(max(due - time.monotonic(), 0.0))
    except KeyboardInterrupt:
        console.print("stopping …")
        return 0
    except httpx.HTTPError as exc:
        console.print(f"[red]reading the demo failed:[/red] {exc}", highlight=False)
        return 1
    finally:
        if reader is not None:
            reader.close()
        _stop(console, state_dir)


def _once(console: Console, reader: Reader, state_dir: Path) -> None:
    """``--once``: the one screen, once what is still arriving has arrived (or at a deadline).

    Only what :class:`Screen` counts as arriving is waited for: an Instance that will never
    have accelerators (stopped, pending, on a CPU node) does not hold the screen.
    """
    deadline = time.monotonic() + ONCE_SETTLE_SECONDS
    screen = Screen.read(reader)
    while not screen.complete and time.monotonic() < deadline:
        time.sleep(0.5)
        screen = Screen.read(reader)
    render(console, screen, reader.endpoints.kubeconfig, state_dir, once=True)


def _stop(console: Console, state_dir: Path, *, interrupted: str = "") -> None:
    """``simulator down``, deaf to Ctrl-C and SIGTERM until done; then one ``stopped …`` line."""
    main = threading.current_thread() is threading.main_thread()  # where signals can be set
    signals = (signal.SIGINT, signal.SIGTERM) if main else ()
    previous = {number: signal.signal(number, signal.SIG_IGN) for number in signals}
    try:
        stopped = down(state_dir)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    what = ", ".join(stopped) if stopped else "everything (nothing was left running)"
    note = f" (interrupted {interrupted})" if interrupted else ""
    console.print(f"stopped {what}{note}", highlight=False, soft_wrap=True)
