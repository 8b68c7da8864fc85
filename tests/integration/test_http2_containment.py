"""One HTTP/2 request with a body must not end a daemon: every listener, over real TLS.

The attack (issue #28): an unauthenticated ``POST`` of 1 MiB over HTTP/2 to a path the server
refuses at once (the worker's ``401``, a Device Manager's ``405``). The server answered before
the body had arrived; the next DATA frame met a stream hypercorn had forgotten, raised
``KeyError`` out of the connection and ended the whole process — the worker (and with it the
fail-closed Pod webhook) or a fleet process hosting every simulated Device Manager.

Each case sends that request over a raw HTTP/2 connection that keeps sending after the answer
(:class:`h2_probe.H2Probe`), then asks a second question *on the same connection*, then a
fresh one: the answer is complete (END_STREAM, then RST_STREAM NO_ERROR, RFC 9113 §8.1), the
connection keeps serving, and the daemon is alive. On main before the fix, each case failed:
the in-process daemons with ``KeyError: 1`` out of ``serve``, the Device Manager process exited.
"""

from __future__ import annotations

import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import h2.errors
import httpx
import pytest
import trio
from dm_stack import open_stack
from hypercorn.config import Config
from hypercorn.events import Event, RawData
from hypercorn.trio.tcp_server import TCPServer
from worker_stack import WorkerStack, open_worker_stack

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from h2_probe import H2Probe
from patience import HANG

BODY = 1 << 20


async def attack_then_ask(
    url: str,
    method: str,
    path: str,
    then: str,
    status: int,
    headers: list[tuple[str, str]] | None = None,
) -> None:
    """The attack, a second request on the same connection, and a fresh connection's answer.

    ``headers`` go with the second and third requests only (the attack is anonymous).
    """
    headers = headers or []
    probe = await H2Probe.open(url)
    try:
        with trio.fail_after(HANG):
            answer = await probe.upload(method, path, BODY)
            assert answer.status == status, bytes(answer.body[:200])
            assert answer.ended, "the answer was cut short"
            # Either the whole body was read, or the server asked us to stop without error.
            assert answer.reset in (None, h2.errors.ErrorCodes.NO_ERROR)
            again = await probe.get(then, headers)
            assert (again.status, again.ended) == (200, True), bytes(again.body[:200])
            assert not probe.closed
    finally:
        await probe.aclose()
    async with httpx.AsyncClient(verify=False, trust_env=False, http2=True) as client:
        with trio.fail_after(HANG):
            fresh = await client.get(url + then, headers=headers)
    assert fresh.status_code == 200


@pytest.fixture
async def worker(tmp_path: Path) -> AsyncIterator[WorkerStack]:
    async with open_worker_stack("nvidia-mixed", tmp_path) as stack:
        yield stack


async def test_device_manager_survives_an_h2_upload_to_a_refused_method(tmp_path: Path) -> None:
    async with open_stack("nvidia-mixed", tmp_path) as stack:
        await attack_then_ask(stack.url, "POST", "/monitor/snapshot", "/readyz", 405)
        await attack_then_ask(stack.url, "PUT", "/metrics", "/readyz", 405)
        assert not stack.daemon.shutdown.is_set()


async def test_worker_secure_port_survives_an_unauthenticated_h2_upload(
    worker: WorkerStack,
) -> None:
    await attack_then_ask(worker.url, "POST", "/no-such-path", "/healthz", 401)
    await attack_then_ask(
        worker.url, "POST", "/apis/worker.gpustack.ai/v1/namespaces/a/instances", "/healthz", 401
    )


async def test_worker_webhook_survives_an_h2_upload_that_is_not_an_admission_review(
    worker: WorkerStack,
) -> None:
    """The Pod webhook shares the secure port; a body it cannot read is a 400, then it serves."""
    await attack_then_ask(worker.url, "POST", "/mutate-v1-pod", "/healthz", 400)
    await attack_then_ask(worker.url, "POST", "/validate-v1-pod", "/healthz", 400)


async def test_device_manager_process_survives_and_keeps_its_figures(
    worker: WorkerStack,
) -> None:
    """A Device Manager as a node runs it (its own process): alive, and still answering."""
    manager = worker.device_managers[0]
    await attack_then_ask(manager.url, "POST", "/monitor/snapshot", "/readyz", 405)
    await trio.sleep(0.2)
    assert manager.process.returncode is None
    async with httpx.AsyncClient(verify=False, trust_env=False) as client:
        snapshot = await client.get(manager.url + "/monitor/snapshot")
    assert snapshot.status_code == 200
    assert snapshot.json()["groups"]


