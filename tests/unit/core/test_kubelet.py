"""The kubelet stats summary: decoding, Pod matching, absence, rounding and the real corpus."""

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corpus_paths import corpus_dir
from corpus_paths import needs_corpus as needs_corpus_of
from gpustack_core.decoding import ContractError
from gpustack_core.kubelet import parse_summary, usage_from_summary
from gpustack_core.usage import PodUsage, UsageSource

CORPUS = corpus_dir("kubelet-summary")
CORPUS_FILES = sorted(CORPUS.glob("*.json")) if CORPUS.is_dir() else []
needs_corpus = needs_corpus_of("kubelet-summary")

UINT64_MAX = 18446744073709551615
T_CPU = "2026-11-29T09:00:01Z"
T_MEM = "2026-11-29T09:00:02Z"
T_FS = "2026-11-29T09:00:03Z"
REF = {"name": "llama", "namespace": "team-a", "uid": "uid-now"}


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def summary(*pods: dict[str, Any]) -> bytes:
    return json.dumps({"node": {"nodeName": "node-1"}, "pods": list(pods)}).encode()


def entry(**fields: Any) -> dict[str, Any]:
    return {"podRef": REF, **fields}


def usage(data: bytes, ref: dict[str, str] = REF) -> PodUsage | None:
    return usage_from_summary(
        parse_summary(data), namespace=ref["namespace"], name=ref["name"], uid=ref["uid"]
    )


FULL = entry(
    cpu={"time": T_CPU, "usageNanoCores": 1_500_000, "usageCoreNanoSeconds": 99},
    memory={"time": T_MEM, "workingSetBytes": 585_728, "usageBytes": 9_999_999},
    **{"ephemeral-storage": {"time": T_FS, "usedBytes": 20_480, "inodesFree": UINT64_MAX}},
    containers=[{"name": "main", "cpu": {"time": T_CPU, "usageNanoCores": 1}}],
)


# --- the spec's numbers ---------------------------------------------------------------------


def test_spec_figures() -> None:
    assert usage(summary(FULL)) == PodUsage(
        source=UsageSource.KUBELET,
        timestamp=at(T_CPU),
        cpu_millicores=2,  # 1.5 millicores rounds up
        memory_mib=1,  # 585,728 B is 1 MiB, never 0
        storage_mib=1,  # 20,480 B
    )


def test_measured_idle_is_zero_not_absent() -> None:
    pod = entry(
        cpu={"time": T_CPU, "usageNanoCores": 0},
        memory={"time": T_MEM, "workingSetBytes": 0},
        **{"ephemeral-storage": {"time": T_FS, "usedBytes": 0}},
    )
    assert usage(summary(pod)) == PodUsage(UsageSource.KUBELET, at(T_CPU), 0, 0, 0)


@pytest.mark.parametrize(
    ("nanocores", "millicores"),
    [(1, 1), (1_000_000, 1), (1_000_001, 2), (65_536 * 10**9, 65_536_000)],
)
def test_cpu_rounds_up(nanocores: int, millicores: int) -> None:
    pod = entry(cpu={"time": T_CPU, "usageNanoCores": nanocores})
    result = usage(summary(pod))
    assert result is not None
    assert result.cpu_millicores == millicores


def test_uint64_max_decodes_exactly() -> None:
    pod = entry(**{"ephemeral-storage": {"time": T_FS, "usedBytes": 2**60}})
    result = usage(summary(pod))
    assert result is not None
    assert result.storage_mib == 2**40  # 1 EiB, the plausibility bound itself


@pytest.mark.parametrize(
    "figures",
    [
        {"cpu": {"time": T_CPU, "usageNanoCores": 10**30}},  # 10^24 milli-cores otherwise
        {"cpu": {"time": T_CPU, "usageNanoCores": 65_536 * 10**9 + 1}},  # one nanocore over
        {"memory": {"time": T_MEM, "workingSetBytes": UINT64_MAX}},
        {"ephemeral-storage": {"time": T_FS, "usedBytes": 2**60 + 2**20}},
    ],
)
def test_a_figure_no_node_can_reach_is_no_answer_for_the_pod(figures: dict[str, Any]) -> None:
    """The whole summary still parses; only that Pod goes to the metrics.k8s.io fallback."""
    other_ref = {"name": "other", "namespace": "team-a", "uid": "uid-other"}
    other = {"podRef": other_ref, "cpu": {"time": T_CPU, "usageNanoCores": 5_000_000}}
    data = summary(entry(**figures), other)
    parse_summary(data)  # the document itself is well-formed
    assert usage(data) is None
    answer = usage(data, other_ref)
    assert answer is not None
    assert answer.cpu_millicores == 5


