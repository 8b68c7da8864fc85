"""Discovery documents in Kubernetes' exact spelling, and the Accept negotiation for ``/apis``."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpustack_worker import discovery
from gpustack_worker.discovery import (
    aggregated_content_type,
    aggregated_discovery,
    aggregated_discovery_version,
    api_group,
    api_group_list,
    api_resource_list,
    wants_aggregated_discovery,
)

V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
V2BETA1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
GROUP_VERSION = {"groupVersion": "worker.gpustack.ai/v1", "version": "v1"}
SETTINGS_VERSION = {"groupVersion": "gpustack.ai/v1", "version": "v1"}
SETTING_VERBS = ["get", "list", "patch", "update", "watch"]
"""The reference's Setting: get/list/watch/update/patch, no create or delete
(shared/reference/instancetypes.md, "Settings the chain reads")."""

VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
"""Every verb of an Instance at v1: reads, watches and writes."""


def test_constants() -> None:
    assert discovery.GROUP == "worker.gpustack.ai"
    assert discovery.VERSION == "v1"
    assert discovery.STORAGE_VERSION == "v1alpha1"


def test_api_group_list() -> None:
    assert api_group_list() == {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": "worker.gpustack.ai",
                "versions": [GROUP_VERSION],
                "preferredVersion": GROUP_VERSION,
            },
            {
                "name": "gpustack.ai",
                "versions": [SETTINGS_VERSION],
                "preferredVersion": SETTINGS_VERSION,
            },
        ],
    }


def test_the_settings_group_and_its_resource_list() -> None:
    assert api_group("gpustack.ai") == {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": "gpustack.ai",
        "versions": [SETTINGS_VERSION],
        "preferredVersion": SETTINGS_VERSION,
    }
    assert discovery.settings_resource_list() == {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "gpustack.ai/v1",
        "resources": [
            {
                "name": "settings",
                "singularName": "setting",
                "namespaced": True,
                "kind": "Setting",
                "verbs": SETTING_VERBS,
                "shortNames": ["set"],
                "categories": ["gpustack"],
            }
        ],
    }


def test_api_group() -> None:
    assert api_group() == {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": "worker.gpustack.ai",
        "versions": [GROUP_VERSION],
        "preferredVersion": GROUP_VERSION,
    }


def test_api_resource_list() -> None:
    assert api_resource_list() == {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "worker.gpustack.ai/v1",
        "resources": [
            {
                "name": "instances",
                "singularName": "instance",
                "namespaced": True,
                "kind": "Instance",
                "verbs": VERBS,
                "shortNames": ["inst"],
            },
            {
                "name": "instances/metrics",
                "singularName": "",
                "namespaced": True,
                "kind": "InstanceMetrics",
                "verbs": ["get"],
            },
        ],
    }


def test_the_storage_version_is_never_advertised() -> None:
    documents = [api_group_list(), api_group(), api_resource_list(), aggregated_discovery()]
    assert "v1alpha1" not in json.dumps(documents)


@pytest.mark.parametrize("version", ["v2", "v2beta1"])
def test_aggregated_discovery(version: str) -> None:
    gvk = {"group": "worker.gpustack.ai", "version": "v1"}
    assert aggregated_discovery(version) == {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": f"apidiscovery.k8s.io/{version}",
        "metadata": {},
        "items": [
            {
                "metadata": {"name": "worker.gpustack.ai"},
                "versions": [
                    {
                        "version": "v1",
                        "resources": [
                            {
                                "resource": "instances",
                                "responseKind": {**gvk, "kind": "Instance"},
                                "scope": "Namespaced",
                                "singularResource": "instance",
                                "verbs": VERBS,
                                "shortNames": ["inst"],
                                "subresources": [
                                    {
                                        "subresource": "metrics",
                                        "responseKind": {**gvk, "kind": "InstanceMetrics"},
                                        "verbs": ["get"],
                                    }
                                ],
                            }
                        ],
                        "freshness": "Current",
                    }
                ],
            },
            {
                "metadata": {"name": "gpustack.ai"},
                "versions": [
                    {
                        "version": "v1",
                        "resources": [
                            {
                                "resource": "settings",
                                "responseKind": {
                                    "group": "gpustack.ai",
                                    "version": "v1",
                                    "kind": "Setting",
                                },
                                "scope": "Namespaced",
                                "singularResource": "setting",
                                "verbs": SETTING_VERBS,
                                "shortNames": ["set"],
                                "categories": ["gpustack"],
                            }
                        ],
                        "freshness": "Current",
                    }
                ],
            },
        ],
    }
    assert aggregated_content_type(version) == (
        f"application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"
    )
    assert discovery.AGGREGATED_CONTENT_TYPE == aggregated_content_type("v2") == V2


def test_aggregated_discovery_refuses_an_unserved_version() -> None:
    with pytest.raises(ValueError, match="v1"):
        aggregated_discovery("v1")


def test_the_legacy_and_aggregated_documents_agree() -> None:
    """One resource list, two spellings: every legacy entry is in the aggregated one."""
    lists = [api_resource_list(), discovery.settings_resource_list()]
    legacy = {(r["name"], r["kind"], tuple(r["verbs"])) for d in lists for r in d["resources"]}
    aggregated = set()
    for item in aggregated_discovery()["items"]:
        for resource in item["versions"][0]["resources"]:
            aggregated.add(
                (resource["resource"], resource["responseKind"]["kind"], tuple(resource["verbs"]))
            )
            for sub in resource.get("subresources", ()):
                name = f"{resource['resource']}/{sub['subresource']}"
                aggregated.add((name, sub["responseKind"]["kind"], tuple(sub["verbs"])))
    assert legacy == aggregated


def test_documents_are_fresh_per_call() -> None:
    first = api_resource_list()
    first["resources"][0]["verbs"].append("deletecollection")
    assert api_resource_list()["resources"][0]["verbs"] == VERBS


# --------------------------------------------------------------------------------------------
# Accept negotiation
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        # What the kube-aggregator sends (handler_discovery.go), with its legacy fallback.
        (f"{V2},{V2BETA1},application/json", "v2"),
        # kubectl: the legacy form rated lower.
        (f"{V2},{V2BETA1},application/json;q=0.9", "v2"),
        (V2, "v2"),
        (V2BETA1, "v2beta1"),
        (f"{V2BETA1},{V2}", "v2"),
        (f"{V2};q=0.5,{V2BETA1}", "v2beta1"),
        (f"{V2};q=0,{V2BETA1}", "v2beta1"),
        # Parameters in any order, with whitespace, names in any case.
        ("application/json ; as=APIGroupDiscoveryList ; v=v2 ; g=apidiscovery.k8s.io", "v2"),
        ("Application/JSON;G=apidiscovery.k8s.io;V=v2;AS=APIGroupDiscoveryList", "v2"),
        ('application/json;g="apidiscovery.k8s.io";v="v2";as="APIGroupDiscoveryList"', "v2"),
        (f"  {V2} ;  q=1.0 ", "v2"),
        (f"text/html, {V2};q=0.001", "v2"),
        (f"{V2};q=0.5, application/json;q=0.5", "v2"),
        # Refused or outranked: the legacy APIGroupList.
        (f"{V2};q=0", None),
        (f"{V2};Q=0.000", None),
        (f"{V2};q=0.5,application/json", None),
        (f"{V2};q=0.5,*/*", None),
        ("application/json", None),
        ("*/*", None),
        ("", None),
        # Parameter values are compared as sent, as Kubernetes does.
        ("application/json;g=APIDISCOVERY.k8s.io;v=v2;as=APIGroupDiscoveryList", None),
        ("application/json;g=apidiscovery.k8s.io;v=V2;as=APIGroupDiscoveryList", None),
        # Not our document: wrong media type, group, version or kind, or a missing parameter.
        ("application/yaml;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", None),
        ("application/json;g=apidiscovery.k8s.io;v=v1;as=APIGroupDiscoveryList", None),
        ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscovery", None),
        ("application/json;g=apidiscovery.k8s.io;v=v2", None),
        ("application/json;v=v2;as=APIGroupDiscoveryList", None),
        (
            "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
            None,
        ),
        # Malformed ranges are skipped, never fatal.
        (f"{V2};q=2", None),
        (f"{V2};q=abc", None),
        (f"{V2};q=0.5.5", None),
        (f"{V2};v=v2beta1", None),
        (f"{V2};;", None),
        (f"garbage,{V2}", "v2"),
        ('application/json;x="a,b";g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList', "v2"),
    ],
)
def test_negotiation(accept: str, expected: str | None) -> None:
    assert aggregated_discovery_version(accept) == expected
    # The simple question serves v2 or nothing, so answering v2 when it says yes is never wrong.
    assert wants_aggregated_discovery(accept) is (expected == "v2")


@given(st.text())
def test_never_raises(accept: str) -> None:
    assert aggregated_discovery_version(accept) in {None, "v2", "v2beta1"}


_PARAMS = [("g", "apidiscovery.k8s.io"), ("v", "v2"), ("as", "APIGroupDiscoveryList")]
_SPACE = st.sampled_from(["", " ", "\t", "  "])


@st.composite
def _spelled_v2(draw: st.DrawFn) -> str:
    """The v2 range with its parameters permuted, spaced and their names in any case."""
    params = draw(st.permutations(_PARAMS))
    media = draw(st.sampled_from(["application/json", "APPLICATION/JSON", "Application/Json"]))
    text = draw(_SPACE) + media
    for name, value in params:
        spelled = "".join(
            c.upper() if upper else c
            for c, upper in zip(name, draw(st.lists(st.booleans(), min_size=2)), strict=False)
        )
        text += f"{draw(_SPACE)};{draw(_SPACE)}{spelled}={value}"
    return text + draw(_SPACE)


@given(_spelled_v2(), st.sampled_from(["", ";q=1", ";q=0.3", ";q=1.000"]))
def test_any_spelling_of_v2_is_accepted(v2: str, weight: str) -> None:
    assert aggregated_discovery_version(v2 + weight) == "v2"
    assert aggregated_discovery_version(f"application/json;q=0.2,{v2}{weight}") == "v2"


@given(_spelled_v2(), st.sampled_from([";q=0", ";q=0.0", ";Q=0.000", " ; q = 0"]))
def test_q_zero_always_refuses(v2: str, weight: str) -> None:
    assert aggregated_discovery_version(v2 + weight) is None
    assert not wants_aggregated_discovery(f"{v2}{weight},application/json")


@given(st.lists(st.sampled_from([V2, V2BETA1, "application/json;q=0.1", "text/plain"]), min_size=1))
def test_the_order_of_ranges_does_not_matter(ranges: list[str]) -> None:
    expected = aggregated_discovery_version(",".join(sorted(ranges)))
    assert aggregated_discovery_version(",".join(ranges)) == expected
    assert aggregated_discovery_version(",".join(reversed(ranges))) == expected
