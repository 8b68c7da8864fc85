"""Two rules kube-apiserver applies to built-in kinds, which tenants' isolation rests on.

- **A Namespace's ``kubernetes.io/metadata.name`` label is its name.** The API server sets it on
  every create and update whatever the request carried (the Namespace strategy's
  ``Canonicalize``, and ``SetDefaults_Namespace``), so a ``namespaceSelector`` on that label — the
  chart's Pod webhooks exclude ``NotIn [gpustack-system, kube-system]`` by it — cannot be
  dodged by a tenant labelling its own namespace ``kube-system``.
- **A Pod's spec is immutable but for a few fields** (``ValidatePodUpdate``): container and init
  container images, ``activeDeadlineSeconds``, additions to ``tolerations``, and
  ``terminationGracePeriodSeconds`` set to 1 where it was negative. Everything else — the
  containers' ``resources`` above all, from which the Pod webhook folded ``.sliced.units`` and
  which the device plugin reads at admission — is a 422 ``Invalid`` with the server's message
  (up to the ``cmp.Diff`` of the two specs the server appends after a newline, left out here).
  The server's own checks of the allowed fields' values (a deadline may only shrink, …) are
  not repeated.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from gpustack_core.quantity import QuantityError, parse_quantity
from gpustack_simulator.cluster.admission import NAMESPACE_NAME_LABEL

UPDATABLE_POD_SPEC_FIELDS = (
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
)
"""kube-apiserver's list, in its order and spelling (``pkg/apis/core/validation``)."""

POD_UPDATE_FORBIDDEN = "Forbidden: pod updates may not change fields other than " + ",".join(
    UPDATABLE_POD_SPEC_FIELDS
)

Cause = tuple[str, str, str]
"""(field path, message, reason), as ``apiserver.invalid`` lists them."""


def name_namespace(obj: dict[str, Any]) -> None:
    """Set ``kubernetes.io/metadata.name`` to the Namespace's name (in place)."""
    meta = obj.setdefault("metadata", {})
    name = meta.get("name")
    if not name:
        return  # generateName: set once the name is known (the create path calls again)
    labels = meta.get("labels")
    if not isinstance(labels, dict):
        labels = meta["labels"] = {}
    labels[NAMESPACE_NAME_LABEL] = name


def pod_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Cause]:
    """Why ``new``'s spec may not replace ``old``'s, as ``ValidatePodUpdate`` words it."""
    before = old.get("spec") or {}
    after = copy.deepcopy(dict(new.get("spec") or {}))
    for key in ("containers", "initContainers"):
        _keep_images(before.get(key), after.get(key))
    if "activeDeadlineSeconds" in before or "activeDeadlineSeconds" in after:
        _copy(before, after, "activeDeadlineSeconds")
    if _added_to(before.get("tolerations"), after.get("tolerations")):
        _copy(before, after, "tolerations")
    grace = before.get("terminationGracePeriodSeconds")
    if isinstance(grace, int) and grace < 0 and after.get("terminationGracePeriodSeconds") == 1:
        _copy(before, after, "terminationGracePeriodSeconds")
    if _by_value(after) == _by_value(before):
        return []
    return [("spec", POD_UPDATE_FORBIDDEN, "FieldValueForbidden")]


def _by_value(spec: Mapping[str, Any]) -> Any:
    """``spec`` with its containers' resource quantities as numbers, compared by value.

    The server decodes quantities, so ``"0.5"`` and ``"500m"`` (or a canonical ``"160k"`` and
    ``"160000"``) are one value: re-sending a Pod as read is no change.
    """
    copied = copy.deepcopy(dict(spec))
    for key in ("containers", "initContainers"):
        for container in copied.get(key) or ():
            resources = container.get("resources") if isinstance(container, dict) else None
            if not isinstance(resources, dict):
                continue
            for kind in ("limits", "requests"):
                amounts = resources.get(kind)
                if isinstance(amounts, dict):
                    resources[kind] = {name: _amount(v) for name, v in amounts.items()}
    return copied


def _amount(value: Any) -> Any:
    try:
        return parse_quantity(value)
    except (QuantityError, TypeError, ValueError):
        return value  # not a quantity: compared as written


def _copy(before: Mapping[str, Any], after: dict[str, Any], key: str) -> None:
    if key in before:
        after[key] = copy.deepcopy(before[key])
    else:
        after.pop(key, None)


def _keep_images(before: Any, after: Any) -> None:
    """Each container's image as before, where the lists line up (the one change allowed)."""
    if not isinstance(before, list) or not isinstance(after, list) or len(before) != len(after):
        return
    for old, new in zip(before, after, strict=True):
        if isinstance(old, dict) and isinstance(new, dict):
            if "image" in old:
                new["image"] = old["image"]
            else:
                new.pop("image", None)


def _added_to(before: Any, after: Any) -> bool:
    """Whether ``after`` keeps every toleration of ``before`` (it may add some)."""
    if before is None:
        return True
    if not isinstance(before, list) or not isinstance(after, list):
        return False
    return all(item in after for item in before)