async def test_the_cluster_standin_survives_it_too(worker: WorkerStack) -> None:
    """The demo's API server stand-in serves through the same contained loop."""
    token = next(u.token for u in worker.cluster.state.expanded.users if u.name == "admin")
    await attack_then_ask(
        worker.cluster.url,
        "POST",
        "/api/v1/namespaces",
        "/version",
        401,
        [("authorization", f"Bearer {token}")],
    )


async def test_an_over_size_body_is_refused_and_the_connection_kept(worker: WorkerStack) -> None:
    """413 on an authenticated write: the stream is reset NO_ERROR at once, the connection lives.

    kube-aggregator carries every user's requests to the worker over shared HTTP/2 connections.
    Before, the client (blocked on the stream's flow-control window once the app stopped
    reading) waited until the idle timer closed the connection — every stream on it with it.
    """
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(str(worker.cluster.state.pki.front_proxy_client))
    probe = await H2Probe.open(worker.url, context)
    identity = [("x-remote-user", "admin"), ("x-remote-group", "system:masters")]
    try:
        # Before the fix the answer came only once the 5 s idle timer closed the connection:
        # `not probe.closed` below tells the two apart, so the deadline only catches a hang.
        with trio.fail_after(HANG):
            answer = await probe.upload(
                "POST",
                "/apis/worker.gpustack.ai/v1/namespaces/team-a/instances",
                4 << 20,
                [*identity, ("content-type", "application/json")],
            )
            assert (answer.status, answer.ended) == (413, True)
            assert answer.reset == h2.errors.ErrorCodes.NO_ERROR
            again = await probe.get("/healthz")
            assert (again.status, again.ended) == (200, True)
            assert not probe.closed
    finally:
        await probe.aclose()


REQUESTS_PAST_THE_COUNT = Config().keep_alive_max_requests + 300
"""More requests on one HTTP/2 connection than hypercorn's ``keep_alive_max_requests`` (1,000)."""


async def _many_over_one_connection(url: str, path: str) -> dict[object, int]:
    """``REQUESTS_PAST_THE_COUNT`` GETs, 32 in flight, over one HTTP/2 connection; outcomes."""
    outcomes: dict[object, int] = {}
    turns = iter(range(REQUESTS_PAST_THE_COUNT))
    async with httpx.AsyncClient(verify=False, trust_env=False, http2=True) as client:

        async def one() -> None:
            for _ in turns:
                try:
                    response = await client.get(url + path)
                except httpx.HTTPError as exc:
                    key: object = type(exc).__name__
                else:
                    key = (response.http_version, response.status_code)
                outcomes[key] = outcomes.get(key, 0) + 1

        with trio.fail_after(HANG):
            async with trio.open_nursery() as nursery:
                for _ in range(32):
                    nursery.start_soon(one)
    return outcomes


async def test_a_busy_h2_connection_is_never_cut_with_answers_in_flight(
    worker: WorkerStack,
) -> None:
    """kube-aggregator sends every user's reads to the worker over one HTTP/2 connection.

    hypercorn closed an HTTP/2 connection after 1,000 requests by a GOAWAY after which h2 sends
    nothing, so the answers still in flight were lost: through the real aggregator, 32 readers
    got 503 "server sent GOAWAY and closed the connection" and aborted connections. Every
    request must be answered, over HTTP/2, on the worker and on a Device Manager alike.
    """
    outcomes = await _many_over_one_connection(worker.url, "/healthz")
    assert outcomes == {("HTTP/2", 200): REQUESTS_PAST_THE_COUNT}
    manager = worker.device_managers[0]
    outcomes = await _many_over_one_connection(manager.url, "/readyz")
    assert outcomes == {("HTTP/2", 200): REQUESTS_PAST_THE_COUNT}


async def test_an_h2_answer_leaves_in_fewer_writes_than_its_frames(
    worker: WorkerStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Headers, body and END_STREAM go out together when the body is ready (one TLS record,
    one ``send``), not in three writes as hypercorn wrote them; kube-aggregator reads every
    user's answers from the worker this way. Counted where hypercorn hands bytes to the
    connection (``TCPServer.protocol_send``), for answers read one at a time."""
    writes = [0]
    upstream = TCPServer.protocol_send

    async def counted(self: TCPServer, event: Event) -> None:
        if isinstance(event, RawData):
            writes[0] += 1
        await upstream(self, event)

    monkeypatch.setattr(TCPServer, "protocol_send", counted)
    async with httpx.AsyncClient(verify=False, trust_env=False, http2=True) as client:
        with trio.fail_after(HANG):
            for _ in range(5):  # the connection's preface and settings
                await client.get(worker.url + "/healthz")
            writes[0] = 0
            answers = [await client.get(worker.url + "/healthz") for _ in range(100)]
    assert {(a.http_version, a.status_code) for a in answers} == {("HTTP/2", 200)}
    assert writes[0] < 2 * len(answers), f"{writes[0]} writes for {len(answers)} answers"
