"""Delegated authorization: ask the API server, remember the answer briefly.

An aggregated API server owns no policy; it asks with a SubjectAccessReview, as kube's own
delegating authorizer does. A console polling many Instances would ask the same question many
times a second, so decisions are cached for a few seconds (allowed and denied separately, as
``--authorization-webhook-cache-*-ttl`` do), concurrent identical questions share one review,
and failed reviews are never cached: the next request asks again. The shared review runs in
the authorizer's own nursery under its own deadline, so a caller that gives up (a client that
disconnects) does not cancel it for the others waiting on it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import trio

from gpustack_kube.client import KubeError
from gpustack_kube.paths import SUBJECT_ACCESS_REVIEWS
from gpustack_worker.authn import UserInfo

REVIEW_PATH = SUBJECT_ACCESS_REVIEWS.path()
DEFAULT_TTL = 10.0
REVIEW_TIMEOUT = 10.0
MAX_ENTRIES = 4096
"""Cached decisions kept at most; beyond it the oldest go first, bounding memory per user."""

Post = Callable[[str, Mapping[str, Any]], Awaitable[dict[str, Any]]]
"""``KubeClient.post``: POST a JSON object, return the decoded answer, raise ``KubeError``."""


class AuthorizationError(Exception):
    """The review itself failed (unreachable, refused, malformed): a 500, never cached."""


@dataclass(frozen=True)
class Attributes:
    """What a request does, in the terms of a SubjectAccessReview.

    A non-empty ``path`` makes it a non-resource request (``/openapi/v2``, ``/healthz``), for
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
        """A request for a path outside any API group (discovery, OpenAPI, health)."""
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


@dataclass(frozen=True)
class AuthorizerStatistics:
    """How many reviews reached the API server, and how many callers were spared one."""

    reviews: int
    hits: int
    shared: int


@dataclass
class _Flight:
    """One review in progress; every caller asking the same question waits on ``done``."""

    done: trio.Event = field(default_factory=trio.Event)
    decision: Decision | None = None
    error: BaseException | None = None


_Key = tuple[UserInfo, Attributes]


class Authorizer:
    """SubjectAccessReviews with short-lived decisions and single-flight reviews."""

    def __init__(
        self,
        post: Post,
        nursery: trio.Nursery,
        *,
        allowed_ttl: float = DEFAULT_TTL,
        denied_ttl: float = DEFAULT_TTL,
        timeout: float = REVIEW_TIMEOUT,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self._post = post
        self._nursery = nursery
        self._allowed_ttl = allowed_ttl
        self._denied_ttl = denied_ttl
        self._timeout = timeout
        self._max_entries = max_entries
        self._cached: dict[_Key, tuple[float, Decision]] = {}
        self._flights: dict[_Key, _Flight] = {}
        self._reviews = self._hits = self._shared = 0

    async def authorize(self, user: UserInfo, attributes: Attributes) -> Decision:
        """May ``user`` do this? ``AuthorizationError`` when the review could not say."""
        key = (user, attributes)
        cached = self._cached.get(key)
        if cached is not None:
            if trio.current_time() < cached[0]:
                self._hits += 1
                return cached[1]
            del self._cached[key]
        flight = self._flights.get(key)
        if flight is None:
            flight = _Flight()
            self._flights[key] = flight
            self._nursery.start_soon(self._fly, key, flight)
        else:
            self._shared += 1
        await flight.done.wait()
        if flight.error is not None:
            raise flight.error
        assert flight.decision is not None
        return flight.decision

    async def _fly(self, key: _Key, flight: _Flight) -> None:
        self._reviews += 1
        try:
            flight.decision = await self._review(*key)
        except Exception as exc:  # handed to every waiter; never cached
            flight.error = exc
        else:
            ttl = self._allowed_ttl if flight.decision.allowed else self._denied_ttl
            if ttl > 0:
                self._remember(key, trio.current_time() + ttl, flight.decision)
        finally:
            if flight.decision is None and flight.error is None:  # the nursery was cancelled
                flight.error = AuthorizationError("SubjectAccessReview abandoned: shutting down")
            del self._flights[key]
            flight.done.set()

    def _remember(self, key: _Key, expiry: float, decision: Decision) -> None:
        self._cached[key] = (expiry, decision)
        if len(self._cached) > self._max_entries:
            now = trio.current_time()
            for stale in [k for k, (until, _) in self._cached.items() if until <= now]:
                del self._cached[stale]
            while len(self._cached) > self._max_entries:
                del self._cached[next(iter(self._cached))]

    async def _review(self, user: UserInfo, attributes: Attributes) -> Decision:
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": subject_access_review_spec(user, attributes),
        }
        try:
            with trio.fail_after(self._timeout):
                answer = await self._post(REVIEW_PATH, body)
        except KubeError as exc:
            raise AuthorizationError(f"SubjectAccessReview failed: {exc}") from exc
        except trio.TooSlowError as exc:
            raise AuthorizationError(
                f"SubjectAccessReview failed: no answer within {self._timeout:g} s"
            ) from exc
        return decision_from_review(answer)

    def statistics(self) -> AuthorizerStatistics:
        """Counters for tests and ``/debug``."""
        return AuthorizerStatistics(self._reviews, self._hits, self._shared)


def subject_access_review_spec(user: UserInfo, attributes: Attributes) -> dict[str, Any]:
    """The review's ``spec``: who, and what; empty fields left out as the API omits them."""
    spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups)}
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra.items()}
    spec.update(attributes.review())
    return spec


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


def _describe(value: object) -> str:
    return "missing" if value is None else f"{type(value).__name__} {json.dumps(value)[:80]}"


def forbidden_message(user: UserInfo, a: Attributes, reason: str = "") -> str:
    """The ``Forbidden`` Status message, word for word as kube-apiserver writes it."""
    if a.path:
        message = f"forbidden: User {_q(user.name)} cannot {a.verb} path {_q(a.path)}"
    else:
        resource = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
        where = f"in the namespace {_q(a.namespace)}" if a.namespace else "at the cluster scope"
        why = (
            f"User {_q(user.name)} cannot {a.verb} resource {_q(resource)} "
            f"in API group {_q(a.group)} {where}"
        )
        qualified = f"{a.resource}.{a.group}" if a.group else a.resource
        if not qualified:
            message = f"forbidden: {why}"
        elif a.name:
            message = f"{qualified} {_q(a.name)} is forbidden: {why}"
        else:
            message = f"{qualified} is forbidden: {why}"
    return f"{message}: {reason}" if reason else message


def _q(text: str) -> str:
    """Go's ``%q`` for the strings that appear here."""
    return json.dumps(text, ensure_ascii=False)
