"""An InstanceType's ``status`` from its views: the figures, and the table cells rendered from them.

``kubectl get instancetypes`` prints ``ENTRANCE UNIT(CPU/RAM)/STORAGE ACCELERATOR(EX/SH/SL/PT)
CPU PHASE`` (the walkthrough's tables). The composite cells are rendered here, from the same
:class:`~gpustack_core.views.Views` the figures are, and written together with them in one
status write (``status.summary``), so a table row can never disagree with the object's figures.
Each accelerator group and the CPU cell read ``onceMaxRequest/remaining``, the figures a user
sizes a request by; ``capacity`` stays in the object.
"""

from __future__ import annotations

from typing import Final, Literal

from gpustack_core.devices import ProfileCount
from gpustack_core.instancetype import (
    Capacity,
    InstanceTypeStatus,
    PartitionedCapacity,
    Summary,
    UnitResources,
)
from gpustack_core.quantity import canonical_quantity
from gpustack_core.views import View, Views

ABSENT: Final = "-"
"""A unit figure the type does not state: shown as absent, never as ``0``."""


def _quantity(value: int | str | None) -> str:
    return ABSENT if value is None or value == "" else str(value)


def unit_text(unit: UnitResources) -> str:
    """``8/64Gi/100Gi``: the unit's CPU, RAM and local storage as the type states them."""
    return "/".join(_quantity(v) for v in (unit.cpu, unit.ram, unit.local_storage))


def _pair(view: View, *, millicores: bool = False) -> str:
    spell = _cores if millicores else str
    return f"{spell(view.once_max_request)}/{spell(view.remaining)}"


def _cores(millicores: int) -> str:
    return canonical_quantity(f"{millicores}m")


def accelerator_text(views: Views) -> str:
    """``1/1 10/10 100/100 0/0``: EX, SH, SL and PT, each ``onceMaxRequest/remaining``."""
    return " ".join(
        _pair(v) for v in (views.exclusive, views.shared, views.sliced, views.partitioned)
    )


def cpu_text(view: View) -> str:
    """``48/72``: the CPU view's ``onceMaxRequest/remaining`` in cores (``500m`` if fractional)."""
    return _pair(view, millicores=True)


def _capacity(view: View) -> Capacity:
    return Capacity(
        capacity=str(view.capacity),
        once_max_request=str(view.once_max_request),
        remaining=str(view.remaining),
    )


def instancetype_status(
    *,
    unit: UnitResources,
    views: Views,
    cpu: View,
    entrance: str,
    phase: Literal["Active", "Inactive"],
) -> InstanceTypeStatus:
    """The status an InstanceType is written with: four views, CPU, entrance, phase, cells.

    ``views`` is all-zero for a CPU pool and ``cpu`` all-zero for an accelerated one (its
    queue covers credits, not CPU), which is what the walkthrough's ``0/0`` cells are.
    """
    return InstanceTypeStatus(
        phase=phase,
        accelerator=_capacity(views.exclusive),
        accelerator_shared=_capacity(views.shared),
        accelerator_sliced=_capacity(views.sliced),
        accelerator_partitioned=PartitionedCapacity(
            capacity=str(views.partitioned.capacity),
            once_max_request=str(views.partitioned.once_max_request),
            remaining=str(views.partitioned.remaining),
            remaining_profiles=tuple(
                ProfileCount(name=name, count=count) for name, count in views.remaining_profiles
            ),
        ),
        cpu=Capacity(
            capacity=_cores(cpu.capacity),
            once_max_request=_cores(cpu.once_max_request),
            remaining=_cores(cpu.remaining),
        ),
        entrance=entrance,
        summary=Summary(
            unit=unit_text(unit), accelerator=accelerator_text(views), cpu=cpu_text(cpu)
        ),
    )
