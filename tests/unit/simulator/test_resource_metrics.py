"""The node agent's ``/metrics/resource`` as metrics-server reads it.

Expected values are written by hand from the summary (nanoseconds → seconds, RFC 3339 → Unix
milliseconds) and the exposition is read back by prometheus_client's own parser, not ours.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from gpustack_simulator.cluster.resourcemetrics import render

T = "2026-12-07T04:00:00Z"
T_MS = 1_796_616_000_000  # date -d 2026-12-07T04:00:00Z +%s, times 1000


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], tuple[float, Any]]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name, tuple(sorted(sample.labels.items()))] = (
                sample.value,
                sample.timestamp,
            )
    return out


def _summary() -> dict[str, Any]:
    return {
        "node": {
            "nodeName": "n1",
            "cpu": {"time": T, "usageCoreNanoSeconds": 1_500_000_000_000},
            "memory": {"time": T, "workingSetBytes": 3 << 30},
        },
        "pods": [
            {
                "podRef": {"name": "p", "namespace": "team-a", "uid": "u"},
                "cpu": {"time": T, "usageCoreNanoSeconds": 2_500_000_000},
                "memory": {"time": T, "workingSetBytes": 1 << 20},
                "containers": [
                    {
                        "name": "main",
                        "startTime": "2026-12-07T03:00:00Z",
                        "cpu": {"time": T, "usageCoreNanoSeconds": 2_500_000_000},
                        "memory": {"time": T, "workingSetBytes": 1 << 20},
                    },
                    # measured CPU, unmeasured memory: its memory sample is absent, not 0
                    {"name": "side", "cpu": {"time": T, "usageCoreNanoSeconds": 0}},
                ],
            }
        ],
    }


def test_families_values_and_stamps() -> None:
    got = _samples(render(_summary()))
    pod = (("container", "main"), ("namespace", "team-a"), ("pod", "p"))
    side = (("container", "side"), ("namespace", "team-a"), ("pod", "p"))
    assert got["node_cpu_usage_seconds_total", ()] == (1500.0, T_MS / 1000)
    assert got["node_memory_working_set_bytes", ()] == (float(3 << 30), T_MS / 1000)
    assert got["container_cpu_usage_seconds_total", pod] == (2.5, T_MS / 1000)
    assert got["container_memory_working_set_bytes", pod] == (float(1 << 20), T_MS / 1000)
    assert got["container_start_time_seconds", pod][0] == (T_MS - 3_600_000) / 1000
    assert got["container_cpu_usage_seconds_total", side] == (0.0, T_MS / 1000)
    assert ("container_memory_working_set_bytes", side) not in got
    assert got["pod_cpu_usage_seconds_total", pod[1:]] == (2.5, T_MS / 1000)
    assert got["resource_scrape_error", ()] == (0.0, None)


def test_an_unmeasured_node_has_no_node_samples() -> None:
    text = render({"node": {"nodeName": "n1"}, "pods": []})
    names = {name for name, _ in _samples(text)}
    assert names == {"resource_scrape_error"}


_name = st.from_regex(r"[a-z]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)


@given(
    st.lists(
        st.tuples(_name, _name, st.lists(st.tuples(_name, st.integers(0, 10**18)), max_size=3)),
        max_size=5,
        unique_by=lambda p: (p[0], p[1]),
    )
)
def test_every_container_figure_reads_back(
    pods: list[tuple[str, str, list[tuple[str, int]]]],
) -> None:
    summary = {
        "node": {"nodeName": "n"},
        "pods": [
            {
                "podRef": {"name": name, "namespace": ns},
                "containers": [
                    {"name": c, "cpu": {"time": T, "usageCoreNanoSeconds": used}}
                    for c, used in containers
                ],
            }
            for ns, name, containers in pods
        ],
    }
    got = _samples(render(summary))
    want = {}
    for ns, name, containers in pods:
        for c, used in containers:
            key = tuple(sorted({"container": c, "namespace": ns, "pod": name}.items()))
            want[key] = used / 1e9
    cpu = {k: v[0] for (n, k), v in got.items() if n == "container_cpu_usage_seconds_total"}
    assert cpu.keys() == want.keys()
    for key, value in want.items():
        assert abs(cpu[key] - value) <= abs(value) * 1e-12
