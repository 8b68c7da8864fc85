"""The Instance API (``worker.gpustack.ai``): one set of structs for CRD, OpenAPI and controller.

An Instance is a container workspace backed by a Pod (``shared/spec/gpu-instances.md``). These
structs are the only description of its fields: the CRD's structural schema and the worker's
OpenAPI documents are generated from them (``gpustack_worker.openapi``), and the controller
decodes stored objects into them, so a field added here is published, validated and read by
every surface at once — nothing is copied by hand. Field names are the reference operator's
wire contract (``shared/reference/operator-half.md``, "Instance").

Schema-only facts (descriptions, patterns, bounds, enums, server-side defaults, list-map keys)
ride on ``Annotated[…, Meta(…)]``; ``x-default`` marks a default the API server applies (plain
struct defaults only mean "absent" and are never published as defaults).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

from msgspec import Meta

from gpustack_core.decoding import convert
from gpustack_core.wire import Wire

KIND: Final = "Instance"
PLURAL: Final = "instances"

Phase = Literal["Starting", "Ready", "Stopping", "Stopped", "Deleting"]
"""``status.phase`` values, in lifecycle order."""

DEFAULT_VOLUME_MOUNT: Final = "/workspace"
"""Where the workspace volume is mounted when ``spec.volumeMount`` is absent."""

_QUANTITY_PATTERN: Final = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


def quantity_meta(description: str) -> Meta:
    """A ``resource.Quantity`` as controller-gen writes it: ``8``, ``"500m"`` and ``64Gi``."""
    return Meta(
        description=description,
        extra_json_schema={"pattern": _QUANTITY_PATTERN, "x-kubernetes-int-or-string": True},
    )


Quantity = int | str
"""A Kubernetes quantity as stored: an integer or its string spelling."""

AbsolutePath = Annotated[str, Meta(pattern="^/")]
PortNumber = Annotated[int, Meta(ge=1, le=65535, extra_json_schema={"format": "int32"})]
Protocol = Annotated[
    Literal["TCP", "UDP", "SCTP"],
    Meta(description="The port's protocol.", extra_json_schema={"x-default": "TCP"}),
]


def _list_map(description: str, *keys: str) -> Meta:
    return Meta(
        description=description,
        extra_json_schema={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [*keys]},
    )


def _exactly_one(description: str, *names: str) -> Meta:
    """``oneOf`` of ``required`` alone: structural, and enforced by the API server itself."""
    return Meta(
        description=description,
        extra_json_schema={"oneOf": [{"required": [name]} for name in names]},
    )


class LocalObject(Wire, frozen=True, kw_only=True):
    """A named object in the Instance's namespace."""

    name: Annotated[str, Meta(description="The object's name, in the Instance's namespace.")]


class Port(Wire, frozen=True, kw_only=True):
    """A container port reached through the Instance's NodePort Service."""

    port: Annotated[PortNumber, Meta(description="The container port.")]
    protocol: Protocol = "TCP"
    name: Annotated[str, Meta(description="An optional name for the port.")] = ""


class StatusPort(Wire, frozen=True, kw_only=True):
    """A ``spec.ports`` entry with the node port its Service allocated."""

    port: Annotated[PortNumber, Meta(description="The container port.")]
    protocol: Protocol = "TCP"
    name: Annotated[str, Meta(description="An optional name for the port.")] = ""
    node_port: Annotated[PortNumber, Meta(description="The node port allocated for it.")] | None = (
        None
    )


class EnvVar(Wire, frozen=True, kw_only=True):
    """One environment variable of the workload container."""

    name: Annotated[str, Meta(description="The variable's name.", min_length=1)]
    value: Annotated[str, Meta(description="Its value.")] = ""


class Resources(Wire, frozen=True, kw_only=True):
    """What the Instance may use: CPU, RAM, local storage and its accelerator request.

    The accelerator fields choose the mode (``operator-half.md``, "Through the Instance API"):
    ``accelerator: N`` alone is Exclusive; ``accelerator: 1`` with a memory percentage is
    Sliced; ``accelerator: 1`` with a partition profile is Partitioned. Shared cannot be
    requested through an Instance.
    """

    cpu: Annotated[Quantity, quantity_meta("CPU limit (cores).")] | None = None
    ram: Annotated[Quantity, quantity_meta("Memory limit.")] | None = None
    local_storage: Annotated[Quantity, quantity_meta("Ephemeral storage limit.")] | None = None
    accelerator: (
        Annotated[Quantity, quantity_meta("How many accelerators (1 when sliced).")] | None
    ) = None
    accelerator_sliced_memory_percentage: (
        Annotated[int, Meta(ge=1, le=100, description="A slice's share of the card's memory.")]
        | None
    ) = None
    accelerator_sliced_cores_percentage: (
        Annotated[int, Meta(ge=1, le=100, description="A slice's compute cap (default 100).")]
        | None
    ) = None
    accelerator_partitioned_profile: Annotated[
        str, Meta(description="A hardware partition profile, e.g. 1g.10gb.")
    ] = ""

    def limits(self) -> dict[str, Quantity]:
        """CPU, RAM and storage spelled as a container's limits (``memory``, …), set ones only."""
        values = {"cpu": self.cpu, "memory": self.ram, "ephemeral-storage": self.local_storage}
        return {name: value for name, value in values.items() if value is not None}