# --- matching -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ref",
    [
        pytest.param({**REF, "uid": "uid-previous"}, id="recreated-pod-other-uid"),
        pytest.param({**REF, "name": "llama-2"}, id="other-name"),
        pytest.param({**REF, "namespace": "team-b"}, id="other-namespace"),
    ],
)
def test_only_the_exact_pod_matches(ref: dict[str, str]) -> None:
    assert usage(summary(FULL), ref) is None


def test_the_matching_entry_among_several_is_used() -> None:
    stale = {
        **FULL,
        "podRef": {**REF, "uid": "uid-previous"},
        "memory": {"time": T_MEM, "workingSetBytes": 50 * 2**20},
    }
    result = usage(summary(stale, FULL))
    assert result is not None
    assert result.memory_mib == 1


def test_node_without_pods() -> None:
    assert usage(json.dumps({"node": {"nodeName": "n"}, "pods": None}).encode()) is None
    assert usage(json.dumps({"node": {"nodeName": "n"}}).encode()) is None


# --- absence and timestamps -----------------------------------------------------------------


def test_known_pod_without_figures_or_time_is_not_an_answer() -> None:
    assert usage(summary(entry(containers=None))) is None
    assert usage(summary(entry(cpu={}, memory={}, containers=[]))) is None


def test_figures_without_any_time_are_not_fabricated_a_timestamp() -> None:
    pod = entry(
        cpu={"usageNanoCores": 5}, memory={"time": None, "workingSetBytes": 5}, containers=[]
    )
    assert usage(summary(pod)) is None


def test_time_without_figures_is_not_an_answer() -> None:
    assert usage(summary(entry(cpu={"time": T_CPU}, memory={"time": T_MEM}))) is None


def test_timestamp_prefers_cpu_then_memory_then_storage() -> None:
    no_cpu = {k: v for k, v in FULL.items() if k != "cpu"}
    only_fs = {k: v for k, v in no_cpu.items() if k != "memory"}
    assert (r := usage(summary(no_cpu))) is not None
    assert r.timestamp == at(T_MEM)
    assert r.cpu_millicores is None
    assert (r := usage(summary(only_fs))) is not None
    assert r.timestamp == at(T_FS)
    assert (r.cpu_millicores, r.memory_mib, r.storage_mib) == (None, None, 1)


def test_timestamp_comes_from_a_reported_figure() -> None:
    # A cpu block with a time but no rate yet: memory's time dates the sample.
    pod = entry(cpu={"time": T_CPU}, memory={"time": T_MEM, "workingSetBytes": 1})
    assert (r := usage(summary(pod))) is not None
    assert (r.timestamp, r.cpu_millicores, r.memory_mib) == (at(T_MEM), None, 1)


def test_new_kubelet_missing_rate_does_not_fall_back_to_containers() -> None:
    # The pod-level block exists, so this kubelet aggregates: a missing rate is missing.
    pod = entry(
        cpu={"time": T_CPU},
        memory={"time": T_MEM, "workingSetBytes": 3 * 2**20},
        containers=[{"name": "main", "cpu": {"time": T_CPU, "usageNanoCores": 7_000_000}}],
    )
    assert (r := usage(summary(pod))) is not None
    assert (r.cpu_millicores, r.memory_mib, r.storage_mib) == (None, 3, None)


def test_old_kubelet_sums_containers_exactly_then_rounds() -> None:
    pod = entry(
        containers=[
            {
                "name": "a",
                "cpu": {"time": T_MEM, "usageNanoCores": 500_000},
                "memory": {"time": T_MEM, "workingSetBytes": 3 * 2**19},
            },
            {
                "name": "b",
                "cpu": {"time": T_CPU, "usageNanoCores": 500_000},
                "memory": {"time": T_CPU, "workingSetBytes": 3 * 2**19},
            },
        ]
    )
    assert usage(summary(pod)) == PodUsage(
        source=UsageSource.KUBELET,
        timestamp=at(T_CPU),  # the stalest part dates the sum
        cpu_millicores=1,  # not 1 + 1
        memory_mib=3,  # not 2 + 2
        storage_mib=None,  # no pod-level storage, and containers are never summed for it
    )


def test_old_kubelet_partial_container_figures_are_absent() -> None:
    pod = entry(
        containers=[
            {"name": "a", "cpu": {"time": T_CPU, "usageNanoCores": 5}, "memory": {"time": T_CPU}},
            {"name": "b", "memory": {"time": T_CPU, "workingSetBytes": 5}},
        ]
    )
    assert usage(summary(pod)) is None
    pod["containers"][1]["cpu"] = {"time": T_CPU, "usageNanoCores": 2_000_000}
    assert (r := usage(summary(pod))) is not None
    assert (r.cpu_millicores, r.memory_mib) == (3, None)


