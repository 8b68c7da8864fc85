"""The worker's admission webhooks, stated once (issue #32, item 3).

The chart registers them with kube-apiserver through the worker's Service; ``simulator up``
registers the same hooks with the stand-in or a real control plane through a loopback ``url``.
Both used to spell every hook out, and the two copies drifted (``matchPolicy`` once went
missing from one). Now each hook is a :class:`Webhook` row of :data:`WEBHOOKS`:

- :func:`configurations` renders the two configuration objects for a caller that says how the
  API server reaches the worker (``client_config``), which optional hooks are on, the Pod hooks'
  failure policy and the namespaces never sent;
- :func:`chart_json` is ``clusters/chart/admission/webhooks.json``, the same rows as the chart's
  template ranges over them (a test holds the file equal to this module, and another holds what
  the chart renders equal to what :func:`configurations` gives ``simulator up``).

What a row cannot know stays with its caller: the address and CA, the release namespace, the
chart's ``worker.admissionWebhook.failurePolicy`` and the Pod ``matchConditions`` (derived from
the resource names a cluster may move, :mod:`gpustack_core.podmatch`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from gpustack_core import contract, metricaccess

Configuration = Literal["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
MUTATING: Final[Configuration] = "MutatingWebhookConfiguration"
VALIDATING: Final[Configuration] = "ValidatingWebhookConfiguration"
CONFIGURATIONS: Final[tuple[Configuration, ...]] = (MUTATING, VALIDATING)

MULTI_TENANT_METRICS: Final = "multiTenantMetrics"
"""The optional part a hook may belong to: the chart's value of that name (``.enabled``)."""

ALWAYS_EXCLUDED: Final[tuple[str, ...]] = (contract.SYSTEM_NAMESPACE, "kube-system")
"""Namespaces the Pod hooks never see, beside the release's own (so the worker's Pods, and the
cluster's own, can always be created)."""

TIMEOUT_SECONDS: Final = 10


@dataclass(frozen=True, slots=True)
class Webhook:
    """One admission webhook of the worker: what it judges and how a failure to call it ends.

    ``pods`` marks the gate-1 hooks: selected by namespace and ``matchConditions``, with the
    failure policy the operator chooses; every other hook is ``Fail`` always (with ``Ignore``
    a worker outage would let a tenant take what the hook forbids).
    """

    name: str
    configuration: Configuration
    path: str
    group: str
    version: str
    resource: str
    operations: tuple[str, ...]
    scope: Literal["Namespaced", "Cluster"]
    why: tuple[str, ...]
    pods: bool = False
    reinvocation: Literal["IfNeeded", "Never"] | None = None
    part: str | None = None


WEBHOOKS: Final[tuple[Webhook, ...]] = (
    Webhook(
        name="pods.mutate.worker.gpustack.ai",
        configuration=MUTATING,
        path=contract.POD_MUTATE_PATH,
        scope="Namespaced",
        pods=True,
        reinvocation="IfNeeded",
        why=(
            "Gate 1 (docs/worker.md): accelerator requests folded into units. The fold is",
            "idempotent, so a re-run after another webhook's mutation is safe.",
        ),
        group="",
        version="v1",
        resource="pods",
        operations=("CREATE",),
    ),
    Webhook(
        name="instances.mutate.worker.gpustack.ai",
        configuration=MUTATING,
        path=contract.INSTANCE_MUTATE_PATH,
        resource="instances",
        operations=("CREATE",),
        scope="Namespaced",
        reinvocation="Never",
        why=(
            "The Instance preset: at creation, the cpu/ram/localStorage an Instance leaves out",
            "come from its InstanceType's unitResources. Fail, so the validating hook after it",
            "is never skipped.",
        ),
        group=contract.API_GROUP,
        version=contract.CRD_VERSION,
    ),
    Webhook(
        name="instancetypes.mutate.worker.gpustack.ai",
        configuration=MUTATING,
        path=contract.INSTANCE_TYPE_MUTATE_PATH,
        resource="instancetypes",
        operations=("CREATE", "UPDATE"),
        scope="Cluster",
        reinvocation="Never",
        why=(
            "The InstanceType defaults (docs/instancetypes.md): a type written against the",
            "catalog is enriched from its flavor. Fail: a type admitted un-enriched would stay",
            "so (immutable).",
        ),
        group=contract.API_GROUP,
        version=contract.CRD_VERSION,
    ),
    Webhook(
        name="pods.validate.worker.gpustack.ai",
        configuration=VALIDATING,
        path=contract.POD_VALIDATE_PATH,
        scope="Namespaced",
        pods=True,
        why=("Gate 1: the final Pod checked against the request rules (docs/worker.md).",),
        group="",
        version="v1",
        resource="pods",
        operations=("CREATE",),
    ),
    Webhook(
        name="instances.validate.worker.gpustack.ai",
        configuration=VALIDATING,
        path=contract.INSTANCE_VALIDATE_PATH,
        resource="instances",
        operations=("CREATE", "UPDATE"),
        scope="Namespaced",
        why=(
            "The Instance rules: a malformed Instance, a node escape its Setting forbids, a spec",
            "change while running, a pin to no Node, more cards than any node holds. Every",
            "namespace; Fail, or an outage would let a tenant take the forbidden escapes.",
        ),
        group=contract.API_GROUP,
        version=contract.CRD_VERSION,
    ),
    Webhook(
        name="instancetypes.validate.worker.gpustack.ai",
        configuration=VALIDATING,
        path=contract.INSTANCE_TYPE_VALIDATE_PATH,
        resource="instancetypes",
        operations=("CREATE", "UPDATE"),
        scope="Cluster",
        why=(
            "The InstanceType rules: nameable keys, askable unitResources, nothing but",
            "displayName and inactive changed after creation.",
        ),
        group=contract.API_GROUP,
        version=contract.CRD_VERSION,
    ),
    Webhook(
        name="metricaccesses.validate.worker.gpustack.ai",
        configuration=VALIDATING,
        path=contract.METRIC_ACCESS_VALIDATE_PATH,
        group=metricaccess.GROUP,
        version=metricaccess.VERSION,
        resource=metricaccess.PLURAL,
        operations=("CREATE", "UPDATE"),
        scope="Namespaced",
        part=MULTI_TENANT_METRICS,
        why=(
            "The MetricAccess rules (docs/multi-tenant-metrics.md): a selector naming another",
            "namespace, a source or target the requester may not read, refused before the",
            "controller would deliver it. Fail, or an outage would let a tenant declare",
            "another tenant's figures.",
        ),
    ),
)