def resources_from_limits(limits: Mapping[str, Quantity]) -> Resources:
    """The inverse of :meth:`Resources.limits` for the three core resources; others ignored."""

    def pick(name: str) -> Quantity | None:
        value = limits.get(name)
        return str(value) if isinstance(value, float) else value

    return Resources(cpu=pick("cpu"), ram=pick("memory"), local_storage=pick("ephemeral-storage"))


def resources_of(obj: Mapping[str, Any], *, what: str) -> Resources:
    """An Instance object's ``spec.resources``, decoded (``ContractError`` names the field)."""
    spec = obj.get("spec")
    raw = spec.get("resources") if isinstance(spec, Mapping) else None
    return convert(raw or {}, Resources, what=f"{what}: spec.resources")


class Ephemeral(Wire, frozen=True, kw_only=True):
    """A workspace that lives as long as the Pod."""

    capacity: Annotated[Quantity, quantity_meta("The workspace's size.")] | None = None


class Volume(Wire, frozen=True, kw_only=True):
    """The workspace volume: exactly one source."""

    ephemeral: Ephemeral | None = None
    persistent: (
        Annotated[LocalObject, Meta(description="A PersistentVolumeClaim holding the workspace.")]
        | None
    ) = None


HostPathType = Literal[
    "", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice",
    "BlockDevice",
]  # fmt: skip


class HostPath(Wire, frozen=True, kw_only=True):
    """A path on the node; gated by a Setting."""

    path: Annotated[AbsolutePath, Meta(description="The path on the node.")]
    type: Annotated[HostPathType, Meta(description="What must be at the path.")] = ""


class AdditionalVolume(Wire, frozen=True, kw_only=True):
    """A further mount into the workload container only: exactly one source."""

    mount_path: Annotated[AbsolutePath, Meta(description="An absolute, canonical path.")]
    sub_path: Annotated[str, Meta(description="Mount only this path of the source.")] = ""
    read_only: Annotated[bool, Meta(description="Mount read-only.")] = False
    persistent: Annotated[LocalObject, Meta(description="A PersistentVolumeClaim.")] | None = None
    config_map: Annotated[LocalObject, Meta(description="A ConfigMap.")] | None = None
    secret: Annotated[LocalObject, Meta(description="A Secret.")] | None = None
    host_path: HostPath | None = None


_SOURCES = ("persistent", "configMap", "secret", "hostPath")


class InstanceSpec(Wire, frozen=True, kw_only=True):
    """What the Instance runs; editable while stopped."""

    display_name: Annotated[str, Meta(description="A name for people.")] = ""
    description: Annotated[str, Meta(description="What the Instance is for.")] = ""
    type: Annotated[str, Meta(description="The InstanceType whose pool schedules it.")] = ""
    image: Annotated[str, Meta(description="The workload container's image.", min_length=1)]
    image_pull_policy: (
        Annotated[
            Literal["Always", "IfNotPresent", "Never"],
            Meta(description="When the kubelet pulls the image."),
        ]
        | None
    ) = None
    image_pull_secret: Annotated[
        str, Meta(description="A Secret with registry credentials, in the namespace.")
    ] = ""
    command: Annotated[tuple[str, ...], Meta(description="The workload container's command.")] = ()
    env: Annotated[tuple[EnvVar, ...], _list_map("The workload's environment.", "name")] = ()
    privileged: Annotated[bool, Meta(description="Run privileged; gated by a Setting.")] = False
    ports: Annotated[
        tuple[Port, ...],
        _list_map("Ports reached through the Instance's NodePort Service.", "port", "protocol"),
    ] = ()
    resources: Resources = Resources()
    volume: Annotated[Volume, _exactly_one("The workspace volume.", "ephemeral", "persistent")] = (
        Volume()
    )
    volume_mount: Annotated[
        AbsolutePath, Meta(description=f"Where the workspace is mounted ({DEFAULT_VOLUME_MOUNT}).")
    ] = ""
    ssh_public_key: (
        Annotated[LocalObject, Meta(description="A Secret holding authorized SSH keys.")] | None
    ) = None
    stop: Annotated[
        bool,
        Meta(
            description="Delete the Pod but keep the Instance and its Service.",
            extra_json_schema={"x-default": False},
        ),
    ] = False
    node_name: Annotated[str, Meta(description="Pins the Instance to this node.")] = ""
    additional_volumes: Annotated[
        tuple[
            Annotated[AdditionalVolume, _exactly_one("A further mount.", *_SOURCES)],
            ...,
        ],
        _list_map("Further mounts into the workload container only.", "mountPath"),
    ] = ()


