"""The per-accelerator admission check with real Kueue on the real control plane (issue #30).

Real Kueue v0.17 (built from its module) reserves quota, evicts on ``Retry`` and requeues;
kube-scheduler places the Pod once Kueue ungates it; our device plugin grants the card. The test
fragments one node: a pinned 60 % slice on each of its free sliceable cards (no queue label, so
Kueue leaves them alone), which leaves every card 40 % — the node's totals, twice a 50 % slice,
would take one. A queue whose flavor is that node (ResourceFlavor, ClusterQueue naming
``gpustack-node-devices``, LocalQueue: made by hand here, names of this test's own) then gets a
50 % slice: Kueue reserves quota, the check answers ``Retry`` naming a card, and the Pod stays
gated. Releasing one card admits it: the check answers ``Ready``, Kueue ungates, the scheduler
places the Pod on that node (its fit label now holds the slice) and the plugin grants the freed
card. Expected values are Kubernetes' and Kueue's behaviour and the fold's definition
(1 % = 16,000 units), never read from our code. Skips on the stand-in, which has no Kueue.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from e2e_helpers import create, eventually, kubectl_json
from e2e_system import CONTROL_PLANE, System

from gpustack_core.allocation import ANNOTATION, parse_allocation
from gpustack_core.modes import Manufacturer
from gpustack_core.quantity import parse_quantity

pytestmark = [
    pytest.mark.skipif(
        CONTROL_PLANE != "real",
        reason="runs against the real control plane only (./dev e2e-real): it needs real Kueue",
    ),
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl here"),
]

NAMESPACE = "team-ops"
UNITS = 1_600_000
PERCENT = UNITS // 100
FILL = 60  # percent each filler takes: 40 % left on each card, less than the slice
ASK = 50  # percent the queued slice asks: one card cannot, two cards' leftovers could
PREFIX = "fit-e2e"
CHECK = "gpustack-node-devices"


@dataclass(frozen=True)
class Target:
    """A node and manufacturer whose sliceable cards this test can fragment."""

    node: str
    hostname: str
    manufacturer: str
    base: str
    free: tuple[str, ...]
    """The sliceable cards nothing holds (each gets a filler)."""
    model: str
    """``<manufacturer>-<group id>`` of the free cards: the fit label's key."""


def _rows(devices: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        row["id"]: row
        for group in (devices.get("status") or {}).get("groups") or ()
        for row in group.get("accelerators") or ()
    }


def _target(system: System) -> Target:
    """The (node, manufacturer) with the fewest free sliceable cards, at least two, where no
    card already in a slice still has the asked room (else the queued slice would fit)."""
    found: list[Target] = []
    nodes = {n["metadata"]["name"]: n for n in kubectl_json(system, "get", "nodes")["items"]}
    for devices in kubectl_json(system, "get", "devices")["items"]:
        name = devices["metadata"]["name"]
        rows = _rows(devices)
        by_maker: dict[str, list[tuple[str, dict[str, Any], dict[str, Any]]]] = {}
        for group in devices["spec"].get("groups") or ():
            for card in group.get("accelerators") or ():
                by_maker.setdefault(group["manufacturer"], []).append((group["id"], card, group))
        for maker, cards in by_maker.items():
            try:
                base = Manufacturer(maker).resource_base
            except ValueError:
                continue
            free, blocked, models = [], False, set()
            for gid, card, _ in cards:
                status = card.get("status") or {}
                sliceable = (status.get("logicalSliced") or {}).get("count", 0) > 0
                if not sliceable or status.get("unhealthy"):
                    continue
                row = rows.get(card["id"])
                mode = row["mode"] if row else 0
                left = row["remaining"] if row else UNITS
                if mode == 0 and left >= UNITS:
                    free.append(card["id"])
                    models.add(f"{maker}-{gid}")
                elif mode == 3 and left >= ASK * PERCENT:
                    blocked = True
            hostname = (
                nodes.get(name, {})
                .get("metadata", {})
                .get("labels", {})
                .get("kubernetes.io/hostname")
            )
            if len(free) >= 2 and not blocked and len(models) == 1 and hostname:
                found.append(Target(name, hostname, maker, base, tuple(free), models.pop()))
    if not found:
        pytest.skip("no node has two free sliceable cards of one model to fragment")
    return min(found, key=lambda t: (len(t.free), t.node))


