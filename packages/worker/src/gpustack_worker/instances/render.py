"""What an Instance becomes: its Pod, its NodePort Service and its namespace's isolation policy.

Pure functions of the Instance and the few facts the controller looks up (the node's hostname
label, the manufacturer and queue of the Instance's type, whether the manufacturer's
RuntimeClass exists, the Setting values). The controller diffs what these return against what
the cluster holds, so rendering twice from the same inputs must give the same objects: nothing
here reads a clock, a counter or a random source (``shared/reference/operator.md`` §7,
``shared/spec/gpu-instances.md``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from gpustack_core import contract, settings
from gpustack_core.instance import DEFAULT_VOLUME_MOUNT, Instance, Port, Resources
from gpustack_core.manufacturers import partition_kind
from gpustack_core.quantity import parse_quantity
from gpustack_core.resources import ResourceNames
from gpustack_core.units import ceil_fraction

TYPE_LABEL: Final = "resource.gpustack.ai/type"
"""Marks what the operator rendered for an Instance; the isolation policy selects on it."""
INSTANCES_TYPE: Final = "instances"
QUEUE_LABEL: Final = contract.KUEUE_QUEUE_LABEL
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
STEERED_ANNOTATION: Final = "worker.gpustack.ai/steered-to"
"""On a Pod created steered by fit: the flavors it was steered to, comma-separated."""
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "gpustack-operator"
"""On the isolation policy: only an object carrying it is ever collected (never a hand-made one)."""
ISOLATION_POLICY: Final = "gpustack-instance-isolation"

MAIN: Final = "main"
SSHD: Final = "sshd"
WORKSPACE: Final = "workspace"
SSH_KEYS_VOLUME: Final = "sshd-authorized-keys"
SSH_KEYS_PATH: Final = "/var/run/sshd-authorized-keys"
SSH_KEYS_MODE: Final = 0o600


INSTANCE_API_VERSION: Final = f"{contract.API_GROUP}/{contract.CRD_VERSION}"


class RenderError(ValueError):
    """The Instance asks for something no Pod can express; the message names the field."""


@dataclass(frozen=True)
class Overcommit:
    """How far requests sit below limits (the ``overcommit`` Settings): request = limit / ratio.

    A ratio of 1 makes requests equal limits (Guaranteed QoS when every resource is set).
    """

    cpu: Fraction = Fraction(1)
    memory: Fraction = Fraction(1)

    def __post_init__(self) -> None:
        if self.cpu < 1 or self.memory < 1:
            raise ValueError(f"overcommit ratios must be at least 1, got {self.cpu}, {self.memory}")


@dataclass(frozen=True)
class PodInputs:
    """What the controller looked up for one Instance's Pod."""

    manufacturer: str | None = None
    """The Instance type's manufacturer; ``None`` when it holds no accelerator."""
    queue: str | None = None
    """The type's LocalQueue (its ``entrance``): the Pod then waits for Kueue's admission."""
    hostname: str | None = None
    """The ``kubernetes.io/hostname`` label of ``spec.nodeName``'s Node (not always the name)."""
    steered_to: tuple[str, ...] = ()
    """The names of the flavors in ``flavors`` when they were chosen by fit (not by a pin):
    recorded on the Pod (:data:`STEERED_ANNOTATION`) so a stale choice can be seen."""
    flavors: tuple[Mapping[str, str], ...] = ()
    """The ``nodeLabels`` of the type's flavors Kueue may assign (:func:`flavor_affinity`):
    with ``spec.nodeName`` the one the pinned node forms
    (:func:`gpustack_core.pools.pinned_flavor_labels`), else, for a queued accelerated Pod,
    those with a node whose cards can hold it now (:func:`gpustack_core.pools.steered`).
    Empty: any."""
    runtime_class: str | None = None
    """The manufacturer's RuntimeClass when the cluster has it."""
    sshd_image: str = ""
    """The SSH sidecar's image (a Setting); required when ``spec.sshPublicKey`` is set."""
    overcommit: Overcommit = Overcommit()
    resource_base: str | None = None
    """``GPUSTACK_<MFR>_RESOURCE_NAME`` where the cluster overrides the default base."""


def flavor_affinity(flavors: Sequence[Mapping[str, str]]) -> dict[str, Any]:
    """A required node affinity with one term per flavor: an ``In`` on each of its nodeLabels.

    Kueue matches a Pod's selectors against its flavors' ``nodeLabels`` on the keys flavors
    use (never the hostname, never a fit label), so these terms are what steers its choice to
    a flavor whose node can run the Pod, rather than the first one with quota. Every node of
    such a flavor carries all of its labels, so the scheduler's choice is only narrowed to
    those flavors' nodes.
    """
    terms = [
        {
            "matchExpressions": [
                {"key": key, "operator": "In", "values": [value]}
                for key, value in sorted(labels.items())
            ]
        }
        for labels in flavors
    ]
    required = {"nodeSelectorTerms": terms}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}


