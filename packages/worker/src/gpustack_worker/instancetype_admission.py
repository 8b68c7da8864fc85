"""The InstanceType admission webhook: default a custom type from the catalog, refuse what is wrong.

kube-apiserver sends an ``admission.k8s.io/v1`` ``AdmissionReview`` for every CREATE and UPDATE
of an InstanceType (``worker.gpustack.ai/v1alpha1``, cluster-scoped) to
``POST /mutate-worker-gpustack-ai-v1alpha1-instancetype`` and then
``POST /validate-worker-gpustack-ai-v1alpha1-instancetype``. The rules are pure functions in
:mod:`gpustack_core.instancetype_rules`, where the reasons for each live.

**Mutating.** At creation, a type an administrator writes against the catalog by
``acceleratorGroup`` (``shared/spec/instancetype-walkthrough.md`` §4) is enriched from the
matching flavor — the flavors the managed Nodes form now (their labels, as the derivation reads
them) and the member nodes' ``Devices`` for the slicing ``feature`` — exactly as the operator
enriches the types it derives. On every write the schedule labels and the entrance label are
stamped from the spec and the name. On an update, what the write leaves unset is carried from
the stored spec. A pool no node offers now is admitted as written, with a warning ``kubectl``
prints.

**Validating.** The keys, platform and ``unitResources`` are what a pool can be named by and an
Instance can ask; after creation only ``displayName`` and ``inactive`` change. 403
``Forbidden`` when every error is an immutable field, else 422 ``Invalid``, one
``details.causes`` entry per field.

**Facts looked up.** The Nodes by one list per creation (an administrator's rare act; no cache
to go stale), the ``Devices`` through the Pod webhook's cache. Either unreadable refuses the
creation (503): the spec is immutable afterwards, so a type admitted un-enriched would stay so.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from gpustack_core import contract
from gpustack_core.decoding import ContractError, convert
from gpustack_core.derive import feature_of, identity_of, member_nodes, members
from gpustack_core.fielderrors import FieldError, aggregate, refusal_status
from gpustack_core.instance_rules import object_meta
from gpustack_core.instancetype import QUEUE_ENTRANCE_LABEL, Feature, InstanceTypeSpec
from gpustack_core.instancetype_rules import (
    carried,
    defaulted,
    immutable_errors,
    labels_patch,
    spec_errors,
    spec_patch,
    stamped_labels,
)
from gpustack_core.pools import Flavor, flavors, node_profile_of
from gpustack_kube.client import KubeClient, KubeError
from gpustack_kube.paths import NODES
from gpustack_worker.admission import (
    DevicesCache,
    DevicesUnavailable,
    Review,
    ReviewError,
    answer,
    decode_review,
)

log = logging.getLogger("gpustack.worker.admission.instancetypes")

MUTATE_PATH: Final = contract.INSTANCE_TYPE_MUTATE_PATH
VALIDATE_PATH: Final = contract.INSTANCE_TYPE_VALIDATE_PATH
PHASES: Final[Mapping[str, Literal["mutate", "validate"]]] = {
    MUTATE_PATH: "mutate",
    VALIDATE_PATH: "validate",
}
JUDGED: Final = frozenset({"CREATE", "UPDATE"})
KIND: Final = "InstanceType"


class Unverifiable(Exception):  # noqa: N818 — a state, named as the message reads
    """A fact defaulting needs could not be read; the creation is refused, naming why (503)."""


def _spec(obj: Mapping[str, Any] | None, name: str) -> InstanceTypeSpec:
    """The object's spec, decoded; ``ContractError`` naming the field that is wrong."""
    raw = (obj or {}).get("spec")
    return convert(raw if raw is not None else {}, InstanceTypeSpec, what=f"InstanceType {name}")


def _raw_spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    raw = (obj or {}).get("spec")
    return raw if isinstance(raw, Mapping) else None


