"""The hot GETs answered in front of Quart answer exactly as Quart's own route does.

``build_app`` answers ``instances/<name>/metrics`` and the health probes on ASGI itself
(``_FastPath``); ``build_app(..., fast_path=False)`` sends every request through Quart. The
same requests — names escaped or not, valid or not, callers unauthenticated, forbidden or
allowed, Instances missing, unreadable or undecodable — must get the same status, body and
headers from both, and be counted alike.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import pytest
import trio
from hypothesis import example, given, settings
from hypothesis import strategies as st

from asgi_probe import asgi_exchange
from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig
from gpustack_worker.api import Surface, build_app
from gpustack_worker.authn import Unauthenticated, UserInfo
from gpustack_worker.authz import Authorizer
from gpustack_worker.subresource import Sources
from gpustack_worker.summaries import SummaryCache

V1 = b"/apis/worker.gpustack.ai/v1"
INSTANCE = {
    "apiVersion": "worker.gpustack.ai/v1alpha1",
    "kind": "Instance",
    "metadata": {"name": "qwen-a", "namespace": "team-a", "uid": "u-1"},
    "spec": {"resources": {"cpu": "2", "ram": "4Gi"}},
}
NOT_FOUND = (
    b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    b'"message":"not found","reason":"NotFound","code":404}'
)


class _Callers:
    """``Authorization: Bearer bad`` is nobody; otherwise whoever ``X-Remote-User`` names."""

    async def authenticate(self, chain: Any, headers: Sequence[tuple[str, str]]) -> UserInfo:
        fields = {k.lower(): v for k, v in headers}
        if fields.get("authorization") == "Bearer bad":
            raise Unauthenticated("invalid bearer token")
        return UserInfo(name=fields.get("x-remote-user", "admin"), groups=("team",))


async def _review(path: str, body: Mapping[str, Any]) -> dict[str, Any]:
    allowed = body["spec"]["user"] != "eve"
    return {"status": {"allowed": allowed, "reason": "" if allowed else "eve may not"}}


def _cluster(request: httpx.Request) -> httpx.Response:
    path = request.url.path
    if path.endswith("/instances/qwen-a"):
        return httpx.Response(200, json=INSTANCE)
    if path.endswith("/instances/broken"):
        return httpx.Response(200, json={**INSTANCE, "spec": {"resources": "nonsense"}})
    if path.endswith("/instances/down"):
        raise httpx.ConnectError("the API server is away")
    return httpx.Response(404, content=NOT_FOUND, headers={"Content-Type": "application/json"})


async def _get(
    app: Any, raw_path: bytes, headers: Sequence[tuple[bytes, bytes]]
) -> tuple[int, dict[bytes, bytes], bytes]:
    tls = {"tls": {"client_cert_chain": [], "tls_version": "TLSv1.3"}}
    return await asgi_exchange(
        app, raw_path, [(b"host", b"worker.local"), *headers], extensions=tls
    )


def _comparable(body: bytes) -> object:
    """The answer with its ``timestamp`` (``now`` for an Instance without a Pod) left out."""
    try:
        decoded = json.loads(body)
    except ValueError:
        return body
    if isinstance(decoded, dict) and isinstance(decoded.get("sample"), dict):
        decoded["sample"].pop("timestamp", None)
    return decoded


async def _both(
    raw_path: bytes, headers: Sequence[tuple[bytes, bytes]], ready: str | None = None
) -> list[tuple[int, bytes, bytes, object, dict[int, int]]]:
    answers = []
    for fast in (True, False):
        async with trio.open_nursery() as nursery:
            config = KubeConfig("https://api.invalid", None, None, None, False, "default")
            client = KubeClient(config, transport=httpx.MockTransport(_cluster))

            async def no_summary(node: str) -> Any:
                raise AssertionError("no Pod exists, so no kubelet is read")

            surface = Surface(
                sources=Sources(client, SummaryCache(no_summary, nursery)),
                authenticator=_Callers,  # type: ignore[arg-type]
                authorizer=Authorizer(_review, nursery),
                ready=lambda: ready,
            )
            status, sent_headers, body = await _get(
                build_app(surface, fast_path=fast), raw_path, headers
            )
            await client.aclose()
            nursery.cancel_scope.cancel()
        answers.append(
            (
                status,
                sent_headers.get(b"content-type", b""),
                sent_headers.get(b"content-length", b""),
                _comparable(body),
                dict(surface.requests),
            )
        )
    return answers


SEGMENT = st.one_of(
    st.sampled_from(
        ["team-a", "qwen-a", "broken", "down", "Qwen-A", "..", ".", "%2F", "%ff", "q%77en-a"]
    ),
    st.text(alphabet="abc-.%2F0", max_size=8),
)
TAILS = st.sampled_from([b"/metrics", b"/metrics/", b"/metrics?pretty=1", b"/metrics//"])
CALLERS = st.sampled_from(
    [
        [],
        [(b"x-remote-user", b"eve")],
        [(b"authorization", b"Bearer bad")],
        [(b"x-remote-user", b"alice"), (b"x-remote-extra-scopes", b"a")],
    ]
)


@settings(max_examples=150, deadline=None)
@given(namespace=SEGMENT, name=SEGMENT, tail=TAILS, headers=CALLERS)
@example(namespace="team-a", name="%0a", tail=b"/metrics", headers=[])  # werkzeug routes no newline
async def test_the_metrics_subresource_answers_as_quart_would(
    namespace: str, name: str, tail: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    raw = V1 + b"/namespaces/" + namespace.encode() + b"/instances/" + name.encode() + tail
    logging.disable(logging.CRITICAL)  # the undecodable Instance is logged as the bug it is
    try:
        fast, quart = await _both(raw, headers)
    finally:
        logging.disable(logging.NOTSET)
    assert fast == quart, raw


@pytest.mark.parametrize(
    ("raw", "ready"),
    [
        (b"/healthz", None),
        (b"/livez/", None),
        (b"/readyz", None),
        (b"/readyz", "the informers have not synced"),
        (b"/healthz?verbose", None),
    ],
)
async def test_the_health_probes_answer_as_quart_would(raw: bytes, ready: str | None) -> None:
    fast, quart = await _both(raw, [], ready)
    assert fast == quart


async def test_a_served_answer_is_the_instance_read() -> None:
    """The comparison above is not between two failures: the allowed read answers 200."""
    [(status, content_type, _, body, counted), _] = await _both(
        V1 + b"/namespaces/team-a/instances/qwen-a/metrics", []
    )
    assert (status, content_type, counted) == (200, b"application/json", {200: 1})
    assert isinstance(body, dict)
    assert body["metadata"] == {"name": "qwen-a", "namespace": "team-a", "uid": "u-1"}
    assert body["sample"]["cpuTotalMilliCores"] == 2000
