"""The NFD stand-in: what nfd-master does with ``NodeFeature`` objects, for the stand-in's nodes.

On a real cluster node-feature-discovery's master watches ``nfd.k8s-sigs.io/v1alpha1``
``NodeFeature`` objects and turns their ``spec.labels`` into labels on the Node each names
through its ``nfd.node.kubernetes.io/node-name`` label. The operator's Device Managers and
worker publish their node features that way, so the stand-in must do the same for anything
that reads Node labels (``kubectl get node --show-labels``, the InstanceType chain) to see them.

The behaviour kept from nfd-master:

- several NodeFeatures may name one Node; their labels are merged (ordered by namespace and
  name, a later object winning a clash);
- the labels it manages are recorded in the Node's ``nfd.node.kubernetes.io/feature-labels``
  annotation (comma-separated), so a label a NodeFeature no longer carries — or that left with
  a deleted NodeFeature — is removed from the Node, and labels nobody published through NFD
  are never touched;
- a label name without a prefix gets ``feature.node.kubernetes.io/``; only the label
  namespaces nfd-master admits are applied: its own (``feature.node.kubernetes.io``,
  ``profile.node.kubernetes.io`` and their sub-namespaces) and those the chart's documentation
  tells an administrator to add with ``extraLabelNs`` (``docs/deploy.md``, NFD).

It runs synchronously after every NodeFeature write and delete (the API server's
``after_write`` / ``remove``), so a test reading the Node right after a write sees the labels.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from gpustack_simulator.cluster.store import Store

NODE_FEATURE = "NodeFeature"
NODE = "Node"
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
FEATURE_LABELS_ANNOTATION = "nfd.node.kubernetes.io/feature-labels"
DEFAULT_PREFIX = "feature.node.kubernetes.io"
NFD_NAMESPACES = ("feature.node.kubernetes.io", "profile.node.kubernetes.io")
"""Admitted with their sub-namespaces (``vendor.feature.node.kubernetes.io``)."""
EXTRA_LABEL_NS = (
    "gpustack.ai",
    "feature.gpustack.ai",
    "acceleratable.feature.gpustack.ai",
    "general.feature.gpustack.ai",
)
"""The ``extraLabelNs`` the operator's NFD configuration adds (docs/deploy.md)."""


def qualified(key: str) -> str:
    """A label name as nfd-master writes it: unprefixed names get ``feature.node.kubernetes.io``."""
    return key if "/" in key else f"{DEFAULT_PREFIX}/{key}"


def admitted(key: str, extra: Iterable[str] = EXTRA_LABEL_NS) -> bool:
    """Whether nfd-master would write ``key`` (already qualified) onto a Node."""
    namespace = key.partition("/")[0]
    if namespace in extra:
        return True
    return any(namespace == ns or namespace.endswith("." + ns) for ns in NFD_NAMESPACES)


def wanted_labels(features: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """Node name → the labels its NodeFeatures ask for (merged, admitted ones only)."""
    by_node: dict[str, dict[str, str]] = {}
    ordered = sorted(
        features,
        key=lambda f: (
            str((f.get("metadata") or {}).get("namespace", "")),
            str((f.get("metadata") or {}).get("name", "")),
        ),
    )
    for feature in ordered:
        meta = feature.get("metadata") or {}
        node = (meta.get("labels") or {}).get(NODE_NAME_LABEL)
        if not node or meta.get("deletionTimestamp"):
            continue
        labels = (feature.get("spec") or {}).get("labels") or {}
        target = by_node.setdefault(str(node), {})
        for key, value in labels.items():
            name = qualified(str(key))
            if admitted(name):
                target[name] = str(value)
    return by_node


def relabelled(node: Mapping[str, Any], wanted: Mapping[str, str]) -> dict[str, Any] | None:
    """The Node with NFD's labels set to ``wanted``; ``None`` when nothing would change."""
    meta = node.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    previous = [k for k in annotations.get(FEATURE_LABELS_ANNOTATION, "").split(",") if k]
    for key in previous:
        if key not in wanted:
            labels.pop(qualified(key), None)
    labels.update(wanted)
    if wanted:
        annotations[FEATURE_LABELS_ANNOTATION] = ",".join(sorted(wanted))
    else:
        annotations.pop(FEATURE_LABELS_ANNOTATION, None)
    if labels == (meta.get("labels") or {}) and annotations == (meta.get("annotations") or {}):
        return None
    updated = copy.deepcopy(dict(node))
    updated["metadata"]["labels"] = labels
    if annotations:
        updated["metadata"]["annotations"] = annotations
    else:
        updated["metadata"].pop("annotations", None)
    return updated


def sync(store: Store) -> list[str]:
    """Bring every Node's NFD labels in line with the NodeFeatures now stored.

    Returns the names of the Nodes it rewrote (each rewrite is one watch event, as from
    nfd-master's update). A NodeFeature naming a Node that does not exist waits for it.
    """
    wanted = wanted_labels(store.list(NODE_FEATURE))
    changed = []
    for node in store.list(NODE):
        name = str(node["metadata"]["name"])
        updated = relabelled(node, wanted.get(name, {}))
        if updated is not None:
            store.put(NODE, updated)
            changed.append(name)
    return changed
