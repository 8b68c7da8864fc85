"""Kinds that extend the API server: CRDs, webhook configurations, NFD's NodeFeatures."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpustack_simulator.cluster import admission, nfd
from gpustack_simulator.cluster.resources import CrdError, from_crd
from gpustack_simulator.cluster.strategies.base import Strategy
from gpustack_simulator.cluster.strategies.meta import Cause

if TYPE_CHECKING:
    from gpustack_simulator.cluster.apiserver import ApiServer, Pending
    from gpustack_simulator.cluster.resources import Resource


class CrdStrategy(Strategy):
    """A CustomResourceDefinition: one the stand-in can serve, served once stored."""

    def validate(self, resource: Resource, obj: dict[str, Any]) -> list[Cause]:
        """Object meta, then what keeps the stand-in from serving it (``from_crd``)."""
        causes = super().validate(resource, obj)
        try:
            from_crd(obj)
        except CrdError as exc:
            field, _, message = str(exc).partition(": ")
            causes.append((field, message, "FieldValueInvalid"))
        return causes

    def canonicalize(
        self,
        api: ApiServer,
        resource: Resource,
        obj: dict[str, Any],
        previous: Mapping[str, Any] | None,
    ) -> None:
        """Accepted and established at once (no name conflicts to wait for here)."""
        spec = obj.get("spec") or {}
        obj["status"] = {
            "acceptedNames": dict(spec.get("names") or {}),
            "conditions": [
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"},
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
            ],
            "storedVersions": [v["name"] for v in spec.get("versions") or () if v.get("storage")],
        }

    def before_commit(self, api: ApiServer, pending: Pending) -> None:
        """Its versions are served from the moment it is stored."""
        for served in from_crd(pending.obj):
            api.registry.add(served)

    def after_remove(self, api: ApiServer, resource: Resource, gone: Mapping[str, Any]) -> None:
        """Its resources stop being served."""
        spec = gone.get("spec") or {}
        api.registry.remove_crd(
            str(spec.get("group")), str((spec.get("names") or {}).get("plural"))
        )


class WebhookConfigurationStrategy(Strategy):
    """A Mutating- or ValidatingWebhookConfiguration, checked and defaulted (``admission``)."""

    def validate(self, resource: Resource, obj: dict[str, Any]) -> list[Cause]:
        """Object meta, then the v1 webhook rules."""
        return super().validate(resource, obj) + admission.check_configuration(resource.kind, obj)

    def canonicalize(
        self,
        api: ApiServer,
        resource: Resource,
        obj: dict[str, Any],
        previous: Mapping[str, Any] | None,
    ) -> None:
        """The v1 defaults, so a read-back shows what will be applied."""
        admission.default_configuration(resource.kind, obj)


class NodeFeatureStrategy(Strategy):
    """An NFD NodeFeature: nfd-master puts its labels on its Node (``nfd``)."""

    def after_write(self, api: ApiServer, resource: Resource, stored: Mapping[str, Any]) -> None:
        """Its labels onto the Node it names."""
        nfd.sync(api.store)

    def after_remove(self, api: ApiServer, resource: Resource, gone: Mapping[str, Any]) -> None:
        """Its labels leave the Node."""
        nfd.sync(api.store)
