"""Delegated authorization: the review sent, the short cache, single flight, the 403 wording."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import trio
import trio.testing

from gpustack_kube.client import ApiError, TransportError
from gpustack_worker.authn import UserInfo
from gpustack_worker.authz import (
    Attributes,
    AuthorizationError,
    Authorizer,
    Decision,
    forbidden_message,
)

ALICE = UserInfo(
    name="alice",
    uid="u-1",
    groups=("system:authenticated", "team-a"),
    extra={"scopes": ("view", "edit")},
)
METRICS = Attributes(
    verb="get",
    group="worker.gpustack.ai",
    resource="instances",
    subresource="metrics",
    namespace="team-a",
    name="llama",
)


def answer(allowed: bool, reason: str = "", **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "status": {"allowed": allowed, "reason": reason, **status},
    }


class ApiServer:
    """Answers SubjectAccessReviews after ``delay`` seconds, recording each one."""

    def __init__(self, *answers: dict[str, Any] | Exception) -> None:
        self.answers = list(answers)
        self.posted: list[tuple[str, Mapping[str, Any]]] = []
        self.delay = 0.5
        self.finished = 0

    async def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.posted.append((path, body))
        await trio.sleep(self.delay)
        self.finished += 1
        reply = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(reply, Exception):
            raise reply
        return reply


# --- the review ----------------------------------------------------------------------------


async def test_the_review_names_the_user_and_the_resource(
    autojump_clock: trio.testing.MockClock,
) -> None:
    api = ApiServer(answer(True, "RBAC: allowed by ClusterRoleBinding"))
    async with trio.open_nursery() as background:
        decision = await Authorizer(api.post, background).authorize(ALICE, METRICS)
        background.cancel_scope.cancel()
    assert decision == Decision(True, "RBAC: allowed by ClusterRoleBinding")
    assert api.posted == [
        (
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": "alice",
                    "uid": "u-1",
                    "groups": ["system:authenticated", "team-a"],
                    "extra": {"scopes": ["view", "edit"]},
                    "resourceAttributes": {
                        "verb": "get",
                        "group": "worker.gpustack.ai",
                        "resource": "instances",
                        "subresource": "metrics",
                        "namespace": "team-a",
                        "name": "llama",
                    },
                },
            },
        )
    ]


async def test_empty_fields_are_left_out(autojump_clock: trio.testing.MockClock) -> None:
    api = ApiServer(answer(False))
    async with trio.open_nursery() as background:
        authorizer = Authorizer(api.post, background)
        await authorizer.authorize(
            UserInfo(name="bob"),
            Attributes("list", "worker.gpustack.ai", "instances", version="v1"),
        )
        await authorizer.authorize(UserInfo(name="bob"), Attributes.non_resource("/openapi/v2"))
        background.cancel_scope.cancel()
    assert [body["spec"] for _, body in api.posted] == [
        {
            "user": "bob",
            "groups": [],
            "resourceAttributes": {
                "verb": "list",
                "group": "worker.gpustack.ai",
                "version": "v1",
                "resource": "instances",
            },
        },
        {
            "user": "bob",
            "groups": [],
            "nonResourceAttributes": {"path": "/openapi/v2", "verb": "get"},
        },
    ]


def test_attributes_are_a_resource_or_a_path_not_both() -> None:
    with pytest.raises(ValueError, match="one or the other"):
        Attributes("get", resource="instances", path="/apis")


async def test_denials_carry_the_reason_and_evaluation_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    api = ApiServer(answer(False, "no RBAC policy matched", evaluationError="webhook: timeout"))
    async with trio.open_nursery() as background:
        decision = await Authorizer(api.post, background).authorize(ALICE, METRICS)
        background.cancel_scope.cancel()
    assert decision == Decision(False, "no RBAC policy matched", "webhook: timeout")


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ({"kind": "SubjectAccessReview"}, "has no status object"),
        ({"status": {}}, "status.allowed is missing, not a boolean"),
        ({"status": {"allowed": "true"}}, 'status.allowed is str "true", not a boolean'),
        ({"status": {"allowed": False, "reason": 3}}, "status.reason is int 3, not a string"),
        ({"status": {"allowed": False, "evaluationError": {}}}, "status.evaluationError is dict"),
        ({"status": {"allowed": False, "denied": "yes"}}, "status.denied is str"),
        ({"status": {"allowed": True, "denied": True}}, "both allowed and denied"),
    ],
)
async def test_malformed_answers_are_errors_not_denials(
    autojump_clock: trio.testing.MockClock, reply: dict[str, Any], problem: str
) -> None:
    api = ApiServer(reply)
    async with trio.open_nursery() as background:
        with pytest.raises(AuthorizationError, match=problem):
            await Authorizer(api.post, background).authorize(ALICE, METRICS)
        background.cancel_scope.cancel()


async def test_api_failures_become_authorization_errors(
    autojump_clock: trio.testing.MockClock,
) -> None:
    api = ApiServer(
        ApiError(403, "Forbidden", "cannot create subjectaccessreviews"),
        TransportError("POST: connection refused"),
    )
    async with trio.open_nursery() as background:
        authorizer = Authorizer(api.post, background)
        with pytest.raises(AuthorizationError, match="403 Forbidden: cannot create"):
            await authorizer.authorize(ALICE, METRICS)
        with pytest.raises(AuthorizationError, match="connection refused"):
            await authorizer.authorize(ALICE, METRICS)
        background.cancel_scope.cancel()


async def test_a_hung_review_is_bounded(autojump_clock: trio.testing.MockClock) -> None:
    api = ApiServer(answer(True))
    api.delay = 60
    async with trio.open_nursery() as background:
        start = trio.current_time()
        with pytest.raises(AuthorizationError, match="no answer within 10 s"):
            await Authorizer(api.post, background, timeout=10).authorize(ALICE, METRICS)
        assert trio.current_time() - start == pytest.approx(10)
        background.cancel_scope.cancel()


# --- the cache -----------------------------------------------------------------------------


async def test_allowed_decisions_live_for_allowed_ttl(
    autojump_clock: trio.testing.MockClock,
) -> None:
    api = ApiServer(answer(True))
    async with trio.open_nursery() as background:
        authorizer = Authorizer(api.post, background, allowed_ttl=10, denied_ttl=1)
        await authorizer.authorize(ALICE, METRICS)
        await trio.sleep(9)
        assert (await authorizer.authorize(ALICE, METRICS)).allowed
        assert len(api.posted) == 1
        await trio.sleep(1)
        await authorizer.authorize(ALICE, METRICS)
        assert len(api.posted) == 2
        assert authorizer.statistics().reviews == 2
        assert authorizer.statistics().hits == 1
        background.cancel_scope.cancel()


async def test_denied_decisions_live_for_denied_ttl(
    autojump_clock: trio.testing.MockClock,
) -> None:
    api = ApiServer(answer(False, "nope"), answer(True))
    async with trio.open_nursery() as background:
        authorizer = Authorizer(api.post, background, allowed_ttl=60, denied_ttl=5)
        assert not (await authorizer.authorize(ALICE, METRICS)).allowed
        await trio.sleep(4)
        assert not (await authorizer.authorize(ALICE, METRICS)).allowed
        assert len(api.posted) == 1
        await trio.sleep(1)
        assert (await authorizer.authorize(ALICE, METRICS)).allowed  # the grant shows up
        assert len(api.posted) == 2
        background.cancel_scope.cancel()


async def test_a_zero_ttl_caches_nothing(autojump_clock: trio.testing.MockClock) -> None:
    api = ApiServer(answer(True))
    async with trio.open_nursery() as background:
        authorizer = Authorizer(api.post, background, allowed_ttl=0)
        await authorizer.authorize(ALICE, METRICS)
        await authorizer.authorize(ALICE, METRICS)
        background.cancel_scope.cancel()
    assert len(api.posted) == 2


async def test_errors_are_never_cached(autojump_clock: trio.testing.MockClock) -> None:
    api = ApiServer(TransportError("connection refused"), answer(True))
    async with trio.open_nursery() as background:
        authorizer = Authorizer(api.post, background)
        with pytest.raises(AuthorizationError):
            await authorizer.authorize(ALICE, METRICS)
        assert (await authorizer.authorize(ALICE, METRICS)).allowed  # asked again at once
        assert len(api.posted) == 2
        background.cancel_scope.cancel()


async def test_the_cache_key_is_the_whole_user_and_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    api = ApiServer(answer(True))
    others = [
        UserInfo(name="alice"),
        UserInfo(name="alice", uid="u-2", groups=ALICE.groups, extra=ALICE.extra),
        UserInfo(name="alice", uid="u-1", groups=("team-a",), extra=ALICE.extra),
        UserInfo(name="alice", uid="u-1", groups=ALICE.groups, extra={"scopes": ("view",)}),
    ]
    requests = [
        Attributes("get", "worker.gpustack.ai", "instances", "metrics", "team-b", "llama"),
        Attributes("get", "worker.gpustack.ai", "instances", "", "team-a", "llama"),
        Attributes("list", "worker.gpustack.ai", "instances", "metrics", "team-a", "llama"),
    ]
    async with trio.open_nursery() as background:
        authorizer = Authorizer(api.post, background)
        await authorizer.authorize(ALICE, METRICS)
        for user in others:
            await authorizer.authorize(user, METRICS)
        for attributes in requests:
            await authorizer.authorize(ALICE, attributes)
        same = UserInfo(
            name="alice",
            uid="u-1",
            groups=("system:authenticated", "team-a"),
            extra={"scopes": ("view", "edit")},
        )
        await authorizer.authorize(same, Attributes(**METRICS.__dict__))
        background.cancel_scope.cancel()
    assert len(api.posted) == 1 + len(others) + len(requests)
    assert authorizer.statistics().hits == 1


async def test_the_cache_is_bounded(autojump_clock: trio.testing.MockClock) -> None:
    api = ApiServer(answer(True))
    async with trio.open_nursery() as background:
        authorizer = Authorizer(api.post, background, max_entries=2)
        for name in ["a", "b", "c"]:
            await authorizer.authorize(UserInfo(name=name), METRICS)
        await authorizer.authorize(UserInfo(name="c"), METRICS)  # newest kept
        await authorizer.authorize(UserInfo(name="a"), METRICS)  # oldest dropped
        background.cancel_scope.cancel()
    assert [body["spec"]["user"] for _, body in api.posted] == ["a", "b", "c", "a"]


# --- single flight -------------------------------------------------------------------------


async def test_concurrent_identical_questions_share_one_review(
    autojump_clock: trio.testing.MockClock,
) -> None:
    api = ApiServer(answer(True))
    decisions: list[Decision] = []
    async with trio.open_nursery() as background:
        authorizer = Authorizer(api.post, background)

        async def ask() -> None:
            decisions.append(await authorizer.authorize(ALICE, METRICS))

        async with trio.open_nursery() as callers:
            for _ in range(100):
                callers.start_soon(ask)
        background.cancel_scope.cancel()
    assert len(api.posted) == 1
    assert decisions == [Decision(True, "")] * 100
    assert authorizer.statistics().reviews == 1
    assert authorizer.statistics().shared == 99


async def test_concurrent_callers_all_see_a_shared_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    api = ApiServer(TransportError("connection refused"))
    failures: list[str] = []
    async with trio.open_nursery() as background:
        authorizer = Authorizer(api.post, background)

        async def ask() -> None:
            try:
                await authorizer.authorize(ALICE, METRICS)
            except AuthorizationError as exc:
                failures.append(str(exc))

        async with trio.open_nursery() as callers:
            for _ in range(5):
                callers.start_soon(ask)
        background.cancel_scope.cancel()
    assert len(api.posted) == 1
    assert failures == ["SubjectAccessReview failed: connection refused"] * 5


async def test_a_caller_giving_up_does_not_cancel_the_shared_review(
    autojump_clock: trio.testing.MockClock,
) -> None:
    api = ApiServer(answer(True))
    api.delay = 5
    results: list[bool] = []
    async with trio.open_nursery() as background:
        authorizer = Authorizer(api.post, background)

        async def impatient() -> None:
            with trio.move_on_after(1):
                await authorizer.authorize(ALICE, METRICS)
            results.append(False)

        async def patient() -> None:
            results.append((await authorizer.authorize(ALICE, METRICS)).allowed)

        async with trio.open_nursery() as callers:
            callers.start_soon(impatient)
            callers.start_soon(patient)
        assert results == [False, True]
        assert api.finished == 1
        background.cancel_scope.cancel()
    assert len(api.posted) == 1


async def test_a_lone_caller_giving_up_still_fills_the_cache(
    autojump_clock: trio.testing.MockClock,
) -> None:
    api = ApiServer(answer(True))
    api.delay = 5
    async with trio.open_nursery() as background:
        authorizer = Authorizer(api.post, background)
        with trio.move_on_after(1):
            await authorizer.authorize(ALICE, METRICS)
        await trio.sleep(5)
        assert (await authorizer.authorize(ALICE, METRICS)).allowed
        background.cancel_scope.cancel()
    assert len(api.posted) == 1


async def test_shutting_down_answers_waiters_with_an_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    api = ApiServer(answer(True))
    api.delay = 60
    async with trio.open_nursery() as outer:
        background = await outer.start(_serve_nursery)
        authorizer = Authorizer(api.post, background)

        async def stop() -> None:
            await trio.sleep(1)
            background.cancel_scope.cancel()

        outer.start_soon(stop)
        with pytest.raises(AuthorizationError, match="abandoned"):
            await authorizer.authorize(ALICE, METRICS)


async def _serve_nursery(task_status: trio.TaskStatus[trio.Nursery]) -> None:
    async with trio.open_nursery() as nursery:
        task_status.started(nursery)
        await trio.sleep_forever()


# --- the 403 message -----------------------------------------------------------------------


def test_forbidden_namespaced_with_a_name_and_subresource() -> None:
    user = UserInfo(name="no-metrics")
    assert forbidden_message(user, METRICS) == (
        'instances.worker.gpustack.ai "llama" is forbidden: User "no-metrics" cannot get '
        'resource "instances/metrics" in API group "worker.gpustack.ai" in the namespace "team-a"'
    )


def test_forbidden_at_the_cluster_scope_with_a_reason() -> None:
    attributes = Attributes("list", "worker.gpustack.ai", "instances")
    assert forbidden_message(UserInfo(name="x"), attributes, "no RBAC policy matched") == (
        'instances.worker.gpustack.ai is forbidden: User "x" cannot list resource "instances" '
        'in API group "worker.gpustack.ai" at the cluster scope: no RBAC policy matched'
    )


def test_forbidden_in_the_core_group() -> None:
    attributes = Attributes("get", "", "pods", namespace="default", name="p")
    assert forbidden_message(UserInfo(name="x"), attributes) == (
        'pods "p" is forbidden: User "x" cannot get resource "pods" in API group "" '
        'in the namespace "default"'
    )


def test_forbidden_non_resource_path() -> None:
    message = forbidden_message(UserInfo(name="x"), Attributes.non_resource("/openapi/v2"))
    assert message == 'forbidden: User "x" cannot get path "/openapi/v2"'


# --- namespace-wide first ------------------------------------------------------------------


class RbacServer:
    """Answers as RBAC would for ``grants``: (namespace, name or "") pairs allowed, where ""
    is a rule without resourceNames (it matches a nameless request and every name)."""

    def __init__(self, *grants: tuple[str, str]) -> None:
        self.grants = set(grants)
        self.asked: list[tuple[str, str]] = []

    async def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        attributes = body["spec"]["resourceAttributes"]
        where = (attributes["namespace"], attributes.get("name", ""))
        self.asked.append(where)
        wide = (where[0], "") in self.grants
        return answer(wide or (bool(where[1]) and where in self.grants))


def instance(namespace: str, name: str) -> Attributes:
    return Attributes("get", "worker.gpustack.ai", "instances", "metrics", namespace, name)


async def test_a_namespace_wide_grant_is_asked_once_for_every_name(
    autojump_clock: trio.testing.MockClock,
) -> None:
    api = RbacServer(("team-a", ""))
    async with trio.open_nursery() as background:
        authorizer = Authorizer(api.post, background, namespace_wide_first=True)
        decisions = [
            await authorizer.authorize(ALICE, instance("team-a", f"i-{n}")) for n in range(100)
        ]
        refused = await authorizer.authorize(ALICE, instance("team-b", "i-0"))
        background.cancel_scope.cancel()
    assert all(d.allowed for d in decisions)
    assert not refused.allowed
    # One nameless question for team-a; for team-b the nameless one, then the named one.
    assert api.asked == [("team-a", ""), ("team-b", ""), ("team-b", "i-0")]


async def test_a_grant_naming_objects_is_still_asked_per_name(
    autojump_clock: trio.testing.MockClock,
) -> None:
    api = RbacServer(("team-a", "llama"))
    async with trio.open_nursery() as background:
        authorizer = Authorizer(api.post, background, namespace_wide_first=True)
        named = await authorizer.authorize(ALICE, instance("team-a", "llama"))
        other = await authorizer.authorize(ALICE, instance("team-a", "mistral"))
        background.cancel_scope.cancel()
    assert named.allowed
    assert not other.allowed
    assert api.asked == [("team-a", ""), ("team-a", "llama"), ("team-a", "mistral")]


async def test_without_the_option_only_the_named_question_is_asked(
    autojump_clock: trio.testing.MockClock,
) -> None:
    api = RbacServer(("team-a", ""))
    async with trio.open_nursery() as background:
        authorizer = Authorizer(api.post, background)
        for name in ("a", "b"):
            await authorizer.authorize(ALICE, instance("team-a", name))
        background.cancel_scope.cancel()
    assert api.asked == [("team-a", "a"), ("team-a", "b")]
