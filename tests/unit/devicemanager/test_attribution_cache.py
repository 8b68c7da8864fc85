"""The attribution cache: one ``stat`` read per known process, and a reused PID read afresh.

The process table is written by hand here (not by the simulator's procfs) because the point is
the start time, field 22 of ``stat``, which the tests set per process.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_attribution import MAIN, PLAIN, PLAIN_POD, POD, PODS, SIDECAR, systemd

from gpustack_core.reasons import AttributionReason
from gpustack_devicemanager.attribution import (
    Attributed,
    AttributionCache,
    NonInstance,
    Unattributed,
    _identity,
    _read_bytes,
    _start_time,
    _state,
    attribute,
)


def write(root: Path, pid: int, cgroup: str, *, started: int, state: str = "S",
          comm: str = "python") -> None:  # fmt: skip
    base = root / str(pid)
    base.mkdir(parents=True, exist_ok=True)
    fields = ["1", str(pid), str(pid)] + ["0"] * 49  # ppid … (field 4 on)
    fields[22 - 4] = str(started)
    (base / "stat").write_bytes(f"{pid} ({comm}) {state} {' '.join(fields)}\n".encode())
    (base / "cgroup").write_text(cgroup + "\n")
    (base / "comm").write_text(comm + "\n")


class Counting:
    """A ``read_file`` that counts what it reads, by file name."""

    def __init__(self) -> None:
        self.reads: list[str] = []

    def __call__(self, path: Path) -> bytes:
        self.reads.append(path.name)
        return path.read_bytes()


def test_a_known_process_costs_one_read_and_answers_the_same(tmp_path: Path) -> None:
    write(tmp_path, 10, systemd(POD, MAIN), started=500)
    write(tmp_path, 11, systemd(PLAIN_POD, PLAIN), started=501)
    cache = AttributionCache()
    cold = Counting()
    first = attribute([10, 11], tmp_path, PODS, read_file=cold, cache=cache)
    assert first == {10: Attributed(POD, "main"), 11: NonInstance(PLAIN_POD)}
    assert sorted(cold.reads) == sorted(["cgroup", "stat", "comm", "cgroup"] * 2)
    warm = Counting()
    again = attribute([10, 11], tmp_path, PODS, read_file=warm, cache=cache)
    assert again == first
    assert warm.reads == ["stat", "stat"]
    assert cache.hits == 2


def test_a_reused_pid_is_never_placed_on_the_previous_pod(tmp_path: Path) -> None:
    write(tmp_path, 10, systemd(POD, MAIN), started=500)
    cache = AttributionCache()
    assert attribute([10], tmp_path, PODS, cache=cache) == {10: Attributed(POD, "main")}
    # The process exits; a new one, in another Pod, gets the same PID (a later start time).
    write(tmp_path, 10, systemd(PLAIN_POD, PLAIN), started=9000)
    assert attribute([10], tmp_path, PODS, cache=cache) == {10: NonInstance(PLAIN_POD)}
    assert cache.hits == 0


def test_pod_changes_are_seen_through_the_cache(tmp_path: Path) -> None:
    """The cache keeps where a process runs, never what the node's Pods say about it."""
    write(tmp_path, 10, systemd(POD, SIDECAR), started=7)
    cache = AttributionCache()
    assert attribute([10], tmp_path, PODS, cache=cache) == {10: Attributed(POD, "sidecar")}
    assert attribute([10], tmp_path, {}, cache=cache) == {
        10: Unattributed(AttributionReason.UNKNOWN_POD)
    }
    assert cache.hits == 1


def test_a_cached_process_turned_zombie_or_gone_says_so(tmp_path: Path) -> None:
    write(tmp_path, 10, systemd(POD, MAIN), started=7)
    write(tmp_path, 12, systemd(POD, MAIN), started=8)
    cache = AttributionCache()
    attribute([10, 12], tmp_path, PODS, cache=cache)
    write(tmp_path, 10, systemd(POD, MAIN), started=7, state="Z")
    (tmp_path / "12" / "stat").unlink()
    assert attribute([10, 12], tmp_path, PODS, cache=cache) == {
        10: Unattributed(AttributionReason.ZOMBIE),
        12: Unattributed(AttributionReason.EXITED),
    }


def test_the_cache_holds_only_the_last_ticks_pids(tmp_path: Path) -> None:
    for pid in (10, 11, 12):
        write(tmp_path, pid, systemd(POD, MAIN), started=pid)
    cache = AttributionCache()
    attribute([10, 11, 12], tmp_path, PODS, cache=cache)
    attribute([11], tmp_path, PODS, cache=cache)
    assert set(cache.entries) == {11}


CONTAINERS = [(POD, MAIN), (POD, SIDECAR), (PLAIN_POD, PLAIN)]


