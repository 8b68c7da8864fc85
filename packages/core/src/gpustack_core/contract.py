"""The names other systems depend on, in one place: annotation and label keys, namespace, ports.

Each is part of the wire contract (``shared/spec``) and must match it letter for letter; a
literal repeated in two packages is one that can drift in one of them. Everything here is a
plain constant so this module imports nothing and every package can depend on it.
"""

from __future__ import annotations

from typing import Final

ALLOCATION_ANNOTATION: Final = "device.gpustack.ai/accelerator.allocated"
"""The Pod annotation the Device Manager writes: container → granted devices (allocation.py)."""

PART_OF_LABEL: Final = "app.kubernetes.io/part-of"
"""Set by the Instance controller to the Instance's UID on the Pod it renders."""
INSTANCE_MANAGED_BY_LABEL: Final = "worker.gpustack.ai/managed-by"
"""On an Instance: the controller that reconciles it. Absent or :data:`INSTANCE_CONTROLLER`, the
worker's Instance controller does; any other value hands the Instance to that manager (the
pattern of a Job's ``spec.managedBy``) and the worker neither renders nor writes it — the
simulator's scenarios mark their pre-rendered Instances so."""
INSTANCE_CONTROLLER: Final = "instance-controller.worker.gpustack.ai"
"""A label value, so no ``/``: kube-apiserver refuses one (found by running on the real server)."""
COMPONENT_LABEL: Final = "app.kubernetes.io/component"
DEVICE_MANAGER_COMPONENT: Final = "device-manager"
"""``app.kubernetes.io/component`` of the Device Manager Pods."""
DEVICE_MANAGER_SELECTOR: Final = f"{COMPONENT_LABEL}={DEVICE_MANAGER_COMPONENT}"
"""The label selector that finds the Device Manager Pods."""
MANUFACTURER_LABEL: Final = "gpustack.ai/manufacturer"
"""The manufacturer a Device Manager Pod serves (one DaemonSet per manufacturer)."""

SYSTEM_NAMESPACE: Final = "gpustack-system"
"""Where the Device Managers and the worker run."""

DEVICE_MANAGER_PORT: Final = 32443
"""The Device Manager's secure port (snapshot, metrics, health)."""
WORKER_PORT: Final = 31443
"""The worker's secure port (the aggregated API behind the APIService)."""

API_GROUP: Final = "worker.gpustack.ai"
API_VERSION: Final = "v1"
"""The version the worker serves (Instances and their ``metrics`` subresource)."""
CRD_VERSION: Final = "v1alpha1"
"""The Instance CRD's stored version."""
SETTINGS_API_GROUP: Final = "gpustack.ai"
SETTINGS_API_VERSION: Final = "v1"
"""Where the worker serves the operator Settings as the ``Setting`` resource (the reference's
``gpustack.ai/v1``, backed by the Secret ``gpustack-settings``; docs/settings.md)."""

POD_MUTATE_PATH: Final = "/mutate-v1-pod"
POD_VALIDATE_PATH: Final = "/validate-v1-pod"
"""The Pod admission webhook (gate 1) on the worker's secure port."""
POD_WEBHOOK_LABEL: Final = "gpustack.ai/pod-webhook"
POD_WEBHOOK_DISABLED: Final = "disabled"
"""``gpustack.ai/pod-webhook: disabled`` on a Namespace sends none of its Pods to the Pod
webhook; on a Pod, only a Pod that asks for no slice and no partition (docs/deploy.md, "The Pod
webhook and worker outages")."""
INSTANCE_MUTATE_PATH: Final = f"/mutate-worker-gpustack-ai-{CRD_VERSION}-instance"
INSTANCE_VALIDATE_PATH: Final = f"/validate-worker-gpustack-ai-{CRD_VERSION}-instance"
"""The Instance admission webhook on the worker's secure port (controller-runtime's spelling:
``/<verb>-<group with dashes>-<version>-<kind>``), for CREATE and UPDATE of the stored version
every write reaches, through ``v1`` or not."""
INSTANCE_TYPE_MUTATE_PATH: Final = f"/mutate-worker-gpustack-ai-{CRD_VERSION}-instancetype"
INSTANCE_TYPE_VALIDATE_PATH: Final = f"/validate-worker-gpustack-ai-{CRD_VERSION}-instancetype"
"""The InstanceType admission webhook (defaulting from the catalog flavor, immutability), same
spelling, for CREATE and UPDATE."""
METRIC_ACCESS_VALIDATE_PATH: Final = "/validate-observability-gpustack-ai-v1-metricaccess"
"""The MetricAccess admission webhook (docs/multi-tenant-metrics.md, "Admission"), same
spelling (``observability.gpustack.ai/v1``), for CREATE and UPDATE."""

# -- the InstanceType chain over Kueue (shared/reference/instancetypes.md, the walkthrough) ----

OS_LABEL: Final = "kubernetes.io/os"
ARCH_LABEL: Final = "kubernetes.io/arch"
RESOURCE_TYPE_LABEL: Final = "resource.gpustack.ai/type"
"""The operator's marker on what it owns: ``nodes`` on a ResourceFlavor, ``instancetypes`` on a
ClusterQueue, ``instances`` on an Instance's Pod."""
DERIVED_FROM_NODE_LABEL: Final = "schedule.gpustack.ai/derived-from-node"
"""On an InstanceType the operator authored from the nodes (``"true"``), not an admin's."""
CREDITS_PREFIX: Final = "credits.gpustack.ai/"
"""A manufacturer's Kueue quota resource: ``credits.gpustack.ai/nvidia``."""
NODE_DEVICES_CHECK: Final = "gpustack-node-devices"
"""The per-accelerator AdmissionCheck an accelerated ClusterQueue references once Active."""
NODE_DEVICES_CONTROLLER: Final = "gpustack.ai/node-devices"
"""The check's ``spec.controllerName``: the worker answers every AdmissionCheck naming it."""
FIT_LABEL_DOMAIN: Final = "fit.gpustack.ai"
"""The per-card fit labels' domain on a Node (``<figure>.fit.gpustack.ai/<aKey>``): written by
the worker from the node's ``Devices`` ledger, read by the Pod webhook's fit affinity."""
FIT_SLICED_PREFIX: Final = f"sliced-max-free-units.{FIT_LABEL_DOMAIN}/"
"""``+ <aKey>``: the most units one card of the model can still give a logical slice."""
FIT_SHARED_PREFIX: Final = f"shared-free-cards.{FIT_LABEL_DOMAIN}/"
"""``+ <aKey>``: how many cards of the model can still give one share (160,000 units)."""
KUEUE_API_VERSION: Final = "kueue.x-k8s.io/v1beta2"
"""The Kueue API the chain writes (the version Kueue v0.17 stores)."""

KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
"""Kueue's label routing a Pod to a LocalQueue (its Pod integration gates such Pods)."""
