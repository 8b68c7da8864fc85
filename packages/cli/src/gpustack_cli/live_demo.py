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
from pathlib import Path

import httpx
import msgspec
from rich.console import Console

from gpustack_cli.demo_view import accelerator_table, pod_table
from gpustack_core.instance_metrics import InstanceMetrics
from gpustack_kube.paths import INSTANCES
from gpustack_simulator.demo import DemoRow
from gpustack_simulator.up import Endpoints, UpError, down, up

V1 = "/apis/worker.gpustack.ai/v1"
INSTANCES_V1 = INSTANCES.with_version("v1")
REFRESH_SECONDS = 5.0
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
        rows: list[DemoRow] = []
        problems: list[str] = []
        for item in listed.json()["items"]:
            meta = item["metadata"]
            path = INSTANCES_V1.path(meta["namespace"], meta["name"], "metrics")
            answer = self.api.get(path)
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


def show(console: Console, reader: Reader, state_dir: Path, *, once: bool = False) -> None:
    """One screen: the Instances' figures, an exporter excerpt, how to explore by hand."""
    rows, problems = reader.rows()
    stamp = time.strftime("%H:%M:%S")
    console.print(pod_table(rows, title=f"InstanceMetrics through the aggregator at {stamp}"))
    console.print(accelerator_table(rows))
    for problem in problems:
        console.print(f"[yellow]{problem}[/yellow]")
    console.print("\n".join(reader.excerpt()), highlight=False, soft_wrap=True)
    kubeconfig = reader.endpoints.kubeconfig
    lead = (
        f"\nTo keep it running: gpustack-operator simulator up --state-dir {state_dir}; then:\n"
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


def _settled_shape(reader: Reader) -> tuple[int, ...] | None:
    """Accelerator entries per Instance; ``None`` while any answers otherwise or has none known."""
    rows, problems = reader.rows()
    if problems or any(r.metrics.sample.accelerators is None for r in rows):
        return None
    return tuple(len(r.metrics.sample.accelerators or ()) for r in rows)


def _wait_settled(reader: Reader, deadline: float) -> None:
    """Until every Instance answers and two reads 0.5 s apart agree on its accelerators.

    ``up`` returns as soon as every daemon serves; in the demo's first second a worker read
    can still meet a Device Manager whose first snapshot is being fetched. The first screen
    (the only one with ``--once``) should show the settled system; after the deadline it shows
    whatever answers, problems included.
    """
    previous = _settled_shape(reader)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        current = _settled_shape(reader)
        if current is not None and current == previous:
            return
        previous = current


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
        deadline = time.monotonic() + 30
        while len(reader.excerpt()) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)  # the exporter publishes after its first round
        _wait_settled(reader, min(deadline, time.monotonic() + 20))
        while True:
            show(console, reader, state_dir.resolve(), once=once)
            if once:
                return 0
            console.print(f"[dim]refreshing every {REFRESH_SECONDS:g}s; Ctrl-C stops[/dim]")
            time.sleep(REFRESH_SECONDS)
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
