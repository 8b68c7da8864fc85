"""The InstanceType API (``worker.gpustack.ai/v1alpha1``, cluster-scoped): what an Instance names.

An Instance's ``spec.type`` names one. The Instance controller reads the manufacturer, product
and sliceability from it to render the accelerator request, and its ``status.entrance`` (the
LocalQueue) to put the Pod in Kueue's line. An administrator can author one by hand today; the
Kueue chain derives them from the nodes later (``shared/spec/instancetype-walkthrough.md``).
Field names are the reference operator's (``shared/reference/operator-half.md``).
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from msgspec import Meta

from gpustack_core.decoding import convert
from gpustack_core.devices import ProfileCount
from gpustack_core.instance import Quantity, quantity_meta
from gpustack_core.wire import Wire

KIND: Final = "InstanceType"
PLURAL: Final = "instancetypes"
QUEUE_ENTRANCE_LABEL: Final = "schedule.gpustack.ai/queue-entrance"
"""The LocalQueue an InstanceType's Pods wait in, also on ``status.entrance``."""


class LogicalSlicedFeature(Wire, frozen=True, kw_only=True):
    """Software slicing the type's accelerators offer."""

    max_size: Annotated[int, Meta(ge=0, description="Slices per accelerator (0: none).")] = 0
    cores_percentage_overcommit: Annotated[
        bool, Meta(description="Whether slices' compute caps may sum above 100 %.")
    ] = False
    memory_percentage_step: Annotated[
        int, Meta(ge=0, description="The granularity of a slice's memory share, in %.")
    ] = 0


class PhysicalSlicedFeature(Wire, frozen=True, kw_only=True):
    """Hardware partitioning the type's accelerators offer."""

    max_size: Annotated[int, Meta(ge=0, description="Partitions per accelerator (0: none).")] = 0


class Feature(Wire, frozen=True, kw_only=True):
    """What fractions of an accelerator the type can grant."""

    logical_sliced: LogicalSlicedFeature = LogicalSlicedFeature()
    physical_sliced: PhysicalSlicedFeature = PhysicalSlicedFeature()


class UnitResources(Wire, frozen=True, kw_only=True):
    """CPU, RAM and storage that come with one accelerator of the type."""

    cpu: Annotated[Quantity, quantity_meta("CPU per unit.")] | None = None
    ram: Annotated[Quantity, quantity_meta("Memory per unit.")] | None = None
    local_storage: Annotated[Quantity, quantity_meta("Storage per unit.")] | None = None


class InstanceTypeSpec(Wire, frozen=True, kw_only=True):
    """What an Instance of this type gets and where it may run.

    Immutable after creation but for ``displayName`` and ``inactive`` (the InstanceType
    webhook, :mod:`gpustack_core.instancetype_rules`): a pool re-sized or re-pointed under
    running Instances would leave them on what they no longer match, so that is delete and
    create again.
    """

    display_name: Annotated[
        str, Meta(description="A name people read; may change, as inactive may.")
    ] = ""
    acceleratable: Annotated[bool, Meta(description="Whether the type holds accelerators.")] = False
    accelerator_group: Annotated[
        str, Meta(description="The accelerator key, e.g. nvidia-a10g.")
    ] = ""
    general_group: Annotated[str, Meta(description="The CPU key, or generic.")] = ""
    os: Annotated[str, Meta(description="kubernetes.io/os of its nodes.")] = ""
    arch: Annotated[str, Meta(description="kubernetes.io/arch of its nodes.")] = ""
    manufacturer: Annotated[str, Meta(description="The accelerators' manufacturer.")] = ""
    product: Annotated[str, Meta(description="The accelerators' product, e.g. NVIDIA-A10G.")] = ""
    family: Annotated[str, Meta(description="The accelerators' family, e.g. Ampere.")] = ""
    memory: Annotated[Quantity, quantity_meta("One accelerator's memory.")] | None = None
    cores: Annotated[Quantity, quantity_meta("One accelerator's cores.")] | None = None
    feature: Feature = Feature()
    unit_resources: UnitResources = UnitResources()
    inactive: Annotated[
        bool, Meta(description="Stops every Instance of the type and admits no new ones.")
    ] = False


class Capacity(Wire, frozen=True, kw_only=True):
    """One mode's capacity across the type's pool."""

    capacity: Annotated[Quantity, quantity_meta("In the pool.")] | None = None
    once_max_request: (
        Annotated[Quantity, quantity_meta("The most one Instance may ask.")] | None
    ) = None
    remaining: Annotated[Quantity, quantity_meta("Not yet granted.")] | None = None


class PartitionedCapacity(Capacity, frozen=True, kw_only=True):
    """The partition view, and what is left of each profile the pool offers."""

    remaining_profiles: Annotated[
        tuple[ProfileCount, ...],
        Meta(description="Free partitions per profile; every offered profile, zero included."),
    ] = ()
    """Zero included: "offered but full" is not "not offered"."""


class Summary(Wire, frozen=True, kw_only=True):
    """The status as kubectl get instancetypes prints it: the table's composite cells.

    A CRD's printer column is one JSONPath, which cannot join four views into
    ``1/1 10/10 100/100 0/0``; the controller writes each composite cell here in the same
    status write as the figures it is rendered from, so the table never disagrees with them.
    """

    unit: Annotated[str, Meta(description="UNIT(CPU/RAM)/STORAGE: the unit resources.")] = ""
    accelerator: Annotated[
        str, Meta(description="ACCELERATOR(EX/SH/SL/PT): each view's onceMaxRequest/remaining.")
    ] = ""
    cpu: Annotated[str, Meta(description="CPU: the CPU view's onceMaxRequest/remaining.")] = ""


class InstanceTypeStatus(Wire, frozen=True, kw_only=True):
    """The pool's state, as the scheduling chain computes it."""

    phase: (
        Annotated[Literal["Active", "Inactive"], Meta(description="Active or Inactive.")] | None
    ) = None
    accelerator: Capacity | None = None
    accelerator_shared: Capacity | None = None
    accelerator_sliced: Capacity | None = None
    accelerator_partitioned: PartitionedCapacity | None = None
    cpu: Capacity | None = None
    entrance: Annotated[str, Meta(description="The LocalQueue its Instances' Pods wait in.")] = ""
    summary: Summary | None = None


class InstanceTypeMeta(Wire, frozen=True, kw_only=True):
    """The metadata the controller reads."""

    name: str
    uid: str = ""
    deletion_timestamp: str | None = None
    labels: dict[str, str] = {}


class InstanceType(Wire, frozen=True, kw_only=True):
    """An InstanceType as stored."""

    metadata: InstanceTypeMeta
    spec: InstanceTypeSpec = InstanceTypeSpec()
    status: InstanceTypeStatus = InstanceTypeStatus()

    @property
    def queue(self) -> str:
        """The LocalQueue to label Pods with: the status's entrance, else the label's."""
        return self.status.entrance or self.metadata.labels.get(QUEUE_ENTRANCE_LABEL, "")

    def unavailable(self) -> str | None:
        """Why no Instance may run on this type now (deleting, inactive), or ``None``."""
        if self.metadata.deletion_timestamp:
            return f"InstanceType {self.metadata.name} is being deleted"
        if self.spec.inactive or self.status.phase == "Inactive":
            return f"InstanceType {self.metadata.name} is inactive"
        return None


def instancetype_from_object(obj: dict[str, Any]) -> InstanceType:
    """Decode a stored InstanceType; the ``ContractError`` names it and the field."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name", "?") if isinstance(meta, dict) else "?"
    return convert(obj, InstanceType, what=f"InstanceType {name}")
