"""KubeClient through httpx's MockTransport: requests as sent, answers and errors as read."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from gpustack_kube.client import (
    ApiError,
    KubeClient,
    MalformedResponseError,
    TooLarge,
    TransportError,
)
from gpustack_kube.config import KubeConfig

CONFIG = KubeConfig(
    server="https://api.test:6443",
    token="secret",
    ca_data=None,
    client_cert=None,
    insecure=False,
    namespace="default",
)

Handler = Callable[[httpx.Request], httpx.Response]


def client_for(handler: Handler, config: KubeConfig = CONFIG) -> KubeClient:
    return KubeClient(config, transport=httpx.MockTransport(handler))


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


class Counting(httpx.AsyncByteStream):
    """A response body in chunks that records how many were read.

    Closing it ends the reading, as closing a connection does (httpx's own iterator-backed
    bodies ignore the close).
    """

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.read = 0
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            if self.closed:
                return
            self.read += 1
            yield chunk

    async def aclose(self) -> None:
        self.closed = True


# -- get ----------------------------------------------------------------------------------------


async def test_get_sends_identity_and_params() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"kind": "PodList", "items": []})

    async with client_for(handler) as client:
        answer = await client.get("/api/v1/pods", {"fieldSelector": "spec.nodeName=n1", "x": True})
    assert answer == {"kind": "PodList", "items": []}
    (request,) = seen
    assert str(request.url.copy_with(query=None)) == "https://api.test:6443/api/v1/pods"
    assert dict(request.url.params) == {"fieldSelector": "spec.nodeName=n1", "x": "true"}
    assert request.headers["Authorization"] == "Bearer secret"
    assert request.headers["Accept"] == "application/json"


async def test_server_path_prefix_is_kept() -> None:
    """Rancher-style proxied clusters put the API under a path on the server URL."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    prefixed = KubeConfig("https://rancher.test/k8s/clusters/c-1", "t", None, None, False, "d")
    async with client_for(handler, prefixed) as client:
        await client.get("/api/v1/pods")
    assert seen[0].url.path == "/k8s/clusters/c-1/api/v1/pods"


async def test_no_token_sends_no_authorization() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    async with client_for(
        handler, KubeConfig("https://api.test", None, None, None, False, "d")
    ) as c:
        await c.get("/version")
    assert "Authorization" not in seen[0].headers


async def test_status_body_becomes_api_error() -> None:
    body = status(403, "Forbidden", 'nodes is forbidden: User "x" cannot list resource "nodes"')

    async with client_for(lambda _: httpx.Response(403, json=body)) as client:
        with pytest.raises(ApiError) as excinfo:
            await client.get("/api/v1/nodes")
    error = excinfo.value
    assert (error.status, error.reason) == (403, "Forbidden")
    assert error.message.startswith("nodes is forbidden")
    assert json.loads(error.body) == body
    assert not error.expired
    assert "403 Forbidden" in str(error)


async def test_non_json_error_body_is_tolerated() -> None:
    html = b"<html><body>502 Bad Gateway</body></html>"

    async with client_for(lambda _: httpx.Response(502, content=html)) as client:
        with pytest.raises(ApiError) as excinfo:
            await client.get("/api/v1/pods")
    assert (excinfo.value.status, excinfo.value.reason) == (502, "Bad Gateway")
    assert excinfo.value.message == html.decode()
    assert excinfo.value.body == html


async def test_expired_status() -> None:
    body = status(410, "Expired", "too old resource version: 1 (2000)")
    async with client_for(lambda _: httpx.Response(410, json=body)) as client:
        with pytest.raises(ApiError) as excinfo:
            await client.get("/api/v1/pods")
    assert excinfo.value.expired


@pytest.mark.parametrize("content", [b"not json", b"[1, 2]"])
async def test_success_that_is_not_an_object_is_malformed(content: bytes) -> None:
    async with client_for(lambda _: httpx.Response(200, content=content)) as client:
        with pytest.raises(MalformedResponseError, match="GET /api/v1/pods"):
            await client.get("/api/v1/pods")


async def test_transport_failure_is_a_transport_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with client_for(handler) as client:
        with pytest.raises(TransportError, match="connection refused"):
            await client.get("/api/v1/pods")


