"""The demo's tables at 80 columns, and Ctrl-C ending the live demo cleanly (exit 0)."""

import itertools
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import msgspec
import pytest
from rich.console import Console

from gpustack_cli import live_demo
from gpustack_cli.demo_view import accelerator_table, pod_table, short_ids
from gpustack_simulator.demo import DemoRow, demo_metrics, load_demo
from gpustack_simulator.up import DeviceManagerEndpoint, Endpoints, UpError

MODES = ("Exclusive", "Shared", "Sliced", "Partitioned", "Visibility")


def _live_rows() -> list[DemoRow]:
    """Rows as the live demo reads them (no device index), with its longer names and modes.

    Real-looking UUIDs that differ early, made-up ones that differ only at the end, two
    Instances sharing one card, the SSH sidecar's Visibility grant, a PCI address.
    """
    offline = demo_metrics(load_demo())
    template = next(r for r in offline if r.metrics.sample.accelerators)
    entry = (template.metrics.sample.accelerators or [])[0]
    grants = [
        ("team-a", "llama-70b", "GPU-9d4e7a21-3c5b-4f8e-a1d2-7b6c5e4f3a21", "Exclusive"),
        ("team-a", "embed-a", "GPU-0b1c2d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e", "Shared"),
        ("team-b", "embed-b", "GPU-0b1c2d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e", "Shared"),
        ("team-b", "qwen-pending", "GPU-6a7b8c9d-0000-1111-2222-333344445501", "Sliced"),
        ("team-b", "qwen-b", "GPU-6a7b8c9d-0000-1111-2222-333344445502", "Visibility"),
        (
            "gpustack-demo",
            "applied-partitioned",
            "MIG-1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60002",
            "Partitioned",
        ),
        ("team-c", "hybrid", "0000:8a:00.0", "Exclusive"),
    ]
    rows = []
    for namespace, name, device, mode in grants:
        metadata = msgspec.structs.replace(
            template.metrics.metadata, namespace=namespace, name=name
        )
        grant = msgspec.structs.replace(entry, id=device, mode=mode, memory_total_mib=196592)
        sample = msgspec.structs.replace(template.metrics.sample, accelerators=[grant])
        metrics = msgspec.structs.replace(template.metrics, metadata=metadata, sample=sample)
        rows.append(DemoRow(metrics, {}, []))
    return rows


ROW_SETS = {"offline": lambda: demo_metrics(load_demo()), "live": _live_rows}


def _render(rows: list[DemoRow], width: int) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(pod_table(rows, title="InstanceMetrics through the aggregator at 12:00:00"))
    console.print(accelerator_table(rows))
    return console.export_text()


@pytest.mark.parametrize("which", sorted(ROW_SETS))
def test_at_80_columns_no_name_id_or_mode_is_cut(which: str) -> None:
    rows = ROW_SETS[which]()
    text = _render(rows, 80)
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), text
    assert "…" not in text
    names = {f"{r.metrics.metadata.namespace}/{r.metrics.metadata.name}" for r in rows}
    ids = {a.id for r in rows for a in r.metrics.sample.accelerators or []}
    short = short_ids(sorted(ids))
    for name in names:  # whole, on one line
        assert any(name in line.split() for line in lines), (name, text)
    for full, cut in short.items():
        assert any(cut in line.split() for line in lines), (cut, text)
        assert len(cut) <= 16
        if cut != full:  # a shortened id has its legend line
            assert any(line.split() == [cut, full] for line in lines), (full, text)
    modes = {a.mode for r in rows for a in r.metrics.sample.accelerators or []}
    for mode in modes:
        assert any(mode in line.split() for line in lines), (mode, text)
    assert "their figures, by #" in text  # too narrow for one table: split, deliberately
    for header in ("Grants", "Healthy", "Storage MiB"):  # no column cropped off the edge
        assert header in text, text
    for row in rows:
        sample = row.metrics.sample
        for figure in (sample.cpu_total_milli_cores, sample.storage_total_mib):
            assert str(figure) in text.replace("/ ", " ").split(), (figure, text)


def test_a_wide_terminal_gets_one_table() -> None:
    text = _render(demo_metrics(load_demo()), 160)
    assert "their figures" not in text
    assert "19876 / 20389" in text
    assert "…" not in text


