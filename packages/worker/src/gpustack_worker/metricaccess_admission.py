"""The MetricAccess admission webhook: refuse a declaration that reaches past its owner.

kube-apiserver sends an ``admission.k8s.io/v1`` ``AdmissionReview`` for every CREATE and UPDATE
of a MetricAccess (``observability.gpustack.ai/v1``, namespaced) to
``POST /validate-observability-gpustack-ai-v1-metricaccess``. The controller delivers whatever
is stored, with its own (wide) permissions, so what a MetricAccess may name is decided here, for
the person who writes it (docs/multi-tenant-metrics.md, "Admission"):

- **The spec** is read by :func:`gpustack_core.metricaccess.spec_from_object`, the same reading
  the controller makes, so the two cannot disagree: an entry that is neither a name, a regex
  nor a plain selector, or a selector naming a namespace other than ``="<source>"``, is **422
  Invalid**, before anyone is asked anything.
- **The source.** A ``source`` other than the object's own namespace copies that namespace's
  figures into this one: allowed only when the requester may read metrics there, asked as the
  gateway asks a tenant's query (:data:`gpustack_worker.metricsgateway.METRICS_READ`, ``get
  pods.metrics.k8s.io`` in the source). Not allowed: **403 Forbidden**.
- **The target.** A remote-write target Service in another namespace sends the figures there:
  allowed only when the requester may ``get`` that Service. Not allowed: **403**.

The requester is the review's ``userInfo`` (user, uid, groups, extra) as the API server
authenticated it; the permission is a SubjectAccessReview for exactly that user, never a guess
from names. A review that names nobody cannot reach another namespace. The API server unable to
answer: **503**, never admitted. An UPDATE that leaves the spec as stored (a label, a finalizer)
is not a new claim and is not judged again; any change to the spec is judged whole.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import trio

from gpustack_core import contract
from gpustack_core.fielderrors import FieldError, aggregate, forbidden, refusal_status
from gpustack_core.metricaccess import GROUP, KIND, MetricsError, Spec, spec_from_object
from gpustack_kube.client import KubeClient
from gpustack_kube.reviews import Attributes, UserInfo
from gpustack_serving.access import (
    AccessReviewer,
    AccessSettings,
    ReviewUnavailable,
    forbidden_line,
)
from gpustack_worker.admission import Review, ReviewError, answer, decode_review
from gpustack_worker.metricsgateway import METRICS_READ

log = logging.getLogger("gpustack.worker.admission.metricaccesses")

VALIDATE_PATH: Final = contract.METRIC_ACCESS_VALIDATE_PATH
PHASES: Final[Mapping[str, Literal["validate"]]] = {VALIDATE_PATH: "validate"}
JUDGED: Final = frozenset({"CREATE", "UPDATE"})
SERVICE_READ: Final = Attributes(verb="get", resource="services")
"""What sending figures to a Service is, in SubjectAccessReview terms; its namespace and name
come from the target."""
SOURCE_FIELD: Final = "spec.source"
TARGET_FIELD: Final = "spec.remoteWrite.target.prometheus.namespace"

REVIEWS: Final = AccessSettings(paths=frozenset(), allowed_ttl=0.0, denied_ttl=0.0, token_ttl=0.0)
"""Decisions are not cached: a write is rare, and a revoked binding must stop the next one."""


class MetricAccessWebhook:
    """Answers MetricAccess reviews; one per worker, asking through its client."""

    def __init__(self, reviewer: AccessReviewer) -> None:
        self.reviewer = reviewer
        self.denied = 0

    @classmethod
    def of(cls, client: KubeClient) -> MetricAccessWebhook:
        """The webhook asking through ``client`` (which needs ``create subjectaccessreviews``)."""
        return cls(AccessReviewer(client.post, REVIEWS, trio.current_time))

    async def handle(self, path: str, body: bytes) -> tuple[int, bytes]:
        """``(status, body)`` for one POST: 200 with a review, or 400 with one line."""
        if path not in PHASES:
            return 404, f"no MetricAccess webhook at {path}\n".encode()
        try:
            decoded = decode_review(body)
        except ReviewError as exc:
            return 400, f"{exc}\n".encode()
        if decoded.group != GROUP or decoded.kind != KIND or decoded.operation not in JUDGED:
            return 200, answer(decoded.uid)
        if decoded.obj is None:
            return 400, f"AdmissionReview: an {decoded.operation} carries no object\n".encode()
        return 200, await self.validate(decoded)

    async def validate(self, review: Review) -> bytes:
        """The spec as the controller reads it, then the requester's right to what it names."""
        assert review.obj is not None  # handle refused a review without one
        if _spec_unchanged(review):
            return answer(review.uid)
        obj = _with_namespace(review.obj, review.namespace)
        try:
            spec = spec_from_object(obj)
        except MetricsError as exc:
            error = FieldError("spec", "Invalid value", detail=" ".join(str(exc).split()))
            return self._deny(review, [error])
        try:
            errors = await self._permission_errors(review.user, review.namespace, spec)
        except ReviewUnavailable as exc:
            self.denied += 1
            log.warning("cannot authorize MetricAccess %s: %s", _where(review), exc)
            line = f"cannot reach the API server to authorize the MetricAccess: {exc}"
            return answer(
                review.uid, denied=" ".join(line.split()), code=503, reason="ServiceUnavailable"
            )
        if errors:
            return self._deny(review, errors)
        return answer(review.uid)

    async def _permission_errors(
        self, user: UserInfo | None, own: str, spec: Spec
    ) -> list[FieldError]:
        """One ``Forbidden`` per namespace the spec reaches that the requester may not."""
        asks: list[tuple[str, Attributes, str]] = []
        if spec.source != own:
            source = dataclasses.replace(METRICS_READ, namespace=spec.source)
            asks.append((SOURCE_FIELD, source, "copy another namespace's metrics"))
        target = spec.target
        if target is not None and target.namespace != own:
            service = dataclasses.replace(
                SERVICE_READ, namespace=target.namespace, name=target.service
            )
            asks.append((TARGET_FIELD, service, "send metrics to another namespace's Service"))
        errors = []
        for field, attributes, what in asks:
            if user is None:
                errors.append(forbidden(field, f"the review names no requester who may {what}"))
                continue
            decision = await self.reviewer.decide(user, attributes)
            if not decision.allowed:
                line = forbidden_line(user, attributes)
                errors.append(forbidden(field, f"{line}: only a requester who may can {what}"))
        return errors

    def _deny(self, review: Review, errors: Sequence[FieldError]) -> bytes:
        self.denied += 1
        code, reason = refusal_status(errors)
        message = aggregate(errors)
        log.info("denied MetricAccess %s (%s): %s", _where(review), review.operation, message)
        return answer(
            review.uid,
            denied=message,
            code=code,
            reason=reason,
            causes=[e.cause() for e in errors],
        )


def _with_namespace(obj: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """``obj`` with ``metadata.namespace`` from the review when the object leaves it out.

    ``kubectl create -n team-a`` may send an object without it; the source and the target
    default to the namespace the object is created in, which the review always names.
    """
    meta = obj.get("metadata")
    meta = dict(meta) if isinstance(meta, Mapping) else {}
    if not meta.get("namespace"):
        meta["namespace"] = namespace
    return {**obj, "metadata": meta}


def _spec_unchanged(review: Review) -> bool:
    """An UPDATE whose spec is the stored one: a label or finalizer, no new claim."""
    if review.operation != "UPDATE" or review.old is None or review.obj is None:
        return False
    return review.obj.get("spec") == review.old.get("spec")


def _where(review: Review) -> str:
    return f"{review.namespace}/{review.name or '<generated>'}"


__all__ = ["PHASES", "VALIDATE_PATH", "MetricAccessWebhook"]