async def test_closed_client_refuses_requests() -> None:
    client = client_for(lambda _: httpx.Response(200, json={}))
    async with client:
        await client.get("/version")
    with pytest.raises(RuntimeError, match="closed"):
        await client.get("/version")


async def test_token_file_is_reread_after_a_minute(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    config = KubeConfig("https://api.test", "first", None, None, False, "d", token_file=token)
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"])
        return httpx.Response(200, json={})

    async with client_for(handler, config) as client:
        await client.get("/version")
        token.write_text("second\n")
        mock_clock.jump(59)
        await client.get("/version")
        mock_clock.jump(1)
        await client.get("/version")
        token.unlink()  # a failed reread keeps the last token
        mock_clock.jump(60)
        await client.get("/version")
    assert seen == ["Bearer first", "Bearer first", "Bearer second", "Bearer second"]


# -- get_bytes ----------------------------------------------------------------------------------


async def test_get_bytes_within_the_limit() -> None:
    body = Counting([b"ab", b"cd", b"ef"])
    async with client_for(lambda _: httpx.Response(200, stream=body)) as client:
        assert await client.get_bytes("/x", limit=6) == b"abcdef"


async def test_get_bytes_stops_reading_past_the_limit() -> None:
    body = Counting([b"abcd"] * 100)
    async with client_for(lambda _: httpx.Response(200, stream=body)) as client:
        with pytest.raises(TooLarge) as excinfo:
            await client.get_bytes("/x", limit=10)
    assert (excinfo.value.limit, excinfo.value.path) == (10, "/x")
    assert body.read == 3  # 12 bytes read, then no more
    assert body.closed


async def test_get_bytes_refuses_a_declared_length_unread() -> None:
    body = Counting([b"a" * 100])
    response = httpx.Response(200, stream=body, headers={"Content-Length": "100"})
    async with client_for(lambda _: response) as client:
        with pytest.raises(TooLarge):
            await client.get_bytes("/x", limit=99)
    assert body.read == 0


async def test_get_bytes_error_is_an_api_error() -> None:
    body = status(503, "ServiceUnavailable", "error trying to reach service: dial tcp")
    async with client_for(lambda _: httpx.Response(503, json=body)) as client:
        with pytest.raises(ApiError) as excinfo:
            await client.get_bytes("/api/v1/nodes/n/proxy/stats/summary", limit=10)
    assert (excinfo.value.status, excinfo.value.reason) == (503, "ServiceUnavailable")


# -- post ---------------------------------------------------------------------------------------


async def test_post_sends_json_and_reads_json() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        review = json.loads(request.content)
        review["status"] = {"allowed": True}
        return httpx.Response(201, json=review)

    review = {"kind": "SubjectAccessReview", "spec": {"user": "u"}}
    async with client_for(handler) as client:
        answer = await client.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    assert answer == {**review, "status": {"allowed": True}}
    assert seen[0].method == "POST"
    assert seen[0].headers["Content-Type"] == "application/json"
    assert seen[0].headers["Authorization"] == "Bearer secret"


async def test_post_error() -> None:
    body = status(400, "BadRequest", "the review has no spec")
    async with client_for(lambda _: httpx.Response(400, json=body)) as client:
        with pytest.raises(ApiError, match="the review has no spec"):
            await client.post("/apis/x", {})


# -- watch --------------------------------------------------------------------------------------


def event(kind: str, name: str, version: str) -> dict[str, Any]:
    return {"type": kind, "object": {"metadata": {"name": name, "resourceVersion": version}}}


async def collect(events: AsyncIterator[dict[str, Any]], into: list[dict[str, Any]]) -> None:
    async for e in events:
        into.append(e)


def lines(*events: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


async def test_watch_streams_events_split_across_chunks() -> None:
    data = lines(event("ADDED", "a", "2"), event("MODIFIED", "a", "3")) + b"\n"
    chunks = [data[:7], data[7:40], data[40:]]  # boundaries fall inside events
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, stream=Counting(chunks))

    async with client_for(handler) as client:
        got = [e async for e in client.watch("/api/v1/pods", {"resourceVersion": "1"})]
    assert got == [event("ADDED", "a", "2"), event("MODIFIED", "a", "3")]
    assert dict(seen[0].url.params) == {"resourceVersion": "1", "watch": "true"}


async def test_watch_yields_as_events_arrive() -> None:
    send, receive = trio.open_memory_channel[bytes](10)

    async def body() -> AsyncIterator[bytes]:
        async for chunk in receive:
            yield chunk

    async with client_for(lambda _: httpx.Response(200, content=body())) as client:
        events = client.watch("/api/v1/pods")
        await send.send(lines(event("ADDED", "a", "2")))
        assert (await events.__anext__())["type"] == "ADDED"
        await send.send(lines(event("DELETED", "a", "3")))
        assert (await events.__anext__())["type"] == "DELETED"
        await send.aclose()
        with pytest.raises(StopAsyncIteration):
            await events.__anext__()


class Channel(httpx.AsyncByteStream):
    """A body the test writes to while the client reads; closing it ends it."""

    def __init__(self) -> None:
        self.send, self.receive = trio.open_memory_channel[bytes](100)
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while not self.closed:
            try:
                yield await self.receive.receive()
            except trio.EndOfChannel:
                return

    async def aclose(self) -> None:
        self.closed = True


async def test_leaving_a_watch_early_closes_the_stream() -> None:
    body = Channel()
    async with client_for(lambda _: httpx.Response(200, stream=body)) as client:
        body.send.send_nowait(lines(event("ADDED", "a", "2"), event("ADDED", "b", "3")))
        async with aclosing(client.watch("/api/v1/pods")) as events:
            async for e in events:
                assert e["object"]["metadata"]["name"] == "a"
                break
        assert body.closed  # not left open until garbage collection


async def test_watch_error_event_closes_an_open_stream() -> None:
    body = Channel()
    error = {"type": "ERROR", "object": status(500, "InternalError", "etcd is sad")}
    body.send.send_nowait(lines(error))  # the stream stays open after it
    async with client_for(lambda _: httpx.Response(200, stream=body)) as client:
        with pytest.raises(ApiError, match="etcd is sad"):
            await collect(client.watch("/api/v1/pods"), [])
    assert body.closed


async def test_watch_error_event_is_an_api_error() -> None:
    error = {"type": "ERROR", "object": status(410, "Expired", "too old resource version")}
    data = lines(event("ADDED", "a", "2"), error, event("ADDED", "b", "3"))
    got: list[dict[str, Any]] = []
    async with client_for(lambda _: httpx.Response(200, content=data)) as client:
        with pytest.raises(ApiError) as excinfo:
            await collect(client.watch("/api/v1/pods"), got)
    assert [e["object"]["metadata"]["name"] for e in got] == ["a"]
    assert (excinfo.value.status, excinfo.value.expired) == (410, True)


async def test_watch_refused_with_a_status() -> None:
    body = status(410, "Expired", "too old resource version: 1 (2000)")
    async with client_for(lambda _: httpx.Response(410, json=body)) as client:
        with pytest.raises(ApiError) as excinfo:
            async for _ in client.watch("/api/v1/pods", {"resourceVersion": "1"}):
                pass
    assert excinfo.value.expired
    assert "too old" in excinfo.value.message


@pytest.mark.parametrize("line", [b"{not json\n", b'{"type": "ADDED"}\n', b"[]\n"])
async def test_watch_malformed_event(line: bytes) -> None:
    async with client_for(lambda _: httpx.Response(200, content=line)) as client:
        with pytest.raises(MalformedResponseError):
            async for _ in client.watch("/api/v1/pods"):
                pass


async def test_watch_broken_connection_is_a_transport_error() -> None:
    async def body() -> AsyncIterator[bytes]:
        yield lines(event("ADDED", "a", "2"))
        raise httpx.ReadError("connection reset")

    got: list[dict[str, Any]] = []
    async with client_for(lambda _: httpx.Response(200, content=body())) as client:
        with pytest.raises(TransportError, match="connection reset"):
            await collect(client.watch("/api/v1/pods"), got)
    assert len(got) == 1