def _raw_labels(obj: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    meta = (obj or {}).get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels if isinstance(labels, Mapping) else None


class InstanceTypeWebhook:
    """Answers InstanceType reviews; one per worker, sharing its client and ``Devices`` cache."""

    def __init__(self, client: KubeClient, devices: DevicesCache) -> None:
        self.client = client
        self.devices = devices
        self.denied = 0
        self.patched = 0

    async def handle(self, path: str, body: bytes) -> tuple[int, bytes]:
        """``(status, body)`` for one POST: 200 with a review, or 400 with one line."""
        phase = PHASES[path]
        try:
            decoded = decode_review(body)
        except ReviewError as exc:
            return 400, f"{exc}\n".encode()
        if decoded.operation in JUDGED and decoded.obj is None:
            return 400, f"AdmissionReview: an {decoded.operation} carries no object\n".encode()
        if (
            decoded.group != contract.API_GROUP
            or decoded.kind != KIND
            or decoded.operation not in JUDGED
        ):
            return 200, answer(decoded.uid)
        if phase == "mutate":
            return 200, await self.mutate(decoded)
        return 200, self.validate(decoded)

    # -- validating -------------------------------------------------------------------------

    def validate(self, review: Review) -> bytes:
        """The spec's shape at creation; immutability at an update."""
        name = _name(review)
        try:
            new = _spec(review.obj, name)
        except ContractError as exc:
            return self._deny(review, [], " ".join(str(exc).split()), code=422)
        errors: list[FieldError] = []
        old = self._old(review, name)
        if old is None:
            errors += spec_errors(new)
        else:
            # Ratcheting: a stored spec a rule came after may stay as it is; it cannot change.
            stored = {str(e) for e in spec_errors(old)}
            errors += [e for e in spec_errors(new) if str(e) not in stored]
            errors += immutable_errors(new, old)
        if errors:
            code, reason = refusal_status(errors)
            return self._deny(review, errors, aggregate(errors), code=code, reason=reason)
        return answer(review.uid)

    def _old(self, review: Review, name: str) -> InstanceTypeSpec | None:
        """The stored spec an UPDATE replaces; ``None`` for a CREATE or one that won't decode."""
        if review.operation != "UPDATE" or review.old is None:
            return None
        try:
            return _spec(review.old, name)
        except ContractError as exc:
            log.warning("the stored InstanceType %s does not decode: %s", name, exc)
            return None

    # -- mutating ---------------------------------------------------------------------------

    async def mutate(self, review: Review) -> bytes:
        """Enrich at creation, carry at an update, stamp the labels on both.

        A spec that does not decode or that the rules refuse is left to the validating
        webhook, which names why: defaulting a wrong spec would only hide what is wrong.
        """
        name = _name(review)
        try:
            written = _spec(review.obj, name)
        except ContractError:
            return answer(review.uid)
        if spec_errors(written):
            return answer(review.uid)
        warnings: list[str] = []
        old = self._old(review, name)
        if old is not None:
            spec = carried(written, old)
        else:
            try:
                found = await self._flavors()
                placed, _ = defaulted(written, found, Feature())  # the platform, if one
                feature = await self._feature(placed, found)
            except Unverifiable as exc:
                return self._deny(review, [], str(exc), code=503, reason="ServiceUnavailable")
            spec, warnings = defaulted(written, found, feature)
        labels = stamped_labels(name, spec)
        if not _known_name(review):  # no name yet: no entrance to compute (status has it later)
            labels.pop(QUEUE_ENTRANCE_LABEL, None)
        patch = spec_patch(_raw_spec(review.obj), written, spec)
        patch += labels_patch(_raw_labels(review.obj), labels)
        for warning in warnings:
            log.info("InstanceType %s: %s", name, warning)
        if not patch:
            return answer(review.uid, warnings=warnings)
        self.patched += 1
        return answer(review.uid, patch=patch, warnings=warnings)

    async def _flavors(self) -> tuple[Flavor, ...]:
        """Every flavor the managed Nodes form now, read from their labels."""
        try:
            listed = await self.client.get(NODES.path())
        except KubeError as exc:
            raise Unverifiable(
                f"could not list the Nodes to default the InstanceType from its flavor: {exc}"
            ) from exc
        items = listed.get("items")
        profiles = []
        for item in items if isinstance(items, list) else ():
            if isinstance(item, Mapping):
                profile = node_profile_of(item).profile
                if profile is not None:
                    profiles.append(profile)
        return flavors(profiles)

    async def _feature(self, spec: InstanceTypeSpec, found: Sequence[Flavor]) -> Feature:
        """What the pool's cards offer (their ``Devices`` spec); none for a CPU type."""
        if not spec.acceleratable or not spec.os or not spec.arch:
            return Feature()
        nodes = member_nodes(members(identity_of(spec), found))
        if not nodes:
            return Feature()
        try:
            groups = await self.devices.nodes()
        except DevicesUnavailable as exc:
            raise Unverifiable(f"{exc}: the InstanceType's feature cannot be defaulted") from exc
        return feature_of(
            (g for node in nodes for g in groups.get(node, ())), spec.accelerator_group
        )

    def _deny(
        self,
        review: Review,
        errors: Sequence[FieldError],
        message: str,
        *,
        code: int,
        reason: str = "Invalid",
    ) -> bytes:
        self.denied += 1
        log.info("denied InstanceType %s (%s): %s", _name(review), review.operation, message)
        return answer(
            review.uid,
            denied=message,
            code=code,
            reason=reason,
            causes=[e.cause() for e in errors],
        )


def _known_name(review: Review) -> str:
    return review.name or object_meta(review.obj or {})[0]


def _name(review: Review) -> str:
    return _known_name(review) or "<generated>"


__all__ = ["MUTATE_PATH", "PHASES", "VALIDATE_PATH", "InstanceTypeWebhook"]
