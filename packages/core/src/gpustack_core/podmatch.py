"""Which Pod creations kube-apiserver sends to the Pod webhook: its ``matchConditions`` (CEL).

The webhook is ``failurePolicy: Fail``: a slice or partition it never saw would reach the
device plugin unfolded (charged one token, not its memory), which over-allocates. Sending it
every Pod made one worker outage refuse every Pod creation in the cluster, including Pods that
ask for no accelerator at all and that the webhook answers untouched. So kube-apiserver
evaluates these conditions first and calls the webhook only for a Pod that needs it:

- ``asks-for-accelerators``: a container or init container names one of our resources, in
  its ``limits`` or its ``requests``: a manufacturer's base (``nvidia.com/gpu``) or any
  ``<base>.…`` name (``.shared``, ``.sliced*``, ``.partitioned*``; a suffix we do not serve is
  sent too and answered untouched: more is safe, less is not), or a visibility resource
  (``device.gpustack.ai/<mfr>.visibility``). A Pod that only carries the Kueue queue label is
  not sent: the webhook answers it allowed and unpatched (the fit pin needs an accelerator ask).
- ``not-opted-out``: a Pod labelled ``gpustack.ai/pod-webhook: disabled`` is not sent, unless
  it asks for a slice or a partition. A tenant writes its Pod's labels, and those requests are
  the ones an unjudged Pod over-allocates with; a whole card or a share is counted by the
  kubelet whether the webhook saw it or not.

Every name comes from :class:`~gpustack_core.resources.ResourceNames`, so the chart's file
(``clusters/chart/admission/pod-match-conditions.json``) and ``simulator up`` state exactly
what the webhook judges; ``tests/unit/deploy/test_chart_pod_match.py`` keeps the file current.
Every field access is guarded by ``has()``: an evaluation error counts as a failure, and with
``Fail`` it would refuse the Pod.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from gpustack_core import contract
from gpustack_core.manufacturers import rows
from gpustack_core.resources import ResourceNames, default_names

ASKS: Final = "asks-for-accelerators"
NOT_OPTED_OUT: Final = "not-opted-out"


def _quoted(values: Sequence[str]) -> str:
    """A CEL list literal of strings; every name here is ``[a-z0-9./-]``, so no escaping."""
    for value in values:
        if "'" in value or "\\" in value:
            raise ValueError(f"resource name {value!r} cannot be quoted in CEL")
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _any_key(predicate: str) -> str:
    """CEL: some container or init container names a key ``k`` satisfying ``predicate``.

    Limits and requests both count; every absent field reads as an empty list or map, never
    as an error.
    """
    containers = (
        "((has(object.spec.initContainers) ? object.spec.initContainers : [])"
        " + (has(object.spec.containers) ? object.spec.containers : []))"
    )
    maps = (
        "[has(c.resources.limits) ? c.resources.limits : {},"
        " has(c.resources.requests) ? c.resources.requests : {}]"
    )
    return f"{containers}.exists(c, has(c.resources) && {maps}.exists(m, m.exists(k, {predicate})))"


def asks_expression(names: Sequence[ResourceNames] | None = None) -> str:
    """CEL: the Pod names one of ``names``' resources (any suffix of a base, or visibility).

    ``names`` defaults to every manufacturer's at its default base, read from the table now.
    """
    names = default_names() if names is None else names
    bases = _quoted([n.base for n in names])
    visibility = _quoted([n.visibility for n in names])
    return _any_key(f"k in {visibility} || {bases}.exists(b, k == b || k.startsWith(b + '.'))")


def folded_expression(names: Sequence[ResourceNames] | None = None) -> str:
    """CEL: the Pod names a slice or partition resource, whose units only the webhook writes."""
    names = default_names() if names is None else names
    prefixes = _quoted([p for n in names for p in (n.sliced, n.partitioned)])
    return _any_key(f"{prefixes}.exists(p, k == p || k.startsWith(p + '.'))")


def opted_out_expression() -> str:
    """CEL: the Pod carries ``gpustack.ai/pod-webhook: disabled``."""
    key, value = contract.POD_WEBHOOK_LABEL, contract.POD_WEBHOOK_DISABLED
    return (
        f"has(object.metadata.labels) && '{key}' in object.metadata.labels"
        f" && object.metadata.labels['{key}'] == '{value}'"
    )


def match_conditions(names: Sequence[ResourceNames] | None = None) -> list[dict[str, str]]:
    """The Pod webhooks' ``matchConditions``; kube-apiserver sends a Pod when all are true."""
    return [
        {"name": ASKS, "expression": asks_expression(names)},
        {
            "name": NOT_OPTED_OUT,
            "expression": f"!({opted_out_expression()}) || {folded_expression(names)}",
        },
    ]


def match_conditions_json(names: Sequence[ResourceNames] | None = None) -> str:
    """:func:`match_conditions` as the chart's file holds it (indented JSON, one newline)."""
    return json.dumps(match_conditions(names), indent=2) + "\n"


def default_bases_json() -> str:
    """Manufacturer -> default base, as ``clusters/chart/admission/resource-bases.json``.

    The chart's ``resourceNames`` moves a manufacturer off its default base; to rewrite the
    conditions above it must know which literals the default spelled (its template replaces
    ``'<default>'``, ``'<default>.sliced'``, ``'<default>.partitioned'``).
    """
    bases = {row.name: row.resource_base for row in rows()}
    return json.dumps(bases, indent=2) + "\n"


__all__ = [
    "ASKS",
    "NOT_OPTED_OUT",
    "asks_expression",
    "default_bases_json",
    "folded_expression",
    "match_conditions",
    "match_conditions_json",
    "opted_out_expression",
]
