"""The Pod strategy: quantities stored canonically, a spec that may barely change, run by a node.

Besides object meta and ``ValidatePodUpdate`` (``corerules``), a Pod's spec is checked where
kube-apiserver's ``ValidatePodSpec`` refuses what the project's controllers and webhooks could
write by mistake, in its words:

- container names (init containers' and containers' together) and volume names are unique
  (``Duplicate value``);
- a container's ``volumeMounts`` name a volume of the Pod (``Not found``) and no two share a
  ``mountPath`` (``Invalid value: "/data": must be unique``);
- resources (``ValidateResourceRequirements``): no quantity is negative; an extended resource
  (a name with a domain outside ``kubernetes.io``) is a whole number (``must be an integer``)
  and may not be overcommitted — its request equals its limit, and a request needs a limit; a
  native resource's request is at most its limit. A request left out defaults to its limit
  before these checks, as the server defaults it when it decodes the Pod.

The value a message shows is the quantity as the server writes it (``"0.5"`` shows as
``"500m"``). Quantities that do not parse are left to the rest of the write path.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from gpustack_core import fielderrors
from gpustack_core.quantity import QuantityError, canonical_quantity, parse_quantity
from gpustack_simulator.cluster import corerules
from gpustack_simulator.cluster.strategies.base import Strategy
from gpustack_simulator.cluster.strategies.meta import Cause, cause
from gpustack_simulator.podstatus import canonical_pod_quantities, qos_class

if TYPE_CHECKING:
    from gpustack_simulator.cluster.apiserver import ApiServer, Pending
    from gpustack_simulator.cluster.resources import Resource

NATIVE_DOMAIN = "kubernetes.io/"


class PodStrategy(Strategy):
    """A Pod: see the module docstring."""

    def prepare_for_create(self, resource: Resource, obj: dict[str, Any]) -> None:
        """No status from the client; requests defaulted from limits, quantities canonical."""
        super().prepare_for_create(resource, obj)
        canonical_pod_quantities(obj)

    def prepare_for_update(
        self, resource: Resource, obj: dict[str, Any], old: Mapping[str, Any]
    ) -> None:
        """Requests defaulted and quantities canonical, as the server decodes every body."""
        canonical_pod_quantities(obj)

    def validate(self, resource: Resource, obj: dict[str, Any]) -> list[Cause]:
        """Object meta, then the spec (``ValidatePodSpec``, the parts listed above)."""
        return super().validate(resource, obj) + [cause(e) for e in spec_errors(obj)]

    def validate_update(
        self, resource: Resource, obj: dict[str, Any], old: Mapping[str, Any]
    ) -> list[Cause]:
        """``ValidatePodUpdate``: only a few spec fields may change, and the new Pod is valid."""
        return corerules.pod_update(old, obj) + super().validate_update(resource, obj, old)

    def canonicalize(
        self,
        api: ApiServer,
        resource: Resource,
        obj: dict[str, Any],
        previous: Mapping[str, Any] | None,
    ) -> None:
        """Quantities as the server stores them; a new Pod's phase and QoS class."""
        canonical_pod_quantities(obj)
        if "status" not in obj:
            # The QoS class is the API server's, fixed at creation (kube-apiserver refuses
            # a later change): computed from the requests, not BestEffort for every Pod.
            obj["status"] = {"phase": "Pending", "qosClass": qos_class(obj.get("spec") or {})}

    def before_commit(self, api: ApiServer, pending: Pending) -> None:
        """A Pod created through the API is the node simulator's to run."""
        if pending.operation == "CREATE":
            # Even when it names its node already (scenario Pods, put into the store
            # directly, are never adopted).
            api.nodes.managed.add(str(pending.obj["metadata"]["uid"]))

    def after_write(self, api: ApiServer, resource: Resource, stored: Mapping[str, Any]) -> None:
        """The node simulator binds, starts or finishes it; what derives from Pods follows."""
        api.nodes.reconcile(api)
        api.state.pods_changed()

    def after_remove(self, api: ApiServer, resource: Resource, gone: Mapping[str, Any]) -> None:
        """What derives from Pods (the Device Manager Endpoints) follows."""
        api.state.pods_changed()

    def graceful(self, api: ApiServer, obj: Mapping[str, Any], options: Mapping[str, Any]) -> bool:
        """A bound Pod terminates through its kubelet unless the delete asks for no grace."""
        return api.nodes.graceful(obj, options)