def _pod(name: str, base: str, percent: int, *, node: str | None = None,
         queue: str | None = None) -> dict[str, Any]:  # fmt: skip
    limits = {f"{base}.sliced": "1", f"{base}.sliced.memory-percentage": str(percent)}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox",
                                            "command": ["sleep", "infinity"],
                                            "resources": {"limits": limits}}]}  # fmt: skip
    if node is not None:
        spec["nodeName"] = node
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
            "spec": spec}  # fmt: skip


def _apply(system: System, items: list[dict[str, Any]]) -> None:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", system.endpoints.kubeconfig, "--context", "admin",
         "apply", "-f", "-"],
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def _granted(system: System, pod: str) -> list[str] | None:
    """The cards a Running Pod was granted, from its allocation annotation."""
    found = kubectl_json(system, "get", "pod", "-n", NAMESPACE, pod)
    text = (found["metadata"].get("annotations") or {}).get(ANNOTATION)
    if found["status"].get("phase") != "Running" or not text:
        return None
    allocation = parse_allocation(text)
    return [a.id for e in allocation.values() for g in e.devices.groups for a in g.accelerators]


def _fit_label(system: System, target: Target, *, below: bool) -> int | None:
    """The node's sliced fit label for the model, once it is below (or at least) the ask."""
    labels = kubectl_json(system, "get", "node", target.node)["metadata"].get("labels") or {}
    value = labels.get(f"sliced-max-free-units.fit.gpustack.ai/{target.model}")
    if value is None or (int(value) < ASK * PERCENT) != below:
        return None
    return int(value)


def _active(system: System, kind: str, name: str) -> dict[str, Any] | None:
    """The object once its ``Active`` condition is ``True``."""
    found: dict[str, Any] = kubectl_json(system, "get", kind, name)
    conditions = (found.get("status") or {}).get("conditions") or ()
    return (
        found if any(c["type"] == "Active" and c["status"] == "True" for c in conditions) else None
    )


def _workload(system: System, pod: str) -> dict[str, Any] | None:
    for w in kubectl_json(system, "get", "workloads.kueue.x-k8s.io", "-n", NAMESPACE)["items"]:
        if any(o.get("name") == pod for o in w["metadata"].get("ownerReferences") or ()):
            return dict(w)
    return None


def _retry_events(system: System, workload: str) -> list[dict[str, Any]] | None:
    events = kubectl_json(system, "get", "events", "-n", NAMESPACE)["items"]
    found = [e for e in events if e["involvedObject"].get("name") == workload
             and e["reason"] == "NodeDevicesRetry"]  # fmt: skip
    return found or None


@pytest.fixture
def fragmented(system: System) -> Iterator[tuple[Target, list[str]]]:
    """One filler per free card of the target; everything this test made deleted after."""
    target = _target(system)
    fillers: list[str] = []
    try:
        for i, card in enumerate(target.free):
            name = f"{PREFIX}-filler-{i}"
            made = create(system, _pod(name, target.base, FILL, node=target.node))
            assert made.returncode == 0, made.stderr
            fillers.append(name)
            cards = eventually(lambda n=name: _granted(system, n), f"{name} granted", timeout=90)
            assert len(cards) == 1, cards
            assert cards[0] in target.free, (cards, card)
        held = {c for f in fillers for c in _granted(system, f) or ()}
        assert held == set(target.free), "the plugin packed two fillers on one card"
        yield target, fillers
    finally:
        for kind, names in (("pod", [*fillers, f"{PREFIX}-slice"]),
                            ("localqueue", [f"{PREFIX}-lq"])):  # fmt: skip
            system.kubectl("delete", kind, "-n", NAMESPACE, "--ignore-not-found",
                           "--wait=true", "--timeout=90s", *names)  # fmt: skip
        system.kubectl("delete", "clusterqueue", "--ignore-not-found", f"{PREFIX}-cq")
        system.kubectl("delete", "resourceflavor", "--ignore-not-found", f"{PREFIX}-flavor")


