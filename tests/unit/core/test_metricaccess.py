"""A MetricAccess's entries: exact names, regexes, selectors told apart; everything else refused."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_core.metricaccess import (
    Kind,
    Matcher,
    MetricsError,
    classify,
    parse_interval,
    spec_from_object,
)


@pytest.mark.parametrize(
    ("text", "kind", "matchers"),
    [
        ("DCGM_FI_DEV_GPU_UTIL", Kind.EXACT, [("__name__", "=", "DCGM_FI_DEV_GPU_UTIL")]),
        (
            "container_(cpu|memory)_.*",
            Kind.REGEX,
            [("__name__", "=~", "container_(cpu|memory)_.*")],
        ),
        (
            '{__name__=~"nginx_ingress_controller_.*"}',
            Kind.SELECTOR,
            [("__name__", "=~", "nginx_ingress_controller_.*")],
        ),
        (
            "gpustack_instance_up{instance!='x', job=~`a|b`,}",
            Kind.SELECTOR,
            [
                ("__name__", "=", "gpustack_instance_up"),
                ("instance", "!=", "x"),
                ("job", "=~", "a|b"),
            ],
        ),
        ('{__name__="m", v="a\\"b"}', Kind.SELECTOR, [("__name__", "=", "m"), ("v", "=", 'a"b')]),
    ],
)
def test_the_three_kinds(text: str, kind: Kind, matchers: list[tuple[str, str, str]]) -> None:
    entry = classify(text)
    assert entry.kind == kind
    assert [(m.name, m.op, m.value) for m in entry.matchers] == matchers


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        ("rate(x[5m]) > 0", "neither"),
        ("x{a='1'}[5m]", "only a plain selector"),
        ("x{a='1'} offset 5m", "only a plain selector"),
        ("sum(x{a='1'})", "expected '{' at column 4"),
        ('{job="x"}', "must name its metrics"),
        ('{__name__=~".*"}', "must name its metrics"),
        ('{__name__!="x"}', "must name its metrics"),
        (".*", "matches every metric"),
        ("a(?=b)", "not RE2"),
        ("a(b", "not a regex"),
        ('x{a="1"', "expected ',' or '}'"),
        ('x{a="1}', "unterminated"),
        ('x{a~"1"}', "expected one of"),
        ('x{a="1"} or y', "only a plain selector"),
        ('x{a=~"("}', "not a regex"),
    ],
)
def test_refusals_say_why_in_one_line(text: str, why: str) -> None:
    with pytest.raises(MetricsError, match=why) as caught:
        classify(text)
    assert "\n" not in str(caught.value)


@settings(max_examples=400)
@given(st.text(max_size=60))
def test_any_text_is_classified_or_refused_cleanly(text: str) -> None:
    try:
        entry = classify(text)
    except MetricsError:
        return
    assert entry.matchers  # something it names
    assert any(m.name == "__name__" and m.op in {"=", "=~"} for m in entry.matchers)


def test_the_selector_gets_the_source_namespace_in_place_of_its_own() -> None:
    entry = classify('x{namespace="team-a", i="1"}')
    assert entry.selector("team-a") == '{__name__="x",i="1",namespace="team-a"}'
    assert entry.selector(None) == '{__name__="x",namespace="team-a",i="1"}'


def _obj(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"source": "team-a", "metrics": ["gpustack_instance_up"]}
    return {"metadata": {"namespace": "team-a", "name": "m"}, "spec": {**base, **spec}}


@pytest.mark.parametrize(
    "entry",
    [
        'x{namespace="team-b"}',
        'x{namespace!="team-a"}',
        'x{namespace=~"team-a|team-b"}',
        'x{namespace=~"team-a"}',
        'x{namespace=~".+"}',
    ],
)
def test_a_selector_naming_another_namespace_is_refused(entry: str) -> None:
    with pytest.raises(MetricsError, match="names other namespaces than the source"):
        spec_from_object(_obj(metrics=[entry]))


def test_a_selector_naming_the_source_is_taken() -> None:
    spec = spec_from_object(_obj(metrics=['x{namespace="team-a"}']))
    assert spec.entries[0].matchers[-1] == Matcher("namespace", "=", "team-a")


def test_a_full_spec() -> None:
    spec = spec_from_object(
        _obj(
            remoteWrite={
                "enabled": True,
                "interval": "1m30s",
                "target": {
                    "type": "prometheus",
                    "prometheus": {"serviceName": "prom", "servicePort": 9090},
                    "extraLabels": {"tenant": "team-a"},
                },
            }
        )
    )
    assert spec.isolation is True  # the default: only the source's series
    assert spec.interval == 90.0
    assert spec.target is not None
    assert (spec.target.service, spec.target.port, spec.target.namespace) == (
        "prom",
        9090,
        "team-a",
    )
    assert spec.target.path == "/api/v1/write"
    assert spec.target.extra_labels == {"tenant": "team-a"}


@pytest.mark.parametrize(
    ("remote_write", "why"),
    [
        ({"enabled": True}, "target must be an object"),
        ({"enabled": True, "target": {"prometheus": {"serviceName": "p"}}}, "servicePort"),
        ({"enabled": True, "target": {"prometheus": {"serviceName": "P_", "servicePort": 1}}},
         "RFC 1123"),
        ({"enabled": True, "target": {"type": "kafka", "prometheus": {}}}, "only type prometheus"),
        ({"enabled": True, "target": {"prometheus": {"serviceName": "p", "servicePort": 1},
                                      "extraLabels": {"namespace": "x"}}}, "not the namespace"),
        ({"enabled": True, "target": {"prometheus": {"serviceName": "p", "servicePort": 1},
                                      "extraLabels": {"__name__": "x"}}}, "may set"),
        ({"interval": "2s"}, "outside"),
        ({"interval": "30"}, "not a duration"),
        ({"enabled": "yes"}, "true or false"),
    ],
)  # fmt: skip
def test_remote_write_refusals(remote_write: dict[str, Any], why: str) -> None:
    with pytest.raises(MetricsError, match=why):
        spec_from_object(_obj(remoteWrite=remote_write))


def test_intervals() -> None:
    assert parse_interval("30s") == 30.0
    assert parse_interval("1h") == 3600.0
    with pytest.raises(MetricsError):
        parse_interval("1d")
