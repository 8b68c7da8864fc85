"""The resources the stand-in serves, built-in and registered at run time through CRDs.

One table answers every question a route asks of a path: which stored kind it names, whether
it is namespaced, whether it has a ``/status`` subresource, whether strategic merge applies and
which structural schema validates it. Discovery is generated from the same table, so a CRD
created through the API appears in ``/apis`` at once, as it does on a cluster.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpustack_core import contract
from gpustack_simulator.cluster.services import ENDPOINTS, SERVICE

READ = ("get", "list", "watch")
WRITE = ("create", "update", "patch", "delete")
ALL_VERBS = (*READ, *WRITE)
CRD = "CustomResourceDefinition"
POD, NODE, INSTANCE, CONFIGMAP = "Pod", "Node", "Instance", "ConfigMap"


@dataclass(frozen=True)
class Resource:
    """One served resource: where it lives in the API and how the store keys it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    status: bool = True
    """Has a ``/status`` subresource (the main resource then ignores ``status`` writes)."""
    strategic: bool = True
    """Built-in kinds take strategic merge patches; custom resources refuse them (415)."""
    schema: Mapping[str, Any] | None = None
    """The CRD version's ``openAPIV3Schema``; ``None`` for built-ins (not validated here)."""
    verbs: tuple[str, ...] = ALL_VERBS
    spec_key: str | None = "spec"
    """The field whose change bumps ``metadata.generation``; ``None``: every non-metadata one."""

    @property
    def api_version(self) -> str:
        """``v1`` for the core group, ``group/version`` otherwise."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def discovery(self) -> dict[str, Any]:
        """The ``APIResource`` entry for this resource (and its status subresource)."""
        entry: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular or self.kind.lower(),
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": [*self.verbs, "deletecollection"] if "delete" in self.verbs else [*self.verbs],
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        return entry


def _core(plural: str, kind: str, **kw: Any) -> Resource:
    return Resource("", "v1", plural, kind, kw.pop("namespaced", True), **kw)


BUILTIN: tuple[Resource, ...] = (
    _core("pods", POD, singular="pod", short_names=("po",)),
    _core("services", SERVICE, singular="service", short_names=("svc",)),
    _core("endpoints", ENDPOINTS, singular="endpoints", short_names=("ep",), status=False),
    _core("configmaps", CONFIGMAP, singular="configmap", short_names=("cm",), status=False),
    _core("secrets", "Secret", singular="secret", status=False),
    _core("events", "Event", singular="event", short_names=("ev",), status=False),
    _core("namespaces", "Namespace", singular="namespace", short_names=("ns",), namespaced=False),
    _core("nodes", NODE, singular="node", short_names=("no",), namespaced=False),
    Resource(
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        "NetworkPolicy",
        True,
        singular="networkpolicy",
        short_names=("netpol",),
        status=False,
    ),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", True, singular="lease", status=False),
    Resource(
        "node.k8s.io",
        "v1",
        "runtimeclasses",
        "RuntimeClass",
        False,
        singular="runtimeclass",
        status=False,
    ),
    Resource(
        "nfd.k8s-sigs.io",
        "v1alpha1",
        "nodefeatures",
        "NodeFeature",
        True,
        singular="nodefeature",
        status=False,
        strategic=False,
    ),
    Resource(
        contract.API_GROUP,
        contract.CRD_VERSION,
        "instances",
        INSTANCE,
        True,
        singular="instance",
        short_names=("inst",),
        strategic=False,
    ),
    Resource(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        False,
        singular="mutatingwebhookconfiguration",
        status=False,
        spec_key=None,
    ),
    Resource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        False,
        singular="validatingwebhookconfiguration",
        status=False,
        spec_key=None,
    ),
    Resource(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        CRD,
        False,
        singular="customresourcedefinition",
        short_names=("crd", "crds"),
    ),
)


class CrdError(ValueError):
    """A CustomResourceDefinition the stand-in cannot serve (answered 422)."""


def from_crd(crd: Mapping[str, Any]) -> list[Resource]:
    """The served versions of a CRD as resources; ``CrdError`` naming the field otherwise."""
    spec = crd.get("spec")
    if not isinstance(spec, Mapping):
        raise CrdError("spec: Required value")
    names = spec.get("names") or {}
    group, plural, kind = spec.get("group"), names.get("plural"), names.get("kind")
    for path, value in (
        ("spec.group", group),
        ("spec.names.plural", plural),
        ("spec.names.kind", kind),
    ):
        if not isinstance(value, str) or not value:
            raise CrdError(f"{path}: Required value")
    name = (crd.get("metadata") or {}).get("name")
    if name != f"{plural}.{group}":
        raise CrdError(
            f'metadata.name: Invalid value: "{name}": must be spec.names.plural+"."+spec.group'
        )
    scope = spec.get("scope", "Namespaced")
    if scope not in {"Namespaced", "Cluster"}:
        raise CrdError(f'spec.scope: Unsupported value: "{scope}"')
    found = []
    for version in spec.get("versions") or ():
        if not version.get("served", True):
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        found.append(
            Resource(
                str(group),
                str(version["name"]),
                str(plural),
                str(kind),
                scope == "Namespaced",
                singular=str(names.get("singular", "")),
                short_names=tuple(names.get("shortNames") or ()),
                status="status" in (version.get("subresources") or {}),
                strategic=False,
                schema=schema,
            )
        )
    if not found:
        raise CrdError("spec.versions: Invalid value: no version is served")
    return found


@dataclass
class Registry:
    """Every served resource by (group, version, plural), with the CRDs' added at run time."""

    resources: dict[tuple[str, str, str], Resource] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for resource in BUILTIN:
            self.add(resource)

    def add(self, resource: Resource) -> None:
        """Serve ``resource`` (replacing an earlier definition of the same path)."""
        self.resources[(resource.group, resource.version, resource.plural)] = resource

    def remove_crd(self, group: str, plural: str) -> None:
        """Stop serving every version of a deleted CRD."""
        for key in [k for k in self.resources if k[0] == group and k[2] == plural]:
            del self.resources[key]

    def find(self, group: str, version: str, plural: str) -> Resource | None:
        """The resource a path names, if served."""
        return self.resources.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> Resource | None:
        """The resource an ownerReference or a body's ``apiVersion``/``kind`` names."""
        return next(
            (r for r in self.resources.values() if r.api_version == api_version and r.kind == kind),
            None,
        )

    def groups(self) -> Iterator[tuple[str, list[str]]]:
        """Every non-core group with its versions, preferred (first registered) first."""
        seen: dict[str, list[str]] = {}
        for group, version, _ in self.resources:
            if group and version not in seen.setdefault(group, []):
                seen[group].append(version)
        yield from seen.items()

    def listed(self, group: str, version: str) -> list[Resource]:
        """The resources of one group version, as its discovery document lists them."""
        return [r for (g, v, _), r in self.resources.items() if g == group and v == version]
