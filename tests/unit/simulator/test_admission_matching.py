"""Which writes an admission webhook is called for, and which configurations are refused.

Expected values are the ``admissionregistration.k8s.io/v1`` API reference's: ``*`` is every
resource but no subresource, ``pods/*`` is pods and every subresource of them, ``*/*`` is
everything, ``scope: Namespaced`` never selects a Namespace object itself, an object selector
matches the new or the old object, and a namespace selector always sees
``kubernetes.io/metadata.name``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from gpustack_simulator.cluster.admission import (
    Admission,
    Attributes,
    Hook,
    check_configuration,
    denied,
)
from gpustack_simulator.cluster.resources import Registry, Resource
from gpustack_simulator.cluster.selectors import SelectorError, match_label_selector
from gpustack_simulator.cluster.state import ClusterState
from gpustack_simulator.cluster.store import Store

REGISTRY = Registry()


def resource(group: str, version: str, plural: str) -> Resource:
    found = REGISTRY.find(group, version, plural)
    assert found is not None
    return found


PODS = resource("", "v1", "pods")
NAMESPACES = resource("", "v1", "namespaces")
NODES = resource("", "v1", "nodes")
LEASES = resource("coordination.k8s.io", "v1", "leases")


def admission(store: Store | None = None) -> Admission:
    state = SimpleNamespace(store=store or Store(), webhook_services={})
    return Admission(cast(ClusterState, state))


def attrs(
    res: Resource = PODS,
    operation: str = "CREATE",
    *,
    namespace: str = "default",
    sub: str = "",
    labels: dict[str, str] | None = None,
    old_labels: dict[str, str] | None = None,
) -> Attributes:
    obj = {"metadata": {"name": "x", "labels": labels or {}}}
    old = {"metadata": {"name": "x", "labels": old_labels or {}}}
    return Attributes(
        res,
        operation,
        namespace,
        "x",
        sub,
        None if operation == "DELETE" else obj,
        None if operation == "CREATE" else old,
        {},
    )


def hook(**spec: Any) -> Hook:
    rules = spec.pop(
        "rules",
        [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}],
    )
    return Hook("config", {"name": "h.example.test", "rules": rules, **spec}, mutating=False)


def rule(resources: list[str], **extra: Any) -> list[dict[str, Any]]:
    return [
        {
            "operations": extra.pop("operations", ["*"]),
            "apiGroups": extra.pop("apiGroups", ["*"]),
            "apiVersions": extra.pop("apiVersions", ["*"]),
            "resources": resources,
            **extra,
        }
    ]


@pytest.mark.parametrize(
    ("resources", "sub", "expected"),
    [
        (["pods"], "", True),
        (["pods"], "status", False),
        (["pods/status"], "status", True),
        (["pods/status"], "", False),
        (["pods/*"], "", True),
        (["pods/*"], "status", True),
        (["*"], "", True),
        (["*"], "status", False),
        (["*/status"], "status", True),
        (["*/*"], "binding", True),
        (["services"], "", False),
    ],
)
def test_resources_and_subresources(resources: list[str], sub: str, expected: bool) -> None:
    assert admission().selected(hook(rules=rule(resources)), attrs(sub=sub)) is expected


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"operations": ["UPDATE"]}, False),
        ({"operations": ["CREATE", "DELETE"]}, True),
        ({"apiGroups": ["apps"]}, False),
        ({"apiGroups": [""]}, True),
        ({"apiVersions": ["v1beta1"]}, False),
    ],
)
def test_operations_groups_and_versions(extra: dict[str, Any], expected: bool) -> None:
    assert admission().selected(hook(rules=rule(["pods"], **extra)), attrs()) is expected


@pytest.mark.parametrize(
    ("res", "namespace", "scope", "expected"),
    [
        (PODS, "default", "Namespaced", True),
        (PODS, "default", "Cluster", False),
        (NODES, "", "Cluster", True),
        (NODES, "", "Namespaced", False),
        (NAMESPACES, "", "Cluster", True),
        (NAMESPACES, "", "Namespaced", False),
        (LEASES, "kube-system", "*", True),
    ],
)
def test_scope(res: Resource, namespace: str, scope: str, expected: bool) -> None:
    chosen = hook(rules=rule(["*"], scope=scope))
    assert admission().selected(chosen, attrs(res, namespace=namespace)) is expected


def test_webhook_configurations_are_never_admitted() -> None:
    mutating = resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations")
    assert admission().selected(hook(), attrs(mutating, namespace="")) is False


def test_the_object_selector_matches_the_new_or_the_old_object() -> None:
    chosen = hook(objectSelector={"matchLabels": {"team": "a"}})
    assert admission().selected(chosen, attrs(labels={"team": "a"}))
    assert not admission().selected(chosen, attrs(labels={"team": "b"}))
    assert admission().selected(chosen, attrs(operation="UPDATE", old_labels={"team": "a"}))
    assert admission().selected(chosen, attrs(operation="DELETE", old_labels={"team": "a"}))
    assert not admission().selected(chosen, attrs(operation="DELETE"))


def test_the_namespace_selector_reads_the_namespace_and_its_name_label() -> None:
    store = Store()
    store.put(
        "Namespace",
        {"metadata": {"name": "guarded", "labels": {"admission": "on"}}},
    )
    by_label = hook(namespaceSelector={"matchLabels": {"admission": "on"}})
    by_name = hook(namespaceSelector={"matchLabels": {"kubernetes.io/metadata.name": "team-a"}})
    chain = admission(store)
    assert chain.selected(by_label, attrs(namespace="guarded"))
    assert not chain.selected(by_label, attrs(namespace="default"))
    assert chain.selected(by_name, attrs(namespace="team-a"))
    assert not chain.selected(by_name, attrs(namespace="guarded"))
    assert chain.selected(by_label, attrs(NODES, namespace=""))  # cluster-scoped: always


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ({}, {}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]},
            {"a": "2"},
            True,
        ),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"b": "1"}, True),
    ],
)
def test_label_selectors(selector: dict[str, Any], labels: dict[str, str], expected: bool) -> None:
    assert match_label_selector(selector, labels) is expected


def test_an_unknown_selector_operator_is_an_error() -> None:
    with pytest.raises(SelectorError, match="Matches"):
        match_label_selector({"matchExpressions": [{"key": "a", "operator": "Matches"}]}, {})


def test_a_valid_configuration_has_no_causes() -> None:
    config = {
        "webhooks": [
            {
                "name": "ok.example.test",
                "clientConfig": {"service": {"namespace": "ns", "name": "svc", "path": "/v"}},
                "rules": rule(["pods"]),
                "sideEffects": "NoneOnDryRun",
                "admissionReviewVersions": ["v1", "v1beta1"],
                "timeoutSeconds": 30,
            }
        ]
    }
    assert check_configuration("ValidatingWebhookConfiguration", config) == []


def test_each_invalid_field_is_named() -> None:
    config = {
        "webhooks": [
            {
                "name": "dup.example.test",
                "clientConfig": {"url": "https://h/x", "service": {"name": "s"}},
                "sideEffects": "Some",
                "admissionReviewVersions": ["v1"],
                "failurePolicy": "Maybe",
                "timeoutSeconds": 0,
                "rules": rule(["pods"], operations=["PATCH"], scope="Everywhere"),
            },
            {
                "name": "dup.example.test",
                "clientConfig": {"url": "https://h/x"},
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            },
        ]
    }
    fields = [field for field, _, _ in check_configuration("MutatingWebhookConfiguration", config)]
    assert fields == [
        "webhooks[0].clientConfig",
        "webhooks[0].sideEffects",
        "webhooks[0].failurePolicy",
        "webhooks[0].timeoutSeconds",
        "webhooks[0].rules[0].operations",
        "webhooks[0].rules[0].scope",
        "webhooks[1].name",
    ]


def test_a_denial_without_a_status_is_kube_apiservers_403() -> None:
    error = denied("h.example.test", None, attrs())
    assert (error.code, error.reason) == (403, "Forbidden")
    assert error.message == (
        'pods "x" is forbidden: admission webhook "h.example.test" denied the request '
        "without explanation"
    )
    internal = denied("h.example.test", {"code": 500, "message": "boom"}, attrs())
    assert (internal.code, internal.reason) == (500, "InternalError")
    assert internal.message == (
        'Internal error occurred: admission webhook "h.example.test" denied the request: boom'
    )