def _items(value: Any) -> list[tuple[int, Mapping[str, Any]]]:
    """The objects of a list field, with their indexes (anything else is skipped)."""
    if not isinstance(value, list):
        return []
    return [(i, item) for i, item in enumerate(value) if isinstance(item, Mapping)]


def spec_errors(pod: Mapping[str, Any]) -> list[fielderrors.FieldError]:
    """What ``ValidatePodSpec`` refuses of ``pod``'s spec, of the rules this module keeps."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return []
    errors: list[fielderrors.FieldError] = []
    volumes: set[str] = set()
    for i, volume in _items(spec.get("volumes")):
        name = volume.get("name")
        if isinstance(name, str) and name in volumes:
            errors.append(fielderrors.duplicate(f"spec.volumes[{i}].name", name))
        volumes.add(str(name))
    containers: set[str] = set()
    for key in ("initContainers", "containers"):
        for i, container in _items(spec.get(key)):
            at = f"spec.{key}[{i}]"
            name = container.get("name")
            if isinstance(name, str) and name in containers:
                errors.append(fielderrors.duplicate(f"{at}.name", name))
            containers.add(str(name))
            errors += _mount_errors(container.get("volumeMounts"), volumes, f"{at}.volumeMounts")
            resources = container.get("resources")
            if isinstance(resources, Mapping):
                errors += resource_errors(resources, f"{at}.resources")
    return errors


def _mount_errors(mounts: Any, volumes: set[str], at: str) -> list[fielderrors.FieldError]:
    """``ValidateVolumeMounts``: each names a volume of the Pod, no two at one path."""
    errors: list[fielderrors.FieldError] = []
    paths: set[str] = set()
    for i, mount in _items(mounts):
        name, path = str(mount.get("name") or ""), str(mount.get("mountPath") or "")
        if not name:
            errors.append(fielderrors.required(f"{at}[{i}].name", ""))
        if name not in volumes:
            errors.append(fielderrors.not_found(f"{at}[{i}].name", name))
        if not path:
            errors.append(fielderrors.required(f"{at}[{i}].mountPath", ""))
        if path in paths:
            errors.append(fielderrors.invalid(f"{at}[{i}].mountPath", path, "must be unique"))
        paths.add(path)
    return errors


def is_extended(name: str) -> bool:
    """An extended resource: a domain-prefixed name outside ``kubernetes.io`` (``nvidia.com/gpu``).

    Extended resources are whole numbers and cannot be overcommitted (``IsExtendedResourceName``,
    ``IsOvercommitAllowed``).
    """
    return "/" in name and NATIVE_DOMAIN not in name and not name.startswith("requests.")


def _parsed(amounts: Any) -> dict[str, tuple[Fraction, str]]:
    """Each quantity that parses, by name: its value and the server's spelling."""
    if not isinstance(amounts, Mapping):
        return {}
    parsed: dict[str, tuple[Fraction, str]] = {}
    for name, written in amounts.items():
        try:
            parsed[str(name)] = (parse_quantity(written), canonical_quantity(written))
        except (QuantityError, TypeError, ValueError):
            continue
    return parsed


def resource_errors(resources: Mapping[str, Any], at: str) -> list[fielderrors.FieldError]:
    """``ValidateResourceRequirements``, in its order and words (see the module docstring)."""
    limits, requests = _parsed(resources.get("limits")), _parsed(resources.get("requests"))
    errors: list[fielderrors.FieldError] = []
    for kind, amounts in (("limits", limits), ("requests", requests)):
        for name, (value, shown) in amounts.items():
            field = f"{at}.{kind}[{name}]"
            if value < 0:
                errors.append(
                    fielderrors.invalid(field, shown, "must be greater than or equal to 0")
                )
            if is_extended(name) and value.denominator != 1:
                errors.append(fielderrors.invalid(field, shown, "must be an integer"))
            if kind == "limits":
                continue
            if name not in limits:
                if is_extended(name):
                    errors.append(
                        fielderrors.required(
                            f"{at}.limits", "Limit must be set for non overcommitable resources"
                        )
                    )
                continue
            limit, limit_shown = limits[name]
            if is_extended(name) and value != limit:
                errors.append(
                    fielderrors.invalid(
                        f"{at}.requests", shown, f"must be equal to {name} limit of {limit_shown}"
                    )
                )
            elif value > limit:
                errors.append(
                    fielderrors.invalid(
                        f"{at}.requests",
                        shown,
                        f"must be less than or equal to {name} limit of {limit_shown}",
                    )
                )
    return errors
