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
from dataclasses import dataclass, field, replace
from typing import Any

import trio

from gpustack_kube.client import KubeError
from gpustack_kube.reviews import (
    SUBJECT_ACCESS_REVIEW_PATH,
    Attributes,
    AuthorizationError,
    Decision,
    UserInfo,
    decision_from_review,
    subject_access_review,
    subject_access_review_spec,
)

__all__ = [
    "REVIEW_PATH",
    "Attributes",
    "AuthorizationError",
    "Authorizer",
    "AuthorizerStatistics",
    "Decision",
    "decision_from_review",
    "forbidden_message",
    "subject_access_review_spec",
]
"""The review pieces live in :mod:`gpustack_kube.reviews` (the Device Manager's guard asks the
same questions); they are named here too, where the worker's code and tests have read them."""

REVIEW_PATH = SUBJECT_ACCESS_REVIEW_PATH
DEFAULT_TTL = 10.0
REVIEW_TIMEOUT = 10.0
MAX_ENTRIES = 4096
"""Cached decisions kept at most; beyond it the oldest go first, bounding memory per user."""

Post = Callable[[str, Mapping[str, Any]], Awaitable[dict[str, Any]]]
"""``KubeClient.post``: POST a JSON object, return the decoded answer, raise ``KubeError``."""


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
        namespace_wide_first: bool = False,
    ) -> None:
        self._post = post
        self._wide_first = namespace_wide_first
        self._nursery = nursery
        self._allowed_ttl = allowed_ttl
        self._denied_ttl = denied_ttl
        self._timeout = timeout
        self._max_entries = max_entries
        self._cached: dict[_Key, tuple[float, Decision]] = {}
        self._flights: dict[_Key, _Flight] = {}
        self._reviews = self._hits = self._shared = 0

    async def authorize(self, user: UserInfo, attributes: Attributes) -> Decision:
        """May ``user`` do this? ``AuthorizationError`` when the review could not say.

        With ``namespace_wide_first``, a request for one named object first asks the same
        question without the name: allowed there means allowed for every name (an RBAC rule
        matches a nameless request only when it lists no ``resourceNames``, and such a rule
        allows each name), so a console cycling over a thousand Instances of one namespace
        costs one review per TTL instead of one per Instance; only where that is denied (a
        rule naming objects) is the named question asked.
        """
        if self._wide_first and attributes.name and not attributes.path:
            wide = await self._decide(user, replace(attributes, name=""))
            if wide.allowed:
                return wide
        return await self._decide(user, attributes)

    async def _decide(self, user: UserInfo, attributes: Attributes) -> Decision:
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
        body = subject_access_review(user, attributes)
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
