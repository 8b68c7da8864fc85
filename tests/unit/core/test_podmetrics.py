"""The metrics.k8s.io fallback: exact sums, clamping, incarnation checks and the real corpus."""

import contextlib
import json
import math
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corpus_paths import corpus_dir
from corpus_paths import needs_corpus as needs_corpus_of
from gpustack_core.decoding import ContractError
from gpustack_core.podmetrics import (
    parse_pod_metrics,
    parse_pod_metrics_list,
    usage_from_pod_metrics,
)
from gpustack_core.usage import PodUsage, UsageSource

CORPUS = corpus_dir("podmetrics")
needs_corpus = needs_corpus_of("podmetrics")

STAMP = "2026-11-29T09:00:30Z"
MEASURED = datetime(2026, 11, 29, 9, 0, 30, tzinfo=UTC)
CREATED = MEASURED - timedelta(minutes=5)


def document(containers: Any, **fields: Any) -> bytes:
    return json.dumps(
        {
            "kind": "PodMetrics",
            "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {"name": "llama", "namespace": "team-a", "creationTimestamp": STAMP},
            "timestamp": STAMP,
            "window": "30s",
            "containers": containers,
            **fields,
        }
    ).encode()


def c(name: str, **usage: Any) -> dict[str, Any]:
    return {"name": name, "usage": usage}


def usage(data: bytes, created: datetime = CREATED) -> PodUsage | None:
    return usage_from_pod_metrics(parse_pod_metrics(data), pod_created=created)


# --- figures --------------------------------------------------------------------------------


def test_spec_figures() -> None:
    assert usage(document([c("main", cpu="704595n", memory="801112Ki")])) == PodUsage(
        source=UsageSource.METRICS_API,
        timestamp=MEASURED,
        cpu_millicores=1,  # 0.7 millicores rounds up
        memory_mib=783,  # ⌈801,112 × 1024 / 2**20⌉ = ⌈782.34⌉
        storage_mib=None,  # this API has no storage figure
    )


def test_sums_are_exact_before_rounding() -> None:
    result = usage(
        document(
            [
                c("a", cpu="1500000n", memory="1536Ki"),
                c("b", cpu="1.5m", memory="1.5Mi"),
            ]
        )
    )
    assert result is not None
    assert result.cpu_millicores == 3  # not 2 + 2
    assert result.memory_mib == 3  # not 2 + 2


def test_negative_usage_clamps_to_zero() -> None:
    assert (r := usage(document([c("main", cpu="-250m", memory="-1Mi")]))) is not None
    assert (r.cpu_millicores, r.memory_mib) == (0, 0)


def test_clamp_is_per_container_before_summing() -> None:
    result = usage(document([c("a", cpu="-250m", memory="1Mi"), c("b", cpu="300m", memory="1Mi")]))
    assert result is not None
    assert result.cpu_millicores == 300  # not 50


def test_zero_is_measured_idle() -> None:
    assert (r := usage(document([c("main", cpu="0", memory="0")]))) is not None
    assert (r.cpu_millicores, r.memory_mib) == (0, 0)


def test_container_without_a_figure_makes_that_figure_absent() -> None:
    result = usage(document([c("a", cpu="1", memory="1Mi"), c("b", memory="1Mi")]))
    assert result is not None
    assert (result.cpu_millicores, result.memory_mib) == (None, 2)


def test_no_figure_at_all_is_not_served() -> None:
    assert usage(document([c("a")])) is None


# --- not served -----------------------------------------------------------------------------


def test_no_containers_is_not_served() -> None:
    assert usage(document([])) is None
    assert usage(document(None)) is None


def test_missing_timestamp_is_not_served() -> None:
    assert usage(document([c("a", cpu="1", memory="1")], timestamp=None)) is None
    raw = json.loads(document([c("a", cpu="1", memory="1")]))
    del raw["timestamp"]
    assert usage(json.dumps(raw).encode()) is None


def test_entry_predating_the_pod_is_rejected() -> None:
    data = document([c("a", cpu="1", memory="1")])
    assert usage(data, created=MEASURED + timedelta(seconds=1)) is None
    assert usage(data, created=MEASURED) is not None  # measured the instant it was created
    assert usage(data, created=MEASURED - timedelta(seconds=1)) is not None


# --- malformed input ------------------------------------------------------------------------


def test_malformed_quantity_names_container_and_resource() -> None:
    pm = parse_pod_metrics(document([c("main", cpu="1"), c("side", cpu="1", memory="lots")]))
    with pytest.raises(ContractError) as excinfo:
        usage_from_pod_metrics(pm, pod_created=CREATED)
    message = str(excinfo.value)
    assert "team-a/llama" in message
    assert "'side'" in message
    assert "usage.memory" in message


def test_type_error_names_the_path() -> None:
    with pytest.raises(ContractError, match=r"PodMetrics: .*\$\.containers\[1\]\.usage"):
        parse_pod_metrics(document([c("a", cpu="1"), c("b", cpu=[1])]))


