"""Write semantics of an API server over the stand-in's store: what a controller relies on.

Create, update (PUT), patch and delete for every resource in the registry, with the rules
envtest's kube-apiserver enforces and controllers are written against:

- every write gets the next ``resourceVersion``; an update naming an older one is a 409
  ``Conflict``, a create of an existing name a 409 ``AlreadyExists``;
- the server defaults ``uid``, ``creationTimestamp``, ``generation`` and names from
  ``generateName``; ``metadata.generation`` moves only when the spec does;
- a resource with a ``/status`` subresource ignores ``status`` on its main resource and
  everything but ``status`` on the subresource;
- a delete sets ``deletionTimestamp`` while finalizers remain and removes the object once an
  update clears the last one; ``propagationPolicy`` drives ownerReference garbage collection
  (``Background`` collects dependents after the owner, ``Foreground`` before it, ``Orphan``
  strips the reference instead);
- a custom resource is pruned and validated against its CRD's structural schema (422 with the
  field paths), and a CRD created through the API is served at once;
- what one kind does differently (a Pod's spec that may barely change, a Service's addresses,
  a Namespace's name label, a CRD served once stored, the node simulator after a Pod write) is
  that kind's strategy (``strategies/``), called at the same stages of every write as
  kube-apiserver's registry calls its strategies;
- a write through the API passes the registered admission webhooks (``admission.py``): the
  ``admitted_*`` methods stage it so the webhook calls happen between building the object and
  storing it; the plain methods are the same write without them, for the stand-in's own
  controllers.

Errors are ``Status`` bodies with the API server's reason, code, message and details.
"""

from __future__ import annotations

import copy
import secrets
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpustack_core.status import StatusError, not_found
from gpustack_simulator.cluster import patch as patching
from gpustack_simulator.cluster.admission import Admission, Attributes, options_for
from gpustack_simulator.cluster.kubelet import NodeSimulator
from gpustack_simulator.cluster.resources import Resource
from gpustack_simulator.cluster.state import ClusterState
from gpustack_simulator.cluster.strategies import strategy_for
from gpustack_simulator.cluster.strategies.meta import Cause
from gpustack_simulator.cluster.validation import unknown_fields

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
GENERATE_SUFFIX = 5
IGNORE, WARN, STRICT = "Ignore", "Warn", "Strict"
FIELD_VALIDATION = (IGNORE, STRICT, WARN)
"""``?fieldValidation=`` values (``Warn`` when a request names none)."""
UPDATE_RETRIES = 8
"""How often an unconditional update is rebuilt when its object moves during admission."""
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""The API server's name-suffix alphabet (no vowels, no look-alikes)."""


def now_stamp() -> str:
    """Wall-clock RFC 3339 in UTC, whole seconds, as ``creationTimestamp`` is written."""
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def invalid(resource: Resource, name: str, causes: list[Cause]) -> StatusError:
    """A 422 ``Invalid`` whose details list each cause with its field path."""
    texts = list(dict.fromkeys(f"{field}: {message}" for field, message, _ in causes))
    text = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"  # apimachinery's
    error = StatusError(
        422,
        f'{resource.kind}.{resource.group or "core"} "{name}" is invalid: {text}'
        if resource.group
        else f'{resource.kind} "{name}" is invalid: {text}',
        kind=resource.kind,
        name=name,
        group=resource.group,
        reason="Invalid",
    )
    error.details["causes"] = [
        {"reason": reason, "message": message, "field": field} for field, message, reason in causes
    ]
    return error


def conflict(resource: Resource, name: str, message: str) -> StatusError:
    """The 409 an update with a stale ``resourceVersion`` gets."""
    qualified = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
    return StatusError(
        409,
        f'Operation cannot be fulfilled on {qualified} "{name}": {message}',
        kind=resource.plural,
        name=name,
        group=resource.group,
        reason="Conflict",
    )