def test_old_kubelet_container_without_time_leaves_no_timestamp() -> None:
    pod = entry(containers=[{"name": "a", "cpu": {"usageNanoCores": 5}}])
    assert usage(summary(pod)) is None


# --- malformed input ------------------------------------------------------------------------


def test_type_error_names_the_field_path() -> None:
    pod = entry(cpu={"time": T_CPU, "usageNanoCores": "12"})
    with pytest.raises(ContractError) as excinfo:
        parse_summary(summary(pod))
    message = str(excinfo.value)
    assert "kubelet stats summary" in message
    assert "$.pods[0]" in message
    assert "usageNanoCores" in message


def test_negative_counter_is_a_contract_error() -> None:
    pod = entry(**{"ephemeral-storage": {"time": T_FS, "usedBytes": -1}})
    with pytest.raises(ContractError, match=r"\$\.pods\[0\]\.ephemeral-storage\.usedBytes"):
        parse_summary(summary(pod))


def test_naive_time_is_a_contract_error() -> None:
    pod = entry(memory={"time": "2026-11-29T09:00:00", "workingSetBytes": 1})
    with pytest.raises(ContractError, match=r"\$\.pods\[0\]\.memory\.time"):
        parse_summary(summary(pod))


def test_missing_pod_uid_is_a_contract_error() -> None:
    pod = {"podRef": {"name": "a", "namespace": "b"}}
    with pytest.raises(ContractError, match=r"uid.*\$\.pods\[0\]\.podRef"):
        parse_summary(summary(pod))


def test_other_documents_are_not_summaries() -> None:
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 503}
    with pytest.raises(ContractError, match="node"):
        parse_summary(json.dumps(status))
    with pytest.raises(ContractError, match="not valid JSON"):
        parse_summary(b"<html>bad gateway</html>")


# --- the corpus -----------------------------------------------------------------------------