def test_naive_timestamp_is_a_contract_error() -> None:
    with pytest.raises(ContractError, match=r"\$\.timestamp"):
        parse_pod_metrics(document([], timestamp="2026-11-29T09:00:30"))


def test_missing_namespace_is_a_contract_error() -> None:
    raw = json.loads(document([]))
    del raw["metadata"]["namespace"]
    with pytest.raises(ContractError, match=r"namespace.*\$\.metadata"):
        parse_pod_metrics(json.dumps(raw))


# --- the corpus -----------------------------------------------------------------------------

_UNITS = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "Ki": Fraction(1024),
}


def exact(text: str) -> Fraction:
    """The corpus' quantities are ``<int>n`` / ``<int>Ki``; read them without the parser."""
    for suffix, scale in _UNITS.items():
        if text.endswith(suffix):
            return int(text.removesuffix(suffix)) * scale
    return Fraction(int(text))


@needs_corpus
def test_every_corpus_item_matches_recomputation() -> None:
    raw = (CORPUS / "libcloud-gke-podmetricslist.json").read_bytes()
    items = json.loads(raw)["items"]
    parsed = parse_pod_metrics_list(raw)
    assert len(parsed.items or ()) == len(items) == 10
    for item, pm in zip(items, parsed.items or (), strict=True):
        assert (pm.metadata.namespace, pm.metadata.name) == (
            item["metadata"]["namespace"],
            item["metadata"]["name"],
        )
        cpu = sum(exact(x["usage"]["cpu"]) for x in item["containers"])
        memory = sum(exact(x["usage"]["memory"]) for x in item["containers"])
        timestamp = datetime.fromisoformat(item["timestamp"])
        assert usage_from_pod_metrics(pm, pod_created=timestamp) == PodUsage(
            source=UsageSource.METRICS_API,
            timestamp=timestamp,
            cpu_millicores=math.ceil(cpu * 1000),
            memory_mib=math.ceil(memory / 2**20),
            storage_mib=None,
        )
        later = timestamp + timedelta(seconds=1)
        assert usage_from_pod_metrics(pm, pod_created=later) is None


@needs_corpus
def test_first_corpus_item_by_hand() -> None:
    parsed = parse_pod_metrics_list((CORPUS / "libcloud-gke-podmetricslist.json").read_bytes())
    assert parsed.items is not None
    first = usage_from_pod_metrics(parsed.items[0], pod_created=datetime(2021, 8, 13, tzinfo=UTC))
    assert first is not None
    assert (first.cpu_millicores, first.memory_mib) == (1, 25)  # 704595n, 24716Ki


@needs_corpus
def test_node_metrics_list_is_not_a_pod_metrics_list() -> None:
    raw = (CORPUS / "libcloud-gke-nodemetricslist.json").read_bytes()
    with pytest.raises(ContractError, match=r"namespace.*\$\.items\[0\]\.metadata"):
        parse_pod_metrics_list(raw)


# --- fuzz -----------------------------------------------------------------------------------

_KEYS = st.sampled_from(
    [
        "metadata",
        "name",
        "namespace",
        "timestamp",
        "window",
        "containers",
        "usage",
        "cpu",
        "memory",
        "items",
    ]
) | st.text(max_size=8)
JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([STAMP, "-250m", "801112Ki", "1e999", "0.5"])
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_KEYS, children, max_size=5),
    max_leaves=30,
)


def exercise(data: bytes | str) -> None:
    with contextlib.suppress(ContractError):
        usage_from_pod_metrics(parse_pod_metrics(data), pod_created=CREATED)
    with contextlib.suppress(ContractError):
        parse_pod_metrics_list(data)


@given(st.binary(max_size=300) | st.text(max_size=300))
def test_random_input_is_a_contract_error_or_metrics(data: bytes | str) -> None:
    exercise(data)


@given(JSONISH)
def test_random_json_is_a_contract_error_or_metrics(obj: Any) -> None:
    exercise(json.dumps(obj))


@given(st.lists(st.dictionaries(st.sampled_from(["cpu", "memory"]), JSONISH), max_size=4))
def test_random_usage_values_are_a_contract_error_or_usage(usages: list[Any]) -> None:
    exercise(document([{"name": f"c{i}", "usage": u} for i, u in enumerate(usages)]))


MILLI = st.integers(min_value=-(10**9), max_value=10**9)


@given(st.lists(st.tuples(MILLI, MILLI), min_size=1, max_size=5))
def test_figures_equal_clamped_exact_sums(parts: list[tuple[int, int]]) -> None:
    containers = [c(f"c{i}", cpu=f"{m}u", memory=f"{b}k") for i, (m, b) in enumerate(parts)]
    result = usage(document(containers))
    assert result is not None
    cpu = sum(max(Fraction(m, 10**6), Fraction(0)) for m, _ in parts)
    memory = sum(max(b * 1000, 0) for _, b in parts)
    assert result.cpu_millicores == math.ceil(cpu * 1000)
    assert result.memory_mib == math.ceil(Fraction(memory, 2**20))
