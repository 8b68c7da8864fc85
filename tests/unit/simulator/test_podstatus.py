"""The Pod status both of the project's kubelets report (the stand-in's and the node agent's).

The QoS classes are Kubernetes' rules (pkg/apis/core/helper/qos): Guaranteed when every
container limits cpu and memory and requests equal the limits by *value*; BestEffort when no
container asks for anything; Burstable otherwise. The real API server fixed the value
comparison here: it refused a Burstable status for a Guaranteed Pod whose request was spelled
``68719476736`` and its limit ``64Gi``.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_simulator.podstatus import canonical_pod_quantities, qos_class, running_status


def containers(*resources: dict[str, Any]) -> dict[str, Any]:
    return {"containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(resources)]}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (containers({}), "BestEffort"),
        (containers({"limits": {"cpu": "8", "memory": "64Gi"}}), "Guaranteed"),
        (
            containers(
                {
                    "limits": {"cpu": "8", "memory": "64Gi"},
                    "requests": {"cpu": "8000m", "memory": "68719476736"},
                }
            ),
            "Guaranteed",
        ),
        (
            containers(
                {
                    "limits": {"cpu": "8", "memory": "64Gi"},
                    "requests": {"cpu": "4", "memory": "64Gi"},
                }
            ),
            "Burstable",
        ),
        (containers({"limits": {"cpu": "8"}}), "Burstable"),
        (containers({"requests": {"memory": "1Gi"}}), "Burstable"),
        (
            containers({"limits": {"cpu": "1", "memory": "1Gi"}}, {}),
            "Burstable",
        ),  # one container without limits spoils Guaranteed
    ],
)
def test_qos_class_follows_kubernetes_rules(spec: dict[str, Any], expected: str) -> None:
    assert qos_class(spec) == expected


def test_running_status_keeps_the_class_the_server_fixed() -> None:
    pod = {
        "metadata": {"uid": "u1", "name": "p", "namespace": "n"},
        "spec": containers({"limits": {"cpu": "1", "memory": "1Gi"}}),
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }
    status = running_status(pod, host_ip="198.18.0.10", pod_ip="10.244.1.2", now="t")
    assert status["qosClass"] == "Burstable"  # never rewritten: the field is immutable
    assert status["phase"] == "Running"
    assert [c["name"] for c in status["containerStatuses"]] == ["c0"]
    assert status["containerStatuses"][0]["containerID"].startswith("containerd://")


def test_container_quantities_are_stored_as_the_real_server_stores_them() -> None:
    """Each pair below was read back from kube-apiserver v1.37.2 (``create --dry-run=server``)."""
    pod = {
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "resources": {
                        "limits": {"cpu": "0.0000000001", "memory": "1.0001",
                                   "nvidia.com/gpu.sliced.units": "320000"},
                        "requests": {"cpu": "0.1m"},
                    },
                }
            ]
        }
    }  # fmt: skip
    canonical_pod_quantities(pod)
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"cpu": "1m", "memory": "1001m",
                                   "nvidia.com/gpu.sliced.units": "320k"}  # fmt: skip
    # A request left out defaults to its limit; one given is kept (and rounded).
    assert resources["requests"] == {"cpu": "1m", "memory": "1001m",
                                     "nvidia.com/gpu.sliced.units": "320k"}  # fmt: skip