def expected(pod: dict[str, Any]) -> tuple[int | None, int | None, int | None]:
    """Recompute (cpu, memory, storage) from the raw JSON, independently of the parser."""
    levels = [pod.get("cpu"), pod.get("memory"), pod.get("ephemeral-storage")]
    pre_pod_level = all(level is None for level in levels)

    def figure(block: str, key: str) -> int | None:
        if (pod.get(block) or {}).get(key) is not None:
            return int(pod[block][key])
        containers = pod.get("containers") or []
        if not pre_pod_level or block == "ephemeral-storage" or not containers:
            return None
        parts: list[int | None] = [(c.get(block) or {}).get(key) for c in containers]
        total = 0
        for part in parts:
            if part is None:
                return None
            total += part
        return total

    cpu = figure("cpu", "usageNanoCores")
    memory = figure("memory", "workingSetBytes")
    storage = figure("ephemeral-storage", "usedBytes")
    return (
        None if cpu is None else -(-cpu // 1_000_000),
        None if memory is None else -(-memory // 2**20),
        None if storage is None else -(-storage // 2**20),
    )


@needs_corpus
@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.name)
def test_corpus_file_parses_and_every_pod_matches_recomputation(path: Path) -> None:
    raw = path.read_bytes()
    parsed = parse_summary(raw)
    document = json.loads(raw)
    assert parsed.node.node_name == document["node"]["nodeName"]
    pods = document.get("pods") or []
    assert len(parsed.pods or ()) == len(pods)
    for pod in pods:
        ref = pod["podRef"]
        result = usage_from_summary(
            parsed, namespace=ref["namespace"], name=ref["name"], uid=ref["uid"]
        )
        want = expected(pod)
        if want == (None, None, None):
            assert result is None, ref["name"]
            continue
        assert result is not None, ref["name"]
        assert result.source is UsageSource.KUBELET
        assert result.timestamp.tzinfo is not None
        assert (result.cpu_millicores, result.memory_mib, result.storage_mib) == want, ref
        # The same pod under a previous incarnation's UID is never matched.
        assert (
            usage_from_summary(parsed, namespace=ref["namespace"], name=ref["name"], uid="x")
            is None
        )


def test_corpus_is_present_or_skipped_loudly() -> None:
    if not CORPUS.is_dir():
        pytest.skip(f"shared corpus not found at {CORPUS}")
    assert len(CORPUS_FILES) >= 15


def corpus_usage(name: str, pod: str) -> PodUsage | None:
    raw = (CORPUS / name).read_bytes()
    for item in json.loads(raw)["pods"]:
        if item["podRef"]["name"] == pod:
            ref = item["podRef"]
            return usage_from_summary(
                parse_summary(raw), namespace=ref["namespace"], name=ref["name"], uid=ref["uid"]
            )
    raise AssertionError(f"{pod} not in {name}")


@needs_corpus
def test_honeycomb_renamed_keys_are_absent_not_zero() -> None:
    result = corpus_usage(
        "honeycomb-stats-summary.json", "nginx-ingress-default-backend-5b967cf596-pp4m9"
    )
    assert result is not None
    assert result.cpu_millicores is None
    assert result.memory_mib is None
    assert result.storage_mib == 1  # 49,152 B of pod-level ephemeral storage
    assert result.timestamp == datetime(2020, 9, 16, 3, 30, 53, tzinfo=UTC)


@needs_corpus
def test_old_kubelet_figures_are_container_sums() -> None:
    result = corpus_usage("nri-old-kubelet-no-pod-cpu-mem.json", "newrelic-infra-monitoring-pjp0v")
    assert result == PodUsage(
        source=UsageSource.KUBELET,
        timestamp=datetime(2017, 11, 30, 14, 48, 10, tzinfo=UTC),
        cpu_millicores=math.ceil((184_087 + 13_046_199) / 1_000_000),  # 14
        memory_mib=math.ceil((15_196_160 + 38_313_984) / 2**20),  # 52
        storage_mib=None,
    )


@needs_corpus
def test_windows_pod_level_rate_wins_over_a_container_without_one() -> None:
    result = corpus_usage("datadog-eks-windows-summary.json", "dd-datadog-lbvkl")
    assert result is not None
    assert result.cpu_millicores is not None


@needs_corpus
def test_uint64_max_inodes_are_ignored() -> None:
    raw = (CORPUS / "beats-gke-2017-multiple-containers-summary.json").read_bytes()
    assert b"18446744073709551615" in raw
    assert parse_summary(raw).node.node_name


# --- fuzz -----------------------------------------------------------------------------------

_KEYS = st.sampled_from(
    [
        "node",
        "nodeName",
        "pods",
        "podRef",
        "name",
        "namespace",
        "uid",
        "cpu",
        "memory",
        "ephemeral-storage",
        "time",
        "usageNanoCores",
        "workingSetBytes",
        "usedBytes",
        "containers",
    ]
) | st.text(max_size=8)
_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([T_CPU, "2026-11-29T09:00:00", "llama", "team-a", "uid-now"])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
JSONISH = st.recursive(
    _LEAVES,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_KEYS, children, max_size=5),
    max_leaves=40,
)


def exercise(data: bytes | str) -> None:
    try:
        parsed = parse_summary(data)
    except ContractError:
        return
    for pod in parsed.pods or ():
        ref = pod.pod_ref
        usage_from_summary(parsed, namespace=ref.namespace, name=ref.name, uid=ref.uid)


@given(st.binary(max_size=300) | st.text(max_size=300))
def test_random_input_is_a_contract_error_or_a_summary(data: bytes | str) -> None:
    exercise(data)


@given(JSONISH)
def test_random_json_is_a_contract_error_or_a_summary(obj: Any) -> None:
    exercise(json.dumps(obj))


@given(
    st.lists(
        st.fixed_dictionaries(
            {"podRef": st.just(REF)},
            optional={
                "cpu": st.fixed_dictionaries(
                    {}, optional={"time": st.just(T_CPU), "usageNanoCores": JSONISH}
                ),
                "memory": st.fixed_dictionaries(
                    {}, optional={"time": st.just(T_MEM), "workingSetBytes": JSONISH}
                ),
                "ephemeral-storage": st.fixed_dictionaries(
                    {}, optional={"time": JSONISH, "usedBytes": JSONISH}
                ),
                "containers": JSONISH,
            },
        ),
        max_size=3,
    )
)
def test_near_valid_summaries_are_a_contract_error_or_usage(pods: list[Any]) -> None:
    exercise(summary(*pods))


@given(
    cpu=st.none() | st.integers(min_value=0, max_value=65_536 * 10**9),
    memory=st.none() | st.integers(min_value=0, max_value=2**52),
    storage=st.none() | st.integers(min_value=0, max_value=2**60),
)
def test_pod_level_figures_round_up(
    cpu: int | None, memory: int | None, storage: int | None
) -> None:
    pod = entry(
        cpu={"time": T_CPU, **({} if cpu is None else {"usageNanoCores": cpu})},
        memory={"time": T_MEM, **({} if memory is None else {"workingSetBytes": memory})},
        **{
            "ephemeral-storage": {
                "time": T_FS,
                **({} if storage is None else {"usedBytes": storage}),
            }
        },
    )
    result = usage(summary(pod))
    if (cpu, memory, storage) == (None, None, None):
        assert result is None
        return
    assert result is not None
    assert result.cpu_millicores == (None if cpu is None else -(-cpu // 10**6))
    assert result.memory_mib == (None if memory is None else -(-memory // 2**20))
    assert result.storage_mib == (None if storage is None else -(-storage // 2**20))
    assert result.timestamp == at(
        T_CPU if cpu is not None else T_MEM if memory is not None else T_FS
    )
