"""One InstanceType's status from the flavors its pool selects and the member nodes' ledgers.

The pool is the type's spec read as a :class:`~gpustack_core.poolnames.PoolIdentity`, its
members the flavors that identity selects (:func:`gpustack_core.derive.members`) — never a list
remembered at creation — so a derived type, a collapsed type kept after CPU awareness flipped on
and a custom type an administrator wrote are reported the same way, and two siblings on one card
(the walkthrough's §4) show the same figures.

An accelerated pool's four views come from its member nodes' ``Devices`` (spec: what each card
offers; status: what Pods hold); its CPU view is ``0/0``, as its queue covers credits, not CPU. A
CPU pool has no accelerator views; its CPU view is its member nodes' cores less what its own
ClusterQueue has reserved (nothing where no queue exists: then nothing reaches the pool through
Kueue). The phase is ``Inactive`` exactly while the spec says ``inactive``.

Pure: the controller hands it what its caches hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpustack_core.derive import CPU_RESOURCE, identity_of, member_nodes, members, node_cores
from gpustack_core.instancetype import InstanceType, InstanceTypeStatus
from gpustack_core.poolnames import entrance_name
from gpustack_core.pools import Flavor
from gpustack_core.typestatus import instancetype_status
from gpustack_core.views import NodeDevices, View, Views, accelerator_views, cpu_view
from gpustack_worker.instancetypes.observed import reserved


def type_status(
    itype: InstanceType,
    flavors: Sequence[Flavor],
    devices: Mapping[str, NodeDevices],
    queue: Mapping[str, Any] | None,
) -> InstanceTypeStatus:
    """The status ``itype`` is written with now.

    ``flavors``: every flavor the managed nodes form; ``devices``: the nodes' ``Devices`` by
    node name (a member node without one offers nothing yet); ``queue``: the type's
    ClusterQueue as stored, if any.
    """
    pool = identity_of(itype.spec)
    found = members(pool, flavors)
    if pool.acceleratable:
        nodes = [devices[n] for n in member_nodes(found) if n in devices]
        views, cpu = accelerator_views(nodes, pool.accelerator_group), View()
    else:
        views, cpu = Views(), cpu_view(node_cores(found), reserved(queue, CPU_RESOURCE))
    return instancetype_status(
        unit=itype.spec.unit_resources,
        views=views,
        cpu=cpu,
        entrance=entrance_name(itype.metadata.name),
        phase="Inactive" if itype.spec.inactive else "Active",
    )
