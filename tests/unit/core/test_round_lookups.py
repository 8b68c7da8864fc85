"""What the exporter's round looks up many times reads exactly what a single lookup reads.

``sum_declared`` is memoized on the spellings and ``index_pods`` replaces a scan per Pod; both
are there for speed only (``./dev bench``), so the figures and the refusals must not change.
"""

from __future__ import annotations

import pytest

from gpustack_core.decoding import ContractError
from gpustack_core.kubelet import find_pod, index_pods, parse_summary, usage_from_summary, usage_of
from gpustack_core.pods import Pod, declared_totals, pod_from_object, sum_declared
from gpustack_core.usage import DeclaredTotals


def test_a_boolean_is_refused_even_after_the_same_value_as_a_number_was_summed() -> None:
    assert sum_declared([("a", {"cpu": 1})]) == DeclaredTotals(1000, 0, 0)
    with pytest.raises(ContractError, match=r"^b\.cpu: .*boolean"):
        sum_declared([("b", {"cpu": True})])


def test_a_malformed_quantity_names_its_declaration_after_good_ones_were_summed() -> None:
    good = {"memory": "1.5Mi", "ephemeral-storage": "1Gi", "cpu": "250m"}
    assert sum_declared([("x", good), ("y", good)]) == DeclaredTotals(500, 3, 2048)
    with pytest.raises(ContractError, match=r"^z\.memory: quantity 'bogus'"):
        sum_declared([("x", good), ("z", {"memory": "bogus"})])
    with pytest.raises(ContractError, match=r"^z\.memory: quantity 'bogus'"):  # not cached
        sum_declared([("x", good), ("z", {"memory": "bogus"})])


def entry(namespace: str, name: str, uid: str, nanocores: int) -> str:
    return (
        f'{{"podRef":{{"namespace":"{namespace}","name":"{name}","uid":"{uid}"}},'
        f'"cpu":{{"time":"2026-11-29T09:00:00Z","usageNanoCores":{nanocores}}}}}'
    )


def test_the_index_answers_as_the_scan_does() -> None:
    summary = parse_summary(
        (
            '{"node":{"nodeName":"n1"},"pods":['
            + ",".join(
                [
                    entry("a", "p", "u1", 1_000_000),
                    entry("a", "p", "u2", 2_000_000),  # same name, another Pod
                    entry("b", "p", "u1", 3_000_000),  # same UID, another namespace
                    entry("a", "p", "u1", 9_000_000),  # a repeat: the first one wins
                ]
            )
            + "]}"
        ).encode()
    )
    index = index_pods(summary)
    for key in [("a", "p", "u1"), ("a", "p", "u2"), ("b", "p", "u1"), ("a", "q", "u1")]:
        namespace, name, uid = key
        assert index.get(key) is find_pod(summary, namespace=namespace, name=name, uid=uid)
        assert usage_of(index.get(key)) == usage_from_summary(
            summary, namespace=namespace, name=name, uid=uid
        )
    first = usage_of(index[("a", "p", "u1")])
    assert first is not None
    assert first.cpu_millicores == 1


def pod_with_limits(*containers: dict[str, str]) -> Pod:
    return pod_from_object(
        {
            "metadata": {
                "name": "p",
                "namespace": "ns",
                "uid": "u",
                "creationTimestamp": "2026-11-29T09:00:00Z",
            },
            "spec": {
                "containers": [
                    {"name": f"c{i}", "resources": {"limits": limits}}
                    for i, limits in enumerate(containers)
                ]
            },
        }
    )


def test_a_pods_malformed_limit_is_named_after_its_shape_was_summed() -> None:
    good = {"cpu": "2", "memory": "1Gi"}
    assert declared_totals(pod_with_limits(good, good)) == DeclaredTotals(4000, 2048, 0)
    with pytest.raises(ContractError) as raised:
        declared_totals(pod_with_limits(good, {"cpu": "2", "memory": "12 parsecs"}))
    assert str(raised.value).startswith(
        "Pod ns/p: container 'c1': limits.memory: quantity '12 parsecs'"
    )
