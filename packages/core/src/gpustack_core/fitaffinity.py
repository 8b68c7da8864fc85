"""Node selection by labels, and the fit affinity the Pod webhook pins a slice with.

Two uses of a Pod's required node affinity, kept together because they must read it the same
way:

- **Which nodes a PodSet may use** (:func:`selects`): the node-devices check considers only the
  nodes a Pod of the PodSet could be scheduled to — its ``nodeSelector``, its required node
  affinity (``In NotIn Exists DoesNotExist Gt Lt`` on labels, ``In NotIn`` on
  ``metadata.name``) and the ``spec.nodeLabels`` of the ResourceFlavor Kueue assigned. An
  expression on a fit label is skipped there: the check reads the ledger those labels come
  from, uncached, and a label a few seconds stale must not hide a node that has room.
- **The pin** (:func:`pin`, setting ``workload-fit-affinity``): a logical slice of ``U`` units,
  or a shared request of ``N >= 2`` cards, is ANDed into every required node-selector term as
  ``sliced-max-free-units.fit.gpustack.ai/<aKey> Gt U-1`` or
  ``shared-free-cards.fit.gpustack.ai/<aKey> Gt N-1``, so kube-scheduler skips a node whose
  free room is spread over cards none of which fits. A request names a manufacturer, not a
  model, and its device plugin serves every card of that manufacturer on the node, so each
  model of the manufacturer is an alternative (one term per model, ORed); the cross product
  with the Pod's own terms is bounded by :data:`MAX_TERMS`, above which no pin is added.

Pure: the webhook and the controller bring the Pod, the labels and the models.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from itertools import product
from typing import Any, Final

from gpustack_core import contract
from gpustack_core.fit import Ask, is_fit_label
from gpustack_core.modes import AllocationMode
from gpustack_core.requests import json_pointer_token

MAX_TERMS: Final = 32
"""The most node-selector terms a pinned Pod may carry; a larger cross product is not pinned."""

REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"
NAME_FIELD: Final = "metadata.name"

Expression = dict[str, Any]


# -- selection --------------------------------------------------------------------------------


def _integer(text: str) -> int | None:
    try:
        return int(text, 10)
    except ValueError:
        return None


def _expression_matches(labels: Mapping[str, str], expression: Mapping[str, Any]) -> bool:
    """One ``matchExpressions`` entry, as the scheduler's label selector reads it."""
    key = str(expression.get("key", ""))
    operator = expression.get("operator")
    values = [str(v) for v in expression.get("values") or ()]
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        have, bound = _integer(labels[key]), _integer(values[0])
        if have is None or bound is None:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False  # an operator the scheduler would refuse matches nothing


def _field_matches(name: str, expression: Mapping[str, Any]) -> bool:
    if expression.get("key") != NAME_FIELD:
        return False
    values = [str(v) for v in expression.get("values") or ()]
    if expression.get("operator") == "In":
        return name in values
    if expression.get("operator") == "NotIn":
        return name not in values
    return False


def term_matches(
    name: str,
    labels: Mapping[str, str],
    term: Mapping[str, Any],
    skip: Callable[[str], bool] = is_fit_label,
) -> bool:
    """Whether a node matches one node-selector term: every expression but ``skip``'s keys.

    A term with no expression at all matches nothing, as in Kubernetes.
    """
    expressions = [e for e in term.get("matchExpressions") or () if isinstance(e, Mapping)]
    fields = [e for e in term.get("matchFields") or () if isinstance(e, Mapping)]
    if not expressions and not fields:
        return False
    kept = [e for e in expressions if not skip(str(e.get("key", "")))]
    return all(_expression_matches(labels, e) for e in kept) and all(
        _field_matches(name, f) for f in fields
    )