def _static(hook: Webhook) -> dict[str, object]:
    """The fields of ``hook``'s registration that no caller changes."""
    body: dict[str, object] = {
        "name": hook.name,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "timeoutSeconds": TIMEOUT_SECONDS,
        "matchPolicy": "Equivalent",
        "rules": [
            {
                "apiGroups": [hook.group],
                "apiVersions": [hook.version],
                "operations": list(hook.operations),
                "resources": [hook.resource],
                "scope": hook.scope,
            }
        ],
    }
    if not hook.pods:
        body["failurePolicy"] = "Fail"
    if hook.reinvocation is not None:
        body["reinvocationPolicy"] = hook.reinvocation
    return body


def namespace_selector(excluded: Iterable[str]) -> dict[str, object]:
    """The Pod hooks' namespaces: not one of ``excluded``, not opted out by the label."""
    return {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(excluded)},
            {
                "key": contract.POD_WEBHOOK_LABEL,
                "operator": "NotIn",
                "values": [contract.POD_WEBHOOK_DISABLED],
            },
        ]
    }


def excluded_namespaces(release_namespace: str) -> list[str]:
    """The release namespace and :data:`ALWAYS_EXCLUDED`, each once, in that order."""
    return list(dict.fromkeys((release_namespace, *ALWAYS_EXCLUDED)))


def configurations(
    client_config: Callable[[Webhook], Mapping[str, object]],
    *,
    match_conditions: Sequence[Mapping[str, str]],
    release_namespace: str = contract.SYSTEM_NAMESPACE,
    pod_failure_policy: Literal["Fail", "Ignore"] = "Fail",
    parts: Iterable[str] = (),
    name: str = "gpustack-operator-worker",
) -> list[dict[str, object]]:
    """The Mutating and Validating configurations, each with its hooks in :data:`WEBHOOKS` order.

    A hook of an optional part is left out unless its part is in ``parts``.
    """
    on = set(parts)
    out: list[dict[str, object]] = []
    for configuration in CONFIGURATIONS:
        hooks: list[dict[str, object]] = []
        for hook in WEBHOOKS:
            if hook.configuration != configuration or (hook.part and hook.part not in on):
                continue
            body = {**_static(hook), "clientConfig": dict(client_config(hook))}
            if hook.pods:
                body["failurePolicy"] = pod_failure_policy
                body["namespaceSelector"] = namespace_selector(
                    excluded_namespaces(release_namespace)
                )
                body["matchConditions"] = [dict(c) for c in match_conditions]
            hooks.append(body)
        out.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": configuration,
                "metadata": {"name": name},
                "webhooks": hooks,
            }
        )
    return out


def chart_rows() -> list[dict[str, object]]:
    """What the chart's template ranges over, a row per hook.

    Each row holds the hook's configuration, whether it is a Pod hook, its optional part, the
    comment it renders with, and its fixed fields.
    """
    return [
        {
            "configuration": hook.configuration,
            "pods": hook.pods,
            "part": hook.part or "",
            "path": hook.path,
            "why": list(hook.why),
            "webhook": _static(hook),
        }
        for hook in WEBHOOKS
    ]


def chart_json() -> str:
    """:func:`chart_rows` as ``clusters/chart/admission/webhooks.json``.

    Beside the rows, the Pod hooks' namespace selector over :data:`ALWAYS_EXCLUDED` (the chart
    puts the release namespace first).
    """
    document = {
        "podNamespaceSelector": namespace_selector(ALWAYS_EXCLUDED),
        "webhooks": chart_rows(),
    }
    return json.dumps(document, indent=2) + "\n"


__all__ = [
    "ALWAYS_EXCLUDED",
    "CONFIGURATIONS",
    "MULTI_TENANT_METRICS",
    "MUTATING",
    "VALIDATING",
    "WEBHOOKS",
    "Webhook",
    "chart_json",
    "chart_rows",
    "configurations",
    "excluded_namespaces",
    "namespace_selector",
]
