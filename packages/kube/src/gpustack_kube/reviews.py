"""TokenReview and SubjectAccessReview, as bodies to send and answers to read.

Every server of ours that decides on a Kubernetes identity asks the API server twice: who a
bearer token belongs to (``authentication.k8s.io/v1`` TokenReview) and whether that user may do
what it asks (``authorization.k8s.io/v1`` SubjectAccessReview). The worker's aggregated API does
both, and so does the guard in front of the Device Manager's ``/metrics``
(:mod:`gpustack_serving.access`); the wire shapes and the rules for reading them live here once,
so the two can never disagree on what a malformed answer means (a failed review, never a
verdict).
"""

from __future__ import annotations

import json
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpustack_kube.paths import SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS

SUBJECT_ACCESS_REVIEW_PATH = SUBJECT_ACCESS_REVIEWS.path()
TOKEN_REVIEW_PATH = TOKEN_REVIEWS.path()


class AuthorizationError(Exception):
    """The review itself failed (unreachable, refused, malformed): never a denial, never cached."""


class TokenReviewError(Exception):
    """A TokenReview answer that says neither "authenticated" nor "not": a failed review."""


@dataclass(frozen=True)
class UserInfo:
    """Who made a request, as Kubernetes' ``user.Info`` has it.

    ``extra`` is frozen on construction (a read-only mapping of tuples) so that a UserInfo can
    key an authorization cache; the hash is written out because a mapping has none.
    """

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        frozen = types.MappingProxyType({k: tuple(v) for k, v in self.extra.items()})
        object.__setattr__(self, "extra", frozen)
        object.__setattr__(self, "groups", tuple(self.groups))

    def __hash__(self) -> int:
        return hash((self.name, self.uid, self.groups, tuple(sorted(self.extra.items()))))


@dataclass(frozen=True)
class Attributes:
    """What a request does, in the terms of a SubjectAccessReview.

    A non-empty ``path`` makes it a non-resource request (``/openapi/v2``, ``/metrics``), for
    which only ``verb`` goes with it.
    """

    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""
    version: str = ""

    def __post_init__(self) -> None:
        if self.path and (self.resource or self.subresource or self.namespace or self.name):
            raise ValueError(
                f"attributes of {self.path!r} name a resource too; a request is one or the other"
            )

    @classmethod
    def non_resource(cls, path: str, verb: str = "get") -> Attributes:
        """A request for a path outside any API group (discovery, OpenAPI, health, metrics)."""
        return cls(verb=verb, path=path)

    def review(self) -> dict[str, Any]:
        """The ``resourceAttributes`` or ``nonResourceAttributes`` part of a review's spec."""
        if self.path:
            return {"nonResourceAttributes": {"path": self.path, "verb": self.verb}}
        fields = {
            "verb": self.verb,
            "group": self.group,
            "version": self.version,
            "resource": self.resource,
            "subresource": self.subresource,
            "namespace": self.namespace,
            "name": self.name,
        }
        return {"resourceAttributes": {k: v for k, v in fields.items() if v}}


@dataclass(frozen=True)
class Decision:
    """The review's verdict; ``reason`` (and any evaluation error) as the authorizer wrote it."""

    allowed: bool
    reason: str
    evaluation_error: str = ""


def subject_access_review_spec(user: UserInfo, attributes: Attributes) -> dict[str, Any]:
    """The review's ``spec``: who, and what; empty fields left out as the API omits them."""
    spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups)}
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra.items()}
    spec.update(attributes.review())
    return spec


def subject_access_review(user: UserInfo, attributes: Attributes) -> dict[str, Any]:
    """The whole SubjectAccessReview object to POST to :data:`SUBJECT_ACCESS_REVIEW_PATH`."""
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": subject_access_review_spec(user, attributes),
    }


def decision_from_review(answer: Mapping[str, Any]) -> Decision:
    """Read ``status``; anything but a boolean ``allowed`` is a failed review, not a denial."""
    status = answer.get("status")
    if not isinstance(status, Mapping):
        raise AuthorizationError("SubjectAccessReview answer has no status object")
    allowed = status.get("allowed")
    if not isinstance(allowed, bool):
        raise AuthorizationError(
            f"SubjectAccessReview status.allowed is {_describe(allowed)}, not a boolean"
        )
    denied = status.get("denied", False)
    if not isinstance(denied, bool):
        raise AuthorizationError(
            f"SubjectAccessReview status.denied is {_describe(denied)}, not a boolean"
        )
    if allowed and denied:
        raise AuthorizationError("SubjectAccessReview status is both allowed and denied")
    texts: dict[str, str] = {}
    for name in ("reason", "evaluationError"):
        value = status.get(name, "")
        if value is None:
            value = ""
        if not isinstance(value, str):
            raise AuthorizationError(
                f"SubjectAccessReview status.{name} is {_describe(value)}, not a string"
            )
        texts[name] = value
    return Decision(allowed, texts["reason"], texts["evaluationError"])


def token_review(token: str) -> dict[str, Any]:
    """The TokenReview object to POST to :data:`TOKEN_REVIEW_PATH` for one bearer token.

    No ``audiences``: the API server then checks the token against its own audiences, which
    is what a service-account token mounted in a Pod carries.
    """
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    }


def user_from_token_review(answer: Mapping[str, Any]) -> UserInfo | None:
    """The user a TokenReview answer names; ``None`` when the token did not authenticate.

    ``status.authenticated`` must be ``true`` exactly, and then a user with a name must be
    there: an answer that says authenticated but names nobody is a failed review
    (:class:`TokenReviewError`), not an anonymous user.
    """
    status = answer.get("status")
    if status is None:
        status = {}
    if not isinstance(status, Mapping):
        raise TokenReviewError("TokenReview answer's status is not an object")
    if status.get("authenticated") is not True:
        return None
    info = status.get("user")
    if not isinstance(info, Mapping) or not isinstance(info.get("username"), str):
        raise TokenReviewError("TokenReview says authenticated but names no user")
    name = str(info["username"])
    if not name:
        raise TokenReviewError("TokenReview says authenticated but the user name is empty")
    groups = info.get("groups") or ()
    extra = info.get("extra") or {}
    if not isinstance(groups, list | tuple) or not isinstance(extra, Mapping):
        raise TokenReviewError("TokenReview user.groups or user.extra has the wrong shape")
    return UserInfo(
        name=name,
        uid=str(info.get("uid") or ""),
        groups=tuple(str(g) for g in groups),
        extra={str(k): tuple(str(x) for x in (v or ())) for k, v in extra.items()},
    )


def _describe(value: object) -> str:
    return "missing" if value is None else f"{type(value).__name__} {json.dumps(value)[:80]}"


__all__ = [
    "SUBJECT_ACCESS_REVIEW_PATH",
    "TOKEN_REVIEW_PATH",
    "Attributes",
    "AuthorizationError",
    "Decision",
    "TokenReviewError",
    "UserInfo",
    "decision_from_review",
    "subject_access_review",
    "subject_access_review_spec",
    "token_review",
    "user_from_token_review",
]
