"""The contract constants, pinned to the spec's spelling (shared/spec, ARCHITECTURE.md).

The expected strings are copied from the spec, not from the module: a rename here that the
spec did not make must fail.
"""

from __future__ import annotations

from gpustack_core import allocation, contract, instance_metrics, pods


def test_names_match_the_spec() -> None:
    assert contract.ALLOCATION_ANNOTATION == "device.gpustack.ai/accelerator.allocated"
    assert contract.PART_OF_LABEL == "app.kubernetes.io/part-of"
    assert (contract.COMPONENT_LABEL, contract.DEVICE_MANAGER_COMPONENT) == (
        "app.kubernetes.io/component",
        "device-manager",
    )
    assert contract.DEVICE_MANAGER_SELECTOR == "app.kubernetes.io/component=device-manager"
    assert contract.MANUFACTURER_LABEL == "gpustack.ai/manufacturer"
    assert contract.SYSTEM_NAMESPACE == "gpustack-system"
    assert (contract.DEVICE_MANAGER_PORT, contract.WORKER_PORT) == (32443, 31443)
    assert (contract.API_GROUP, contract.API_VERSION, contract.CRD_VERSION) == (
        "worker.gpustack.ai",
        "v1",
        "v1alpha1",
    )


def test_older_names_are_the_same_objects() -> None:
    assert allocation.ANNOTATION is contract.ALLOCATION_ANNOTATION
    assert pods.PART_OF_LABEL is contract.PART_OF_LABEL
    assert instance_metrics.API_GROUP is contract.API_GROUP
    assert instance_metrics.API_VERSION == "worker.gpustack.ai/v1"
