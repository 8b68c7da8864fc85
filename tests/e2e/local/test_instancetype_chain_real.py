"""Real Kueue takes the InstanceType chain the worker derives: queues Active, flavors in use.

Run by ``./dev e2e-real`` (``GPUSTACK_E2E_CONTROL_PLANE=real``) on the suite's ``simulator up``:
a real kube-apiserver, Kueue v0.17 built from its module, and nfd-master turning the worker's and
the Device Managers' NodeFeatures into node labels. The stand-in stores Kueue's objects without
judging them (``tests/integration/test_instancetype_controllers.py``); only real Kueue can say
whether what the worker writes is a ClusterQueue it accepts and admits through.

Expected names follow the reference's rule, computed here from the Nodes' labels as the
reference states it (``shared/reference/instancetypes.md``, "Names and the entrance queue"),
never from the worker's code; readiness is Kueue's own condition on its objects.
"""

from __future__ import annotations

import re
import shutil
import time
from typing import Any

import pytest
from e2e_helpers import eventually, kubectl_json
from e2e_system import CONTROL_PLANE, System

pytestmark = [
    pytest.mark.skipif(
        CONTROL_PLANE != "real",
        reason="runs against the real control plane only (./dev e2e-real)",
    ),
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl here"),
]

OURS = "resource.gpustack.ai/type=instancetypes"
CHECK = "gpustack-node-devices"
ACCELERATABLE = "acceleratable.feature.gpustack.ai/"
GENERAL = "general.feature.gpustack.ai/"
IN_USE = "kueue.x-k8s.io/resource-in-use"
"""The finalizer Kueue puts on a ResourceFlavor (and AdmissionCheck) a ClusterQueue names."""


def fnv64(text: str) -> str:
    """64-bit FNV-1a as hex (offset basis 0xcbf29ce484222325, prime 0x100000001b3)."""
    value = 0xCBF29CE484222325
    for byte in text.encode():
        value = ((value ^ byte) * 0x100000001B3) % 2**64
    return f"{value:016x}"


DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
"""Kubernetes' rule for an object name (RFC 1123 subdomain, at most 253 characters)."""


def derived_pools(nodes: list[dict[str, Any]]) -> set[str]:
    """The collapsed pools the managed nodes form, by the reference's naming rule.

    A key that is a valid label but makes no valid object name (the demo's ``hygon-k100_ai``)
    forms no pool: the API server would refuse its objects, and the operator leaves it out.
    """
    names = set()
    for node in nodes:
        labels = node["metadata"].get("labels") or {}
        if labels.get("gpustack.ai/managed") != "true":
            continue
        platform = f"{labels['kubernetes.io/os']}-{labels['kubernetes.io/arch']}"
        if any(k.startswith(GENERAL) and k.endswith(".count") for k in labels):
            names.add(f"gpustack--generic-{platform}")
        for key in labels:
            if key.startswith(ACCELERATABLE) and key.endswith(".count"):
                names.add(f"gpustack--{key[len(ACCELERATABLE) : -len('.count')]}-{platform}")
    return {n for n in names if len(n) <= 253 and DNS_SUBDOMAIN.fullmatch(n)}


def _active(obj: dict[str, Any]) -> dict[str, Any] | None:
    found = [c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == "Active"]
    return found[0] if found else None


def _check_active(system: System) -> bool:
    done = system.kubectl("get", "admissioncheck", CHECK, "-o", "json")
    if done.returncode != 0:
        return False
    condition = _active(kubectl_json(system, "get", "admissioncheck", CHECK))
    return condition is not None and condition["status"] == "True"


def test_real_kueue_accepts_the_derived_queues_flavors_and_entrances(system: System) -> None:
    nodes = kubectl_json(system, "get", "nodes")["items"]
    expected = derived_pools(nodes)
    assert expected, "no managed node carries pool labels (is nfd-master running?)"

    def queues() -> dict[str, dict[str, Any]] | None:
        listed = kubectl_json(system, "get", "clusterqueues", "-l", OURS)["items"]
        found = {q["metadata"]["name"]: q for q in listed}
        judged = all(_active(q) is not None for q in found.values())
        return found if expected <= set(found) and judged else None

    found = eventually(queues, "a ClusterQueue per derived pool, judged by Kueue", timeout=90)
    check_active = _check_active(system)
    for name, queue in found.items():
        condition = _active(queue)
        assert condition is not None
        names_check = CHECK in [c["name"] for c in (queue["spec"].get(
            "admissionChecksStrategy") or {}).get("admissionChecks") or ()]  # fmt: skip
        if condition["status"] != "True":
            # The one Inactive reason allowed: the node-devices check named but not Active.
            assert names_check, (name, condition)
            assert not check_active, (name, condition)
            assert condition["reason"] in {"AdmissionCheckInactive", "AdmissionCheckNotFound"}
            continue
        assert condition["reason"] == "Ready", (name, condition)
        # Every flavor it names exists, and Kueue has marked it in use.
        for group in queue["spec"]["resourceGroups"]:
            for flavor in group["flavors"]:
                stored = kubectl_json(system, "get", "resourceflavor", flavor["name"])
                assert IN_USE in (stored["metadata"].get("finalizers") or ()), flavor["name"]

    # The entrances: one LocalQueue per pool in a tenant namespace, named by the FNV-1a hash of
    # the queue's name, and Kueue holds each Active as its queue is.
    def entrances() -> dict[str, dict[str, Any]] | None:
        listed = kubectl_json(system, "get", "localqueues", "-n", "team-a")["items"]
        by_name = {q["metadata"]["name"]: q for q in listed}
        wanted = {f"gpustack-fnv64-{fnv64(name)}" for name in expected}
        judged = all(_active(by_name[n]) is not None for n in wanted & set(by_name))
        return by_name if wanted <= set(by_name) and judged else None

    local = eventually(entrances, "the entrance LocalQueues in team-a", timeout=90)
    for name in expected:
        queue = local[f"gpustack-fnv64-{fnv64(name)}"]
        assert queue["spec"]["clusterQueue"] == name
        if _active(found[name])["status"] == "True":  # type: ignore[index]
            assert _active(queue)["status"] == "True", queue  # type: ignore[index]
    assert not kubectl_json(system, "get", "localqueues", "-n", "kube-system")["items"]
    assert not kubectl_json(system, "get", "localqueues", "-n", "gpustack-system")["items"]

    # The printed table is the real server's, from the CRD's printer columns.
    done = system.kubectl("get", "instancetypes", "--no-headers")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()}
    for name in expected:
        assert rows[name][1] == f"gpustack-fnv64-{fnv64(name)}"
        assert rows[name][-1] == "Active"

    # Settled: the worker rewrites nothing Kueue stores (no patch loop over its defaults).
    before = {n: q["metadata"]["generation"] for n, q in found.items()}
    time.sleep(10)
    listed = kubectl_json(system, "get", "clusterqueues", "-l", OURS)["items"]
    after = {q["metadata"]["name"]: q["metadata"]["generation"] for q in listed}
    assert {n: after.get(n) for n in before} == before
