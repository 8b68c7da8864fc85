"""The generic strategy: what kube-apiserver's registry does for every kind, and the hooks.

kube-apiserver keeps a kind's rules in its REST *strategy* (``pkg/registry/<group>/<kind>/
strategy.go``), beside a generic store that does what every kind shares (resourceVersion,
uid, generation, finalizers, garbage collection). The stand-in's :class:`ApiServer` is that
store; a :class:`Strategy` is the part one kind changes, at the same points of a write:

1. :meth:`Strategy.prepare_for_create` / :meth:`Strategy.prepare_for_update` — the request
   object made what the kind stores before it is checked (a Pod's status dropped, its requests
   defaulted from its limits);
2. :meth:`Strategy.validate` / :meth:`Strategy.validate_update` — every refusal, as
   ``(field, message, reason)`` causes of one 422 (object meta, the kind's own rules, a
   custom resource's schema);
3. :meth:`Strategy.canonicalize` — what the server fills in once the object is valid (a
   Service's cluster IP and node ports, a Namespace's name label, a CRD's status);
4. :meth:`Strategy.before_commit` — re-done or recorded just before the store write, with
   nothing else running (node ports taken meanwhile, a CRD's resources served);
5. :meth:`Strategy.after_write` / :meth:`Strategy.after_remove` — the controllers that follow
   a write on a cluster, run synchronously here (the node simulator, nfd-master).

The generic strategy serves every kind without one of its own (ConfigMaps, Secrets, Leases,
custom resources); a kind's strategy subclasses it and is registered in
:mod:`gpustack_simulator.cluster.strategies` by ``(group, kind)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from gpustack_simulator.cluster.strategies.meta import Cause, NameRule, subdomain, validate_meta
from gpustack_simulator.cluster.validation import validate as validate_schema

if TYPE_CHECKING:
    from gpustack_simulator.cluster.apiserver import ApiServer, Pending
    from gpustack_simulator.cluster.resources import Resource


class Strategy:
    """A kind's rules at each stage of a write; this base is every kind's shared part."""

    name_rule: ClassVar[NameRule] = subdomain
    """What ``metadata.name`` must be (``ValidateObjectMeta``'s ``nameFn``)."""
    keeps_status_on_create: ClassVar[bool] = False
    """Whether a create through the main resource keeps ``status`` (a Node's kubelet
    registers it with its status; every other kind with a status subresource drops it)."""

    def prepare_for_create(self, resource: Resource, obj: dict[str, Any]) -> None:
        """Make the request what a create stores, before validation (``PrepareForCreate``)."""
        if resource.status and not self.keeps_status_on_create:
            obj.pop("status", None)

    def prepare_for_update(
        self, resource: Resource, obj: dict[str, Any], old: Mapping[str, Any]
    ) -> None:
        """Make an update's object what the kind stores, before validation.

        The server's defaulting at decode; the store has already kept ``status`` and its own
        fields.
        """

    def validate(self, resource: Resource, obj: dict[str, Any]) -> list[Cause]:
        """Every refusal of a new object: its meta, then (a custom resource) its schema.

        A custom resource is pruned in place to what its schema declares, as the API server
        stores it.
        """
        causes = validate_meta(obj, type(self).name_rule)
        if resource.schema is not None:
            causes += [
                (c.field, c.message, c.reason) for c in validate_schema(obj, resource.schema)
            ]
        return causes

    def validate_update(
        self, resource: Resource, obj: dict[str, Any], old: Mapping[str, Any]
    ) -> list[Cause]:
        """Every refusal of an update: what the kind forbids to change, then :meth:`validate`."""
        return self.validate(resource, obj)

    def canonicalize(
        self,
        api: ApiServer,
        resource: Resource,
        obj: dict[str, Any],
        previous: Mapping[str, Any] | None,
    ) -> None:
        """What the server fills in once the object is valid (``previous``: the stored one)."""

    def before_commit(self, api: ApiServer, pending: Pending) -> None:
        """Just before the store write, nothing else running between this and the write."""

    def after_write(self, api: ApiServer, resource: Resource, stored: Mapping[str, Any]) -> None:
        """What follows a stored write on a cluster (its controllers), run synchronously."""

    def after_remove(self, api: ApiServer, resource: Resource, gone: Mapping[str, Any]) -> None:
        """What follows the object leaving the store (before garbage collection)."""

    def graceful(self, api: ApiServer, obj: Mapping[str, Any], options: Mapping[str, Any]) -> bool:
        """Whether a delete waits for someone to finish it (a bound Pod's kubelet)."""
        return False
