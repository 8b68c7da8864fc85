"""Each kind's write rules, kept as kube-apiserver's registry keeps them: by kind.

:func:`strategy_for` answers the :class:`~.base.Strategy` of a served resource: the kind's own
where :data:`STRATEGIES` has one (by ``(group, kind)``), the generic one otherwise (object
meta, and a custom resource's schema). To give a kind rules of its own, subclass
:class:`~.base.Strategy` (overriding only the stages it changes) and add it to
:data:`STRATEGIES`; ``docs/scenarios.md`` (the cluster stand-in) says more.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from gpustack_simulator.cluster import admission, nfd
from gpustack_simulator.cluster.resources import CRD, NODE, POD
from gpustack_simulator.cluster.services import SERVICE
from gpustack_simulator.cluster.strategies.base import Strategy
from gpustack_simulator.cluster.strategies.core import (
    EventStrategy,
    NamespaceStrategy,
    NodeStrategy,
    ServiceStrategy,
)
from gpustack_simulator.cluster.strategies.extensions import (
    CrdStrategy,
    NodeFeatureStrategy,
    WebhookConfigurationStrategy,
)
from gpustack_simulator.cluster.strategies.pods import PodStrategy

if TYPE_CHECKING:
    from gpustack_simulator.cluster.resources import Resource

GENERIC: Final = Strategy()
"""Every kind without rules of its own: ConfigMaps, Secrets, Leases, custom resources."""

STRATEGIES: Final[Mapping[tuple[str, str], Strategy]] = {
    ("", POD): PodStrategy(),
    ("", SERVICE): ServiceStrategy(),
    ("", "Namespace"): NamespaceStrategy(),
    ("", NODE): NodeStrategy(),
    ("", "Event"): EventStrategy(),
    ("apiextensions.k8s.io", CRD): CrdStrategy(),
    (admission.GROUP, admission.MUTATING): WebhookConfigurationStrategy(),
    (admission.GROUP, admission.VALIDATING): WebhookConfigurationStrategy(),
    ("nfd.k8s-sigs.io", nfd.NODE_FEATURE): NodeFeatureStrategy(),
}
"""The kinds with rules of their own, by ``(group, kind)``."""


def strategy_for(resource: Resource) -> Strategy:
    """The strategy of ``resource``'s kind: its own, or the generic one."""
    return STRATEGIES.get((resource.group, resource.kind), GENERIC)


__all__ = ["GENERIC", "STRATEGIES", "Strategy", "strategy_for"]
