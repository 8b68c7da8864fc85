"""The Instance admission webhook: refuse a bad Instance before it is stored, default its preset.

kube-apiserver sends an ``admission.k8s.io/v1`` ``AdmissionReview`` for every CREATE and UPDATE
of an Instance (``worker.gpustack.ai/v1alpha1``, the stored version every write reaches, also
one made through the worker's ``v1``) to ``POST /validate-worker-gpustack-ai-v1alpha1-instance``
and, before it, ``POST /mutate-worker-gpustack-ai-v1alpha1-instance``. This module decodes the
review, looks up the few facts a rule needs and answers; every rule is a pure function in
:mod:`gpustack_core.instance_rules`, where the reasons for each live.

**Validating** refuses, with kube-apiserver's field-error wording, an Instance that is
malformed, takes a node escape its Setting forbids, changes its spec while running, pins a
node that does not exist (at creation) or asks more cards than the largest node holds. The
answer is 403 ``Forbidden`` when every error is a refusal of something well-formed (a gate, a
running spec), else 422 ``Invalid``, with one ``details.causes`` entry per field.

**Mutating** fills, at creation, the ``cpu``, ``ram`` and ``localStorage`` an Instance leaves
out from its InstanceType's ``unitResources`` (the reference's preset as the default request).

**Facts looked up.** The Settings are read from :class:`gpustack_worker.settings.OperatorSettings`
(live, no request). The node, at creation when ``spec.nodeName`` is set, by one ``GET``; the
InstanceType by one ``GET`` when the rule needs its manufacturer or preset; the cards per node
from the Pod webhook's ``Devices`` cache (listed at most every 5 s). A fact that cannot be read
is said so: a node that cannot be looked up refuses (503 — nothing unverified is admitted), a
``Devices`` list that cannot be read skips only the capacity check, which the scheduler repeats.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal

import msgspec

from gpustack_core import contract
from gpustack_core.decoding import ContractError
from gpustack_core.fielderrors import FieldError, aggregate, refusal_status
from gpustack_core.instance import Instance, instance_from_object
from gpustack_core.instance_rules import (
    Gates,
    accelerator_count,
    capacity_errors,
    default_resources,
    gate_errors,
    immutable_errors,
    name_errors,
    node_errors,
    object_meta,
    spec_errors,
    typeless_errors,
)
from gpustack_core.instancetype import InstanceType, instancetype_from_object
from gpustack_core.names import dns1123_subdomain_problem
from gpustack_core.settings import Settings
from gpustack_kube.client import KubeClient, KubeError, NotFound
from gpustack_kube.paths import INSTANCE_TYPES, NODES
from gpustack_worker.admission import (
    DevicesCache,
    DevicesUnavailable,
    Review,
    ReviewError,
    answer,
    decode_review,
)

log = logging.getLogger("gpustack.worker.admission.instances")

MUTATE_PATH: Final = contract.INSTANCE_MUTATE_PATH
VALIDATE_PATH: Final = contract.INSTANCE_VALIDATE_PATH
PHASES: Final[Mapping[str, Literal["mutate", "validate"]]] = {
    MUTATE_PATH: "mutate",
    VALIDATE_PATH: "validate",
}
JUDGED: Final = frozenset({"CREATE", "UPDATE"})


class Unverifiable(Exception):  # noqa: N818 — a state, named as the message reads
    """A fact a rule needs could not be read; the review is refused, naming why (503)."""


class InstanceWebhook:
    """Answers Instance reviews; one per worker, sharing its client and ``Devices`` cache."""

    def __init__(
        self,
        client: KubeClient,
        devices: DevicesCache,
        settings: Callable[[], Settings] = Settings,
        namespace: str = contract.SYSTEM_NAMESPACE,
    ) -> None:
        """Judge with the Settings in force at each call, kept in ``namespace``.

        ``settings`` is ``OperatorSettings.current``; ``namespace`` the release namespace,
        which a refusal names as where the Setting can be changed.
        """
        self.client = client
        self.devices = devices
        self.settings = settings
        self.namespace = namespace
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
            or decoded.kind != "Instance"
            or decoded.operation not in JUDGED
        ):
            return 200, answer(decoded.uid)
        if phase == "mutate":
            return 200, await self.mutate(decoded)
        return 200, await self.validate(decoded)

    # -- validating -------------------------------------------------------------------------

    async def validate(self, review: Review) -> bytes:
        """Every rule over the review; the answer names each field that is wrong."""
        assert review.obj is not None
        try:
            new = instance_from_object(review.obj)
        except ContractError as exc:
            return self._deny(review, [], f"{' '.join(str(exc).split())}", code=422)
        old = _decoded_old(review)
        creating = review.operation == "CREATE"
        settings = self.settings()
        errors: list[FieldError] = []
        if creating:
            errors += name_errors(*object_meta(review.obj))
        shape = spec_errors(new.spec)
        if old is not None:  # ratcheting: what was stored wrong before may stay as it was
            stored = {str(e) for e in spec_errors(old.spec)}
            shape = [e for e in shape if str(e) not in stored]
        errors += shape
        errors += gate_errors(
            new.spec,
            old.spec if old is not None else None,
            Gates(
                settings.instance_privileged_allowed,
                settings.instance_host_path_volume_allowed,
                self.namespace,
            ),
        )
        if old is not None:
            errors += immutable_errors(new.spec, old.spec)
        # A request already refused for its shape is not also measured against the nodes.
        counted = not any(e.field.startswith("spec.resources.accelerator") for e in errors)
        try:
            errors += await self._cluster_errors(new, old, creating, counted=counted)
        except Unverifiable as exc:
            return self._deny(review, [], str(exc), code=503, reason="ServiceUnavailable")
        if errors:
            code, reason = refusal_status(errors)
            return self._deny(review, errors, aggregate(errors), code=code, reason=reason)
        return answer(review.uid)

    async def _cluster_errors(
        self, new: Instance, old: Instance | None, creating: bool, *, counted: bool
    ) -> list[FieldError]:
        errors: list[FieldError] = []
        node = new.spec.node_name
        if creating and node and dns1123_subdomain_problem(node) is None:
            errors += node_errors(node, await self._node_exists(node))
        count = accelerator_count(new.spec.resources)
        before = accelerator_count(old.spec.resources) if old is not None else None
        # An unchanged request is never stranded by an edit (a node left meanwhile).
        if counted and count and count != before and new.spec.type:
            found = await self._type(new.spec.type)
            if found is None:
                return errors  # no such type: the controller stops the Instance, saying why
            manufacturer = found.spec.manufacturer
            typeless = typeless_errors(new.spec.resources, new.spec.type, manufacturer)
            if typeless:
                return errors + typeless
            try:
                nodes = await self.devices.nodes()
            except DevicesUnavailable as exc:
                log.warning("not checking accelerator capacity: %s", exc)
                return errors
            cards = {
                name: sum(len(g.accelerators) for g in groups if g.manufacturer == manufacturer)
                for name, groups in nodes.items()
            }
            errors += capacity_errors(new.spec.resources, manufacturer, cards)
        return errors

    async def _node_exists(self, name: str) -> bool:
        try:
            await self.client.get(NODES.path(name=name))
        except NotFound:
            return False
        except KubeError as exc:
            raise Unverifiable(f"spec.nodeName: could not look Node {name} up: {exc}") from exc
        return True

    async def _type(self, name: str) -> InstanceType | None:
        """The named InstanceType, ``None`` when it does not exist or cannot be read."""
        if dns1123_subdomain_problem(name) is not None:
            return None
        try:
            return instancetype_from_object(await self.client.get(INSTANCE_TYPES.path(name=name)))
        except NotFound:
            return None
        except (KubeError, ContractError) as exc:
            log.warning("reading InstanceType %s: %s", name, exc)
            return None

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
        log.info(
            "denied Instance %s/%s (%s): %s",
            review.namespace,
            review.name or object_meta(review.obj or {})[0] or "<generated>",
            review.operation,
            message,
        )
        return answer(
            review.uid,
            denied=message,
            code=code,
            reason=reason,
            causes=[e.cause() for e in errors],
        )

    # -- mutating ---------------------------------------------------------------------------

    async def mutate(self, review: Review) -> bytes:
        """At creation, the preset's ``cpu``/``ram``/``localStorage`` where the Instance has none.

        An Instance that does not decode is left to the validating webhook, which names why.
        """
        if review.operation != "CREATE" or review.obj is None:
            return answer(review.uid)
        try:
            new = instance_from_object(review.obj)
        except ContractError:
            return answer(review.uid)
        if not new.spec.type:
            return answer(review.uid)
        found = await self._type(new.spec.type)
        if found is None:
            return answer(review.uid)
        filled = default_resources(
            new.spec.resources, found.spec.unit_resources, acceleratable=found.spec.acceleratable
        )
        if not filled:
            return answer(review.uid)
        self.patched += 1
        spec = review.obj.get("spec")
        patch: list[dict[str, Any]]
        if isinstance(spec, Mapping) and isinstance(spec.get("resources"), Mapping):
            patch = [
                {"op": "add", "path": f"/spec/resources/{wire}", "value": value}
                for wire, value in filled.items()
            ]
        else:
            patch = [{"op": "add", "path": "/spec/resources", "value": dict(filled)}]
        return answer(review.uid, patch=patch)


def _decoded_old(review: Review) -> Instance | None:
    """The stored Instance an UPDATE replaces; ``None`` for a CREATE or one that no longer decodes.

    An old object that does not decode (stored before a rule existed) is judged as if absent:
    every escape must then be allowed now, the strict reading.
    """
    if review.operation != "UPDATE" or review.old is None:
        return None
    try:
        return instance_from_object(review.old)
    except ContractError as exc:
        log.warning("the stored Instance %s/%s does not decode: %s", review.namespace,
                    review.name, exc)  # fmt: skip
        return None


def patch_of(body: bytes) -> list[dict[str, Any]]:
    """The JSONPatch a response review carries (for tests and the debug state)."""
    review = msgspec.json.decode(body)
    encoded = review.get("response", {}).get("patch")
    return list(msgspec.json.decode(base64.b64decode(encoded))) if encoded else []


__all__ = ["MUTATE_PATH", "PHASES", "VALIDATE_PATH", "InstanceWebhook", "patch_of"]