def test_a_slice_no_card_holds_waits_on_the_checks_retry_and_a_released_card_admits_it(
    system: System, fragmented: tuple[Target, list[str]]
) -> None:
    target, fillers = fragmented
    base = target.base
    # The node's totals would take the slice: what its cards have left, summed.
    devices = kubectl_json(system, "get", "devices", target.node)
    rows = _rows(devices)
    assert sum(rows[c]["remaining"] for c in target.free) >= ASK * PERCENT
    assert all(rows[c]["remaining"] == (100 - FILL) * PERCENT for c in target.free)
    # The worker's fit label says no card of the model holds the slice.
    label = eventually(lambda: _fit_label(system, target, below=True), "the fit label: too little")
    assert label < ASK * PERCENT

    check = eventually(lambda: _active(system, "admissioncheck", CHECK), "the check Active")
    assert check["spec"]["controllerName"] == "gpustack.ai/node-devices"
    # Kueue counts the slice as the operator's Kueue configuration maps it: its units, one
    # credit each, in credits.gpustack.ai/<manufacturer> (the slice's other requests left out).
    resources = [f"credits.gpustack.ai/{target.manufacturer}"]
    quota = {resources[0]: str(16 * UNITS)}
    _apply(system, [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": f"{PREFIX}-flavor"},
         "spec": {"nodeLabels": {"kubernetes.io/hostname": target.hostname}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": {"name": f"{PREFIX}-cq"},
         "spec": {"namespaceSelector": {},
                  "admissionChecksStrategy": {"admissionChecks": [{"name": CHECK}]},
                  "resourceGroups": [{"coveredResources": resources, "flavors": [{
                      "name": f"{PREFIX}-flavor",
                      "resources": [{"name": r, "nominalQuota": q} for r, q in quota.items()]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": f"{PREFIX}-lq", "namespace": NAMESPACE},
         "spec": {"clusterQueue": f"{PREFIX}-cq"}},
    ])  # fmt: skip
    eventually(lambda: _active(system, "clusterqueue", f"{PREFIX}-cq"), "the queue Active")

    made = create(system, _pod(f"{PREFIX}-slice", base, ASK, queue=f"{PREFIX}-lq"))
    assert made.returncode == 0, made.stderr
    pod = kubectl_json(system, "get", "pod", "-n", NAMESPACE, f"{PREFIX}-slice")
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    # The webhook's fold, stored as the server spells a quantity (800000 reads back 800k).
    assert parse_quantity(limits[f"{base}.sliced.units"]) == ASK * PERCENT
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    pinned = {(e["key"], e["operator"], tuple(e["values"]))
              for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]}  # fmt: skip
    assert (f"sliced-max-free-units.fit.gpustack.ai/{target.model}", "Gt",
            (str(ASK * PERCENT - 1),)) in pinned  # fmt: skip

    workload = eventually(lambda: _workload(system, f"{PREFIX}-slice"), "the Pod's Workload")
    [event, *_] = eventually(
        lambda: _retry_events(system, workload["metadata"]["name"]),
        "the check's Retry reason",
        timeout=90,
    )
    assert "no node has one card that can hold it" in event["message"]
    assert f"{target.node}: card " in event["message"]
    assert f"the slice asks {ASK * PERCENT}" in event["message"]
    waiting = kubectl_json(system, "get", "pod", "-n", NAMESPACE, f"{PREFIX}-slice")
    assert not waiting["spec"].get("nodeName")
    assert "kueue.x-k8s.io/admission" in {
        g["name"] for g in waiting["spec"].get("schedulingGates") or ()
    }
    latest = _workload(system, f"{PREFIX}-slice")
    assert latest is not None
    assert not any(c["type"] == "Admitted" and c["status"] == "True"
                   for c in (latest.get("status") or {}).get("conditions") or ())  # fmt: skip

    # Release one card: the check answers Ready, Kueue admits, the scheduler places the Pod.
    released = _granted(system, fillers[0])
    assert released is not None
    gone = system.kubectl("delete", "pod", "-n", NAMESPACE, fillers[0], "--wait=true",
                          "--timeout=90s")  # fmt: skip
    assert gone.returncode == 0, gone.stderr
    eventually(lambda: _fit_label(system, target, below=False), "the fit label: the freed card")
    cards = eventually(
        lambda: _granted(system, f"{PREFIX}-slice"), "the slice admitted and granted", timeout=180
    )
    assert cards == released
    placed = kubectl_json(system, "get", "pod", "-n", NAMESPACE, f"{PREFIX}-slice")
    assert placed["spec"]["nodeName"] == target.node
    admitted = _workload(system, f"{PREFIX}-slice")
    assert admitted is not None
    [entry] = [e for e in admitted["status"]["admissionChecks"] if e["name"] == CHECK]
    assert entry["state"] == "Ready"
    assert target.node in entry["message"]


INSTANCES = "instances.v1alpha1.worker.gpustack.ai"
TYPES = "instancetypes.v1alpha1.worker.gpustack.ai"


def _derived_type(system: System, target: Target) -> dict[str, Any] | None:
    """The derived InstanceType of the target's model, once its status is written."""
    group = target.model.split("-", 1)[1]
    for found in kubectl_json(system, "get", TYPES, "-l",
                              "schedule.gpustack.ai/derived-from-node")["items"]:  # fmt: skip
        spec = found["spec"]
        if (
            spec.get("manufacturer") == target.manufacturer
            and spec.get("acceleratorGroup", "").endswith(group)
            and (found.get("status") or {}).get("acceleratorSliced")
        ):
            return dict(found)
    return None


def test_an_instance_on_a_derived_type_waits_on_the_check_and_a_released_card_admits_it(
    system: System, fragmented: tuple[Target, list[str]]
) -> None:
    """The issue's must-show on the operator's own chain, not a hand-made queue: an Instance
    asking a 50 % slice of the derived type while no card of the pool has 50 % left (the
    node's totals have) is reserved quota by real Kueue on the type's entrance queue and held
    by the node-devices check's Retry, which its status shows; releasing one card on the
    target node admits it there. No flavor could hold it when it was created, so its Pod was
    not steered and Kueue assigned the pool's first flavor; once the card frees, the Instance
    controller replaces the gated Pod steered to the target's flavor (else Kueue would assign
    the first flavor again after every Retry)."""
    target, fillers = fragmented
    chosen = eventually(lambda: _derived_type(system, target), "the target model's derived type")
    name = chosen["metadata"]["name"]

    def fragmented_view() -> dict[str, Any] | None:
        found = kubectl_json(system, "get", TYPES, name)
        sliced = (found.get("status") or {}).get("acceleratorSliced") or {}
        return found if int(sliced.get("onceMaxRequest", 100)) < ASK else None

    try:
        eventually(fragmented_view, "the type's SL view: no card with the slice's room")
    except pytest.fail.Exception:
        pytest.skip(f"another node of {name}'s pool still has a card with {ASK} % free")
    manifest = {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": f"{PREFIX}-inst", "namespace": NAMESPACE},
        "spec": {"type": name, "image": "ubuntu:24.04", "command": ["sleep", "infinity"],
                 "resources": {"cpu": "1", "ram": "1Gi", "accelerator": "1",
                               "acceleratorSlicedMemoryPercentage": ASK}},
    }  # fmt: skip
    made = create(system, manifest)
    assert made.returncode == 0, made.stderr
    try:

        def held() -> dict[str, Any] | None:
            found = kubectl_json(system, "get", INSTANCES, "-n", NAMESPACE, f"{PREFIX}-inst")
            message = (found.get("status") or {}).get("phaseMessage", "")
            return found if message.startswith(f"Retry: {CHECK}: ") else None

        waiting = eventually(held, "the Instance held by the check's Retry", timeout=120)
        message = waiting["status"]["phaseMessage"]
        assert "no node has one card that can hold it" in message, message
        assert waiting["status"]["phase"] == "Starting"
        rows = _rows(kubectl_json(system, "get", "devices", target.node))
        assert sum(rows[c]["remaining"] for c in target.free) >= ASK * PERCENT  # totals allow

        released = _granted(system, fillers[0])
        assert released is not None
        gone = system.kubectl("delete", "pod", "-n", NAMESPACE, fillers[0], "--wait=true",
                              "--timeout=90s")  # fmt: skip
        assert gone.returncode == 0, gone.stderr

        def ready() -> dict[str, Any] | None:
            found = kubectl_json(system, "get", INSTANCES, "-n", NAMESPACE, f"{PREFIX}-inst")
            return found if (found.get("status") or {}).get("phase") == "Ready" else None

        eventually(ready, "the Instance Ready on the released card", timeout=240)
        assert _granted(system, f"{PREFIX}-inst") == released
        placed = kubectl_json(system, "get", "pod", "-n", NAMESPACE, f"{PREFIX}-inst")
        assert placed["spec"]["nodeName"] == target.node
    finally:
        system.kubectl("delete", INSTANCES, "-n", NAMESPACE, f"{PREFIX}-inst", "--wait=true",
                       "--timeout=90s")  # fmt: skip