def owner_reference(instance: Instance) -> dict[str, Any]:
    """The controller reference every object rendered for the Instance carries."""
    return {
        "apiVersion": INSTANCE_API_VERSION,
        "kind": "Instance",
        "name": instance.metadata.name,
        "uid": instance.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def instance_labels(instance: Instance) -> dict[str, str]:
    """The labels the Pod and the Service share; the Service selects by the part-of one."""
    return {contract.PART_OF_LABEL: instance.metadata.uid, TYPE_LABEL: INSTANCES_TYPE}


def belongs_to(instance: Instance, pod: Mapping[str, Any] | None) -> bool:
    """Whether ``pod`` is this incarnation's: its part-of label is the Instance's current UID.

    A Pod left by a deleted Instance of the same name carries the old UID and is not this
    Instance's, whatever its name says.
    """
    labels = (pod or {}).get("metadata", {}).get("labels") or {}
    return pod is not None and labels.get(contract.PART_OF_LABEL) == instance.metadata.uid


def port_name(port: Port) -> str:
    """``tcp-8080``: the reference's ``<proto>-<port>``, lower-cased (a valid IANA_SVC_NAME)."""
    return f"{port.protocol.lower()}-{port.port}"


def accelerator_limits(resources: Resources, names: ResourceNames) -> dict[str, str]:
    """The extended resources ``main`` requests for the Instance's accelerator fields.

    ``accelerator: N`` alone is Exclusive; with a memory percentage it is one Sliced card (the
    webhook folds the percentage into ``.sliced.units``); with a partition profile it is one
    Partitioned card of that profile. Shared cannot be asked for through an Instance.
    """
    sliced = resources.accelerator_sliced_memory_percentage
    profile = resources.accelerator_partitioned_profile
    if resources.accelerator is None:
        if sliced or profile:
            raise RenderError("spec.resources: a slice or partition needs accelerator: 1")
        return {}
    count = _count(resources.accelerator)
    if sliced and profile:
        raise RenderError(
            "spec.resources: acceleratorSlicedMemoryPercentage and "
            "acceleratorPartitionedProfile exclude each other"
        )
    if (sliced or profile) and count != 1:
        raise RenderError(
            f"spec.resources.accelerator: a slice or partition is 1 card, not {count}"
        )
    if sliced:
        limits = {names.sliced: "1", names.sliced_memory_percentage: str(sliced)}
        cores = resources.accelerator_sliced_cores_percentage
        if cores is not None:
            limits[names.sliced_cores_percentage] = str(cores)
        return limits
    if profile:
        kind = partition_kind(names.manufacturer)
        if kind is None:
            raise RenderError(
                f"spec.resources.acceleratorPartitionedProfile: {names.manufacturer} "
                "accelerators have no hardware partitions"
            )
        return {names.partitioned: "1", names.partitioned_profile(kind, profile): "1"}
    if resources.accelerator_sliced_cores_percentage is not None:
        raise RenderError("spec.resources.acceleratorSlicedCoresPercentage needs a memory share")
    return {names.exclusive: str(count)} if count else {}


def _count(value: int | str) -> int:
    try:
        parsed = parse_quantity(value)
    except ValueError as exc:
        raise RenderError(f"spec.resources.accelerator: {exc}") from None
    if parsed.denominator != 1 or parsed < 0:
        raise RenderError(f"spec.resources.accelerator: {value!r} is not a whole card count")
    return int(parsed)


def _request(name: str, value: int | str, overcommit: Overcommit) -> str:
    """A request from its limit: CPU in millicores, memory in bytes, both rounded up."""
    limit = parse_quantity(value)
    if name == "cpu":
        return f"{ceil_fraction(limit * 1000 / overcommit.cpu)}m"
    if name == "memory":
        return str(ceil_fraction(limit / overcommit.memory))
    return str(value)


def _volumes(instance: Instance) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The Pod's volumes and ``main``'s mounts: the workspace first, then additional ones."""
    spec = instance.spec
    mount = spec.volume_mount or DEFAULT_VOLUME_MOUNT
    if spec.volume.persistent is not None:
        workspace: dict[str, Any] = {
            "name": WORKSPACE,
            "persistentVolumeClaim": {"claimName": spec.volume.persistent.name},
        }
    else:
        empty: dict[str, Any] = {}
        capacity = spec.volume.ephemeral.capacity if spec.volume.ephemeral else None
        if capacity is not None:
            empty["sizeLimit"] = str(capacity)
        workspace = {"name": WORKSPACE, "emptyDir": empty}
    volumes = [workspace]
    mounts: list[dict[str, Any]] = [{"name": WORKSPACE, "mountPath": mount}]
    for i, extra in enumerate(spec.additional_volumes):
        name = f"additional-{i}"
        if extra.persistent is not None:
            source: dict[str, Any] = {"persistentVolumeClaim": {"claimName": extra.persistent.name}}
        elif extra.config_map is not None:
            source = {"configMap": {"name": extra.config_map.name}}
        elif extra.secret is not None:
            source = {"secret": {"secretName": extra.secret.name}}
        elif extra.host_path is not None:
            host: dict[str, Any] = {"path": extra.host_path.path}
            if extra.host_path.type:
                host["type"] = extra.host_path.type
            source = {"hostPath": host}
        else:
            raise RenderError(f"spec.additionalVolumes[{i}]: no source")
        volumes.append({"name": name, **source})
        entry: dict[str, Any] = {"name": name, "mountPath": extra.mount_path}
        if extra.sub_path:
            entry["subPath"] = extra.sub_path
        if extra.read_only:
            entry["readOnly"] = True
        mounts.append(entry)
    return volumes, mounts


def render_pod(instance: Instance, inputs: PodInputs) -> dict[str, Any]:
    """The Instance's Pod: same name and namespace, owned by it, labelled with its UID."""
    spec = instance.spec
    meta = instance.metadata
    names = (
        ResourceNames.of(inputs.manufacturer, inputs.resource_base) if inputs.manufacturer else None
    )
    limits: dict[str, str] = {k: str(v) for k, v in spec.resources.limits().items()}
    requests = {k: _request(k, v, inputs.overcommit) for k, v in spec.resources.limits().items()}
    accelerators = accelerator_limits(spec.resources, names) if names is not None else {}
    if (
        names is None
        and spec.resources.accelerator is not None
        and _count(spec.resources.accelerator)
    ):
        raise RenderError("spec.resources.accelerator: the Instance's type names no manufacturer")
    limits.update(accelerators)
    requests.update(accelerators)  # extended resources: requests must equal limits
    volumes, mounts = _volumes(instance)
    main: dict[str, Any] = {
        "name": MAIN,
        "image": spec.image,
        "securityContext": {"runAsUser": 0, **({"privileged": True} if spec.privileged else {})},
        "volumeMounts": mounts,
    }
    if spec.image_pull_policy:
        main["imagePullPolicy"] = spec.image_pull_policy
    if spec.command:
        main["command"] = list(spec.command)
    if spec.env:
        main["env"] = [{"name": e.name, "value": e.value} for e in spec.env]
    if spec.ports:
        main["ports"] = [
            {"name": port_name(p), "containerPort": p.port, "protocol": p.protocol}
            for p in spec.ports
        ]
    if limits:
        main["resources"] = {"limits": limits, "requests": requests}
    containers = [main]
    if spec.ssh_public_key is not None:
        containers.append(_sshd(instance, inputs, names, accelerators))
        volumes.append(
            {
                "name": SSH_KEYS_VOLUME,
                "secret": {
                    "secretName": spec.ssh_public_key.name,
                    "defaultMode": SSH_KEYS_MODE,
                },
            }
        )
    labels = {**instance_labels(instance)}
    if inputs.queue:
        labels[QUEUE_LABEL] = inputs.queue
    pod_spec: dict[str, Any] = {
        "containers": containers,
        "volumes": volumes,
        "hostIPC": True,
        "shareProcessNamespace": True,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    }
    if spec.image_pull_secret:
        pod_spec["imagePullSecrets"] = [{"name": spec.image_pull_secret}]
    if spec.node_name:
        pod_spec["nodeSelector"] = {HOSTNAME_LABEL: inputs.hostname or spec.node_name}
    if inputs.flavors:
        pod_spec["affinity"] = flavor_affinity(inputs.flavors)
    if inputs.runtime_class:
        pod_spec["runtimeClassName"] = inputs.runtime_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": meta.name,
            "namespace": meta.namespace,
            "labels": labels,
            "ownerReferences": [owner_reference(instance)],
        },
        "spec": pod_spec,
    }