def test_short_ids_stay_distinct_and_leave_short_ones_whole() -> None:
    ids = [
        "GPU-6a7b8c9d-0000-1111-2222-333344445500",
        "GPU-6a7b8c9d-0000-1111-2222-333344445501",
        "GPU-6a7b8c9d-0000-1111-2222-333344455500",  # same first 8 and last 4
        "0000:8a:00.0",
    ]
    cut = short_ids(ids)
    assert len(set(cut.values())) == len(ids)
    assert cut["0000:8a:00.0"] == "0000:8a:00.0"
    assert cut[ids[0]] == "GPU-6a7b8c9d~44445500"  # 8~4 and 12~4 would collide
    assert short_ids([ids[0], ids[1]])[ids[0]] == "GPU-6a7b~5500"


class _Reader:
    """A reader whose second read is a Ctrl-C."""

    reads = 0

    def __init__(self, state_dir: Path, endpoints: Endpoints) -> None:
        self.endpoints = endpoints

    def close(self) -> None:
        pass

    def excerpt(self, lines: int = 12) -> list[str]:
        return ["# from https://127.0.0.2:32443/metrics", "gpustack_instance_cpu 1"]

    def arriving(self, rows: list[DemoRow]) -> set[str]:
        return set()

    def rows(self) -> tuple[list[DemoRow], list[str]]:
        _Reader.reads += 1
        if _Reader.reads > 1:
            raise KeyboardInterrupt
        return demo_metrics(load_demo()), []