def required_terms(spec: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """A Pod spec's required node-selector terms; ``None`` when it has none."""
    affinity = spec.get("affinity")
    node = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = node.get(REQUIRED) if isinstance(node, Mapping) else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if not isinstance(terms, list):
        return None
    return [t for t in terms if isinstance(t, Mapping)]


def selects(
    name: str,
    labels: Mapping[str, str],
    spec: Mapping[str, Any],
    node_labels: Mapping[str, str] | None = None,
) -> bool:
    """Whether a Pod with ``spec`` could be scheduled to this node by its labels.

    ``node_labels`` are the assigned ResourceFlavor's, which Kueue adds to the Pod's
    ``nodeSelector`` when it admits it. Taints and resources are not looked at.
    """
    selector = spec.get("nodeSelector")
    wanted = {**(selector if isinstance(selector, Mapping) else {}), **(node_labels or {})}
    if any(labels.get(str(k)) != str(v) for k, v in wanted.items()):
        return False
    terms = required_terms(spec)
    return terms is None or any(term_matches(name, labels, t) for t in terms)


# -- the pin ----------------------------------------------------------------------------------


def requirements(
    asks: Sequence[Ask], models: Mapping[str, Sequence[str]]
) -> list[list[Expression]]:
    """What the Pod's asks require of one card, per manufacturer: alternatives to OR.

    ``models`` maps a manufacturer to its accelerator keys in the cluster (``nvidia-a10g``). A
    slice of ``U`` units asks ``sliced-max-free-units… Gt U-1``; shared requests ask for the
    largest count ``N`` (two containers of one Pod may share a card, so counts do not add)
    when ``N >= 2``; anything else needs no pin. A manufacturer with no known model adds no
    requirement (nothing is known to pin to).
    """
    out: list[list[Expression]] = []
    for maker in sorted({a.manufacturer for a in asks}):
        mine = [a for a in asks if a.manufacturer == maker]
        keys = sorted(set(models.get(maker, ())))
        if not keys:
            continue
        units = max((a.units or 0 for a in mine if a.mode is AllocationMode.SLICED), default=0)
        if units > 0:
            out.append([_gt(contract.FIT_SLICED_PREFIX + k, units - 1) for k in keys])
        shares = max((a.count for a in mine if a.mode is AllocationMode.SHARED), default=0)
        if shares >= 2:
            out.append([_gt(contract.FIT_SHARED_PREFIX + k, shares - 1) for k in keys])
    return out


def _gt(key: str, bound: int) -> Expression:
    return {"key": key, "operator": "Gt", "values": [str(bound)]}


def pinned(spec: Mapping[str, Any]) -> bool:
    """Whether the spec already carries a fit expression (the webhook saw it before)."""
    for term in required_terms(spec) or ():
        for expression in term.get("matchExpressions") or ():
            if isinstance(expression, Mapping) and is_fit_label(str(expression.get("key", ""))):
                return True
    return False


def pinned_terms(
    terms: Sequence[Mapping[str, Any]] | None, needs: Sequence[Sequence[Expression]]
) -> list[dict[str, Any]] | None:
    """Every Pod term ANDed with one alternative of each need; ``None`` when over the bound."""
    base: list[Mapping[str, Any]] = list(terms) if terms else [{}]
    count = len(base)
    for alternatives in needs:
        count *= len(alternatives)
    if count > MAX_TERMS:
        return None
    out: list[dict[str, Any]] = []
    for term, chosen in product(base, product(*needs)):
        made = copy.deepcopy(dict(term))
        made["matchExpressions"] = [*(made.get("matchExpressions") or ()), *chosen]
        out.append(made)
    return out


def pin(pod: Mapping[str, Any], needs: Sequence[Sequence[Expression]]) -> list[dict[str, Any]]:
    """The JSONPatch operations adding the fit expressions to the Pod's required affinity.

    Empty when nothing is needed, when the Pod is already pinned (a reinvoked webhook), or
    when the cross product would exceed :data:`MAX_TERMS`. Only the levels of
    ``spec.affinity`` that are missing are added, so a Pod's pod affinity and preferred terms
    are kept as they are.
    """
    spec = pod.get("spec")
    if not needs or not isinstance(spec, Mapping) or pinned(spec):
        return []
    terms = pinned_terms(required_terms(spec), needs)
    if terms is None:
        return []
    required: dict[str, Any] = {"nodeSelectorTerms": terms}
    affinity = spec.get("affinity")
    if not isinstance(affinity, Mapping):
        return [
            {"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {REQUIRED: required}}}
        ]
    node = affinity.get("nodeAffinity")
    if not isinstance(node, Mapping):
        return [{"op": "add", "path": "/spec/affinity/nodeAffinity", "value": {REQUIRED: required}}]
    path = f"/spec/affinity/nodeAffinity/{json_pointer_token(REQUIRED)}"
    if not isinstance(node.get(REQUIRED), Mapping):
        return [{"op": "add", "path": path, "value": required}]
    return [{"op": "add", "path": f"{path}/nodeSelectorTerms", "value": terms}]


__all__ = [
    "MAX_TERMS",
    "pin",
    "pinned",
    "pinned_terms",
    "required_terms",
    "requirements",
    "selects",
    "term_matches",
]