def _sshd(
    instance: Instance,
    inputs: PodInputs,
    names: ResourceNames | None,
    accelerators: Mapping[str, str],
) -> dict[str, Any]:
    """The SSH sidecar: it enters ``main``'s namespaces and sees its cards, holding none.

    It asks only for the Visibility resource, as many as ``main`` holds cards, so the device
    plugin shows it the same cards without a second grant (metrics skip Visibility entries).
    """
    if not inputs.sshd_image:
        raise RenderError("spec.sshPublicKey: no SSH sidecar image is configured")
    container: dict[str, Any] = {
        "name": SSHD,
        "image": inputs.sshd_image,
        "stdin": True,
        "tty": True,
        "securityContext": {"capabilities": {"add": ["SYS_ADMIN", "SYS_PTRACE"]}},
        "env": [
            {
                "name": "VOLUME_MOUNT_PATH",
                "value": instance.spec.volume_mount or DEFAULT_VOLUME_MOUNT,
            }
        ],
        "volumeMounts": [{"name": SSH_KEYS_VOLUME, "mountPath": SSH_KEYS_PATH, "readOnly": True}],
    }
    cards = _cards(accelerators, names)
    if names is not None and cards:
        visible = {names.visibility: str(cards)}
        container["resources"] = {"limits": visible, "requests": visible}
    return container