@settings(max_examples=40, deadline=None)
@given(
    ticks=st.lists(
        st.lists(
            st.tuples(
                st.sampled_from([10, 11, 12]),
                st.sampled_from(CONTAINERS),
                st.integers(1, 3),
                st.sampled_from("SRZ"),
            ),
            max_size=3,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_cached_answers_equal_uncached_ones(
    ticks: list[list[tuple[int, tuple[str, str], int, str]]],
) -> None:
    """Whatever the process table does between ticks, the cache changes no answer.

    A PID whose cgroup changes keeps its start time only if the process is the same, which is
    how the kernel behaves; the strategy ties the cgroup to the start time to stay physical.
    """
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cache = AttributionCache()
        for tick in ticks:
            for pid, (pod, container), generation, state in tick:
                started = generation * 100 + CONTAINERS.index((pod, container))
                write(root, pid, systemd(pod, container), started=started, state=state)
            pids = sorted({pid for pid, *_ in tick})
            assert attribute(pids, root, PODS, cache=cache) == attribute(pids, root, PODS)


def test_a_process_that_renames_itself_is_read_again(tmp_path: Path) -> None:
    """``comm`` decides "mediated"; ``stat`` carries it, so a rename costs no extra read."""
    write(tmp_path, 10, systemd(POD, MAIN), started=7)
    cache = AttributionCache()
    assert attribute([10], tmp_path, PODS, cache=cache) == {10: Attributed(POD, "main")}
    write(tmp_path, 10, systemd(POD, MAIN), started=7, comm="nvidia-cuda-mps-server")
    assert attribute([10], tmp_path, PODS, cache=cache) == {
        10: Unattributed(AttributionReason.MEDIATED)
    }
    assert cache.hits == 0


def test_a_replaced_pod_record_is_classified_afresh(tmp_path: Path) -> None:
    """The last answer is reused only for the very record it was decided on."""
    write(tmp_path, 10, systemd(POD, MAIN), started=7)
    cache = AttributionCache()
    assert attribute([10], tmp_path, PODS, cache=cache) == {10: Attributed(POD, "main")}
    first = attribute([10], tmp_path, PODS, cache=cache)[10]
    assert attribute([10], tmp_path, PODS, cache=cache)[10] is first  # same record: reused
    # The Pod is recreated under the same UID with new containers: MAIN is nobody's now.
    restarted = replace(PODS[POD], containers=MappingProxyType({SIDECAR: "main"}))
    assert attribute([10], tmp_path, {**PODS, POD: restarted}, cache=cache) == {
        10: Unattributed(AttributionReason.UNKNOWN_CONTAINER)
    }
    # And an equal record that is another object is classified again, to the same answer.
    again = replace(PODS[POD])
    assert attribute([10], tmp_path, {**PODS, POD: again}, cache=cache) == {10: first}
    assert cache.hits == 4


@settings(max_examples=60, deadline=None)
@given(size=st.sampled_from([0, 1, 4095, 4096, 4097, 8192, 12_345]), data=st.data())
def test_the_direct_reader_reads_what_path_read_bytes_reads(size: int, data: st.DataObject) -> None:
    """Whole files of any length, chunk boundaries included, and the same errors."""
    content = data.draw(st.binary(min_size=size, max_size=size))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "stat"
        path.write_bytes(content)
        assert _read_bytes(str(path)) == path.read_bytes() == content
        for missing, error in (
            (Path(tmp) / "gone", FileNotFoundError),
            (Path(tmp), IsADirectoryError),
        ):
            with pytest.raises(error):
                _read_bytes(str(missing))
            with pytest.raises(error):
                missing.read_bytes()


INDEXES = [
    PODS,
    {},
    {**PODS, POD: replace(PODS[POD])},
    {**PODS, POD: replace(PODS[POD], containers=MappingProxyType({SIDECAR: "main"}))},
    {**PODS, POD: replace(PODS[POD], instance=False)},
]


@settings(max_examples=40, deadline=None)
@given(
    ticks=st.lists(
        st.tuples(st.lists(st.sampled_from(CONTAINERS), min_size=3, max_size=3), st.integers(0, 4)),
        min_size=1,
        max_size=6,
    )
)
def test_cached_answers_follow_the_pod_index(
    ticks: list[tuple[list[tuple[str, str]], int]],
) -> None:
    """Whatever the node's Pod index hands over each tick, the cache changes no answer."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cache = AttributionCache()
        for placement, index in ticks:
            for pid, (pod, container) in zip((10, 11, 12), placement, strict=True):
                write(
                    root, pid, systemd(pod, container), started=CONTAINERS.index((pod, container))
                )
            pods = INDEXES[index]
            assert attribute([10, 11, 12], root, pods, cache=cache) == attribute(
                [10, 11, 12], root, pods
            )


@given(
    st.one_of(
        st.binary(max_size=120),
        st.builds(
            lambda name, state, fields: f"5 ({name}) {state} {' '.join(fields)}\n".encode(
                "utf-8", "surrogateescape"
            ),
            st.text(max_size=20),
            st.text(max_size=2),
            st.lists(st.text(alphabet="0123456789 \t)(", max_size=6), max_size=30),
        ),
    )
)
def test_stat_is_read_once_to_the_same_identity(stat: bytes) -> None:
    """The warm path's one parse says what the full path's two parses say, on any text."""
    assert _identity(stat) == (_state(stat), _start_time(stat))