@pytest.fixture
def stand_ins(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The live demo with ``up``/``down`` and the reader stood in; what ``down`` saw."""
    seen: list[str] = []
    endpoints = Endpoints(
        scenario="demo",
        cluster="https://127.0.0.1:1",
        worker="https://127.0.0.1:2",
        kubeconfig="/nonexistent/kubeconfig",
        device_managers=[],
    )

    def down(state_dir: Path) -> list[str]:
        # A second Ctrl-C while stopping must not cut the stop short.
        deaf = all(signal.getsignal(n) is signal.SIG_IGN for n in (signal.SIGINT, signal.SIGTERM))
        seen.append("ignored" if deaf else "open")
        return ["cluster", "device-manager-gpu-node-1-nvidia", "worker"]

    _Reader.reads = 0
    monkeypatch.setattr(live_demo, "up", lambda scenario, state_dir: endpoints)
    monkeypatch.setattr(live_demo, "down", down)
    monkeypatch.setattr(live_demo, "Reader", _Reader)
    monkeypatch.setattr(live_demo.time, "sleep", lambda seconds: None)
    return seen


def test_ctrl_c_between_screens_exits_0_with_one_stopped_line(
    stand_ins: list[str], tmp_path: Path
) -> None:
    console = Console(width=80, record=True, color_system=None)
    before = signal.getsignal(signal.SIGINT)
    code = live_demo.run_live_demo(tmp_path, once=False, console=console)
    assert code == 0
    lines = console.export_text().splitlines()
    assert lines[-2:] == [
        "stopping …",
        "stopped cluster, device-manager-gpu-node-1-nvidia, worker",
    ]
    assert stand_ins == ["ignored"]
    assert signal.getsignal(signal.SIGINT) is before  # restored after stopping


def test_ctrl_c_while_starting_exits_0_and_says_so(
    stand_ins: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(scenario: str, state_dir: Path) -> Endpoints:
        raise KeyboardInterrupt

    monkeypatch.setattr(live_demo, "up", interrupted)
    console = Console(width=80, record=True, color_system=None)
    assert live_demo.run_live_demo(tmp_path, once=False, console=console) == 0
    last = console.export_text().splitlines()[-1]
    assert last.startswith("stopped cluster, ")
    assert last.endswith("(interrupted while starting)")


def test_a_demo_that_does_not_come_up_exits_1(
    stand_ins: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(scenario: str, state_dir: Path) -> Endpoints:
        raise UpError("worker exited with status 1")

    monkeypatch.setattr(live_demo, "up", failing)
    console = Console(width=80, record=True, color_system=None)
    assert live_demo.run_live_demo(tmp_path, once=False, console=console) == 1
    assert "the demo did not come up: worker exited" in console.export_text()


STUBBED_DEMO = """
import sys
from pathlib import Path

from gpustack_cli import live_demo
from gpustack_simulator.demo import demo_metrics, load_demo
from gpustack_simulator.up import Endpoints


class Reader:
    def __init__(self, state_dir, endpoints):
        self.endpoints = endpoints

    def close(self):
        pass

    def excerpt(self, lines=12):
        return ["# from https://127.0.0.2:32443/metrics", "gpustack_instance_cpu 1"]

    def arriving(self, rows):
        return set()

    def rows(self):
        return demo_metrics(load_demo()), []


endpoints = Endpoints(scenario="demo", cluster="https://127.0.0.1:1", worker="w", kubeconfig="k")
live_demo.up = lambda scenario, state_dir: endpoints
live_demo.down = lambda state_dir: ["cluster", "worker"]
live_demo.Reader = Reader
sys.exit(live_demo.run_live_demo(Path(sys.argv[1]), once=False))
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_the_whole_process_group_ends_the_demo_cleanly(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """As ``./dev demo`` gets Ctrl-C: the signal reaches every process of the group at once."""
    script = tmp_path / "demo.py"
    script.write_text(STUBBED_DEMO)
    demo = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, so killpg reaches it and nothing else
    )
    try:
        assert demo.stdout is not None
        for line in demo.stdout:
            if "refreshing every" in line:  # on screen, now sleeping between screens
                break
        os.killpg(demo.pid, signum)
        rest, errors = demo.communicate(timeout=30)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 0, errors
    assert "Traceback" not in errors
    assert rest.splitlines()[-2:] == ["stopping …", "stopped cluster, worker"]


# -- the first screen (issue #31, "First contact") ---------------------------------------------


class _Clock:
    """``live_demo.time`` in virtual seconds: ``sleep`` advances it, nothing waits."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    @staticmethod
    def strftime(fmt: str) -> str:
        return "12:00:00"


class _SlowReader:
    """Three Instances never report accelerators (by design, as in the demo), the exporter's
    first round is late, and the third read of the rows is a Ctrl-C."""

    shown_at: list[float] = []
    clock = _Clock()

    def __init__(self, state_dir: Path, endpoints: Endpoints) -> None:
        self.endpoints = endpoints

    def close(self) -> None:
        pass

    def excerpt(self, lines: int = 12) -> list[str]:
        return ["# from https://127.0.0.2:32443/metrics"]  # no series yet, ever

    def arriving(self, rows: list[DemoRow]) -> set[str]:
        return set()

    def rows(self) -> tuple[list[DemoRow], list[str]]:
        _SlowReader.shown_at.append(_SlowReader.clock.now)
        if len(_SlowReader.shown_at) > 3:
            raise KeyboardInterrupt
        rows = demo_metrics(load_demo())
        for row in rows[:3]:
            sample = msgspec.structs.replace(row.metrics.sample, accelerators=None)
            rows[rows.index(row)] = row._replace(
                metrics=msgspec.structs.replace(row.metrics, sample=sample)
            )
        return rows, []


def test_the_first_screen_shows_as_soon_as_the_stack_answers(
    stand_ins: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the first screen waited for every Instance to report accelerators (three never
    do) and for the exporter's first round, so it came after the 20-30 s deadlines."""
    clock = _SlowReader.clock = _Clock()
    _SlowReader.shown_at = []
    monkeypatch.setattr(live_demo, "Reader", _SlowReader)
    monkeypatch.setattr(live_demo, "time", clock)
    console = Console(width=120, record=True, color_system=None)
    assert live_demo.run_live_demo(tmp_path, once=False, console=console) == 0
    text = console.export_text()
    first = text.index("InstanceMetrics through the aggregator")
    assert clock.now >= 10  # it did go on refreshing
    # Within a second of `up` returning (virtual time: nothing else waited before it).
    assert _SlowReader.shown_at[0] < 1.0, _SlowReader.shown_at
    assert "still arriving" in text[first:]  # the exporter's excerpt is marked, not waited for
    # Screens every 5 s, counted from each screen's start (a slow read does not add to it).
    assert [b - a for a, b in itertools.pairwise(_SlowReader.shown_at)] == [5.0, 5.0, 5.0]


def _without_accelerators(row: DemoRow) -> DemoRow:
    sample = msgspec.structs.replace(row.metrics.sample, accelerators=None)
    return row._replace(metrics=msgspec.structs.replace(row.metrics, sample=sample))


def test_arriving_is_a_running_pod_on_a_device_managers_node_without_figures() -> None:
    """Which Instances without accelerators are still arriving, from the Pods the API lists:
    stopped (no Pod), pending, or on a node without a Device Manager are not."""
    rows = [_without_accelerators(r) for r in demo_metrics(load_demo())[:4]]
    rows.append(demo_metrics(load_demo())[4])  # has its figures
    uids = [r.metrics.metadata.uid for r in rows]
    pods = [
        {"metadata": {"labels": {"app.kubernetes.io/part-of": uids[0]}},
         "spec": {"nodeName": "gpu-node-1"}, "status": {"phase": "Running"}},
        {"metadata": {"labels": {"app.kubernetes.io/part-of": uids[1]}},
         "spec": {"nodeName": "gpu-node-1"}, "status": {"phase": "Pending"}},
        {"metadata": {"labels": {"app.kubernetes.io/part-of": uids[2]}},
         "spec": {"nodeName": "cpu-node-1"}, "status": {"phase": "Running"}},
        {"metadata": {"labels": {"app.kubernetes.io/part-of": uids[4]}},
         "spec": {"nodeName": "gpu-node-1"}, "status": {"phase": "Running"}},
    ]  # fmt: skip  # uids[3]: no Pod at all (a stopped Instance)
    asked: list[str] = []

    def api(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        return httpx.Response(200, json={"kind": "PodList", "items": pods})

    reader = live_demo.Reader.__new__(live_demo.Reader)
    reader.api = httpx.Client(base_url="https://api.invalid", transport=httpx.MockTransport(api))
    reader.endpoints = Endpoints(scenario="demo", cluster="c", worker="w", kubeconfig="k",
                                 device_managers=[_dm("gpu-node-1")])  # fmt: skip
    first = rows[0].metrics.metadata
    assert reader.arriving(rows) == {f"{first.namespace}/{first.name}"}
    assert asked == ["https://api.invalid/api/v1/pods?labelSelector=app.kubernetes.io%2Fpart-of"]
    asked.clear()
    assert reader.arriving(rows[4:]) == set()
    assert asked == []  # every Instance has its figures: nothing to ask


def _dm(node: str) -> DeviceManagerEndpoint:
    return DeviceManagerEndpoint(
        node=node, manufacturer="nvidia", namespace="gpustack-system", pod=f"dm-{node}",
        address="127.0.0.2:1", metrics="https://127.0.0.2:1/metrics",
        snapshot="https://127.0.0.2:1/monitor/snapshot", log="l",
    )  # fmt: skip


def test_once_waits_only_for_what_is_arriving(
    stand_ins: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--once``: Instances that never report accelerators do not hold the one screen; one
    whose Device Manager is late does, until it answers."""
    clock = _Clock()
    reads: list[float] = []

    class Late(_SlowReader):
        def excerpt(self, lines: int = 12) -> list[str]:
            return ["# from https://127.0.0.2:32443/metrics", "gpustack_instance_cpu 1"]

        def rows(self) -> tuple[list[DemoRow], list[str]]:
            reads.append(clock.now)
            rows = demo_metrics(load_demo())
            late = 1 if len(reads) < 3 else 0  # the second Instance's figures come third
            return [_without_accelerators(rows[0]), *([_without_accelerators(rows[1])] * late),
                    *rows[2 - (1 - late):]], []  # fmt: skip

        def arriving(self, rows: list[DemoRow]) -> set[str]:
            second = demo_metrics(load_demo())[1].metrics.metadata
            key = f"{second.namespace}/{second.name}"
            return {key} if len(reads) < 3 else set()

    monkeypatch.setattr(live_demo, "Reader", Late)
    monkeypatch.setattr(live_demo, "time", clock)
    console = Console(width=120, record=True, color_system=None)
    assert live_demo.run_live_demo(tmp_path, once=True, console=console) == 0
    assert reads == [0.0, 0.5, 1.0]  # not the 20 s deadline
    text = console.export_text()
    assert text.count("InstanceMetrics through the aggregator") == 1
    assert "still arriving" not in text