def _cards(accelerators: Mapping[str, str], names: ResourceNames | None) -> int:
    """How many cards ``main``'s request holds: N exclusive, or the one slice or partition."""
    if names is None or not accelerators:
        return 0
    if names.exclusive in accelerators:
        return int(accelerators[names.exclusive])
    return 1


def render_service(
    instance: Instance, existing_node_ports: Mapping[tuple[int, str], int] | None = None
) -> dict[str, Any] | None:
    """The NodePort Service for ``spec.ports``, or ``None`` when it lists none.

    It belongs to the Instance (not the Pod), so stopping keeps it, and it selects by the
    part-of label, so it routes to every Pod the Instance ever has. A port that keeps its
    (port, protocol) keeps its allocated node port: ``existing_node_ports`` is read from the
    Service the cluster holds. A new port gets none here and the API server allocates one.
    """
    if not instance.spec.ports:
        return None
    kept = existing_node_ports or {}
    ports = []
    for port in instance.spec.ports:
        entry: dict[str, Any] = {
            "name": port_name(port),
            "port": port.port,
            "targetPort": port.port,
            "protocol": port.protocol,
        }
        node_port = kept.get((port.port, port.protocol))
        if node_port is not None:
            entry["nodePort"] = node_port
        ports.append(entry)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": instance.metadata.name,
            "namespace": instance.metadata.namespace,
            "labels": instance_labels(instance),
            "ownerReferences": [owner_reference(instance)],
        },
        "spec": {
            "type": "NodePort",
            "selector": {contract.PART_OF_LABEL: instance.metadata.uid},
            "ports": ports,
        },
    }


def parse_cidrs(setting: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The ``instance-isolation-pod-cidrs`` Setting: comma or space separated CIDRs.

    Raises ``ValueError`` naming the first entry that is not a network (``10.0.0.1/8`` has host
    bits set and is refused: a typo there would isolate the wrong range). The rule is
    :func:`gpustack_core.settings.parse_cidrs`; this names the Setting in the message.
    """
    try:
        return list(settings.parse_cidrs(setting))
    except settings.SettingError as exc:
        raise ValueError(f"instance-isolation-pod-cidrs: {exc}") from None


def render_isolation_policy(
    namespace: str, cidrs: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network]
) -> dict[str, Any] | None:
    """The namespace's isolation NetworkPolicy, or ``None`` when the Setting is blank.

    Instance Pods may talk to their own namespace and to anything outside the pod CIDRs (how
    NodePort clients arrive), both ways; DNS (53, UDP and TCP) stays open to everywhere; every
    other namespace's Pods are unreachable in both directions.
    """
    if not cidrs:
        return None
    peers: list[dict[str, Any]] = [{"podSelector": {}}]  # the policy's own namespace
    for family, everything in ((4, "0.0.0.0/0"), (6, "::/0")):
        block: dict[str, Any] = {"cidr": everything}
        excluded = sorted(str(c) for c in cidrs if c.version == family)
        if excluded:
            block["except"] = excluded
        peers.append({"ipBlock": block})
    dns = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": ISOLATION_POLICY,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
        },
        "spec": {
            "podSelector": {"matchLabels": {TYPE_LABEL: INSTANCES_TYPE}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": peers}],
            "egress": [{"to": peers}, {"ports": dns}],
        },
    }