def _spec_view(resource: Resource, obj: Mapping[str, Any]) -> Any:
    """What ``metadata.generation`` tracks: the spec, or everything but metadata and status."""
    if resource.spec_key is not None and resource.spec_key in obj:
        return obj.get(resource.spec_key)
    return {k: v for k, v in obj.items() if k not in {"metadata", "status"}}


class ApiServer:
    """Create, update, patch and delete over ``state``'s store, with watches for each write."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.store = state.store
        self.registry = state.registry
        self.nodes = NodeSimulator(state)
        self.admission = Admission(state)

    # -- reads -----------------------------------------------------------------------------

    def current(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        """A copy of the object, or the 404 a controller expects."""
        found = self.store.get(resource.kind, namespace, name)
        if found is None:
            raise not_found(resource.plural, name, resource.group)
        return copy.deepcopy(found)

    # -- the write path: request → (mutating admission) → prepare → (validating) → commit ----
    #
    # A write is staged so admission can run between the stages, as in kube-apiserver: the
    # request object is built from the body (a patch applied to the stored object), mutating
    # webhooks may change it, the server's rules then turn it into what would be stored and
    # validate it (so a mutation is validated like the request itself), validating webhooks
    # see that final object, and the commit stores it. The commit is synchronous, so between
    # its resourceVersion check and its store write nothing else runs: a request that named a
    # resourceVersion gets its 409 if the object moved while webhooks were being called, and
    # an unconditional one is rebuilt over the new version and admitted again.

    def create(self, resource: Resource, namespace: str, body: Any) -> dict[str, Any]:
        """POST without admission: defaults, validation, ``AlreadyExists``; dependents follow."""
        pending = self._request_create(resource, namespace, body)
        self._prepare(pending)
        return self._commit(pending)

    async def admitted_create(
        self,
        resource: Resource,
        namespace: str,
        body: Any,
        user: Mapping[str, Any],
        *,
        dry_run: bool = False,
        warnings: list[str] | None = None,
        field_validation: str = IGNORE,
    ) -> dict[str, Any]:
        """POST through the admission webhooks, as every create through the API is.

        ``dry_run`` (``?dryRun=All``) runs every stage, webhooks included, and stores nothing;
        ``warnings`` receives the webhooks' warnings once the write succeeded, after the
        unknown fields ``field_validation`` (``?fieldValidation=``) warns of.
        """
        pending = self._request_create(resource, namespace, body)
        decoded = _field_validation(pending, field_validation, patch=False)
        attrs = Attributes(
            resource,
            "CREATE",
            namespace,
            str(pending.obj["metadata"].get("name") or ""),
            "",
            pending.obj,
            None,
            options_for("CREATE", patch=False, dry_run=dry_run),
            user,
            dry_run,
        )
        await self.admission.mutate(attrs)
        pending.obj = self._body(resource, attrs.obj)
        self._namespace(resource, namespace, pending.obj.setdefault("metadata", {}))
        self._prepare(pending)
        attrs.obj, attrs.name = copy.deepcopy(pending.obj), pending.name
        await self.admission.validate(attrs)
        stored = self._commit(pending, dry_run=dry_run)
        if warnings is not None:
            warnings += decoded + attrs.warnings
        return stored

    def replace(
        self, resource: Resource, namespace: str, name: str, body: Any, *, subresource: str = ""
    ) -> dict[str, Any]:
        """PUT without admission: a stale ``resourceVersion`` is a 409; none is unconditional."""
        pending = self._request_replace(resource, namespace, name, body, subresource)
        self._prepare(pending)
        return self._commit(pending)

    def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: Any,
        content_type: str,
        *,
        subresource: str = "",
    ) -> dict[str, Any]:
        """PATCH without admission: the content type's semantics, then an update's rules."""
        pending = self._request_patch(resource, namespace, name, body, content_type, subresource)
        self._prepare(pending)
        return self._commit(pending)

    async def admitted_replace(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: Any,
        user: Mapping[str, Any],
        *,
        subresource: str = "",
        dry_run: bool = False,
        warnings: list[str] | None = None,
        field_validation: str = IGNORE,
    ) -> dict[str, Any]:
        """PUT through the admission webhooks."""
        return await self._admitted_update(
            lambda: self._request_replace(resource, namespace, name, body, subresource),
            user,
            patch=False,
            dry_run=dry_run,
            warnings=warnings,
            field_validation=field_validation,
        )

    async def admitted_patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: Any,
        content_type: str,
        user: Mapping[str, Any],
        *,
        subresource: str = "",
        dry_run: bool = False,
        warnings: list[str] | None = None,
        field_validation: str = IGNORE,
    ) -> dict[str, Any]:
        """PATCH through the admission webhooks (reviewed as an ``UPDATE``, as on a cluster)."""
        return await self._admitted_update(
            lambda: self._request_patch(resource, namespace, name, body, content_type, subresource),
            user,
            patch=True,
            dry_run=dry_run,
            warnings=warnings,
            field_validation=field_validation,
        )

    async def _admitted_update(
        self,
        build: Callable[[], Pending],
        user: Mapping[str, Any],
        *,
        patch: bool,
        dry_run: bool,
        warnings: list[str] | None,
        field_validation: str,
    ) -> dict[str, Any]:
        for _ in range(UPDATE_RETRIES):
            pending = build()
            decoded = _field_validation(pending, field_validation, patch=patch)
            assert pending.current is not None
            attrs = Attributes(
                pending.resource,
                "UPDATE",
                pending.namespace,
                pending.name,
                pending.subresource,
                pending.obj,
                copy.deepcopy(pending.current),
                options_for("UPDATE", patch=patch, dry_run=dry_run),
                user,
                dry_run,
            )
            await self.admission.mutate(attrs)
            pending.obj = self._body(pending.resource, attrs.obj)
            if pending.obj.setdefault("metadata", {}).get("name") != pending.name:
                raise StatusError(400, "an admission webhook may not change metadata.name")
            self._namespace(pending.resource, pending.namespace, pending.obj["metadata"])
            self._prepare(pending)
            attrs.obj = copy.deepcopy(pending.obj)
            await self.admission.validate(attrs)
            try:
                stored = self._commit(pending, dry_run=dry_run)
            except _Moved:
                continue  # unconditional: rebuilt over the version that moved it, re-admitted
            if warnings is not None:
                warnings += decoded + attrs.warnings  # this attempt's, not those it replaced
            return stored
        assert pending.current is not None
        raise conflict(
            pending.resource,
            pending.name,
            "the object kept changing while its update was being admitted; please retry",
        )

    # -- the stages --------------------------------------------------------------------------

    def _request_create(self, resource: Resource, namespace: str, body: Any) -> Pending:
        obj = self._body(resource, body)
        self._namespace(resource, namespace, obj.setdefault("metadata", {}))
        return Pending(resource, "CREATE", namespace, "", obj)

    def _request_replace(
        self, resource: Resource, namespace: str, name: str, body: Any, subresource: str
    ) -> Pending:
        incoming = self._body(resource, body)
        meta = incoming.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise StatusError(
                400,
                f"the name of the object ({meta.get('name')}) does not match "
                f"the name on the URL ({name})",
            )
        meta["name"] = name
        self._namespace(resource, namespace, meta)
        current = self.current(resource, namespace, name)
        wanted = meta.get("resourceVersion")
        return Pending(
            resource,
            "UPDATE",
            namespace,
            name,
            incoming,
            current,
            subresource=subresource,
            precondition=str(wanted) if wanted not in (None, "") else None,
        )

    def _request_patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: Any,
        content_type: str,
        subresource: str,
    ) -> Pending:
        current = self.current(resource, namespace, name)
        base = copy.deepcopy(current)
        base["metadata"].pop("resourceVersion", None)  # only the patch may carry a precondition
        try:
            if content_type == patching.MERGE:
                if not isinstance(body, dict):
                    # RFC 7386 would replace the object; the server cannot decode that as one.
                    raise StatusError(400, f"a merge patch ({patching.MERGE}) is a JSON object")
                patched = patching.merge_patch(base, body)
            elif content_type == patching.JSON_PATCH:
                _json_patch_decodes(body)
                patched = patching.json_patch(current, body)
                if patched.get("metadata", {}).get("resourceVersion") == current["metadata"].get(
                    "resourceVersion"
                ):
                    patched["metadata"].pop("resourceVersion", None)
            elif content_type == patching.STRATEGIC:
                if not resource.strategic:
                    raise StatusError(
                        415,
                        "the body of the request was in an unknown format - accepted media "
                        f"types include: {patching.JSON_PATCH}, {patching.MERGE}, "
                        f"{patching.APPLY}",
                        reason="UnsupportedMediaType",
                    )
                patched = patching.strategic_merge(base, body, kind=resource.kind)
            else:
                raise StatusError(
                    415,
                    f"the body of the request was in an unknown format - accepted media types "
                    f"include: {patching.JSON_PATCH}, {patching.MERGE}, {patching.STRATEGIC}",
                    reason="UnsupportedMediaType",
                )
        except patching.PatchError as exc:
            raise StatusError(
                422,
                str(exc),
                kind=resource.plural,
                name=name,
                group=resource.group,
                reason="Invalid",
            ) from exc
        if not isinstance(patched, dict):
            raise StatusError(422, "the patch does not leave an object", reason="Invalid")
        meta = patched.setdefault("metadata", {})
        if meta.get("name") != name:
            raise StatusError(400, "the patch may not change metadata.name")
        wanted = meta.get("resourceVersion")
        return Pending(
            resource,
            "UPDATE",
            namespace,
            name,
            patched,
            current,
            subresource=subresource,
            precondition=str(wanted) if wanted not in (None, "") else None,
        )

    def _prepare(self, pending: Pending) -> None:
        """The server's rules: what would be stored, validated (``pending.obj`` replaced)."""
        if pending.operation == "CREATE":
            self._prepare_create(pending)
        else:
            self._prepare_update(pending)

    def _prepare_create(self, pending: Pending) -> None:
        resource, namespace, obj = pending.resource, pending.namespace, pending.obj
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise invalid(
                    resource,
                    "",
                    [
                        (
                            "metadata.name",
                            "Required value: name or generateName is required",
                            "FieldValueRequired",
                        )
                    ],
                )
            meta["name"] = self._generate(resource, namespace, str(prefix))
        pending.name = name = str(meta["name"])
        self._exists(resource, namespace, name)
        for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(key, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_stamp()
        meta["generation"] = 1
        strategy = strategy_for(resource)
        strategy.prepare_for_create(resource, obj)
        self._refuse(resource, name, strategy.validate(resource, obj))
        strategy.canonicalize(self, resource, obj, None)

    def _exists(self, resource: Resource, namespace: str, name: str) -> None:
        if self.store.get(resource.kind, namespace, name) is not None:
            qualified = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
            raise StatusError(
                409,
                f'{qualified} "{name}" already exists',
                kind=resource.plural,
                name=name,
                group=resource.group,
                reason="AlreadyExists",
            )

    def _generate(self, resource: Resource, namespace: str, prefix: str) -> str:
        for _ in range(16):
            suffix = "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(GENERATE_SUFFIX))
            if self.store.get(resource.kind, namespace, prefix + suffix) is None:
                return prefix + suffix
        raise StatusError(500, f"could not generate a unique name from {prefix!r}")

    def _prepare_update(self, pending: Pending) -> None:
        resource, current, incoming = pending.resource, pending.current, pending.obj
        assert current is not None
        if pending.precondition is not None and pending.precondition != str(
            current["metadata"]["resourceVersion"]
        ):
            raise _stale(resource, pending.name)
        if pending.subresource == "status":
            result = copy.deepcopy(current)
            if "status" in incoming:
                result["status"] = incoming["status"]
            else:
                result.pop("status", None)
        else:
            result = self._main(resource, current, incoming)
        result["metadata"].pop("resourceVersion", None)
        strategy_for(resource).canonicalize(self, resource, result, current)
        pending.obj = result

    def _commit(self, pending: Pending, *, dry_run: bool = False) -> dict[str, Any]:
        """Store a prepared write, re-checking what may have moved while it was admitted.

        A dry run makes the same checks and answers what would have been stored.
        """
        resource, namespace, name = pending.resource, pending.namespace, pending.name
        stored = self.store.get(resource.kind, namespace, name)
        if pending.operation == "CREATE":
            self._exists(resource, namespace, name)
            previous = None
        else:
            assert pending.current is not None
            if stored is None:
                raise not_found(resource.plural, name, resource.group)
            if (
                stored["metadata"]["resourceVersion"]
                != pending.current["metadata"]["resourceVersion"]
            ):
                if pending.precondition is not None:
                    raise _stale(resource, name)
                raise _Moved
            if _unstamped(pending.obj) == _unstamped(pending.current):
                return pending.current  # a no-op write keeps its resourceVersion, as on a cluster
            previous = pending.current
        if dry_run:
            would = copy.deepcopy(pending.obj)
            if previous is not None:
                would["metadata"]["resourceVersion"] = previous["metadata"]["resourceVersion"]
            return would
        strategy_for(resource).before_commit(self, pending)
        written = self.store.put(resource.kind, pending.obj)
        self.after_write(resource, written)
        found = self.store.get(resource.kind, namespace, name)
        return copy.deepcopy(found if found is not None else written)

    def _main(
        self, resource: Resource, current: dict[str, Any], incoming: dict[str, Any]
    ) -> dict[str, Any]:
        """A write to the main resource: status kept, server fields kept, generation moved."""
        old = current["metadata"]
        result = incoming
        if resource.status:
            if "status" in current:
                result["status"] = current["status"]
            else:
                result.pop("status", None)
        for key in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "generation",
            "deletionGracePeriodSeconds",
        ):
            if key in old:
                result["metadata"][key] = old[key]
            else:
                result["metadata"].pop(key, None)
        if old.get("deletionTimestamp"):
            added = set(result["metadata"].get("finalizers") or ()) - set(
                old.get("finalizers") or ()
            )
            if added:
                raise StatusError(
                    422,
                    f"metadata.finalizers: Forbidden: no new finalizers "
                    f"can be added if the object is being deleted, found new "
                    f"finalizers {sorted(added)}",
                    reason="Invalid",
                )
        strategy = strategy_for(resource)
        strategy.prepare_for_update(resource, result, current)
        if _spec_view(resource, result) != _spec_view(resource, current):
            result["metadata"]["generation"] = int(old.get("generation") or 1) + 1
        causes = strategy.validate_update(resource, result, current)
        self._refuse(resource, str(old.get("name", "")), causes)
        return result

    # -- delete ----------------------------------------------------------------------------

    def delete(
        self, resource: Resource, namespace: str, name: str, options: Mapping[str, Any]
    ) -> dict[str, Any]:
        """DELETE with ``DeleteOptions``: preconditions, propagation, finalizers, grace."""
        current = self.current(resource, namespace, name)
        meta = current["metadata"]
        _preconditions(resource, name, meta, options)
        policy = options.get("propagationPolicy") or (
            "Orphan" if options.get("orphanDependents") else "Background"
        )
        if policy not in {"Background", "Foreground", "Orphan"}:
            raise StatusError(400, f'propagationPolicy: Unsupported value: "{policy}"')
        finalizers: list[str] = list(meta.get("finalizers") or ())
        if policy == "Foreground" and FOREGROUND not in finalizers and self._dependents(meta):
            finalizers.append(FOREGROUND)
        if policy == "Orphan" and ORPHAN not in finalizers and self._dependents(meta):
            finalizers.append(ORPHAN)
        graceful = strategy_for(resource).graceful(self, current, options)
        if finalizers or graceful:
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = now_stamp()
                meta["deletionGracePeriodSeconds"] = int(
                    options.get("gracePeriodSeconds") or (30 if graceful else 0)
                )
            meta["finalizers"] = finalizers
            stored = self.store.put(resource.kind, current)
            self.after_write(resource, stored)
            self.collect()  # foregroundDeletion and orphan are the collector's to finish
            found = self.store.get(resource.kind, namespace, name)
            return copy.deepcopy(found if found is not None else stored)
        return self.remove(resource, current)

    async def admitted_delete(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        options: Mapping[str, Any],
        user: Mapping[str, Any],
        *,
        dry_run: bool = False,
        warnings: list[str] | None = None,
    ) -> dict[str, Any]:
        """DELETE through the admission webhooks (``oldObject`` is what is deleted).

        A dry run answers the object as it is, admitted and checked, and deletes nothing.
        """
        current = self.current(resource, namespace, name)
        _preconditions(resource, name, current["metadata"], options)
        attrs = Attributes(
            resource,
            "DELETE",
            namespace,
            name,
            "",
            None,
            current,
            options_for("DELETE", patch=False, given=options, dry_run=dry_run),
            user,
            dry_run,
        )
        await self.admission.mutate(attrs)
        await self.admission.validate(attrs)
        if dry_run:
            gone = self.current(resource, namespace, name)
            _preconditions(resource, name, gone["metadata"], options)
        else:
            gone = self.delete(resource, namespace, name, options)  # preconditions re-checked
        if warnings is not None:
            warnings += attrs.warnings
        return gone

    def remove(self, resource: Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Take the object out of the store now; collect what it owned."""
        meta = obj["metadata"]
        gone = self.store.delete(resource.kind, meta.get("namespace", ""), meta["name"])
        strategy_for(resource).after_remove(self, resource, obj)
        self.collect()
        return gone if gone is not None else dict(obj)

    # -- garbage collection ----------------------------------------------------------------

    def _served(self) -> list[Resource]:
        """One resource per served kind, in the registry's order (the collector's order)."""
        found = []
        seen: set[str] = set()
        for resource in list(self.registry.resources.values()):
            if resource.kind not in seen:
                seen.add(resource.kind)
                found.append(resource)
        return found

    def _candidates(self) -> list[tuple[Resource, dict[str, Any]]]:
        """Every object the collector can act on (being deleted, or owned), in its order.

        The store's indexes give them without visiting the rest: an object with neither a
        ``deletionTimestamp`` nor owners is one no branch of ``_collect_once`` acts on.
        """
        return [(r, o) for r in self._served() for o in self.store.gc_candidates(r.kind)]

    def _dependents(self, meta: Mapping[str, Any]) -> list[tuple[Resource, dict[str, Any]]]:
        uid = meta.get("uid")
        found = []
        for resource in self._served():
            owned = self.store.owned_by(resource.kind, uid)
            if owned is None:  # references the index could not read: as the scan did
                owned = [
                    o
                    for o in self.store.list(resource.kind)
                    if any(
                        ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences") or ()
                    )
                ]
            found += [(resource, o) for o in owned]
        return found

    def collect(self) -> None:
        """The garbage collector: run until nothing more is collected.

        A dependent whose every owner is gone is deleted (in the background, its own
        dependents following); an owner waiting in ``foregroundDeletion`` loses its finalizer
        once its dependents are gone; one waiting in ``orphan`` strips its references first.
        """
        for _ in range(64):
            if not self._collect_once():
                return

    def _collect_once(self) -> bool:
        everything = self._candidates()
        kinds = {r.kind for r in self._served()}
        # Which owners exist as this pass starts (the scan's set of every UID, asked only
        # about the UIDs the candidates name).
        named = {
            r.get("uid")
            for _, o in everything
            for r in o["metadata"].get("ownerReferences") or ()
            if isinstance(r, Mapping)
        }
        uids = {u for u in named if self.store.uid_in(kinds, u)}
        served = {r.kind for r in self.registry.resources.values()}
        changed = False
        for resource, obj in everything:
            meta = obj["metadata"]
            finalizers = list(meta.get("finalizers") or ())
            if meta.get("deletionTimestamp") and ORPHAN in finalizers:
                for dep_resource, dep in self._dependents(meta):
                    refs = [
                        r
                        for r in dep["metadata"]["ownerReferences"]
                        if r.get("uid") != meta.get("uid")
                    ]
                    dep["metadata"]["ownerReferences"] = refs
                    self.store.put(dep_resource.kind, dep)
                self._finish(resource, obj, ORPHAN)
                return True
            if meta.get("deletionTimestamp") and FOREGROUND in finalizers:
                dependents = self._dependents(meta)
                for dep_resource, dep in dependents:
                    if not dep["metadata"].get("deletionTimestamp"):
                        self.delete(
                            dep_resource,
                            dep["metadata"].get("namespace", ""),
                            dep["metadata"]["name"],
                            {"propagationPolicy": "Foreground"},
                        )
                        changed = True
                if not self._dependents(meta):
                    self._finish(resource, obj, FOREGROUND)
                    return True
                continue
            owners: list[dict[str, Any]] = meta.get("ownerReferences") or []
            if (
                owners
                and not meta.get("deletionTimestamp")
                and not any(r.get("uid") in uids for r in owners)
                # As the real collector: an owner of a kind this server does not serve (a
                # scenario Pod's DaemonSet) cannot be looked up, so it is never judged absent.
                and all(r.get("kind") in served for r in owners)
            ):
                self.delete(
                    resource,
                    meta.get("namespace", ""),
                    meta["name"],
                    {"propagationPolicy": "Background"},
                )
                return True
        return changed

    def _finish(self, resource: Resource, obj: dict[str, Any], finalizer: str) -> None:
        current = self.store.get(
            resource.kind, obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
        )
        if current is None:
            return
        updated = copy.deepcopy(current)
        updated["metadata"]["finalizers"] = [
            f for f in updated["metadata"].get("finalizers") or () if f != finalizer
        ]
        if not updated["metadata"]["finalizers"]:
            del updated["metadata"]["finalizers"]
        stored = self.store.put(resource.kind, updated)
        self.after_write(resource, stored)

    # -- what follows every write ----------------------------------------------------------

    def after_write(self, resource: Resource, stored: Mapping[str, Any]) -> None:
        """Finalizers cleared on a deleting object remove it; else the kind's controllers run.

        (A bound Pod deleted with grace is its kubelet's to finish, not removed here.)
        """
        meta = stored["metadata"]
        strategy = strategy_for(resource)
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not strategy.graceful(self, stored, {})
        ):
            self.remove(resource, stored)
            return
        strategy.after_write(self, resource, stored)

    # -- helpers ---------------------------------------------------------------------------

    @staticmethod
    def _body(resource: Resource, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise StatusError(400, "the body of the request is not a JSON object")
        obj = copy.deepcopy(body)
        kind, api_version = (
            obj.setdefault("kind", resource.kind),
            obj.setdefault("apiVersion", resource.api_version),
        )
        if kind != resource.kind or api_version != resource.api_version:
            raise StatusError(
                400,
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({resource.api_version})"
                if api_version != resource.api_version
                else f"the kind in the data ({kind}) does not match the expected kind "
                f"({resource.kind})",
            )
        if not isinstance(obj.get("metadata", {}), dict):
            raise StatusError(400, "metadata is not an object")
        return obj

    @staticmethod
    def _namespace(resource: Resource, namespace: str, meta: dict[str, Any]) -> None:
        if not resource.namespaced:
            meta.pop("namespace", None)
            return
        given = meta.setdefault("namespace", namespace)
        if given != namespace:
            raise StatusError(
                400,
                "the namespace of the provided object does not match the namespace sent on "
                "the request",
            )

    @staticmethod
    def _refuse(resource: Resource, name: str, causes: list[Cause]) -> None:
        """The 422 a strategy's causes make, if it found any."""
        if causes:
            raise invalid(resource, name, causes)


def _field_validation(pending: Pending, directive: str, *, patch: bool) -> list[str]:
    """The request's unknown fields, as ``?fieldValidation=`` says to answer them.

    kube-apiserver finds them as it decodes the request (a patch: the patched object), before
    admission: ``Strict`` refuses the write with a 400 naming each, ``Warn`` (the default
    through the API) stores the object pruned and warns of each, ``Ignore`` prunes silently.
    The stand-in knows the fields of the kinds it has a schema for (custom resources).
    """
    schema = pending.resource.schema
    if directive == IGNORE or schema is None:
        return []
    unknown = [f'unknown field "{path}"' for path in unknown_fields(pending.obj, schema)]
    if unknown and directive == STRICT:
        strict = "strict decoding error: " + ", ".join(unknown)
        if patch:
            raise StatusError(400, strict)
        kind, version = pending.resource.kind, pending.resource.version
        raise StatusError(
            400, f'{kind} in version "{version}" cannot be handled as a {kind}: {strict}'
        )
    return unknown


def _json_patch_decodes(body: Any) -> None:
    """The 400 a JSON patch that is no list of operations gets, as the server fails to decode it.

    (One that decodes but cannot be applied is a 422, the patch's own error.)
    """
    go_types = {dict: "object", list: "array", str: "string", bool: "bool"}
    if not isinstance(body, list):
        found, into = body, "jsonpatch.Patch"
    else:
        wrong = [op for op in body if not isinstance(op, dict)]
        if not wrong:
            return
        found, into = wrong[0], "jsonpatch.Operation"
    named = go_types.get(type(found), "number" if isinstance(found, int | float) else "value")
    raise StatusError(400, f"json: cannot unmarshal {named} into Go value of type {into}")


def _preconditions(
    resource: Resource, name: str, meta: Mapping[str, Any], options: Mapping[str, Any]
) -> None:
    """The 409 a delete whose ``preconditions`` no longer hold gets."""
    pre = options.get("preconditions") or {}
    for key in ("uid", "resourceVersion"):
        if pre.get(key) and str(pre[key]) != str(meta.get(key)):
            raise conflict(
                resource,
                name,
                f"Precondition failed: {key.replace('resourceVersion', 'ResourceVersion')}"
                f"{'UID' if key == 'uid' else ''} in precondition: {pre[key]}, "
                f"{key} in object meta: {meta.get(key)}".replace("uidUID", "UID"),
            )


def _stale(resource: Resource, name: str) -> StatusError:
    return conflict(
        resource,
        name,
        "the object has been modified; please apply your "
        "changes to the latest version and try again",
    )


class _Moved(Exception):  # noqa: N818 — a signal between two stages, not an error
    """The object moved while an unconditional update was admitted: rebuild and re-admit."""


@dataclass
class Pending:
    """One write between its request and its commit."""

    resource: Resource
    operation: str
    """``CREATE`` or ``UPDATE`` (a patch is an update, as admission reviews name it)."""
    namespace: str
    name: str
    """Empty for a create until ``generateName`` has been expanded."""
    obj: dict[str, Any]
    """The request object, then (after ``_prepare``) what the commit stores."""
    current: dict[str, Any] | None = None
    """The stored object an update was built on; its resourceVersion is re-checked."""
    subresource: str = ""
    precondition: str | None = None
    """The resourceVersion the request named; ``None``: unconditional."""


def _unstamped(obj: Mapping[str, Any]) -> Any:
    copied = copy.deepcopy(dict(obj))
    copied.get("metadata", {}).pop("resourceVersion", None)
    return copied


Mutator = Callable[[dict[str, Any]], None]
