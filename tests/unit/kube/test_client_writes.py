"""The write verbs and typed errors, through httpx's MockTransport: requests as sent.

Expected requests are written out from the API conventions (method, Content-Type per patch
format, the ``DeleteOptions`` body), not taken from the client.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from gpustack_kube.backoff import Backoff
from gpustack_kube.client import (
    AlreadyExists,
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeClient,
    NotFound,
    PatchType,
    ServerError,
    TooManyRequests,
    Unauthorized,
    retry_on_conflict,
)
from gpustack_kube.config import KubeConfig
from gpustack_kube.paths import PODS

CONFIG = KubeConfig("https://api.test:6443", "secret", None, None, False, "default")
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}


def status(code: int, reason: str, message: str = "m") -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": message}  # fmt: skip


class Recorder:
    """Answers every request with ``answer`` and keeps what was sent."""

    def __init__(self, answer: httpx.Response | None = None) -> None:
        self.requests: list[httpx.Request] = []
        self.answer = answer or httpx.Response(200, json={"kind": "Pod", "ok": True})

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answer

    def client(self) -> KubeClient:
        return KubeClient(CONFIG, transport=httpx.MockTransport(self))

    @property
    def one(self) -> httpx.Request:
        assert len(self.requests) == 1
        return self.requests[0]


def sent(request: httpx.Request) -> Any:
    return json.loads(request.content)


async def test_create_posts_to_the_collection_with_params() -> None:
    rec = Recorder(httpx.Response(201, json={"metadata": {"uid": "u1"}}))
    async with rec.client() as client:
        answer = await client.create(PODS.path("ns"), POD, params={"dryRun": "All"})
    request = rec.one
    assert (request.method, request.url.path) == ("POST", "/api/v1/namespaces/ns/pods")
    assert request.url.params["dryRun"] == "All"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Authorization"] == "Bearer secret"
    assert sent(request) == POD
    assert answer == {"metadata": {"uid": "u1"}}


async def test_post_is_create() -> None:
    rec = Recorder()
    async with rec.client() as client:
        await client.post("/apis/authentication.k8s.io/v1/tokenreviews", {"spec": {}})
    assert (rec.one.method, sent(rec.one)) == ("POST", {"spec": {}})


async def test_update_puts_the_object_and_status_is_a_path() -> None:
    rec = Recorder()
    body = {**POD, "metadata": {**POD["metadata"], "resourceVersion": "7"}}
    async with rec.client() as client:
        await client.update(PODS.path("ns", "p"), body)
        await client.update(PODS.path("ns", "p", subresource="status"), body)
    assert [(r.method, r.url.path) for r in rec.requests] == [
        ("PUT", "/api/v1/namespaces/ns/pods/p"),
        ("PUT", "/api/v1/namespaces/ns/pods/p/status"),
    ]
    assert sent(rec.requests[0])["metadata"]["resourceVersion"] == "7"


@pytest.mark.parametrize(
    ("patch_type", "content_type"),
    [
        (PatchType.MERGE, "application/merge-patch+json"),
        (PatchType.STRATEGIC, "application/strategic-merge-patch+json"),
    ],
)
async def test_object_patches_carry_their_content_type(
    patch_type: PatchType, content_type: str
) -> None:
    rec = Recorder()
    body = {"metadata": {"labels": {"a": "b"}}}
    async with rec.client() as client:
        await client.patch(PODS.path("ns", "p"), body, patch_type)
    assert rec.one.method == "PATCH"
    assert rec.one.headers["Content-Type"] == content_type
    assert sent(rec.one) == body


async def test_merge_is_the_default_patch() -> None:
    rec = Recorder()
    async with rec.client() as client:
        await client.patch(PODS.path("ns", "p"), {"spec": {}})
    assert rec.one.headers["Content-Type"] == "application/merge-patch+json"


async def test_json_patch_is_a_list_of_operations() -> None:
    rec = Recorder()
    ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": "3"},
           {"op": "add", "path": "/metadata/labels/x", "value": "y"}]  # fmt: skip
    async with rec.client() as client:
        await client.patch(PODS.path("ns", "p", subresource="status"), ops, PatchType.JSON)
    assert rec.one.headers["Content-Type"] == "application/json-patch+json"
    assert rec.one.url.path == "/api/v1/namespaces/ns/pods/p/status"
    assert sent(rec.one) == ops


async def test_patch_shape_mismatch_is_refused_before_sending() -> None:
    rec = Recorder()
    async with rec.client() as client:
        with pytest.raises(TypeError):
            await client.patch(PODS.path("ns", "p"), {"op": "add"}, PatchType.JSON)
        with pytest.raises(TypeError):
            await client.patch(PODS.path("ns", "p"), [{"op": "add"}], PatchType.MERGE)
    assert rec.requests == []


async def test_delete_sends_delete_options() -> None:
    rec = Recorder(httpx.Response(200, json={"kind": "Status", "status": "Success"}))
    async with rec.client() as client:
        answer = await client.delete(
            PODS.path("ns", "p"),
            propagation_policy="Foreground",
            preconditions={"uid": "u1", "resourceVersion": "9"},
            grace_period_seconds=0,
        )
    assert (rec.one.method, rec.one.url.path) == ("DELETE", "/api/v1/namespaces/ns/pods/p")
    assert sent(rec.one) == {
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "propagationPolicy": "Foreground",
        "preconditions": {"uid": "u1", "resourceVersion": "9"},
        "gracePeriodSeconds": 0,
    }
    assert answer["status"] == "Success"


async def test_plain_delete_sends_bare_options() -> None:
    rec = Recorder()
    async with rec.client() as client:
        await client.delete(PODS.path("ns", "p"))
    assert sent(rec.one) == {"kind": "DeleteOptions", "apiVersion": "v1"}


@pytest.mark.parametrize(
    ("code", "reason", "kind"),
    [
        (400, "BadRequest", BadRequest),
        (401, "Unauthorized", Unauthorized),
        (403, "Forbidden", Forbidden),
        (404, "NotFound", NotFound),
        (409, "Conflict", Conflict),
        (409, "AlreadyExists", AlreadyExists),
        (410, "Expired", Gone),
        (422, "Invalid", Invalid),
        (429, "TooManyRequests", TooManyRequests),
        (500, "InternalError", ServerError),
        (503, "ServiceUnavailable", ServerError),
        (504, "Timeout", ServerError),
        (418, "Teapot", ApiError),
    ],
)
async def test_errors_are_typed_by_code(code: int, reason: str, kind: type[ApiError]) -> None:
    rec = Recorder(httpx.Response(code, json=status(code, reason, "why")))
    async with rec.client() as client:
        with pytest.raises(ApiError) as excinfo:
            await client.create(PODS.path("ns"), POD)
    assert type(excinfo.value) is kind
    assert (excinfo.value.status, excinfo.value.reason, excinfo.value.message) == (
        code,
        reason,
        "why",
    )


def test_already_exists_is_a_conflict_and_every_error_an_api_error() -> None:
    assert issubclass(AlreadyExists, Conflict)
    error = ApiError.from_status(status(410, "Expired"))
    assert isinstance(error, Gone)
    assert error.expired
    # A proxy's text answer is typed by its code too.
    assert isinstance(ApiError.from_response(404, "Not Found", b"no such page"), NotFound)


# -- retry_on_conflict ----------------------------------------------------------------------


def conflict() -> Conflict:
    return Conflict(409, "Conflict", "the object has been modified")


async def test_retry_on_conflict_retries_until_success() -> None:
    calls = 0

    async def write() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise conflict()
        return "done"

    assert await retry_on_conflict(write) == "done"
    assert calls == 3


async def test_retry_on_conflict_reraises_the_last_conflict() -> None:
    raised: list[Conflict] = []

    async def write() -> None:
        raised.append(conflict())
        raise raised[-1]

    with pytest.raises(Conflict) as excinfo:
        await retry_on_conflict(write, attempts=4)
    assert len(raised) == 4
    assert excinfo.value is raised[-1]


@pytest.mark.parametrize(
    "error",
    [AlreadyExists(409, "AlreadyExists", "taken"), NotFound(404, "NotFound", "gone")],
)
async def test_retry_on_conflict_does_not_retry_other_errors(error: ApiError) -> None:
    calls = 0

    async def write() -> None:
        nonlocal calls
        calls += 1
        raise error

    with pytest.raises(type(error)):
        await retry_on_conflict(write)
    assert calls == 1


async def test_retry_on_conflict_sleeps_the_bounded_backoff(
    autojump_clock: trio.testing.MockClock,
) -> None:
    times: list[float] = []

    async def write() -> None:
        times.append(trio.current_time())
        raise conflict()

    backoff = Backoff(initial=1.0, maximum=3.0, factor=2.0, jitter=0.0)
    with pytest.raises(Conflict):
        await retry_on_conflict(write, attempts=4, backoff=backoff)
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(times)]
    assert gaps == [1.0, 2.0, 3.0]  # doubling from 1 s, capped at 3 s; no sleep after the last