class Address(Wire, frozen=True, kw_only=True):
    """One IP address, as ``status.hostIPs``/``podIPs`` on a Pod."""

    ip: Annotated[str, Meta(description="The address.")]


class Allocation(Wire, frozen=True, kw_only=True):
    """One accelerator the Instance's workload holds, as its Pod's annotation records it."""

    manufacturer: Annotated[str, Meta(description="The card's manufacturer.")]
    id: Annotated[str, Meta(description="The card's id.")]
    index: Annotated[int, Meta(ge=0, description="The card's index on the node.")] = 0
    mode: Annotated[str, Meta(description="Exclusive, Shared, Sliced or Partitioned.")] = ""
    allocated: Annotated[int, Meta(ge=0, description="Allocation units (1,600,000 = 1).")] = 0
    partition: Annotated[str, Meta(description="The partition's own id, if one.")] = ""


class Condition(Wire, frozen=True, kw_only=True):
    """``metav1.Condition``, as controller-gen renders it for every operator's CRD."""

    type: Annotated[
        str,
        Meta(
            description="The condition's type, in CamelCase.",
            max_length=316,
            pattern=(
                r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
            ),
        ),
    ]
    status: Annotated[
        Literal["True", "False", "Unknown"], Meta(description="The condition's status.")
    ]
    reason: Annotated[
        str,
        Meta(
            description="A CamelCase reason for the last transition.",
            min_length=1,
            max_length=1024,
            pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        ),
    ]
    message: Annotated[str, Meta(description="A human-readable explanation.", max_length=32768)]
    last_transition_time: Annotated[
        str,
        Meta(
            description="When the condition last changed status.",
            extra_json_schema={"format": "date-time"},
        ),
    ]
    observed_generation: (
        Annotated[
            int,
            Meta(
                ge=0,
                description="The generation the condition was set from.",
                extra_json_schema={"format": "int64"},
            ),
        ]
        | None
    ) = None


class InstanceStatus(Wire, frozen=True, kw_only=True):
    """What the operator observed."""

    phase: (
        Annotated[Phase, Meta(description="Starting, Ready, Stopping, Stopped or Deleting.")] | None
    ) = None
    phase_message: Annotated[str, Meta(description="Why the Instance is in its phase.")] = ""
    observed_generation: (
        Annotated[
            int,
            Meta(
                ge=0,
                description="The spec generation the status describes.",
                extra_json_schema={"format": "int64"},
            ),
        ]
        | None
    ) = None
    node_name: Annotated[str, Meta(description="The node the Instance runs on.")] = ""
    pod_name: Annotated[str, Meta(description="The backing Pod, in the namespace.")] = ""
    host_ips: Annotated[
        tuple[Address, ...],
        Meta(
            description="The node's addresses: external first, then internal.",
            extra_json_schema={"x-kubernetes-list-type": "atomic"},
        ),
    ] = ()
    pod_ips: Annotated[
        tuple[Address, ...],
        Meta(
            description="The backing Pod's addresses.",
            extra_json_schema={"x-kubernetes-list-type": "atomic"},
        ),
    ] = ()
    access_addresses: Annotated[
        tuple[str, ...],
        Meta(
            description="host:nodePort pairs a client reaches the Instance's ports at.",
            extra_json_schema={"x-kubernetes-list-type": "atomic"},
        ),
    ] = ()
    ports: Annotated[
        tuple[StatusPort, ...],
        _list_map("The node port of each spec.ports entry.", "port", "protocol"),
    ] = ()
    allocations: Annotated[
        tuple[Allocation, ...],
        Meta(
            description="The accelerators the workload holds.",
            extra_json_schema={"x-kubernetes-list-type": "atomic"},
        ),
    ] = ()
    conditions: Annotated[
        tuple[Condition, ...], _list_map("The Instance's conditions.", "type")
    ] = ()


class InstanceMeta(Wire, frozen=True, kw_only=True):
    """The metadata the controller reads."""

    name: str
    namespace: str = ""
    uid: str = ""
    generation: int = 0
    resource_version: str = ""
    deletion_timestamp: str | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    finalizers: tuple[str, ...] = ()


class Instance(Wire, frozen=True, kw_only=True):
    """An Instance as stored (``v1alpha1``) and served (``v1``)."""

    metadata: InstanceMeta
    spec: InstanceSpec
    status: InstanceStatus = InstanceStatus()


def instance_from_object(obj: dict[str, Any]) -> Instance:
    """Decode a stored Instance; the ``ContractError`` names the Instance and the field."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = f"{meta.get('namespace', '')}/{meta.get('name', '')}" if isinstance(meta, dict) else "?"
    return convert(obj, Instance, what=f"Instance {name}")
